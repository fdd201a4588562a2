"""Fig. 2d's divergence measures: the fixed random projection and the spreads, by hand."""

import numpy as np
import pytest

from task_specific_learned_opt.figures import divergence


def test_projection_is_fixed_and_linear():
  projection = divergence.random_projection(5, seed=3)
  assert projection.shape == (5, 2)
  np.testing.assert_array_equal(projection, divergence.random_projection(5, seed=3))
  assert not np.array_equal(projection, divergence.random_projection(5, seed=4))
  # A basis vector picks out its row; a known matrix gives the hand-computed point.
  np.testing.assert_allclose(divergence.project(np.eye(5)[2], projection), projection[2])
  known = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  np.testing.assert_allclose(divergence.project(np.array([1.0, 2.0, 3.0]), known), [4.0, 5.0])
  x, y = np.arange(5.0), np.ones(5)
  np.testing.assert_allclose(
    divergence.project(2 * x - 3 * y, projection),
    2 * divergence.project(x, projection) - 3 * divergence.project(y, projection),
  )
  # Entries N(0, 1 / n): the column norms are ~1 for a long vector.
  norms = np.linalg.norm(divergence.random_projection(20000, seed=0), axis=0)
  np.testing.assert_allclose(norms, 1.0, atol=0.03)


def test_spreads_by_hand():
  points = np.array([[0.0, 0.0], [2.0, 0.0]])
  assert divergence.spread_2d(points) == pytest.approx(1.0)
  assert divergence.max_pairwise_distance(points) == pytest.approx(2.0)
  square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  assert divergence.spread_2d(square) == pytest.approx(np.sqrt(0.5))
  assert divergence.max_pairwise_distance(square) == pytest.approx(np.sqrt(2.0))
  # [runs, steps, 2]: one spread per step; doubling the points doubles the spread.
  by_step = divergence.spread_2d(np.stack([square, 2 * square], axis=1))
  np.testing.assert_allclose(by_step, [np.sqrt(0.5), np.sqrt(2.0)])


def test_spread_accumulator_matches_numpy():
  rng = np.random.default_rng(0)
  runs = 100.0 + rng.normal(size=(7, 3, 50))  # Large offsets: no loss of precision.
  accumulator = divergence.SpreadAccumulator()
  for run in runs:
    accumulator.add(run)
  expected = np.sqrt(np.sum(np.var(runs, axis=0), axis=-1))
  np.testing.assert_allclose(accumulator.spread(), expected, rtol=1e-9)
  np.testing.assert_allclose(accumulator.mean(), runs.mean(axis=0), rtol=1e-12)
