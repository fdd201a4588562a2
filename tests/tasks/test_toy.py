"""The toy two-minimum task: its loss, gradient and stationary points by hand."""

import math

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.tasks import toy


def test_loss_and_gradient_worked_numbers():
  task = toy.TwoMinimumTask(num_copies=3)
  params = {"w": tf.constant([-1.2, 1.0, 2.0])}
  with tf.GradientTape() as tape:
    tape.watch(params)
    loss = task.loss(params, task.batch("train", 0))
  # l(-1.2) = (-5.2)(-4.2)(1.44) = 31.4496; l(1) = (-3)(-2)(1) = 6; l(2) = (-2)(-1)(4) = 8.
  assert float(loss) == pytest.approx(31.4496 + 6 + 8, rel=1e-6)
  # l'(w) = 4w^3 - 21w^2 + 24w: l'(-1.2) = -6.912 - 30.24 - 28.8; l'(1) = 7; l'(2) = -4.
  np.testing.assert_allclose(tape.gradient(loss, params)["w"], [-65.952, 7.0, -4.0], rtol=1e-5)


def test_stationary_points():
  assert toy.GLOBAL_MINIMUM == pytest.approx(3.5687, abs=1e-4)
  assert toy.MAXIMUM == pytest.approx(1.6813, abs=1e-4)
  for w in (toy.LOCAL_MINIMUM, toy.MAXIMUM, toy.GLOBAL_MINIMUM):
    assert 4 * w**3 - 21 * w**2 + 24 * w == pytest.approx(0.0, abs=1e-9)
  assert float(toy.toy_loss(tf.constant(toy.GLOBAL_MINIMUM, tf.float64))) == pytest.approx(
    (toy.GLOBAL_MINIMUM - 4) * (toy.GLOBAL_MINIMUM - 3) * toy.GLOBAL_MINIMUM**2
  )
  assert float(toy.toy_loss(tf.constant(toy.GLOBAL_MINIMUM))) < -3.1
  assert math.isclose(toy.W0, -1.2)


def test_init_params_and_empty_batches():
  task = toy.TwoMinimumTask(num_copies=4, w0=0.5)
  np.testing.assert_array_equal(task.init_params(7)["w"], [0.5] * 4)
  assert task.init_params(7)["w"].dtype == tf.float32
  assert task.batch("valid", 3) == {}
  with pytest.raises(ValueError, match="split"):
    task.batch("training", 0)
