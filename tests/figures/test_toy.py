"""The toy two-minimum experiments (Fig. 2a-c, App. B): worked steps, gradients and the binary."""

import os

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import inner_training  # noqa: F401 - registers clip_loss.
from task_specific_learned_opt.figures import toy as toy_figure


def _dl(w):
  return 4 * w**3 - 21 * w**2 + 24 * w


def _d2l(w):
  return 12 * w**2 - 42 * w + 24


def _loss(w):
  return (w - 4) * (w - 3) * w**2


@pytest.fixture
def no_clip():
  gin.parse_config("clip_loss.max_loss = None")


def test_two_heavy_ball_steps_by_hand(no_clip):
  lr, mu = 0.01, 0.9
  # Step 1: g0 = l'(-1.2) = -65.952, m1 = g0, w1 = -1.2 + 0.01 * 65.952 = -0.54048.
  # Step 2: g1 = l'(-0.54048) = -19.73755, m2 = 0.9 m1 + g1 = -79.09435, w2 = 0.2504635.
  g0 = _dl(-1.2)
  assert g0 == pytest.approx(-65.952)
  w1 = -1.2 - lr * g0
  assert w1 == pytest.approx(-0.54048)
  g1 = _dl(w1)
  assert g1 == pytest.approx(-19.73755, abs=1e-5)
  m2 = mu * g0 + g1
  w2 = w1 - lr * m2
  assert w2 == pytest.approx(0.2504635, abs=1e-6)

  lopt = toy_figure.make_optimizer("momentum", "momentum", lr, None)
  final = toy_figure.make_final_fn(lopt, "momentum", 2)
  w, loss, grad = final(np.array([mu, mu]), 2)
  np.testing.assert_allclose(w, [w2, w2], rtol=1e-5)
  np.testing.assert_allclose(loss, [_loss(w2)] * 2, rtol=1e-4)
  # Only m2 depends on mu: d m2 / d mu = g0, so d w2 / d mu = -lr g0 and
  # d l(w2) / d mu = l'(w2) * (-lr g0).
  np.testing.assert_allclose(grad, [_dl(w2) * -lr * g0] * 2, rtol=1e-4)
  w_one, _, _ = final(np.array([mu, mu]), 1)
  np.testing.assert_allclose(w_one, [w1, w1], rtol=1e-5)

  paths = toy_figure.trajectories(lopt, "momentum", np.array([mu]), 2)
  np.testing.assert_allclose(paths, [[-1.2, w1, w2]], rtol=1e-5)


def test_learning_rate_derivatives_by_hand(no_clip):
  lr, mu = 0.02, 0.5
  g0 = _dl(-1.2)
  w1 = -1.2 - lr * g0
  # Plain SGD, one step: d l(w1) / d lr = l'(w1) * (-g0) = -<g1, g0> (App. A's one-step case).
  sgd_final = toy_figure.make_final_fn(
    toy_figure.make_optimizer("sgd", "learning_rate", None, None), "learning_rate", 1
  )
  _, _, grad = sgd_final(np.array([lr]), 1)
  np.testing.assert_allclose(grad, [-_dl(w1) * g0], rtol=1e-4)
  # Heavy ball, two steps: w2 = w1 - lr (mu g0 + g1), so
  # d w2 / d lr = -g0 - (mu g0 + l'(w1)) - lr l''(w1) (-g0).
  final = toy_figure.make_final_fn(
    toy_figure.make_optimizer("momentum", "learning_rate", None, mu), "learning_rate", 1
  )
  w, _, grad = final(np.array([lr]), 2)
  w2 = w1 - lr * (mu * g0 + _dl(w1))
  dw2 = -g0 - (mu * g0 + _dl(w1)) + lr * _d2l(w1) * g0
  np.testing.assert_allclose(w, [w2], rtol=1e-5)
  np.testing.assert_allclose(grad, [_dl(w2) * dw2], rtol=1e-4)


def test_runs_are_independent_and_diverged_runs_do_not_leak(no_clip):
  lopt = toy_figure.make_optimizer("sgd", "learning_rate", None, None)
  thetas = np.array([0.01, 0.05, 0.2, 0.3])  # 0.2 and 0.3 diverge.
  w, _, grad = toy_figure.make_final_fn(lopt, "learning_rate", 4)(thetas, 30)
  assert not np.isfinite(w[2:]).any() or (np.abs(w[2:]) > 10).all()
  alone_w, _, alone_grad = toy_figure.make_final_fn(lopt, "learning_rate", 2)(thetas[:2], 30)
  np.testing.assert_array_equal(w[:2], alone_w)
  np.testing.assert_array_equal(grad[:2], alone_grad)
  assert np.isfinite(grad[:2]).all()
  # lr 0.01 stays near w = 0, lr 0.05 reaches the global minimum.
  assert toy_figure.basins(w, 10.0).tolist() == [0, 1, 3, 3]


def test_basins():
  w = np.array([0.1, 3.4, 2.0, np.nan, 11.0, -np.inf])
  assert toy_figure.basins(w, 10.0).tolist() == [0, 1, 2, 3, 3, 3]
  assert toy_figure.diverged(w, 10.0).tolist() == [False, False, False, True, True, True]


def test_refuses_a_clipped_loss():
  experiment = toy_figure.ToyTwoMinimum(
    theta_name="momentum", theta_min=0.5, theta_max=0.9, learning_rate=0.02, num_thetas=3
  )
  with pytest.raises(ValueError, match="clip_loss.max_loss = None"):
    experiment.compute(None)


def test_make_optimizer_checks_its_arguments():
  with pytest.raises(ValueError, match="theta"):
    toy_figure.make_optimizer("momentum", "momentum", 0.02, 0.9)
  with pytest.raises(ValueError, match="need values"):
    toy_figure.make_optimizer("momentum", "momentum", None, None)
  with pytest.raises(ValueError, match="no momentum"):
    toy_figure.make_optimizer("sgd", "learning_rate", None, 0.9)
  with pytest.raises(ValueError, match="Unknown optimizer"):
    toy_figure.make_optimizer("adam", "learning_rate", None, None)
  lopt = toy_figure.make_optimizer("momentum", "learning_rate", None, 0.5)
  assert lopt.fixed == {"momentum": 0.5} and lopt.learned == {"learning_rate": "identity"}


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
