"""The longer unrolls' summaries (horizon_statistics.py), with worked numbers."""

import numpy as np

from task_specific_learned_opt.figures import horizon_statistics
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def test_training_range_worked_numbers():
  # Before step 2 the values are 1 and 3; after it 2 (inside), 5 (2 above), 0 (1 below).
  actual = horizon_statistics.training_range([0, 1, 2, 3, 4], [1.0, 3.0, 2.0, 5.0, 0.0], 2)
  assert actual == {"low": 1.0, "high": 3.0, "first_exit": 3, "max_excursion": 2.0, "final": 0.0}
  inside = horizon_statistics.training_range([0, 1, 2], [1.0, 3.0, 2.0], 2)
  assert inside["first_exit"] is None and inside["max_excursion"] == 0.0


def test_time_feature_ranges_of_the_shipped_scales():
  """eta = 948.7 sees tanh(-1) .. tanh(499 / 948.7 - 1) = tanh(-0.474) = -0.4414; leaves at 500."""
  lopt = mlp_lopt.MLPLOpt()
  ranges = horizon_statistics.time_feature_ranges(lopt, 500, 5000)
  eta = ranges[4]
  expected = [np.tanh(-1.0), np.tanh(499 / lopt.time_scales[4] - 1.0)]
  np.testing.assert_allclose([eta["low"], eta["high"]], expected, rtol=1e-5)
  np.testing.assert_allclose(eta["high"], -0.44143, atol=1e-5)
  assert eta["first_exit"] == 500
  # At step 5000: tanh(5000 / 948.7 - 1) = tanh(4.27) = 0.9996.
  np.testing.assert_allclose(eta["final"], np.tanh(5000 / lopt.time_scales[4] - 1.0), rtol=1e-5)
  assert ranges[0]["first_exit"] is None  # eta = 3 saturates at 1 within the horizon.
  # Held at t = 499, the last step of the horizon, no time feature leaves its range.
  held = horizon_statistics.time_feature_ranges(mlp_lopt.MLPLOpt(time_max_step=499), 500, 5000)
  assert all(r["first_exit"] is None for r in held)


def test_windows_and_window_means_worked_numbers():
  assert horizon_statistics.windows(500, 5000) == {
    "before": (1, 499),
    "after": (500, 1499),
    "end": (4000, 5000),
  }
  steps = [0, 1, 2, 3, 4]
  spans = {"a": (1, 2), "b": (3, 4)}
  # Scalars: (1 + 2) / 2 and (3 + 5) / 2; vectors per component.
  assert horizon_statistics.window_means(steps, [9.0, 1.0, 2.0, 3.0, 5.0], spans) == {
    "a": 1.5,
    "b": 4.0,
  }
  vectors = [[0, 0], [1, 10], [3, 30], [0, 0], [2, 4]]
  assert horizon_statistics.window_means(steps, vectors, spans) == {"a": [2, 20], "b": [1, 2]}
  empty = horizon_statistics.window_means(steps, vectors, {"none": (5, 9)})
  assert np.isnan(empty["none"]).all()


def test_loss_summary_worked_numbers():
  steps = [0, 50, 100, 150]
  run = {
    "train_loss": [2.0, 1.0, 0.5, 0.3],
    "test_loss": [2.0, 1.2, 0.8, 1.0],
    "minibatch_loss": [1.5, 0.7, 0.4],  # steps 0-49, 50-99, 100-149.
  }
  # Last 100 steps: the records at 100 and 150, the minibatch means of 50-99 and 100-149.
  assert horizon_statistics.loss_summary(steps, run, 100) == {
    "train_loss": 0.3,
    "test_loss": 1.0,
    "train_loss_end": 0.4,
    "test_loss_end": 0.9,
    "minibatch_loss_end": 0.55,
    "mean_minibatch_loss": 0.8666666666666667,
  }
  # A validation record adds its last value, its final window and its mean past step 0, which is
  # what Adam's validation-tuned learning rate is chosen on (as evaluation/tuning.py chooses it).
  run["valid_loss"] = [2.0, 1.1, 0.7, 0.9]
  summary = horizon_statistics.loss_summary(steps, run, 100)
  assert summary["valid_loss"] == 0.9
  np.testing.assert_allclose(summary["valid_loss_end"], 0.8)
  np.testing.assert_allclose(summary["mean_valid_loss"], 0.9)
