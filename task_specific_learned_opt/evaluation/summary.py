"""Several evaluations in one markdown table: each theta against each baseline (App. E, Fig. 7).

`bin/summarize_evaluations` reads the evaluation.json of several `bin/eval` output directories
(e.g. the shipped thetas on their own family and on each problem of gin/eval/out_of_family/) and
writes one table with a row per evaluation, theta and baseline. A row gives, for the mean
training loss, the mean test loss and the final test loss, the learned optimizer's and the
baseline's means over tasks, the tasks the learned optimizer wins ("k of N": a positive
per-task "difference", baseline minus learned averaged over inits) with the sign test's p-value,
and the mean difference with its 95% bootstrap interval over tasks, "not resolved at this size"
when the interval holds zero (statistics.py), all from the evaluation's "comparisons"
(reporting.py; the statistics computed from their differences when an older file has none).
As there, the mean training loss is compared with the baseline of the train-loss panel (tuned on
training loss) and the test losses with the one of the test-loss panel (tuned on validation
loss), so a row pairs the two baselines of one kind: its name is theirs without the
parenthesised objective ("adam" for "adam (lr tuned per task on train loss)" and "adam (lr tuned
per task on valid loss)", "adam+reg+decay" for the L_train and L_valid search winners). A metric
with no comparison of that kind reads "-". The last column says how many of the theta's runs
at least trained (reporting.training_check: a lower training loss at the last step than at the
first, no divergence), "-" for an evaluation written before summaries kept the count.
"""

import os
import re
from collections.abc import Mapping

from task_specific_learned_opt import errors, files
from task_specific_learned_opt.evaluation import reporting, statistics

NOT_COMPARED = "-"
CELLS_PER_METRIC = 3
# The table's metrics, in order, each with the panel whose baselines it is compared with.
_METRICS = [(m, panel) for panel, metrics in reporting.PANEL_METRICS.items() for m in metrics]


class EvaluationNotFoundError(errors.UserError, FileNotFoundError):
  """A path given to summarize is neither an evaluation.json nor a directory holding one."""


def evaluation_path(path: str) -> str:
  """The evaluation of `path`: the file itself, or the directory's evaluation.json, or its
  summary.json (what a shipped evaluation keeps).

  Args:
    path: an output directory of bin/eval, or its evaluation.json or summary.json.

  Raises:
    EvaluationNotFoundError: `path` does not exist, or is a directory without either file.
  """
  if os.path.isdir(path):
    directory = path
    path = os.path.join(directory, reporting.RESULTS_FILENAME)
    if not os.path.isfile(path):
      path = os.path.join(directory, reporting.SUMMARY_FILENAME)
  if not os.path.isfile(path):
    raise EvaluationNotFoundError(
      f"{path} does not exist: give an output directory of bin/eval (it holds "
      f"{reporting.RESULTS_FILENAME} or {reporting.SUMMARY_FILENAME}) or the file itself."
    )
  return path


def read_evaluation(path: str) -> dict:
  """The evaluation bin/eval wrote at `path` (an evaluation.json or the directory holding it).

  Args:
    path: an output directory of bin/eval, or its evaluation.json.

  Returns:
    The file's contents, non-finite numbers as floats (files.read_json).

  Raises:
    EvaluationNotFoundError: there is no such file, or it is not an evaluation bin/eval wrote.
  """
  path = evaluation_path(path)
  evaluation = files.read_json(path)
  if not isinstance(evaluation, dict) or not {"comparisons", "panel_baselines"} <= set(evaluation):
    raise EvaluationNotFoundError(
      f"{path} is not an evaluation written by bin/eval (no comparisons and panel baselines in "
      "it); give an output directory of bin/eval."
    )
  return evaluation


def baseline_kind(name: str) -> str:
  """A baseline's name without its parenthesised objective: "adam (lr tuned ...)" -> "adam"."""
  return re.sub(r"\s*\([^()]*\)$", "", name)


