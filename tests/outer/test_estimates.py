"""Tests for the math of the outer-gradient estimates: antithetic ES, the inverse-variance merge.

The merge is checked against eq. 1 written out in numpy in its original form,
(m_rp / v_rp + m_es / v_es) / (1 / v_rp + 1 / v_es), with v = np.var(ddof=1) + 1e-8.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.outer import estimates

SHAPES = {"w": (3, 2), "b": (2,), "scale": ()}  # Leaves of a small theta, per sample.


def _random_nest(rng, n, scale=1.0, offset=0.0):
  return {
    k: (offset + scale * rng.normal(size=(n, *s))).astype(np.float32) for k, s in SHAPES.items()
  }


def _tf(nest):
  return tf.nest.map_structure(lambda x: tf.constant(x, tf.float32), nest)


def _numpy_merge(rp, es):
  """Eq. 1 in its original form, with float64 numpy statistics."""
  rp, es = np.asarray(rp, np.float64), np.asarray(es, np.float64)
  v_rp = np.var(rp, axis=0, ddof=1) + 1e-8
  v_es = np.var(es, axis=0, ddof=1) + 1e-8
  m_rp, m_es = rp.mean(axis=0), es.mean(axis=0)
  merged = (m_rp / v_rp + m_es / v_es) / (1 / v_rp + 1 / v_es)
  w_es = (1 / v_es) / (1 / v_rp + 1 / v_es)
  return merged, v_rp, v_es, w_es


# es_gradient.


def test_es_gradient_worked_numbers():
  # Two samples, sigma = 0.1 so sigma^2 = 0.01:
  #   sample 0: (L+ - L-) / 2 / sigma^2 = (1.5 - 1.3) / 2 / 0.01 = 10,
  #   sample 1: (0.9 - 1.0) / 2 / 0.01 = -5.
  loss_plus = tf.constant([1.5, 0.9])
  loss_minus = tf.constant([1.3, 1.0])
  e = {"w": tf.constant([[0.1, -0.2], [0.3, 0.05]]), "s": tf.constant([0.02, -0.04])}
  g = estimates.es_gradient(loss_plus, loss_minus, e, 0.1)
  np.testing.assert_allclose(g["w"], [[1.0, -2.0], [-1.5, -0.25]], rtol=1e-5)
  np.testing.assert_allclose(g["s"], [0.2, 0.2], rtol=1e-5)


def test_es_gradient_single_sample_scalar_losses():
  # (2.0 - 1.0) / 2 / 0.01 = 50.
  g = estimates.es_gradient(tf.constant(2.0), tf.constant(1.0), [tf.constant([0.1, -0.1])], 0.1)
  np.testing.assert_allclose(g[0], [5.0, -5.0], rtol=1e-5)


# merge_inverse_variance.


def test_merge_matches_numpy_eq1():
  rng = np.random.default_rng(0)
  rp = _random_nest(rng, 7, scale=0.1, offset=0.3)
  es = _random_nest(rng, 7, scale=2.0, offset=-0.2)
  result = estimates.merge_inverse_variance(_tf(rp), _tf(es))
  for key in SHAPES:
    merged, v_rp, v_es, w_es = _numpy_merge(rp[key], es[key])
    np.testing.assert_allclose(result.gradient[key], merged, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result.rp_variance[key], v_rp, rtol=1e-4)
    np.testing.assert_allclose(result.es_variance[key], v_es, rtol=1e-4)
    np.testing.assert_allclose(result.es_weight[key], w_es, rtol=1e-4, atol=1e-7)
    assert result.gradient[key].shape == SHAPES[key]


def test_merge_single_sample_is_the_average():
  rp = {"a": np.array([[1.0, -2.0]], np.float32)}
  es = {"a": np.array([[3.0, 4.0]], np.float32)}
  result = estimates.merge_inverse_variance(_tf(rp), _tf(es))
  # N = 1: both variances are epsilon, so both weights are 1/2.
  np.testing.assert_allclose(result.gradient["a"], [2.0, 1.0], rtol=1e-6)
  np.testing.assert_allclose(result.es_weight["a"], [0.5, 0.5])
  np.testing.assert_allclose(result.rp_variance["a"], [1e-8, 1e-8], rtol=1e-6)
  np.testing.assert_allclose(result.es_variance["a"], [1e-8, 1e-8], rtol=1e-6)


@pytest.mark.parametrize("high_variance", ["rp", "es"])
def test_merge_extreme_variance_ratio_is_finite(high_variance):
  # The high-variance estimate: mean 1e14 and samples +-1e15 around it, variance ~1.1e30. The
  # low-variance one: exactly 0.5 in every sample, so its variance is epsilon = 1e-8. The ratio
  # (~1e38) is beyond the 20 orders of magnitude of Fig. 4 and near the float32 range.
  signs = np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0])[:, None]
  noisy = (1e14 + 1e15 * signs * np.ones((8, 3))).astype(np.float32)
  exact = np.full((8, 3), 0.5, np.float32)
  rp, es = (noisy, exact) if high_variance == "rp" else (exact, noisy)
  result = estimates.merge_inverse_variance(tf.constant(rp), tf.constant(es))
  for leaf in result:
    assert np.all(np.isfinite(leaf))
  expected_weight = 1.0 if high_variance == "rp" else 0.0
  np.testing.assert_allclose(result.es_weight, expected_weight, atol=1e-6)
  # The low-variance mean survives exactly: no cancellation against the 1e14 mean.
  np.testing.assert_allclose(result.gradient, 0.5, rtol=1e-6)


def test_merge_in_tf_function_with_dynamic_num_samples():
  spec = {k: tf.TensorSpec([None, *s], tf.float32) for k, s in SHAPES.items()}
  merge = tf.function(estimates.merge_inverse_variance, input_signature=[spec, spec])
  rng = np.random.default_rng(1)
  for n in (3, 5):
    rp, es = _random_nest(rng, n, 0.5), _random_nest(rng, n, 1.5)
    result = merge(_tf(rp), _tf(es))
    for key in SHAPES:
      np.testing.assert_allclose(
        result.gradient[key], _numpy_merge(rp[key], es[key])[0], rtol=1e-4, atol=1e-6
      )
  assert merge.experimental_get_tracing_count() == 1


def test_merge_rejects_mismatched_structures():
  with pytest.raises((ValueError, TypeError)):
    estimates.merge_inverse_variance({"a": tf.zeros([2, 1])}, {"b": tf.zeros([2, 1])})


def test_merged_estimate_is_unbiased_and_beats_es():
  # A known mean mu per coordinate; g_rp ~ mu + N(0, 1e-4) (variance), g_es ~ mu + N(0, 1).
  rng = np.random.default_rng(2)
  n, dim = 128, 200
  mu = rng.normal(size=dim).astype(np.float32)
  g_rp = mu + 1e-2 * rng.normal(size=(n, dim)).astype(np.float32)
  g_es = mu + rng.normal(size=(n, dim)).astype(np.float32)
  result = estimates.merge_inverse_variance(tf.constant(g_rp), tf.constant(g_es))
  merged = np.asarray(result.gradient)
  # Standard error of the inverse-variance-weighted mean: sqrt(1 / (n (1 / 1e-4 + 1 / 1))), about
  # 8.8e-4. Tolerance: every coordinate within 5 standard errors of mu (p ~ 6e-7 per coordinate),
  # and the average error over the 200 coordinates, a bias check, within 5 standard errors of it.
  standard_error = np.sqrt(1.0 / (n * (1.0 / 1e-4 + 1.0)))
  assert np.all(np.abs(merged - mu) < 5 * standard_error)
  assert abs(np.mean(merged - mu)) < 5 * standard_error / np.sqrt(dim)
  # The ES mean alone has standard error 1 / sqrt(128) = 0.088, 100 times larger.
  es_rms = np.sqrt(np.mean((g_es.mean(axis=0) - mu) ** 2))
  merged_rms = np.sqrt(np.mean((merged - mu) ** 2))
  assert merged_rms < 0.05 * es_rms


# mean.


def test_mean_over_the_samples():
  # Three samples of a 2-vector: ((1 + 2 + 6) / 3, (0 - 3 + 0) / 3) = (3, -1).
  samples = {"a": tf.constant([[1.0, 0.0], [2.0, -3.0], [6.0, 0.0]])}
  np.testing.assert_allclose(estimates.mean(samples)["a"], [3.0, -1.0])


# finite_mask and clip_by_value.


def test_finite_mask():
  g_rp = {"w": np.zeros((4, 2, 2), np.float32), "b": np.zeros((4,), np.float32)}
  g_es = {"w": np.ones((4, 2, 2), np.float32), "b": np.ones((4,), np.float32)}
  loss_plus = np.ones(4, np.float32)
  loss_minus = np.ones(4, np.float32)
  g_rp["w"][1, 0, 1] = np.nan  # Sample 1: one NaN coordinate of g_rp.
  loss_minus[3] = np.inf  # Sample 3: an infinite L-.
  losses = (tf.constant(loss_plus), tf.constant(loss_minus))
  mask = estimates.finite_mask(_tf(g_rp), _tf(g_es), *losses)
  assert mask.dtype == tf.bool
  np.testing.assert_array_equal(mask, [True, False, True, False])


def test_clip_by_value():
  nest = {"a": tf.constant([-0.5, 0.05, 0.2]), "b": tf.constant(-0.01)}
  clipped = estimates.clip_by_value(nest, 0.1)
  np.testing.assert_allclose(clipped["a"], [-0.1, 0.05, 0.1])
  np.testing.assert_allclose(clipped["b"], -0.01)
  assert estimates.clip_by_value(nest, None) is nest
  with pytest.raises(ValueError, match="limit"):
    estimates.clip_by_value(nest, 0.0)
