"""The exploding learning-rate gradient (Sec. 2.3, App. A): closed form against backprop."""

import os

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import inner_training  # noqa: F401 - registers clip_loss.
from task_specific_learned_opt.figures import exploding, lr_closed_form, toy_unrolls
from task_specific_learned_opt.tasks import quadratic


@pytest.fixture
def no_clip():
  gin.parse_config("clip_loss.max_loss = None")


def _quadratic(curvatures, center):
  task = quadratic.QuadraticTask(
    dim=len(curvatures), min_curvature=min(curvatures), max_curvature=max(curvatures)
  )
  np.testing.assert_allclose(task.curvatures, curvatures, rtol=1e-6)
  return task.with_data({"curvatures": task.curvatures, "center": tf.constant(center, tf.float32)})


def test_one_step_worked_numbers(no_clip):
  # H = diag(1, 3), c = 0, w0 = (2, 1), lr 0.1: g0 = (2, 3), w1 = (1.8, 0.7), g1 = (1.8, 2.1),
  # and d l(w1) / d lr = -<g1, g0> = -(3.6 + 6.3) = -9.9. By hand from
  # l(w1(lr)) = 1/2 ((2 - 2 lr)^2 + 3 (1 - 3 lr)^2): -2 (2 - 0.2) - 9 (1 - 0.3) = -9.9.
  hessian = np.diag([1.0, 3.0])
  grads = lr_closed_form.gradient_descent_gradients(
    hessian, np.zeros(2), np.array([2.0, 1.0]), 0.1, 1
  )
  np.testing.assert_allclose(grads, [[2.0, 3.0], [1.8, 2.1]])
  assert lr_closed_form.closed_form_dloss_dtheta(grads, hessian, 0.1) == pytest.approx(-9.9)
  np.testing.assert_allclose(
    lr_closed_form.closed_form_dw_dtheta(grads, hessian, 0.1), [-2.0, -3.0]
  )
  task = _quadratic([1.0, 3.0], [0.0, 0.0])
  dloss, dw = exploding.make_derivative_fn(task, np.array([2.0, 1.0]), 1)(np.array([0.1]), 1)
  np.testing.assert_allclose(dloss, [-9.9], rtol=1e-6)
  np.testing.assert_allclose(dw, [[-2.0, -3.0]], rtol=1e-6)


@pytest.mark.parametrize("center", [[0.0, 0.0, 0.0], [0.5, -1.0, 2.0]])
def test_backprop_matches_the_closed_form(no_clip, center):
  curvatures = [0.25, 0.5, 1.0]  # lambda_max = 1: 2 / lambda_max = 2.
  task = _quadratic(curvatures, center)
  w0 = np.array([1.0, -0.5, 0.75])
  thetas = np.array([0.5, 1.5, 1.9, 2.1, 2.4])
  derivatives = exploding.make_derivative_fn(task, w0, len(thetas))
  for steps in (1, 5, 20):
    dloss, dw = derivatives(thetas, steps)
    for k, theta in enumerate(thetas):
      grads = lr_closed_form.gradient_descent_gradients(
        np.diag(curvatures), np.array(center), w0, theta, steps
      )
      expected = lr_closed_form.closed_form_dloss_dtheta(grads, np.diag(curvatures), theta)
      expected_dw = lr_closed_form.closed_form_dw_dtheta(grads, np.diag(curvatures), theta)
      tolerance = 1e-3 if center[1] else 1e-4  # Non-zero centres cost float32 precision.
      assert dloss[k] == pytest.approx(expected, rel=tolerance, abs=1e-9), (theta, steps)
      scale = np.abs(expected_dw).max()
      np.testing.assert_allclose(dw[k], expected_dw, rtol=tolerance, atol=tolerance * scale)


