"""The summary table of several evaluations (evaluation/summary.py, bin/summarize_evaluations).

The evaluations are small synthetic evaluation.json files made as bin/eval makes them
(reporting.assign_panels, reporting.comparisons, files.write_json): 3 tasks x 2 inits, the
per-task numbers chosen so that every mean and every count of tasks won can be read off.
"""

import os
import re

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import errors, files
from task_specific_learned_opt.evaluation import reporting, summary

ADAM_TRAIN = "adam (lr tuned per task on train loss)"
ADAM_VALID = "adam (lr tuned per task on valid loss)"
SEARCHED_TRAIN = "adam+reg+decay (L_train)"
HEADER = (
  "| evaluation | theta | baseline "
  "| mean training loss, learned vs baseline (tuned on train loss) | tasks won (sign test p) "
  "| baseline - learned, mean [95% CI] "
  "| mean test loss, learned vs baseline (tuned on valid loss) | tasks won (sign test p) "
  "| baseline - learned, mean [95% CI] "
  "| final test loss, learned vs baseline (tuned on valid loss) | tasks won (sign test p) "
  "| baseline - learned, mean [95% CI] | runs that trained |"
)
UNRESOLVED = "; not resolved at this size"


def _results(mean_loss, mean_test_loss, final_test_loss):
  """One candidate's run-averaged metrics, each given per task (both inits: value -/+ 0.1)."""
  inits = [[-0.1, 0.1]]
  return {
    "mean_loss": np.asarray(mean_loss, dtype=float)[:, None] + inits,
    "mean_test_loss": np.asarray(mean_test_loss, dtype=float)[:, None] + inits,
    "final_test_loss": np.asarray(final_test_loss, dtype=float)[:, None] + inits,
  }


def _write_evaluation(directory, results, objectives):
  """evaluation.json as reporting.write writes it; the candidates without objective are thetas."""
  thetas = [name for name in results if name not in objectives]
  evaluation = {"results": results}
  reporting.assign_panels(evaluation, thetas, objectives)
  comparisons = reporting.comparisons(evaluation, thetas)
  files.write_json(
    os.path.join(directory, reporting.RESULTS_FILENAME),
    {**evaluation, "comparisons": comparisons},
  )
  return str(directory)


@pytest.fixture
def in_family(tmp_path):
  """Two thetas against Adam tuned on each objective."""
  results = {
    "L_train": _results([0.6, 1.0, 0.2], [0.5, 0.5, 0.5], [0.4, 0.6, 0.5]),
    "L_valid": _results([0.9, 0.9, 0.9], [0.3, 0.4, 0.2], [0.1, 0.2, 0.3]),
    ADAM_TRAIN: _results([0.8, 0.9, 0.4], [9.0, 9.0, 9.0], [9.0, 9.0, 9.0]),
    ADAM_VALID: _results([9.0, 9.0, 9.0], [0.6, 0.3, 0.3], [0.5, 0.5, 0.5]),
  }
  return _write_evaluation(tmp_path, results, {ADAM_TRAIN: "train", ADAM_VALID: "valid"})


@pytest.fixture
def out_of_family(tmp_path):
  """One theta against Adam tuned on each objective and an L_train search winner; Adam's final
  test loss on the last task is infinite (a diverged run)."""
  directory = tmp_path / "out_of_family"
  results = {
    "L_train": _results([1.2, 1.4, 1.0], [0.8, 0.8, 0.8], [0.7, 0.8, 0.9]),
    ADAM_TRAIN: _results([1.0, 1.0, 1.0], [9.0, 9.0, 9.0], [9.0, 9.0, 9.0]),
    ADAM_VALID: _results([9.0, 9.0, 9.0], [0.9, 0.9, 0.9], [0.6, 0.6, np.inf]),
    SEARCHED_TRAIN: _results([1.3, 1.3, 1.3], [9.0, 9.0, 9.0], [9.0, 9.0, 9.0]),
  }
  objectives = {ADAM_TRAIN: "train", ADAM_VALID: "valid", SEARCHED_TRAIN: "train"}
  return _write_evaluation(directory, results, objectives)


def test_baseline_kind_drops_the_parenthesised_objective():
  assert summary.baseline_kind(ADAM_TRAIN) == "adam"
  assert summary.baseline_kind(ADAM_VALID) == "adam"
  assert summary.baseline_kind(SEARCHED_TRAIN) == "adam+reg+decay"
  assert summary.baseline_kind("sgdm") == "sgdm"


