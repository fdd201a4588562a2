"""The quadratic task: its loss and gradient by hand."""

import numpy as np
import tensorflow as tf

from task_specific_learned_opt.tasks import quadratic


def test_loss_and_gradient_worked_numbers():
  task = quadratic.QuadraticTask(dim=3, min_curvature=1.0, max_curvature=4.0)
  a = np.array([1.0, 2.0, 4.0])  # log-spaced from 1 to 4.
  np.testing.assert_allclose(task.curvatures, a, rtol=1e-6)
  c = task.center.numpy()
  w = {"w": tf.constant(c + np.array([1.0, -1.0, 0.5], np.float32))}
  batch = task.batch("train", 0)
  with tf.GradientTape() as tape:
    tape.watch(w)
    loss = task.loss(w, batch)
  # 1/2 * (1 * 1 + 2 * 1 + 4 * 0.25) = 2; gradient a * (w - c) = [1, -2, 2].
  assert float(loss) == np.float32(2.0)
  np.testing.assert_allclose(tape.gradient(loss, w)["w"], [1.0, -2.0, 2.0], rtol=1e-5)


def test_noise_makes_batches_differ_by_seed():
  task = quadratic.QuadraticTask(dim=4, noise_std=0.5)
  a, b = task.batch("train", 1)["noise"], task.batch("train", 2)["noise"]
  np.testing.assert_array_equal(a, task.batch("train", 1)["noise"])
  assert not np.allclose(a, b)


def test_family_samples_deterministic_tasks():
  family = quadratic.QuadraticFamily(dim=5)
  np.testing.assert_array_equal(family.sample(3).center, family.sample(3).center)
  assert not np.allclose(family.sample(3).center, family.sample(4).center)
