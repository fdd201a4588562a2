"""Truncated backpropagation ("backprop"): one unroll at theta, its gradient alone, in local mode.

Its sample is the antithetic pair's g_rp in the limit sigma -> 0 (both unrolls at theta), and
the estimator trains a learned optimizer in local mode like any other.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.distributed import local, outer_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import truncated_unroll
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import quadratic


def _setup():
  task = quadratic.QuadraticFamily(dim=4).sample(0)
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)
  state = lopt.opt_fn(theta).init(task.init_params(1))
  unroll = truncated_unroll.Unroll(task, lopt, "train", recompute=False)
  return unroll, theta, state


def _flat(nest):
  return np.concatenate([np.ravel(x) for x in tf.nest.flatten(nest)])


def test_its_sample_is_the_antithetic_g_rp_as_sigma_goes_to_zero():
  unroll, theta, state = _setup()
  backprop, rp = registry.get("backprop"), registry.get("rp")
  sample, end = backprop.sample(unroll, theta, backprop.init_state(state, theta), 5, 3, 7, 0.1)
  assert float(sample.loss_plus) == float(sample.loss_minus)
  assert not np.any(_flat(sample.es))  # No ES estimate.
  assert int(end.inner_state.iteration) == 5
  # The pair at theta +- e with a tiny e: its g_rp and losses approach backprop's.
  pair, pair_end = rp.sample(unroll, theta, rp.init_state(state, theta), 5, 3, 7, 1e-6)
  g, g_pair = _flat(sample.rp), _flat(pair.rp)
  assert np.linalg.norm(g) > 1e-3
  np.testing.assert_allclose(g_pair, g, rtol=1e-3, atol=1e-4 * np.abs(g).max())
  assert float(pair.loss_plus) == pytest.approx(float(sample.loss_plus), rel=1e-5)
  for a, b in zip(tf.nest.flatten(pair_end), tf.nest.flatten(end), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
  # At a sigma where e matters, the pair's g_rp is another number: the limit above is not trivial.
  far, _ = rp.sample(unroll, theta, rp.init_state(state, theta), 5, 3, 7, 0.3)
  assert np.abs(_flat(far.rp) - g).max() > 1e-3 * np.abs(g).max()


def test_it_outer_trains_a_learned_optimizer_in_local_mode(tmp_path):
  setup = outer_training.OuterTraining(
    family=quadratic.QuadraticFamily(dim=4),
    lopt=mlp_lopt.MLPLOpt(),
    num_outer_steps=3,
    batch_size=2,
    estimator="backprop",
  )
  stats = local.train_local(str(tmp_path), num_workers=2, setup=setup)
  assert stats["outer_step"] == 3
  assert np.isfinite(stats["outer_loss"]) and stats["gradient_norm"] > 0