def test_the_table_has_a_row_per_evaluation_theta_and_baseline(in_family, out_of_family):
  text = summary.summarize({"in family": in_family, "mlp": out_of_family})
  assert text.splitlines() == [
    HEADER,
    "|" + " --- |" * 13,
    # L_train against ADAM_TRAIN on training loss: 0.6 (the mean of 0.6, 1.0, 0.2) vs 0.7 (of
    # 0.8, 0.9, 0.4), lower on tasks 0 and 2 (differences 0.2, -0.1, 0.2: the sign test's p is 1
    # for 2 of 3); against ADAM_VALID on test loss: 0.5 vs 0.4 (of 0.6, 0.3, 0.3), lower on task
    # 0; final 0.5 (of 0.4, 0.6, 0.5) vs 0.5, lower on task 0. Three tasks resolve nothing here.
    "| in family | L_train | adam | 0.600 vs 0.700 | 2 of 3 (p = 1) "
    f"| 0.100 [-0.100, 0.200]{UNRESOLVED} | 0.500 vs 0.400 | 1 of 3 (p = 1) "
    f"| -0.100 [-0.200, 0.100]{UNRESOLVED} | 0.500 vs 0.500 | 1 of 3 (p = 1) "
    f"| 0.000 [-0.100, 0.100]{UNRESOLVED} | - |",
    # L_valid: 0.9 vs 0.7, lower on none (a tie on task 1 is no win: 0 of 2 untied, p = 0.5);
    # 0.3 (of 0.3, 0.4, 0.2) vs 0.4, lower on tasks 0 and 2; final 0.2 (of 0.1, 0.2, 0.3) vs
    # 0.5, lower on all 3 (p = 2 / 2^3), every resampled mean above 0: resolved.
    "| in family | L_valid | adam | 0.900 vs 0.700 | 0 of 3 (p = 0.5) "
    f"| -0.200 [-0.500, 0.000]{UNRESOLVED} | 0.300 vs 0.400 | 2 of 3 (p = 1) "
    f"| 0.100 [-0.100, 0.300]{UNRESOLVED} | 0.200 vs 0.500 | 3 of 3 (p = 0.25) "
    "| 0.300 [0.200, 0.400] | - |",
    # 1.2 (of 1.2, 1.4, 1.0) vs 1.0, lower on none; 0.8 vs 0.9, on all 3 by 0.1 (a constant
    # difference: its interval is that constant); final 0.8 (of 0.7, 0.8, 0.9) vs inf (of 0.6,
    # 0.6, inf): lower only where Adam diverged, an infinite mean whose interval holds zero.
    "| mlp | L_train | adam | 1.200 vs 1.000 | 0 of 3 (p = 0.5) "
    f"| -0.200 [-0.400, 0.000]{UNRESOLVED} | 0.800 vs 0.900 | 3 of 3 (p = 0.25) "
    f"| 0.100 [0.100, 0.100] | 0.800 vs inf | 1 of 3 (p = 1) | inf [-0.200, inf]{UNRESOLVED} | - |",
    # Against the search winner, 1.2 vs 1.3, lower on tasks 0 and 2; it has no counterpart tuned
    # on validation loss, so the test losses are not compared.
    "| mlp | L_train | adam+reg+decay | 1.200 vs 1.300 | 2 of 3 (p = 1) "
    f"| 0.100 [-0.100, 0.300]{UNRESOLVED} |" + " - |" * 7,
  ]
  # The runs that trained are read from a summary's "training_check" (reporting.summarize), "-"
  # above: these evaluation.json files are written without one.


def test_the_last_column_counts_the_runs_that_trained_and_diverged(in_family):
  evaluation = summary.read_evaluation(in_family)
  evaluation["candidates"] = {
    "L_train": {"training_check": {"runs": 6, "trained": 4, "diverged": 1}},
    "L_valid": {"training_check": {"runs": 6, "trained": 6, "diverged": 0}},
  }
  cells = [row[-1] for row in summary.rows("in family", evaluation)]
  assert cells == ["4 of 6 (1 diverged)", "6 of 6"]


def test_the_table_is_written_to_the_output_file(in_family, tmp_path):
  output = str(tmp_path / "tables" / "summary.md")
  text = summary.summarize({"in family": in_family}, output)
  assert open(output).read() == text and text.endswith(" |\n")


def test_an_evaluation_json_can_be_given_itself(in_family):
  path = os.path.join(in_family, reporting.RESULTS_FILENAME)
  assert summary.summarize({"a": path}) == summary.summarize({"a": in_family})


@pytest.mark.parametrize("make", ["missing", "empty directory", "other json"])
def test_a_path_without_an_evaluation_is_a_user_error_naming_it(make, in_family, tmp_path):
  path = tmp_path / "runs" / "eval_x"
  if make != "missing":
    path.mkdir(parents=True)
  if make == "other json":
    files.write_json(str(path / reporting.RESULTS_FILENAME), {"best": {}})
  with pytest.raises(summary.EvaluationNotFoundError, match=re.escape(str(path))) as raised:
    summary.summarize({"a": in_family, "x": str(path)})
  assert isinstance(raised.value, errors.UserError)


@pytest.mark.integration
def test_the_binary_prints_the_table_and_writes_it(in_family, out_of_family, tmp_path, capsys):
  output = tmp_path / "summary.md"
  argv = ["summarize_evaluations", f"--eval_dir=in family={in_family}"]
  argv += [f"--eval_dir={out_of_family}", f"--output={output}"]
  testing_utils.run_main("summarize_evaluations", argv)
  printed = capsys.readouterr().out
  assert printed == output.read_text()
  assert printed.splitlines()[2].startswith("| in family | L_train | adam |")
  assert printed.splitlines()[4].startswith("| out_of_family | L_train | adam |")


@pytest.mark.integration
def test_the_binary_names_a_missing_directory_in_one_line(tmp_path):
  missing = tmp_path / "runs" / "eval_missing"
  with pytest.raises(SystemExit) as exit_info:
    testing_utils.run_main("summarize_evaluations", ["x", f"--eval_dir={missing}"])
  message = str(exit_info.value.code)
  assert message.startswith(f"error: {missing}") and "\n" not in message
