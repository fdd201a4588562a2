"""The toy problem's unrolls for a grid of hyper-parameters: worked steps and gradients by hand."""

import gin
import numpy as np
import pytest

from task_specific_learned_opt import inner_training  # noqa: F401 - registers clip_loss.
from task_specific_learned_opt.figures import toy_unrolls


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

  lopt = toy_unrolls.make_optimizer("momentum", "momentum", lr, None)
  final = toy_unrolls.make_final_fn(lopt, "momentum", 2)
  w, loss, grad = final(np.array([mu, mu]), 2)
  np.testing.assert_allclose(w, [w2, w2], rtol=1e-5)
  np.testing.assert_allclose(loss, [_loss(w2)] * 2, rtol=1e-4)
  # Only m2 depends on mu: d m2 / d mu = g0, so d w2 / d mu = -lr g0 and
  # d l(w2) / d mu = l'(w2) * (-lr g0).
  np.testing.assert_allclose(grad, [_dl(w2) * -lr * g0] * 2, rtol=1e-4)
  w_one, _, _ = final(np.array([mu, mu]), 1)
  np.testing.assert_allclose(w_one, [w1, w1], rtol=1e-5)

  paths = toy_unrolls.trajectories(lopt, "momentum", np.array([mu]), 2)
  np.testing.assert_allclose(paths, [[-1.2, w1, w2]], rtol=1e-5)


def test_learning_rate_derivatives_by_hand(no_clip):
  lr, mu = 0.02, 0.5
  g0 = _dl(-1.2)
  w1 = -1.2 - lr * g0
  # Plain SGD, one step: d l(w1) / d lr = l'(w1) * (-g0) = -<g1, g0> (App. A's one-step case).
  sgd_final = toy_unrolls.make_final_fn(
    toy_unrolls.make_optimizer("sgd", "learning_rate", None, None), "learning_rate", 1
  )
  _, _, grad = sgd_final(np.array([lr]), 1)
  np.testing.assert_allclose(grad, [-_dl(w1) * g0], rtol=1e-4)
  # Heavy ball, two steps: w2 = w1 - lr (mu g0 + g1), so
  # d w2 / d lr = -g0 - (mu g0 + l'(w1)) - lr l''(w1) (-g0).
  final = toy_unrolls.make_final_fn(
    toy_unrolls.make_optimizer("momentum", "learning_rate", None, mu), "learning_rate", 1
  )
  w, _, grad = final(np.array([lr]), 2)
  w2 = w1 - lr * (mu * g0 + _dl(w1))
  dw2 = -g0 - (mu * g0 + _dl(w1)) + lr * _d2l(w1) * g0
  np.testing.assert_allclose(w, [w2], rtol=1e-5)
  np.testing.assert_allclose(grad, [_dl(w2) * dw2], rtol=1e-4)


def test_make_optimizer_checks_its_arguments():
  with pytest.raises(ValueError, match="theta"):
    toy_unrolls.make_optimizer("momentum", "momentum", 0.02, 0.9)
  with pytest.raises(ValueError, match="need values"):
    toy_unrolls.make_optimizer("momentum", "momentum", None, None)
  with pytest.raises(ValueError, match="no momentum"):
    toy_unrolls.make_optimizer("sgd", "learning_rate", None, 0.9)
  with pytest.raises(ValueError, match="Unknown optimizer"):
    toy_unrolls.make_optimizer("adam", "learning_rate", None, None)
  lopt = toy_unrolls.make_optimizer("momentum", "learning_rate", None, 0.5)
  assert lopt.fixed == {"momentum": 0.5} and lopt.learned == {"learning_rate": "identity"}
