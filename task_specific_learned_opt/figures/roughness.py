"""How rough a sampled curve or surface is: Fig. 2e-f's roughness against T, as numbers (Sec. 2.3).

Along a 1-D slice, the total variation sum_i |L_{i+1} - L_i| and the mean |second difference|
mean_i |L_{i+1} - 2 L_i + L_{i-1}|; on a 2-D slice, the mean |discrete Laplacian| (the 5-point
stencil, the 2-D second difference) and the mean |difference| between neighbouring grid points.
Second differences are ~h^2 L'' where L is smooth (h the spacing) but ~|jump| at a
near-discontinuity, so they measure the roughness rather than the overall slope, which the total
variation also counts.
"""

import numpy as np


def total_variation(values: np.ndarray) -> float:
  """sum_i |v_{i+1} - v_i| of a 1-D array.

  Args:
    values: [n].
  """
  return float(np.sum(np.abs(np.diff(np.asarray(values, np.float64)))))


def mean_abs_second_difference(values: np.ndarray) -> float:
  """mean_i |v_{i+1} - 2 v_i + v_{i-1}| of a 1-D array.

  Args:
    values: [n], n >= 3.
  """
  return float(np.mean(np.abs(np.diff(np.asarray(values, np.float64), n=2))))


def mean_abs_laplacian(grid: np.ndarray) -> float:
  """The mean |discrete Laplacian| over the interior of a 2-D grid (5-point stencil, unit spacing).

  Args:
    grid: [n, m], n, m >= 3.
  """
  grid = np.asarray(grid, np.float64)
  laplacian = (
    grid[2:, 1:-1] + grid[:-2, 1:-1] + grid[1:-1, 2:] + grid[1:-1, :-2] - 4.0 * grid[1:-1, 1:-1]
  )
  return float(np.mean(np.abs(laplacian)))


def mean_abs_neighbour_difference(grid: np.ndarray) -> float:
  """The mean |difference| between neighbouring points of a 2-D grid, along both axes.

  Args:
    grid: [n, m].
  """
  grid = np.asarray(grid, np.float64)
  differences = np.concatenate(
    [np.abs(np.diff(grid, axis=0)).ravel(), np.abs(np.diff(grid, axis=1)).ravel()]
  )
  return float(np.mean(differences))