def _cells(comparison: dict | None) -> list[str]:
  """The three cells of a comparison: the means ("0.685 vs 0.862"), the tasks won with the sign
  test's p-value ("4 of 5 (p = 0.38)") and the mean difference with its interval ("0.177 [0.120,
  0.240]", followed by "; not resolved at this size" or "; baseline ahead" unless it is above 0)."""
  if comparison is None:
    return [NOT_COMPARED] * CELLS_PER_METRIC
  stats = statistics.of_comparison(comparison)
  interval = statistics.interval_cell(stats)
  if stats["outcome"] != statistics.LEARNED_AHEAD:
    interval += f"; {stats['outcome']}"
  return [
    f"{comparison['learned_mean_loss']:.3f} vs {comparison['baseline_mean_loss']:.3f}",
    f"{stats['wins']} of {stats['num_tasks']} (p = {statistics.format_p(stats['p_value'])})",
    interval,
  ]


def rows(name: str, evaluation: dict) -> list[list[str]]:
  """The table's rows of one evaluation: one per theta and baseline kind, in their order.

  Args:
    name: the evaluation's name (the first column).
    evaluation: an evaluation.json's contents ("comparisons", "panel_baselines").

  Returns:
    Rows of cells: name, theta, baseline kind, then per metric of `_METRICS` the means, the
    tasks won and the mean difference with its interval against the baseline of that kind in
    the metric's panel, and the runs that trained (trained_cell).
  """
  found = {(c["learned"], c["baseline"], c["metric"]): c for c in evaluation["comparisons"]}
  thetas = list(dict.fromkeys(c["learned"] for c in evaluation["comparisons"]))
  panels = evaluation["panel_baselines"]
  kinds = list(dict.fromkeys(baseline_kind(b) for p in reporting.PANEL_METRICS for b in panels[p]))
  table = []
  for theta in thetas:
    for kind in kinds:
      row = [name, theta, kind]
      for metric, panel in _METRICS:
        baselines = [b for b in panels[panel] if baseline_kind(b) == kind]
        row += _cells(found.get((theta, baselines[0], metric)) if baselines else None)
      table.append([*row, trained_cell(evaluation, theta)])
  return table


def trained_cell(evaluation: dict, theta: str) -> str:
  """ "k of n" runs of `theta` that at least trained, with the diverged ones, or "-"."""
  check = evaluation.get("candidates", {}).get(theta, {}).get("training_check")
  if check is None:
    return NOT_COMPARED
  cell = f"{check['trained']} of {check['runs']}"
  return cell + (f" ({check['diverged']} diverged)" if check["diverged"] else "")


def header() -> list[str]:
  """The table's column names."""
  columns = ["evaluation", "theta", "baseline"]
  for metric, panel in _METRICS:
    objective = reporting.PANEL_OBJECTIVES[panel]
    columns += [
      f"{reporting.METRIC_NAMES[metric]}, learned vs baseline (tuned on {objective} loss)",
      "tasks won (sign test p)",
      "baseline - learned, mean [95% CI]",
    ]
  return [*columns, "runs that trained"]


def table(evaluations: Mapping[str, dict]) -> str:
  """One markdown table of every evaluation's rows, in the order of `evaluations` ({name: ...})."""
  lines = [header(), ["---"] * len(header())]
  for name, evaluation in evaluations.items():
    lines += rows(name, evaluation)
  return "".join(f"| {' | '.join(cells)} |\n" for cells in lines)


def summarize(paths: Mapping[str, str], output: str | None = None) -> str:
  """Reads each evaluation of `paths` ({name: directory}); returns (and writes) their table.

  Args:
    paths: {the evaluation's name in the table: a bin/eval output directory or evaluation.json}.
    output: a file the table is written to as well (None: none).

  Returns:
    The markdown table.

  Raises:
    EvaluationNotFoundError: a path holds no evaluation bin/eval wrote.
  """
  evaluations = {name: read_evaluation(path) for name, path in paths.items()}
  text = table(evaluations)
  if output:
    files.write_text(output, text)
  return text
