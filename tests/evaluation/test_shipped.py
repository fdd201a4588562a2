"""The statistics of the shipped evaluations (evaluation/shipped.py) and its committed files."""

import gzip
import json
import os

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import reporting, shipped, statistics, summary


@pytest.fixture(scope="module")
def found():
  return shipped.records()


def _read(*path):
  with open(os.path.join(shipped.PRETRAINED, *path)) as f:
    return f.read()


def test_the_committed_statistics_are_what_the_shipped_files_give(found):
  assert _read(shipped.STATISTICS_MARKDOWN) == shipped.markdown(found)
  written = json.dumps(files.to_json(found), indent=1)
  assert _read(shipped.STATISTICS_JSON) == written


@pytest.mark.parametrize("directory", list(shipped.OUT_OF_FAMILY))
def test_the_committed_out_of_family_tables_are_what_their_files_give(directory):
  table = shipped.out_of_family_table(directory)
  assert _read(*directory.split("/"), shipped.OUT_OF_FAMILY_TABLE) == table


def _thetas(name):
  """How many thetas an App. E evaluation reports: the mixed theta alone; the four others with the
  capped update (the digits convnets: all five); all five with the decay from the first step and
  with the bounded update; else
  an L_train/L_valid pair."""
  if "/mixed" in name:
    return 1
  if "/capped" in name:
    return 5 if name.startswith("digits_conv") else 4
  if "/decay_from_start" in name or "/bounded_weights" in name:
    return 5
  return 2


def test_every_shipped_evaluation_and_comparison_is_there(found):
  assert [r["evaluation"] for r in found if r["evaluation"] == "fig6"] == ["fig6"] * 24
  assert len([r for r in found if r["evaluation"] == "generated_bn_cnn_train"]) == 3
  for directory, names in shipped.OUT_OF_FAMILY.items():
    for name in names:
      rows = [r for r in found if r["evaluation"] == f"{directory}/{name}"]
      tasks = 1 if name.startswith("digits") else 5  # The digits are one 10-class task.
      assert len({r["learned"] for r in rows}) == _thetas(name), name
      assert len(rows) == 3 * _thetas(name), name
      assert {r["num_tasks"] for r in rows} == {tasks}, name
  rows = [r for r in found if r["evaluation"] == "l_valid_alternatives/horizon_1000"]
  assert len(rows) == 15 and {r["num_tasks"] for r in rows} == {4}


def _one(found, evaluation, learned, baseline, metric):
  (row,) = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["baseline"], r["metric"])
    == (evaluation, learned, baseline, metric)
  ]
  return row


def test_the_fig6_headline_counts_and_their_tests(found):
  # L_valid against the L_valid search winner on final test loss: 17 of 20, the sign test's p
  # 2 * P(X <= 3) for X ~ Binomial(20, 1/2), resolved.
  row = _one(found, "fig6", "L_valid", "adam+reg+decay (L_valid)", "final_test_loss")
  assert (row["wins"], row["num_tasks"]) == (17, 20)
  assert row["p_value"] == pytest.approx(2 * (1 + 20 + 190 + 1140) / 2**20)
  assert row["outcome"] == statistics.LEARNED_AHEAD
  assert row["ci95"][0] < row["mean_difference"] < row["ci95"][1]
  # L_train against the L_train winner on mean training loss: 20 of 20, p = 2 / 2^20.
  row = _one(found, "fig6", "L_train", "adam+reg+decay (L_train)", "mean_loss")
  assert (row["wins"], row["p_value"]) == (20, pytest.approx(2 / 2**20))
  assert row["outcome"] == statistics.LEARNED_AHEAD


def test_a_four_of_five_with_an_interval_across_zero_is_not_resolved(found):
  row = _one(
    found,
    "out_of_family/in_family",
    "L_valid",
    "adam (lr tuned per task on valid loss)",
    "final_test_loss",
  )
  assert (row["wins"], row["num_tasks"]) == (4, 5)
  assert row["ci95"][0] < 0 < row["ci95"][1]
  assert row["outcome"] == statistics.NOT_RESOLVED


def _per_run_results(directory):
  """The per-run arrays of a shipped evaluation: its evaluation.json.gz's "results"."""
  with gzip.open(os.path.join(directory, "evaluation.json.gz"), "rt") as f:
    return files.from_json(json.load(f))["results"]


@pytest.mark.parametrize("name", shipped.APP_E)
def test_each_app_e_training_check_recomputes_from_the_per_run_arrays(name):
  directory = os.path.join(shipped.PRETRAINED, "app_e", name)
  results = _per_run_results(directory)
  kept = summary.read_evaluation(directory)["candidates"]
  for candidate, result in results.items():
    assert kept[candidate]["training_check"] == reporting.training_check(result), candidate


WITH_RUNS = [
  name
  for name, directory in shipped.EVALUATIONS.items()
  if os.path.exists(os.path.join(shipped.PRETRAINED, directory, "evaluation.json.gz"))
]


@pytest.mark.parametrize("name", WITH_RUNS)
def test_each_comparison_recomputes_from_the_shipped_per_run_arrays(name):
  """The per-task differences (inits averaged), the means over tasks and the counts of tasks won
  that summary.json keeps, from the arrays of every run (evaluation.json.gz)."""
  directory = os.path.join(shipped.PRETRAINED, shipped.EVALUATIONS[name])
  results = _per_run_results(directory)
  comparisons = summary.read_evaluation(directory)["comparisons"]
  assert comparisons
  for c in comparisons:
    learned = np.asarray(results[c["learned"]][c["metric"]], dtype=np.float64).mean(axis=1)
    baseline = np.asarray(results[c["baseline"]][c["metric"]], dtype=np.float64).mean(axis=1)
    assert len(learned) == c["num_tasks"], (c["learned"], c["baseline"])
    np.testing.assert_allclose(baseline - learned, c["difference"], rtol=1e-6, atol=1e-6)
    assert float(np.mean(learned)) == pytest.approx(c["learned_mean_loss"], rel=1e-6)
    assert float(np.mean(baseline)) == pytest.approx(c["baseline_mean_loss"], rel=1e-6)
    assert int(np.sum(baseline - learned > 0)) == c["wins"], (c["learned"], c["baseline"])


def test_fig6_on_seed_6_ships_its_per_run_arrays():
  """Fig. 6 again on tasks no choice used: every baseline it names, 20 tasks x 5 inits."""
  assert "fig6_seed_6" in WITH_RUNS
  results = _per_run_results(os.path.join(shipped.PRETRAINED, shipped.EVALUATIONS["fig6_seed_6"]))
  kinds = {summary.baseline_kind(name) for name in results}
  assert kinds == {"L_train", "L_valid", "adam", "rmsprop", "sgdm", "adam+reg+decay"}
  assert {np.asarray(r["mean_loss"]).shape for r in results.values()} == {(20, 5)}


@pytest.mark.parametrize("directory", list(shipped.OUT_OF_FAMILY))
def test_docs_evaluation_md_gives_every_row_of_the_out_of_family_tables(directory):
  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    doc = f.read().splitlines()
  rows = shipped.out_of_family_table(directory).splitlines()[2:]
  assert rows
  assert [row for row in rows if row not in doc] == []
