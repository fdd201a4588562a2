"""The toy two-minimum experiments (Fig. 2a-c, App. B): where runs end, the result, the binary."""

import os

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import inner_training  # noqa: F401 - registers clip_loss.
from task_specific_learned_opt.figures import toy_outer_loss, toy_unrolls


def _loss(w):
  return (w - 4) * (w - 3) * w**2


@pytest.fixture
def no_clip():
  gin.parse_config("clip_loss.max_loss = None")


def test_runs_are_independent_and_diverged_runs_do_not_leak(no_clip):
  lopt = toy_unrolls.make_optimizer("sgd", "learning_rate", None, None)
  thetas = np.array([0.01, 0.05, 0.2, 0.3])  # 0.2 and 0.3 diverge.
  w, _, grad = toy_unrolls.make_final_fn(lopt, "learning_rate", 4)(thetas, 30)
  assert not np.isfinite(w[2:]).any() or (np.abs(w[2:]) > 10).all()
  alone_w, _, alone_grad = toy_unrolls.make_final_fn(lopt, "learning_rate", 2)(thetas[:2], 30)
  np.testing.assert_array_equal(w[:2], alone_w)
  np.testing.assert_array_equal(grad[:2], alone_grad)
  assert np.isfinite(grad[:2]).all()
  # lr 0.01 stays near w = 0, lr 0.05 reaches the global minimum.
  assert toy_outer_loss.basins(w, 10.0).tolist() == [0, 1, 3, 3]


def test_basins():
  w = np.array([0.1, 3.4, 2.0, np.nan, 11.0, -np.inf])
  assert toy_outer_loss.basins(w, 10.0).tolist() == [0, 1, 2, 3, 3, 3]
  assert toy_outer_loss.diverged(w, 10.0).tolist() == [False, False, False, True, True, True]


def test_refuses_a_clipped_loss():
  experiment = toy_outer_loss.ToyTwoMinimum(
    theta_name="momentum", theta_min=0.5, theta_max=0.9, learning_rate=0.02, num_thetas=3
  )
  with pytest.raises(ValueError, match="clip_loss.max_loss = None"):
    experiment.compute(None)


TINY = [
  "ToyTwoMinimum.num_thetas = 40",
  "ToyTwoMinimum.num_trajectories = 3",
  "ToyTwoMinimum.num_steps = (5, 20)",
]


@pytest.mark.integration
@pytest.mark.parametrize(
  "name, theta_name, learning_rate, momentum",
  [
    ("fig2_toy_momentum", "momentum", 0.02, "theta"),
    ("fig2_toy_lr_momentum", "learning_rate", "theta", 0.5),
    ("fig2_toy_lr", "learning_rate", "theta", 0.0),
  ],
)
def test_gin_files_through_bin_figure(tmp_path, name, theta_name, learning_rate, momentum):
  result = testing_utils.run_figure(tmp_path, name, TINY)
  assert result["theta_name"] == theta_name
  assert result["learning_rate"] == learning_rate and result["momentum"] == momentum
  assert result["w0"] == -1.2 and result["num_steps"] == [5, 20]
  assert len(result["thetas"]) == 40 and len(result["trajectory_thetas"]) == 3
  assert np.shape(result["trajectories"]) == (3, 21)
  assert np.asarray(result["trajectories"], float)[:, 0].tolist() == pytest.approx([-1.2] * 3)
  for key in ("final_w", "final_loss", "dloss_dtheta"):
    assert np.shape(result[key]) == (2, 40), key
  assert len(result["num_diverged"]) == 2 and len(result["max_abs_dloss_dtheta"]) == 2
  # The JSON's numbers are the runs': final_loss = l(final_w) wherever w_T is finite.
  w = np.asarray(result["final_w"], float)
  loss = np.asarray(result["final_loss"], float)
  finite = np.isfinite(w) & (np.abs(w) < 10)
  np.testing.assert_allclose(loss[finite], _loss(w[finite]), rtol=1e-4, atol=1e-4)
  assert result["num_diverged"] == [int(np.sum(~finite[i])) for i in range(2)]
  assert os.path.getsize(tmp_path / f"{name}.png") > 10000
  assert "clip_loss.max_loss = None" in open(tmp_path / "operative_config.gin").read()
