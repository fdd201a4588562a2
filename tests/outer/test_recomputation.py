"""Recomputed chunks: their lengths at each level, and a gradient equal to plain backprop."""

import numpy as np
import tensorflow as tf

from task_specific_learned_opt.outer import recomputation


def test_segment_lengths():
  lengths = recomputation.segment_lengths_for
  # One level: ceil(0.2 sqrt(K)).
  assert lengths(10000, levels=1).numpy().tolist() == [20]
  assert lengths(9, levels=1).numpy().tolist() == [1]
  assert lengths(9, scale=1.0, levels=1).numpy().tolist() == [3]
  # Two levels: innermost ceil(0.2 * 10000^(1/3)) = ceil(4.31) = 5; then 5 * sqrt(10000 / 5)
  # = 223.6 -> 224: 45 chunks of 224 steps, each rerun as 45 chunks of 5.
  assert lengths(10000).numpy().tolist() == [224, 5]


def test_recomputed_segment_gives_the_values_and_gradients_of_the_plain_one():
  # f(x, y; c) = (x * y * c, x + c) with an int counter passed through: the rerun in the
  # backward pass must give the same gradients as differentiating f directly.
  def segment(x, pair, constants):
    y, count = pair
    return (x * y * constants["c"], x + constants["c"]), count + 1

  x, y, c = tf.constant([1.0, 2.0]), tf.constant([3.0, -1.0]), tf.constant(0.5)
  structure = ((x, x), tf.constant(0))
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([x, y])
    plain = segment(x, (y, tf.constant(4)), {"c": c})
    rerun = recomputation.recomputed(segment, structure, (x, (y, tf.constant(4))), {"c": c})
    plain_loss = tf.reduce_sum(plain[0][0] ** 2) + tf.reduce_sum(plain[0][1])
    rerun_loss = tf.reduce_sum(rerun[0][0] ** 2) + tf.reduce_sum(rerun[0][1])
  assert int(rerun[1]) == 5
  for a, b in zip(
    tape.gradient(plain_loss, [x, y]), tape.gradient(rerun_loss, [x, y]), strict=True
  ):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
