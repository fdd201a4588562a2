"""The worker's truncation step: reproducible samples, the curriculum, the horizon reset."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.distributed import worker
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import schedules
from task_specific_learned_opt.tasks import quadratic

# One family and learned optimizer for every worker: they share one compiled sampler.
FAMILY, LOPT = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()


def _worker(worker_id=0, **kwargs):
  kwargs.setdefault("schedule", schedules.FixedLength(5))
  return worker.Worker(FAMILY, LOPT, worker_id=worker_id, **kwargs)


def test_truncations_follow_the_schedule_and_reset_at_the_horizon():
  w = _worker(horizon=12)
  theta = w.lopt.init(0)
  state = w.initial_state()
  seen = []
  for version in range(5):
    sample, state = w.step(theta, version, state)
    seen.append((sample.inner_step, sample.num_steps, state.task_index))
    assert sample.theta_version == version and sample.worker_id == 0
  # K = 5, 5, then capped at the 2 steps left before the horizon; then a new task from t = 0.
  assert seen == [(0, 5, 1), (5, 5, 1), (10, 2, 1), (0, 5, 2), (5, 5, 2)]
  assert state.truncation_index == 5 and int(state.inner_state.iteration) == 10


def test_the_curriculum_sets_k_from_the_outer_step():
  schedule = schedules.LinearCurriculum(min_length=10, max_length=100, ramp_steps=10)
  w = _worker(schedule=schedule, horizon=1000)
  state = w.initial_state()
  assert 8 <= w.truncation_length(0, state, 0) <= 12  # 10 jittered by up to 20%.
  assert 80 <= w.truncation_length(10, state, 0) <= 120
  assert w.truncation_length(10, state, 995) == 5  # Capped at the steps left.


def test_samples_are_reproducible_from_theta_state_and_seed():
  theta = mlp_lopt.MLPLOpt().init(1)
  a, b = _worker(), _worker()
  sample_a, state_a = a.step(theta, 0, a.initial_state())
  sample_b, state_b = b.step(theta, 0, b.initial_state())
  for x, y in zip(tf.nest.flatten(sample_a), tf.nest.flatten(sample_b), strict=True):
    np.testing.assert_array_equal(x, y)
  again, _ = a.step(theta, 1, state_a)
  assert again.inner_step == 5
  other, _ = _worker(worker_id=1).step(theta, 0, a.initial_state())
  assert other.loss_plus != sample_a.loss_plus  # Another worker, another task.


def test_unknown_objective():
  with pytest.raises(ValueError, match="objective"):
    _worker(objective="test")
