"""How far apart runs of nearby learning rates end up: Fig. 2d's projection and spreads (Sec. 2.3).

The projection is fixed and linear: x = flat(w) @ P, flat(w) being all the parameters flattened
in `tf.nest.flatten` order and P a [num_params, 2] Gaussian matrix (entries N(0, 1 / num_params))
drawn from a numpy seed. The spread of a set of runs is the RMS distance of their points to the
centroid, sqrt(mean_k |x_k - mean_k x_k|^2), in the 2-D projection (`spread_2d`) or in the full
parameter space (`SpreadAccumulator`, one run at a time).
"""

import numpy as np


def random_projection(num_params: int, seed: int) -> np.ndarray:
  """The fixed projection P: float64 [num_params, 2], entries N(0, 1 / num_params).

  Args:
    num_params: the length of the flattened parameter vector.
    seed: the numpy seed; the same seed always gives the same matrix.
  """
  rng = np.random.default_rng(seed)
  return rng.standard_normal((num_params, 2)) / np.sqrt(num_params)


def project(flat_params: np.ndarray, projection: np.ndarray) -> np.ndarray:
  """The 2-D points flat_params @ projection: [..., 2] for flat_params [..., num_params].

  Args:
    flat_params: flattened parameter vectors, [..., num_params].
    projection: P from `random_projection`.
  """
  return np.asarray(flat_params, np.float64) @ projection


def spread_2d(points: np.ndarray) -> np.ndarray:
  """The RMS distance of points to their centroid: sqrt(mean_k |x_k - mean x|^2).

  Args:
    points: [num_runs, ..., dim]; the spread is over axis 0 and the distance over the last axis.

  Returns:
    [...]: one spread per index of the middle axes (e.g. per step).
  """
  points = np.asarray(points, np.float64)
  centred = points - points.mean(axis=0)
  return np.sqrt(np.mean(np.sum(centred**2, axis=-1), axis=0))


def max_pairwise_distance(points: np.ndarray) -> float:
  """The largest Euclidean distance between two of `points` ([num_points, dim]).

  Args:
    points: [num_points, dim].
  """
  points = np.asarray(points, np.float64)
  differences = points[:, None, :] - points[None, :, :]
  return float(np.sqrt(np.max(np.sum(differences**2, axis=-1))))


class SpreadAccumulator:
  """The full-space spread over runs of [num_steps + 1, num_params] trajectories, one run at a time.

  It sums d_k = w_k - w_first (each run minus the first run added) and d_k^2 in float64, so the
  spread sqrt(sum_i var_k(w_k,i)) loses no precision to the parameters' size, and it never holds
  more than two trajectories.
  """

  def __init__(self) -> None:
    """Starts with no runs."""
    self.count = 0
    self.first = None
    self.total = None
    self.total_squares = None

  def add(self, trajectory: np.ndarray) -> None:
    """Adds one run's flattened parameters at every step.

    Args:
      trajectory: [num_steps + 1, num_params].
    """
    trajectory = np.asarray(trajectory, np.float64)
    if self.first is None:
      self.first = trajectory
      self.total = np.zeros_like(trajectory)
      self.total_squares = np.zeros_like(trajectory)
    difference = trajectory - self.first
    self.total += difference
    self.total_squares += difference**2
    self.count += 1

  def mean(self) -> np.ndarray:
    """The mean trajectory over the runs, [num_steps + 1, num_params]."""
    return self.first + self.total / self.count

  def spread(self) -> np.ndarray:
    """Per step, sqrt(mean_k |w_k - mean_k w_k|^2): [num_steps + 1]."""
    mean = self.total / self.count
    variance = np.maximum(self.total_squares / self.count - mean**2, 0.0)
    return np.sqrt(np.sum(variance, axis=-1))
