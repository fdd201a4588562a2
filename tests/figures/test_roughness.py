"""The roughness measures of a sampled curve or surface, by hand."""

import numpy as np
import pytest

from task_specific_learned_opt.figures import roughness


def test_roughness_measures_by_hand():
  assert roughness.total_variation([0.0, 1.0, 0.0, 2.0]) == pytest.approx(4.0)
  assert roughness.mean_abs_second_difference([0.0, 1.0, 0.0, 2.0]) == pytest.approx(2.5)
  assert roughness.mean_abs_second_difference(np.arange(10.0) * 3) == pytest.approx(0.0)
  x, y = np.meshgrid(np.arange(5.0), np.arange(4.0), indexing="ij")
  assert roughness.mean_abs_laplacian(x**2 + y**2) == pytest.approx(4.0)
  assert roughness.mean_abs_laplacian(3 * x - y) == pytest.approx(0.0)
  # Differences of 3 along axis 0 (4 x 4 of them) and 1 along axis 1 (5 x 3): mean 63 / 31.
  assert roughness.mean_abs_neighbour_difference(3 * x - y) == pytest.approx(63 / 31)
