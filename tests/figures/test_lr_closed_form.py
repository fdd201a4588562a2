"""App. A's closed form of a learned learning rate's outer-gradient, by hand."""

import numpy as np
import pytest

from task_specific_learned_opt.figures import lr_closed_form


def test_two_steps_of_the_closed_form_by_hand():
  # T = 2: d w2 / d lr = -((I - lr H) g0 + g1).
  hessian = np.diag([1.0, 3.0])
  grads = lr_closed_form.gradient_descent_gradients(
    hessian, np.zeros(2), np.array([2.0, 1.0]), 0.1, 2
  )
  g0, g1, g2 = grads
  np.testing.assert_allclose(g2, [1.62, 1.47])  # w2 = (1.62, 0.49).
  expected = -((np.eye(2) - 0.1 * hessian) @ g0 + g1)  # -((1.8, 2.1) + (1.8, 2.1)).
  # By hand: w2_i = (1 - lr a_i)^2 w0_i, d/d lr = -2 a_i (1 - lr a_i) w0_i = (-3.6, -4.2).
  np.testing.assert_allclose(expected, [-3.6, -4.2])
  np.testing.assert_allclose(lr_closed_form.closed_form_dw_dtheta(grads, hessian, 0.1), expected)
  assert lr_closed_form.closed_form_dloss_dtheta(grads, hessian, 0.1) == pytest.approx(
    1.62 * -3.6 + 1.47 * -4.2
  )


def test_spectral_radius_and_slope_fit():
  assert lr_closed_form.spectral_radius([0.1, 1.0], 2.2) == pytest.approx(1.2)
  assert lr_closed_form.spectral_radius([0.1, 1.0], 1.0) == pytest.approx(0.9)
  steps = np.arange(10, 20)
  assert lr_closed_form.fit_slope(steps, -3.0 * np.exp(0.25 * steps)) == pytest.approx(0.25)
