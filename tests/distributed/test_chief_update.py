"""The chief's update: merge then Adam on theta; non-finite samples never reach theta."""

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.distributed import base, chief_update
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def _samples(lopt, num, seed=0, version=0, rp_scale=0.1, es_scale=1.0):
  rng = np.random.default_rng(seed)
  n = _flat(lopt.init(0)).size
  samples = []
  for i in range(num):
    g_rp = rng.normal(0.0, rp_scale, n).astype(np.float32)
    g_es = rng.normal(0.0, es_scale, n).astype(np.float32)
    samples.append(base.Sample(g_rp, g_es, 2.0 + 0.1 * i, 2.1, version, 10, 0, i))
  return samples


def _merged(samples):
  """eq. 1 in numpy: per-coordinate inverse-variance weights, N-1 variances + 1e-8."""
  g_rp = np.stack([s.g_rp for s in samples]).astype(np.float64)
  g_es = np.stack([s.g_es for s in samples]).astype(np.float64)
  v_rp, v_es = g_rp.var(0, ddof=1) + 1e-8, g_es.var(0, ddof=1) + 1e-8
  return (g_rp.mean(0) / v_rp + g_es.mean(0) / v_es) / (1 / v_rp + 1 / v_es), v_rp, v_es


def _flat(nest):
  return np.concatenate([np.ravel(x) for x in tf.nest.flatten(nest)])


def test_one_update_is_the_numpy_merge_then_adam():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief_update.Chief(lopt, learning_rate=0.01, beta1=0.5, beta2=0.999, epsilon=1e-8)
  theta0 = _flat(boss.theta_numpy())
  samples = _samples(lopt, 6)
  stats = boss.apply(base.stack(samples))
  merged, v_rp, v_es = _merged(samples)
  # Adam's first step: m_hat = g, v_hat = g^2, so theta <- theta - lr * g / (|g| + eps).
  expected = theta0 - 0.01 * merged / (np.abs(merged) + 1e-8)
  np.testing.assert_allclose(_flat(boss.theta_numpy()), expected, rtol=1e-5, atol=1e-6)
  assert boss.step == 1 and stats["applied"] and stats["num_kept"] == 6
  assert stats["outer_loss"] == pytest.approx(np.mean([2.0, 2.1, 2.2, 2.3, 2.4, 2.5] + [2.1] * 6))
  np.testing.assert_allclose(stats["es_weight"], np.mean(v_rp / (v_rp + v_es)), rtol=1e-4)
  np.testing.assert_allclose(
    stats["merged_variance"], np.mean(v_rp * v_es / (v_rp + v_es)), rtol=1e-4
  )


def test_non_finite_samples_never_reach_theta():
  lopt = mlp_lopt.MLPLOpt()
  samples = _samples(lopt, 5)
  bad_rp = samples[1].g_rp.copy()
  bad_rp[37] = np.nan
  poisoned = [
    samples[0],
    samples[1]._replace(g_rp=bad_rp),
    samples[2],
    samples[3]._replace(loss_minus=float("inf")),
    samples[4],
  ]
  with_bad, clean = chief_update.Chief(lopt), chief_update.Chief(lopt)
  stats = with_bad.apply(base.stack(poisoned))
  clean.apply(base.stack([samples[0], samples[2], samples[4]]))
  np.testing.assert_array_equal(_flat(with_bad.theta_numpy()), _flat(clean.theta_numpy()))
  assert stats["num_dropped"] == 2 and stats["num_kept"] == 3
  assert np.all(np.isfinite(_flat(with_bad.theta_numpy())))


def test_a_batch_of_only_non_finite_samples_changes_nothing():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief_update.Chief(lopt)
  before = _flat(boss.theta_numpy())
  samples = [s._replace(loss_plus=float("nan")) for s in _samples(lopt, 3)]
  stats = boss.apply(base.stack(samples))
  assert not stats["applied"] and stats["num_dropped"] == 3 and boss.step == 0
  np.testing.assert_array_equal(_flat(boss.theta_numpy()), before)


# "pes": the samples' g_es field holds g_pes, whose mean alone is the update.
@pytest.mark.parametrize("estimator, field", [("rp", "g_rp"), ("es", "g_es"), ("pes", "g_es")])
def test_single_estimator_ablations_use_that_mean(estimator, field):
  lopt = mlp_lopt.MLPLOpt()
  boss = chief_update.Chief(lopt, estimator=estimator, learning_rate=0.01)
  theta0 = _flat(boss.theta_numpy())
  samples = _samples(lopt, 4)
  boss.apply(base.stack(samples))
  mean = np.stack([getattr(s, field) for s in samples]).mean(0)
  expected = theta0 - 0.01 * mean / (np.abs(mean) + 1e-8)
  np.testing.assert_allclose(_flat(boss.theta_numpy()), expected, rtol=1e-5, atol=1e-6)


def test_pes_merged_is_the_inverse_variance_merge_of_g_rp_and_g_pes():
  lopt = mlp_lopt.MLPLOpt()
  merged, pes_merged = (
    chief_update.Chief(lopt, estimator=e, learning_rate=0.01) for e in ("merged", "pes_merged")
  )
  samples = _samples(lopt, 5)
  for boss in (merged, pes_merged):
    boss.apply(base.stack(samples))
  np.testing.assert_array_equal(_flat(pes_merged.theta_numpy()), _flat(merged.theta_numpy()))


def test_the_estimator_and_batch_size_are_the_experiments_not_gin_parameters_of_the_chief():
  for name in ("estimator", "batch_size"):  # outer_training.estimator, outer_training.batch_size.
    with pytest.raises(ValueError, match=f"denylisted kwarg '{name}'"):
      gin.parse_config(f"Chief.{name} = 'pes'")


