"""Reporting: the per-task comparison of a learned optimizer with a baseline."""

import numpy as np
import pytest

from task_specific_learned_opt.evaluation import reporting


def test_compare_counts_the_tasks_the_learned_optimizer_wins():
  results = {
    "learned": {"mean_loss": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 1.0]])},
    "adam": {"mean_loss": np.array([[2.0, 2.0], [1.0, 1.0], [2.5, 2.5]])},
  }
  c = reporting.compare({"results": results}, "learned", "adam")
  np.testing.assert_allclose(c["difference"], [1.0, -1.0, 0.5])
  assert c["fraction_learned_wins"] == pytest.approx(2 / 3)
