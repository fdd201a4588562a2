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