def test_the_gradient_is_clipped_per_coordinate_before_adam():
  lopt = mlp_lopt.MLPLOpt()
  beta1 = 0.5
  clipped, unclipped = (
    chief_update.Chief(lopt, clip_value=clip, learning_rate=0.01, beta1=beta1)
    for clip in (0.1, None)
  )
  samples = _samples(lopt, 3, rp_scale=1.0, es_scale=1.0)
  merged, _, _ = _merged(samples)
  assert np.mean(np.abs(merged) > 0.1) > 0.3  # Many coordinates need clipping...
  for boss in (clipped, unclipped):
    boss.apply(base.stack(samples))
  # Adam's first moment after one step is (1 - beta1) g: it shows the gradient Adam was given.
  given = _flat(clipped.variables["m"]) / (1 - beta1)
  np.testing.assert_allclose(given, np.clip(merged, -0.1, 0.1), rtol=1e-5, atol=1e-7)
  assert np.max(np.abs(given)) == pytest.approx(0.1)
  # ...and without a clip value they reach Adam unchanged.
  given = _flat(unclipped.variables["m"]) / (1 - beta1)
  np.testing.assert_allclose(given, merged, rtol=1e-4, atol=1e-6)


def test_the_authors_scale_doubles_the_gradient_before_the_clip():
  # The authors' code clips estimates twice the paper's at 0.1: the paper's merged gradient
  # reaches Adam as 2 * clip(g, 0.05), so the clip binds from |g| = 0.05 on.
  lopt = mlp_lopt.MLPLOpt()
  beta1 = 0.5
  boss = chief_update.Chief(
    lopt, clip_value=0.1, gradient_scale=2.0, learning_rate=0.01, beta1=beta1
  )
  samples = _samples(lopt, 3, rp_scale=1.0, es_scale=1.0)
  merged, _, _ = _merged(samples)
  between = (np.abs(merged) > 0.05) & (np.abs(merged) < 0.1)
  assert between.sum() > 10  # Coordinates that only the doubled estimates clip.
  boss.apply(base.stack(samples))
  given = _flat(boss.variables["m"]) / (1 - beta1)
  np.testing.assert_allclose(given, np.clip(2 * merged, -0.1, 0.1), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(given[between], 0.1 * np.sign(merged[between]), rtol=1e-6)


def test_staleness_is_measured_and_one_trace_serves_every_batch_size():
  lopt = mlp_lopt.MLPLOpt()
  boss = chief_update.Chief(lopt, learning_rate=0.01)
  stats = boss.apply(base.stack(_samples(lopt, 3, version=0)))
  assert stats["max_staleness"] == 0
  samples = _samples(lopt, 5, version=0)  # Computed at step 0, applied at step 1...
  samples[2] = samples[2]._replace(theta_version=1)  # ...but one at step 1.
  stats = boss.apply(base.stack(samples))
  assert stats["max_staleness"] == 1 and stats["mean_staleness"] == pytest.approx(0.8)
  assert boss.step == 2 and stats["num_stale"] == 0
  assert boss._apply.experimental_get_tracing_count() == 1


def test_unknown_estimator():
  with pytest.raises(ValueError, match="merged"):
    chief_update.Chief(mlp_lopt.MLPLOpt(), estimator="both")


def test_max_staleness_drops_old_samples_and_counts_them():
  lopt = mlp_lopt.MLPLOpt(hidden_size=4)
  boss = chief_update.Chief(lopt, batch_size=3, max_staleness=1)
  boss.outer_step.assign(5)
  samples = [s._replace(theta_version=v) for s, v in zip(_samples(lopt, 3), [5, 4, 2], strict=True)]
  fresh_only = chief_update.Chief(lopt, batch_size=3, max_staleness=None)
  fresh_only.outer_step.assign(5)
  stats = boss.apply(base.stack(samples))
  assert stats["num_stale"] == 1 and stats["num_kept"] == 2 and stats["max_staleness"] == 3
  assert boss.step == 6
  fresh_only.apply(base.stack(samples[:2]))  # The same update without the stale sample.
  np.testing.assert_array_equal(_flat(boss.theta_numpy()), _flat(fresh_only.theta_numpy()))
  unbounded = chief_update.Chief(lopt, batch_size=3, max_staleness=None)
  stats = unbounded.apply(base.stack([s._replace(theta_version=-9) for s in samples]))
  assert stats["num_stale"] == 0 and stats["num_kept"] == 3


def test_by_default_samples_more_than_8_steps_old_are_dropped():
  lopt = mlp_lopt.MLPLOpt(hidden_size=4)
  boss = chief_update.Chief(lopt, batch_size=3)
  boss.outer_step.assign(20)
  samples = [
    s._replace(theta_version=v) for s, v in zip(_samples(lopt, 3), [20, 12, 11], strict=True)
  ]
  stats = boss.apply(base.stack(samples))
  assert stats["num_stale"] == 1 and stats["num_kept"] == 2 and stats["max_staleness"] == 9


def test_a_process_that_makes_many_chiefs_logs_no_retracing_warning(caplog):
  # Each chief compiles its own update: a seed study makes one per seed. TensorFlow's detector
  # counts traces per code object and would report the sixth chief's trace.
  lopt = mlp_lopt.MLPLOpt()
  batch = base.stack(_samples(lopt, 3))
  caplog.set_level("WARNING")
  chiefs = [chief_update.Chief(lopt, learning_rate=0.01) for _ in range(8)]
  for boss in chiefs:
    boss.apply(batch)
    assert boss._apply.experimental_get_tracing_count() == 1
  assert not [r for r in caplog.records if "retracing" in r.getMessage()]