def test_closed_form_with_changing_hessians_matches_backprop_on_the_toy(no_clip):
  # App. A holds for any loss: on l(w) = (w-4)(w-3)w^2, H_j = l''(w_j) changes every step.
  lr, steps = 0.02, 6
  w = [-1.2]
  for _ in range(steps):
    w.append(w[-1] - lr * (4 * w[-1] ** 3 - 21 * w[-1] ** 2 + 24 * w[-1]))
  w = np.array(w)
  grads = (4 * w**3 - 21 * w**2 + 24 * w)[:, None]
  hessians = (12 * w[:-1] ** 2 - 42 * w[:-1] + 24)[:, None, None]
  expected = lr_closed_form.closed_form_dloss_dtheta(grads, hessians, lr)
  lopt = toy_unrolls.make_optimizer("sgd", "learning_rate", None, None)
  _, _, grad = toy_unrolls.make_final_fn(lopt, "learning_rate", 1)(np.array([lr]), steps)
  assert grad[0] == pytest.approx(expected, rel=1e-3)


def test_growth_rate_above_two_over_lambda_max(no_clip):
  experiment = exploding.ExplodingLearningRateGradient(
    learning_rates=(1.0, 2.2), max_num_steps=80, closed_form_every=20, dim=2
  )
  result = experiment.compute(_Panels())
  assert result["lambda_max"] == pytest.approx(1.0) and result["two_over_lambda_max"] == 2.0
  rate = np.log(abs(1 - 2.2 * 1.0))  # log |1 - theta lambda_max| = log 1.2 = 0.182.
  assert result["log_abs_one_minus_theta_lambda_max"][1] == pytest.approx(rate)
  # Fitted over T = 41..80, where log T adds about 1/60 per step to both slopes.
  log_t = np.mean(1.0 / np.arange(41, 81))
  assert result["fit_num_steps"] == [41, 80]
  assert result["measured_slope_dw"][1] == pytest.approx(rate + log_t, abs=2e-3)
  assert result["measured_slope"][1] == pytest.approx(2 * rate + log_t, abs=2e-3)
  # Below 2 / lambda_max the slowest mode (lambda = 0.1, |1 - 1.0 * 0.1| = 0.9) sets the decay.
  assert result["predicted_slope"][0] == pytest.approx(2 * np.log(0.9))
  assert result["measured_slope"][0] == pytest.approx(2 * np.log(0.9) + log_t, abs=2e-3)
  d = np.abs(np.asarray(result["dloss_dtheta"])[1])
  assert d[-1] > 1e12 * d[0]  # Exploded.
  assert result["max_relative_error"] < 1e-4 and result["max_relative_error_dw"] < 1e-4


class _Panels:
  def done(self, panel, summary=""):
    pass


@pytest.mark.integration
def test_gin_file_through_bin_figure(tmp_path):
  name = "exploding_lr_gradient"
  bindings = [
    "ExplodingLearningRateGradient.max_num_steps = 20",
    "ExplodingLearningRateGradient.learning_rates = (1.0, 2.2)",
    "ExplodingLearningRateGradient.closed_form_every = 5",
    "ExplodingLearningRateGradient.dim = 3",
  ]
  result = testing_utils.run_figure(tmp_path, name, bindings)
  assert result["learning_rates"] == [1.0, 2.2] and result["lambda_max"] == pytest.approx(1.0)
  assert result["num_steps"] == list(range(1, 21))
  assert result["closed_form_num_steps"] == [1, 5, 10, 15, 20]
  assert np.shape(result["dloss_dtheta"]) == (2, 20)
  assert np.shape(result["dw_dtheta_norm"]) == (2, 20)
  assert np.shape(result["closed_form_dloss_dtheta"]) == (2, 5)
  for key in ("measured_slope", "predicted_slope", "measured_slope_dw", "spectral_radius"):
    assert len(result[key]) == 2, key
  # The closed-form markers are the backprop values at their T.
  backprop = np.asarray(result["dloss_dtheta"])[:, [0, 4, 9, 14, 19]]
  np.testing.assert_allclose(backprop, result["closed_form_dloss_dtheta"], rtol=1e-4)
  assert result["predicted_slope"][1] == pytest.approx(2 * np.log(1.2))
  assert os.path.getsize(tmp_path / f"{name}.png") > 10000
