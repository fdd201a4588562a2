"""A new estimator written against the interface alone trains theta in local mode.

ClippedReparameterization is the whole of what adding an estimator takes: one class (here the
mean of g_rp with each coordinate clipped to +-BOUND) and its registration. Local mode's chief
and workers run it without knowing it; theta after a few outer steps must be Adam's steps on
clip(mean(g_rp)) of the very batches the chief took, computed here by hand.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import checkpoints, layout
from task_specific_learned_opt.distributed import base as transport_base
from task_specific_learned_opt.distributed import chief_update, local, outer_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.outer import estimates
from task_specific_learned_opt.outer.estimators import base, registry
from task_specific_learned_opt.tasks import quadratic

BOUND = 1e-3  # Below most of the coordinates of mean(g_rp) on this problem: the clip acts.


class ClippedReparameterization(base.TruncatedAntithetic):
  """g = clip(mean_i g_rp_i, -BOUND, BOUND), per coordinate."""

  def combine(self, rp, es):
    del es  # Unused.
    return tf.nest.map_structure(lambda g: tf.clip_by_value(g, -BOUND, BOUND), estimates.mean(rp))


@pytest.fixture
def clipped_rp(monkeypatch):
  monkeypatch.setattr(registry, "ESTIMATORS", dict(registry.ESTIMATORS))
  registry.register("clipped_rp", ClippedReparameterization)
  return "clipped_rp"


def test_a_new_estimator_outer_trains_in_local_mode(tmp_path, monkeypatch, clipped_rp):
  batches, apply = [], chief_update.Chief.apply

  def spied_apply(self, batch):
    batches.append((batch, self.theta_numpy()))
    return apply(self, batch)

  monkeypatch.setattr(chief_update.Chief, "apply", spied_apply)
  lopt = mlp_lopt.MLPLOpt()
  setup = outer_training.OuterTraining(
    family=quadratic.QuadraticFamily(dim=4),
    lopt=lopt,
    num_outer_steps=3,
    batch_size=2,
    estimator=clipped_rp,
  )
  stats = local.train_local(str(tmp_path), num_workers=2, setup=setup)
  assert stats["outer_step"] == 3 and len(batches) == 3

  template = lopt.init(0)
  optimizer = adam.Adam(learning_rate=chief_update.LEARNING_RATE_TRAIN, beta1=chief_update.BETA1)
  state = optimizer.init(template)
  clipped_any = False
  for batch, theta_before in batches:
    # theta before each step is Adam's state so far, stepped by hand on clip(mean(g_rp)).
    for a, b in zip(tf.nest.flatten(theta_before), tf.nest.flatten(state.params), strict=True):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    mean_rp = np.mean(np.asarray(batch.g_rp, np.float32), axis=0)
    clipped_any |= bool(np.any(np.abs(mean_rp) > BOUND))
    gradient = transport_base.unflatten(np.clip(mean_rp, -BOUND, BOUND), template)
    state = optimizer.update(state, tf.nest.map_structure(tf.constant, gradient))
  assert clipped_any
  # The exported theta is the last of these steps, and the chief's gradient norm its gradient's.
  final = checkpoints.load_theta(str(tmp_path / layout.THETA_DIRNAME), lopt)
  for a, b in zip(tf.nest.flatten(final), tf.nest.flatten(state.params), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  last = np.clip(mean_rp, -BOUND, BOUND)
  np.testing.assert_allclose(stats["gradient_norm"], np.linalg.norm(last), rtol=1e-5)
