"""The held-out protocol: its steps and seeds."""

import numpy as np

from task_specific_learned_opt.evaluation import protocol


def test_curve_steps_are_log_spaced_distinct_and_end_at_num_steps():
  steps = protocol.curve_steps(10000, 30)
  assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 10000
  assert np.all(np.diff(steps) > 0) and 20 < len(steps) <= 31
