"""Flat theta vectors and the unit directions of the outer-loss slices."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.figures import flat_outer_loss
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def test_directions():
  direction = flat_outer_loss.unit(np.array([3.0, 4.0, 0.0]))
  np.testing.assert_allclose(direction, [0.6, 0.8, 0.0])
  other = flat_outer_loss.orthogonal_random_direction(direction, seed=0)
  assert np.dot(other, direction) == pytest.approx(0.0, abs=1e-12)
  assert np.linalg.norm(other) == pytest.approx(1.0)
  np.testing.assert_array_equal(other, flat_outer_loss.orthogonal_random_direction(direction, 0))
  with pytest.raises(ValueError, match="norm"):
    flat_outer_loss.unit(np.zeros(3))


def test_theta_vector_round_trip():
  theta = mlp_lopt.MLPLOpt().init(0)
  vectors = flat_outer_loss.ThetaVector(theta)
  flat = vectors.flat(theta)
  assert flat.shape == (610,)  # App. D.1: 16 x 32 + 32 + 32 x 2 + 2.
  back = vectors.nest(flat)
  for a, b in zip(tf.nest.flatten(theta), tf.nest.flatten(back), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
