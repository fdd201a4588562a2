"""The worker's truncation step: reproducible samples, the curriculum, the horizon reset, PES."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import inner_training, nests, random_seeds
from task_specific_learned_opt.distributed import worker_step
from task_specific_learned_opt.learned_optimizers import hyperparameters, mlp_lopt
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.outer import antithetic, pes, schedules, truncated_unroll
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import persistent_es, registry
from task_specific_learned_opt.tasks import families, quadratic

# One family and learned optimizer for every worker: they share one compiled sampler.
FAMILY, LOPT = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()


def _worker(worker_id=0, **kwargs):
  kwargs.setdefault("schedule", schedules.FixedLength(5))
  return worker_step.Worker(FAMILY, LOPT, worker_id=worker_id, **kwargs)


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
  assert state.truncation_index == 5 and int(state.estimator_state.inner_state.iteration) == 10


def test_staggered_workers_cut_their_first_run_at_different_points():
  theta = LOPT.init(0)
  first_runs = []
  for worker_id in range(8):
    w = _worker(worker_id, horizon=20, stagger=True)
    horizon = w.run_horizon(0)
    assert 1 <= horizon <= 20 and w.run_horizon(1) == 20 == _worker(
      worker_id, horizon=20
    ).run_horizon(0)
    first_runs.append(horizon)
    if worker_id < 2:  # Steps reach the cut, then the next run goes the whole horizon.
      state, seen = w.initial_state(), []
      while state.task_index < 2 or state.estimator_state is not None:
        sample, state = w.step(theta, 0, state)
        seen.append((state.task_index, sample.inner_step + sample.num_steps))
      ends = [end for task, end in seen if task == 1]
      assert ends[-1] == horizon and max(ends) == horizon
      assert [end for task, end in seen if task == 2][-1] == 20
  # Workers started together reach their first reset at different steps (8 draws in 1 ... 20).
  assert len(set(first_runs)) >= 5


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


# Persistent ES (docs/pes.md).

PES_LOPT = hyperparameters.LearnedHyperparameters(
  sgd.Momentum, learned={"learning_rate": "log"}, initial={"learning_rate": 0.3}
)


def _pes_worker(**kwargs):
  kwargs.setdefault("schedule", schedules.FixedLength(5))
  return worker_step.Worker(
    FAMILY, PES_LOPT, worker_id=2, estimator=registry.get("pes"), horizon=12, **kwargs
  )


def _replayed_truncation(w, theta, state_plus, state_minus, task_index, truncation_index, k):
  """One PES truncation by hand: e, then each unroll from its own state with inner_training."""
  task = w.task(task_index)
  train_seed, _ = truncated_unroll.data_seeds(random_seeds.fold_in(w.task_seed(task_index), 1))
  e = antithetic.perturbation(
    theta, random_seeds.fold_in(random_seeds.fold_in(w.seed, 3), truncation_index), w.sigma
  )
  t0 = int(state_plus.iteration)
  losses, ends = [], []
  for sign, state in ((1.0, state_plus), (-1.0, state_minus)):
    opt = PES_LOPT.opt_fn(tf.nest.map_structure(lambda th, ee, s=sign: th + s * ee, theta, e))
    # The losses of steps t0+1..t0+K: the K post-update states' (L_train).
    _, step_losses = inner_training.unroll(task, opt, state, k + 1, train_seed, first_step=t0)
    losses.append(float(np.mean(step_losses.numpy()[1:])))
    ends.append(inner_training.unroll(task, opt, state, k, train_seed, first_step=t0)[0])
  return e, losses, ends


def test_a_persistent_worker_replayed_by_hand():
  w = _pes_worker()
  theta = PES_LOPT.init(0)
  worker_state = w.initial_state()
  first = w.new_inner_state(theta, 0)
  plus, minus, perturbations = first, first, []
  for truncation, (t0, k) in enumerate([(0, 5), (5, 5), (10, 2)]):
    sample, worker_state = w.step(theta, truncation, worker_state)
    state = worker_state.estimator_state
    assert (sample.inner_step, sample.num_steps) == (t0, k)
    e, (loss_plus, loss_minus), (plus, minus) = _replayed_truncation(
      w, theta, plus, minus, 0, truncation, k
    )
    perturbations.append(e)
    # xi_k = e_1 + ... + e_k, summed here by hand (not by pes.accumulate).
    xi = tf.nest.map_structure(lambda *es: tf.add_n(es), *perturbations)
    expected = pes.gradient(loss_plus, loss_minus, xi, w.sigma)
    np.testing.assert_allclose(sample.loss_plus, loss_plus, rtol=1e-5)
    np.testing.assert_allclose(sample.loss_minus, loss_minus, rtol=1e-5)
    np.testing.assert_allclose(sample.g_es, nests.flatten_numpy(expected), rtol=1e-4, atol=1e-7)
    sample_2_g = sample.g_es
    if truncation < 2:
      # Each unroll continues its own trajectory: the states are the replayed ones, and differ.
      assert int(state.accumulator.num_truncations) == truncation + 1
      for mine, replayed in ((state.state_plus, plus), (state.state_minus, minus)):
        for a, b in zip(tf.nest.flatten(mine), tf.nest.flatten(replayed), strict=True):
          np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
      assert not np.allclose(state.state_plus.params["w"], state.state_minus.params["w"])
      assert not np.allclose(state.state_plus.momentum["w"], state.state_minus.momentum["w"])
  # g_pes of truncation 2 is not truncated ES's: xi = e_1 + e_2 + e_3, not e_3, and the two
  # gradients differ by far more than the tolerance the sample was checked to.
  truncated_es = pes.gradient(loss_plus, loss_minus, e, w.sigma)
  assert not np.allclose(sample_2_g, nests.flatten_numpy(truncated_es), rtol=1e-2)
  # At the horizon everything resets with the inner run: a new task, both states from its
  # initial ones, xi = e of the new run's first truncation alone.
  assert state is None
  sample, worker_state = w.step(theta, 3, worker_state)
  state = worker_state.estimator_state
  assert (sample.inner_step, worker_state.task_index) == (0, 2)
  assert int(state.accumulator.num_truncations) == 1
  start = w.new_inner_state(theta, 1)
  e, (loss_plus, loss_minus), _ = _replayed_truncation(w, theta, start, start, 1, 3, 5)
  np.testing.assert_allclose(
    state.accumulator.perturbation_sum["learning_rate"], e["learning_rate"], rtol=1e-6
  )
  expected = pes.gradient(loss_plus, loss_minus, e, w.sigma)
  np.testing.assert_allclose(sample.g_es, nests.flatten_numpy(expected), rtol=1e-4, atol=1e-7)
  # One trace for every truncation, task and accumulator count.
  assert w._compiled(w.task(1)).experimental_get_tracing_count() == 1


def test_a_persistent_worker_starts_a_new_task_from_a_state_without_the_minus_unroll():
  plain = worker_step.Worker(FAMILY, PES_LOPT, worker_id=2, schedule=schedules.FixedLength(5))
  persistent = _pes_worker()
  theta = PES_LOPT.init(0)
  _, state = plain.step(theta, 0, plain.initial_state())
  assert isinstance(state.estimator_state, estimator_base.UnrollState)
  sample, state = persistent.step(theta, 1, state)
  assert sample.inner_step == 0 and state.task_index == 2
  assert isinstance(state.estimator_state, persistent_es.PESState)
  assert int(state.estimator_state.accumulator.num_truncations) == 1


def test_a_mixtures_samples_are_those_of_its_members_alone():
  # A task's trace is keyed by its member: a quadratic with noise would otherwise run through
  # the noiseless member's trace (the same shapes and data) and silently lose its noise.
  members = (quadratic.QuadraticFamily(dim=4), quadratic.QuadraticFamily(dim=4, noise_std=1.0))
  mixture = families.MixtureFamily(members)
  one_task_each = dict(schedule=schedules.FixedLength(5), horizon=5)  # Every step a new task.
  mixed = worker_step.Worker(mixture, LOPT, worker_id=3, **one_task_each)
  alone = [worker_step.Worker(f, LOPT, worker_id=3, **one_task_each) for f in members]
  theta = tf.nest.map_structure(lambda x: 3.0 * x, LOPT.init(2))
  state, seen = mixed.initial_state(), set()
  for version in range(6):
    member = mixture.member(mixed.task_seed(state.task_index))
    seen.add(member)
    expected, _ = alone[member].step(theta, version, state)
    sample, state = mixed.step(theta, version, state)
    assert sample.loss_plus == expected.loss_plus and sample.num_steps == 5
    for x, y in zip(tf.nest.flatten(sample), tf.nest.flatten(expected), strict=True):
      np.testing.assert_array_equal(x, y)
  assert seen == {0, 1}
