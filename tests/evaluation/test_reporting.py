"""Reporting: the per-task comparison of a learned optimizer with a baseline."""

import numpy as np
import pytest

from task_specific_learned_opt.evaluation import reporting, statistics


def test_compare_counts_the_tasks_the_learned_optimizer_wins():
  results = {
    "learned": {"mean_loss": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 1.0]])},
    "adam": {"mean_loss": np.array([[2.0, 2.0], [1.0, 1.0], [2.5, 2.5]])},
  }
  c = reporting.compare({"results": results}, "learned", "adam")
  np.testing.assert_allclose(c["difference"], [1.0, -1.0, 0.5])
  assert c["fraction_learned_wins"] == pytest.approx(2 / 3)


def test_compare_gives_the_interval_and_the_tests_of_the_difference():
  results = {
    "learned": {"mean_loss": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 1.0]])},
    "adam": {"mean_loss": np.array([[2.0, 2.0], [1.0, 1.0], [2.5, 2.5]])},
  }
  c = reporting.compare({"results": results}, "learned", "adam")
  assert c["mean_difference"] == pytest.approx(0.5 / 3)
  assert (c["wins"], c["losses"], c["num_tasks"]) == (2, 1, 3)
  assert c["p_value"] == 1.0  # 2 of 3: 2 * (1 + 3) / 8, at most 1
  low, high = c["ci95"]
  assert low < c["mean_difference"] < high
  assert c["outcome"] == statistics.NOT_RESOLVED


def _curves(train):
  """A candidate's "<split>_loss" arrays [task, init, step]: every split's curve is `train`."""
  train = np.asarray(train, dtype=float)
  return {f"{split}_loss": train for split in ("train", "valid", "test")}


def test_the_training_check_counts_runs_that_trained_and_runs_that_diverged():
  runs = [
    [[2.3, 1.5, 1.0], [2.3, 2.4, 2.2]],  # trained; trained (2.4 is below twice 2.3)
    [[2.3, 2.3, 2.3], [2.3, 2.0, 2.5]],  # no lower last loss; nor here
    [[2.3, 4.7, 1.0], [2.3, np.nan, 1.0]],  # rose above twice the first; a NaN on the way
  ]
  assert reporting.training_check(_curves(runs)) == {"runs": 6, "trained": 2, "diverged": 2}


@pytest.mark.parametrize("test_loss", [[2.3, np.inf], [2.3, 4.7], [np.nan, 1.0]])
def test_a_run_whose_test_loss_blew_up_diverged_though_its_training_loss_fell(test_loss):
  curves = _curves([[[2.3, 1.0]]])
  curves["test_loss"] = np.array([[test_loss]])
  assert reporting.training_check(curves) == {"runs": 1, "trained": 0, "diverged": 1}


def test_a_test_loss_that_rose_less_than_twofold_is_overfitting_not_divergence():
  curves = _curves([[[2.3, 1.0]]])
  curves["test_loss"] = np.array([[[2.3, 4.5]]])
  assert reporting.training_check(curves) == {"runs": 1, "trained": 1, "diverged": 0}


def test_the_summary_keeps_each_candidates_training_check():
  r = {**_curves([[[2.3, 1.0]], [[2.3, 5.0]]]), "test_accuracy": np.zeros([2, 1, 2])}
  r.update(mean_loss=np.ones([2, 1]), steps_per_second=np.ones([2, 1]))
  summary = reporting.summarize({"results": {"learned": r}}, "title")
  assert summary["candidates"]["learned"]["training_check"] == {
    "runs": 2,
    "trained": 1,
    "diverged": 1,
  }
