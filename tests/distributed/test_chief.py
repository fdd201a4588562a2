"""The chief's update: merge then Adam on theta; non-finite samples never reach theta."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.distributed import base, chief
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def _samples(lopt, num, seed=0, version=0):
  rng = np.random.default_rng(seed)
  shapes = tf.nest.map_structure(lambda x: x.shape, lopt.init(0))
  samples = []
  for i in range(num):
    g_rp = tf.nest.map_structure(lambda s: rng.normal(0.0, 0.1, s).astype(np.float32), shapes)
    g_es = tf.nest.map_structure(lambda s: rng.normal(0.0, 1.0, s).astype(np.float32), shapes)
    samples.append(base.Sample(g_rp, g_es, 2.0 + 0.1 * i, 2.1, version, 10, 0, i))
  return samples


def _flat(nest):
  return np.concatenate([np.ravel(x) for x in tf.nest.flatten(nest)])


def test_one_update_is_the_numpy_merge_then_adam():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief.Chief(lopt, learning_rate=0.01, beta1=0.5, beta2=0.999, epsilon=1e-8)
  theta0 = _flat(boss.theta_numpy())
  samples = _samples(lopt, 6)
  stats = boss.apply(samples)
  g_rp = np.stack([_flat(s.g_rp) for s in samples])
  g_es = np.stack([_flat(s.g_es) for s in samples])
  v_rp, v_es = g_rp.var(0, ddof=1) + 1e-8, g_es.var(0, ddof=1) + 1e-8
  merged = (g_rp.mean(0) / v_rp + g_es.mean(0) / v_es) / (1 / v_rp + 1 / v_es)  # eq. 1
  # Adam's first step: m_hat = g, v_hat = g^2, so theta <- theta - lr * g / (|g| + eps).
  expected = theta0 - 0.01 * merged / (np.abs(merged) + 1e-8)
  np.testing.assert_allclose(_flat(boss.theta_numpy()), expected, rtol=1e-5, atol=1e-6)
  assert boss.step == 1 and stats["applied"] and stats["num_kept"] == 6
  assert stats["outer_loss"] == pytest.approx(np.mean([2.0, 2.1, 2.2, 2.3, 2.4, 2.5] + [2.1] * 6))
  np.testing.assert_allclose(stats["es_weight"], np.mean(v_rp / (v_rp + v_es)), rtol=1e-4)


def test_non_finite_samples_never_reach_theta():
  lopt = mlp_lopt.MLPLOpt()
  samples = _samples(lopt, 5)
  bad_rp = samples[1].g_rp.copy()
  bad_rp["hidden"] = dict(bad_rp["hidden"], w=bad_rp["hidden"]["w"].copy())
  bad_rp["hidden"]["w"][3, 4] = np.nan
  poisoned = [
    samples[0],
    samples[1]._replace(g_rp=bad_rp),
    samples[2],
    samples[3]._replace(loss_minus=float("inf")),
    samples[4],
  ]
  with_bad, clean = chief.Chief(lopt), chief.Chief(lopt)
  stats = with_bad.apply(poisoned)
  clean.apply([samples[0], samples[2], samples[4]])
  np.testing.assert_array_equal(_flat(with_bad.theta_numpy()), _flat(clean.theta_numpy()))
  assert stats["num_dropped"] == 2 and stats["num_kept"] == 3
  assert np.all(np.isfinite(_flat(with_bad.theta_numpy())))


def test_a_batch_of_only_non_finite_samples_changes_nothing():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief.Chief(lopt)
  before = _flat(boss.theta_numpy())
  samples = [s._replace(loss_plus=float("nan")) for s in _samples(lopt, 3)]
  stats = boss.apply(samples)
  assert not stats["applied"] and stats["num_dropped"] == 3 and boss.step == 0
  np.testing.assert_array_equal(_flat(boss.theta_numpy()), before)


@pytest.mark.parametrize("estimator, field", [("rp", "g_rp"), ("es", "g_es")])
def test_single_estimator_ablations_use_that_mean(estimator, field):
  lopt = mlp_lopt.MLPLOpt()
  boss = chief.Chief(lopt, estimator=estimator, learning_rate=0.01)
  theta0 = _flat(boss.theta_numpy())
  samples = _samples(lopt, 4)
  boss.apply(samples)
  mean = np.stack([_flat(getattr(s, field)) for s in samples]).mean(0)
  expected = theta0 - 0.01 * mean / (np.abs(mean) + 1e-8)
  np.testing.assert_allclose(_flat(boss.theta_numpy()), expected, rtol=1e-5, atol=1e-6)


def test_clip_by_value_and_staleness_and_one_trace():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief.Chief(lopt, clip_value=0.1, learning_rate=0.01)
  stats = boss.apply(_samples(lopt, 3, version=0))
  assert stats["gradient_norm"] <= 0.1 * np.sqrt(_flat(boss.theta_numpy()).size) + 1e-6
  stats = boss.apply(_samples(lopt, 5, version=0))  # Computed at step 0, applied at step 1.
  assert stats["max_staleness"] == 1 and boss.step == 2
  assert boss._apply.experimental_get_tracing_count() == 1


def test_unknown_estimator():
  with pytest.raises(ValueError, match="merged"):
    chief.Chief(mlp_lopt.MLPLOpt(), estimator="both")
