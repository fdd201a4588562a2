"""The math of the outer-gradient estimates: antithetic ES and the inverse-variance merge (Sec. 3).

A worker returns, per truncation, the reparameterisation estimate g_rp = d/dtheta (L+ + L-) / 2
and the antithetic ES estimate g_es = (L+ - L-) / 2 * e / sigma^2 of the gradient of the smoothed
outer loss E_{e ~ N(0, sigma^2 I)}[L(theta + e)]. The chief stacks N such samples on axis 0 of
every leaf and merges them per coordinate by inverse variance weighting (eq. 1):

  g_merged = (m_rp / v_rp + m_es / v_es) / (1 / v_rp + 1 / v_es),

with m the means and v the empirical variances over the N samples. Which of these the chief
applies is the estimator's choice (outer/estimators/: "merged", "rp", "es", "pes", ...); this
module holds the pure functions they share, and the chief's finite-sample mask and clip.

All functions are plain TF over nests, eager-testable and usable inside the chief's tf.function
with a dynamic number of samples N.
"""

from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests

VARIANCE_EPSILON = 1e-8  # App. C / authors' code: added to both empirical variances.


def es_gradient(
  loss_plus: tf.Tensor, loss_minus: tf.Tensor, perturbation: nests.Nest, sigma: float | tf.Tensor
) -> nests.Nest:
  """The antithetic ES estimate of the smoothed outer-loss gradient (Sec. 3).

  g_es = (L+ - L-) / 2 * e / sigma^2,

  with e ~ N(0, sigma^2 I) the perturbation, L+ = L(theta + e) and L- = L(theta - e). This is the
  log-derivative estimate, grad_theta log N(theta + e; theta, sigma^2 I) = e / sigma^2, averaged
  over the antithetic pair.

  Args:
    loss_plus: L+, a scalar for one sample or shape [N] for N samples.
    loss_minus: L-, the same shape as `loss_plus`.
    perturbation: e, a nest like theta; with N samples every leaf has the leading axis N.
    sigma: the standard deviation of e (paper: sigma^2 = 0.01, so sigma = 0.1).

  Returns:
    g_es, a float32 nest of the structure and shapes of `perturbation`.
  """
  sigma = tf.cast(sigma, tf.float32)
  scale = (tf.cast(loss_plus, tf.float32) - tf.cast(loss_minus, tf.float32)) / (
    2.0 * tf.square(sigma)
  )

  def _leaf(e: tf.Tensor) -> tf.Tensor:
    e = tf.cast(e, tf.float32)
    # The per-sample scale broadcasts over the trailing (theta) axes of each leaf.
    extra_axes = e.shape.rank - scale.shape.rank
    shape = tf.concat([tf.shape(scale), tf.ones([extra_axes], tf.int32)], axis=0)
    return tf.reshape(scale, shape) * e

  return tf.nest.map_structure(_leaf, perturbation)


class MergeResult(NamedTuple):
  """The merged gradient and its per-coordinate diagnostics, each a nest like theta.

  Attributes:
    gradient: g_merged of eq. 1.
    rp_variance: v_rp, the empirical variance of the g_rp samples (N - 1 denominator, + epsilon).
    es_variance: v_es, the same for g_es.
    es_weight: w_es = v_es^-1 / (v_rp^-1 + v_es^-1), the weight of the ES mean in g_merged.
  """

  gradient: nests.Nest
  rp_variance: nests.Nest
  es_variance: nests.Nest
  es_weight: nests.Nest


def _moments(samples: tf.Tensor, epsilon: float) -> tuple[tf.Tensor, tf.Tensor]:
  """Mean and empirical variance (+ epsilon) over axis 0, for a static or dynamic N."""
  samples = tf.cast(samples, tf.float32)
  mean = tf.reduce_mean(samples, axis=0)
  num = tf.cast(tf.shape(samples)[0], tf.float32)
  # Bessel's N - 1; a single sample has no spread, so N = 1 divides by 1 and leaves epsilon.
  denominator = tf.maximum(num - 1.0, 1.0)
  variance = tf.reduce_sum(tf.square(samples - mean), axis=0) / denominator + epsilon
  return mean, variance


def _merge(
  g_rp: nests.Nest, g_es: nests.Nest, epsilon: float
) -> tuple[MergeResult, nests.Nest, nests.Nest]:
  """`merge_inverse_variance` that also returns the nests of means m_rp and m_es."""
  tf.nest.assert_same_structure(g_rp, g_es)
  rp_means, es_means, rp_vars, es_vars, grads, weights = [], [], [], [], [], []
  for rp, es in zip(tf.nest.flatten(g_rp), tf.nest.flatten(g_es), strict=True):
    m_rp, v_rp = _moments(rp, epsilon)
    m_es, v_es = _moments(es, epsilon)
    # w_es = v_rp / (v_rp + v_es), written with one ratio so that neither a sum of two huge
    # variances nor an infinite one overflows to inf / inf: the paper reports variances 20 orders
    # of magnitude apart (Fig. 4). Both variances are >= epsilon > 0, so no ratio divides by 0.
    w_es = 1.0 / (1.0 + v_es / v_rp)
    w_rp = 1.0 / (1.0 + v_rp / v_es)
    # Weighting each mean separately, rather than m_rp + w_es (m_es - m_rp), keeps the small mean
    # exact when the other, high-variance one is many orders of magnitude larger.
    grads.append(w_rp * m_rp + w_es * m_es)
    rp_means.append(m_rp)
    es_means.append(m_es)
    rp_vars.append(v_rp)
    es_vars.append(v_es)
    weights.append(w_es)

  def _pack(leaves: list[tf.Tensor]) -> nests.Nest:
    return tf.nest.pack_sequence_as(g_rp, leaves)

  result = MergeResult(
    gradient=_pack(grads),
    rp_variance=_pack(rp_vars),
    es_variance=_pack(es_vars),
    es_weight=_pack(weights),
  )
  return result, _pack(rp_means), _pack(es_means)


def merge_inverse_variance(
  g_rp: nests.Nest, g_es: nests.Nest, epsilon: float = VARIANCE_EPSILON
) -> MergeResult:
  """Merges N samples of g_rp and g_es per coordinate by inverse variance weighting (eq. 1).

  Over the samples stacked on axis 0, per coordinate:

    m = mean(x),   v = sum((x - m)^2) / (N - 1) + epsilon,
    g_merged = (m_rp / v_rp + m_es / v_es) / (1 / v_rp + 1 / v_es)
             = (1 - w_es) m_rp + w_es m_es,   w_es = v_rp / (v_rp + v_es).

  The same samples give the means and the variances, as in the paper (Sec. 3); the variance of
  the mean would divide both variances by N and leave the weights unchanged. Computed in float32
  in the second form above, which stays finite when the variances differ by tens of orders of
  magnitude.

  Note: with N = 1 the empirical variance is undefined; the denominator is max(N - 1, 1), so both
  variances equal epsilon, both weights are 1/2 and g_merged is the average of the two estimates.

  Args:
    g_rp: per-sample reparameterisation estimates, a nest like theta with leaves [N, ...].
    g_es: per-sample ES estimates, the same structure and shapes. N may be dynamic.
    epsilon: added to both variances (1e-8).

  Returns:
    A MergeResult of float32 nests shaped like one sample (the leading axis reduced).
  """
  result, _, _ = _merge(g_rp, g_es, epsilon)
  return result


def mean(samples: nests.Nest) -> nests.Nest:
  """The mean over the N samples stacked on axis 0 of every leaf, in float32.

  Args:
    samples: per-sample estimates, a nest with leaves [N, ...]; N may be dynamic.

  Returns:
    A float32 nest shaped like one sample.
  """
  return tf.nest.map_structure(lambda x: tf.reduce_mean(tf.cast(x, tf.float32), axis=0), samples)


def _all_finite_per_sample(samples: tf.Tensor) -> tf.Tensor:
  """[N] bool: whether every entry of each sample (row of axis 0) is finite."""
  samples = tf.convert_to_tensor(samples)
  shape = tf.shape(samples)
  # An explicit row size (not -1) also handles N = 0 and empty samples.
  rows = tf.reshape(samples, [shape[0], tf.reduce_prod(shape[1:])])
  return tf.reduce_all(tf.math.is_finite(rows), axis=1)


def finite_mask(
  g_rp: nests.Nest, g_es: nests.Nest, loss_plus: tf.Tensor, loss_minus: tf.Tensor
) -> tf.Tensor:
  """Which of N samples are entirely finite, for the chief to keep (App. C).

  mask[i] = all(isfinite(g_rp[i])) and all(isfinite(g_es[i])) and isfinite(L+[i]) and
  isfinite(L-[i]). One diverged inner run would otherwise turn the merged gradient to NaN.

  Args:
    g_rp: per-sample reparameterisation estimates, leaves [N, ...].
    g_es: per-sample ES estimates, leaves [N, ...].
    loss_plus: L+ per sample, [N].
    loss_minus: L- per sample, [N].

  Returns:
    A bool tensor of shape [N].
  """
  mask = tf.logical_and(_all_finite_per_sample(loss_plus), _all_finite_per_sample(loss_minus))
  for leaf in tf.nest.flatten(g_rp) + tf.nest.flatten(g_es):
    mask = tf.logical_and(mask, _all_finite_per_sample(leaf))
  return mask


def clip_by_value(nest: nests.Nest, limit: float | None) -> nests.Nest:
  """Clips every coordinate to [-limit, limit], as the authors' code does before Adam.

  g <- min(max(g, -limit), limit); the authors' code uses limit = 0.1. The paper does not clip.

  Args:
    nest: a nest of tensors, e.g. the outer gradient.
    limit: the bound, > 0, or None to return `nest` unchanged.

  Returns:
    The clipped nest (or `nest` itself when `limit` is None).

  Raises:
    ValueError: if `limit` is not positive.
  """
  if limit is None:
    return nest
  if limit <= 0:
    raise ValueError(f"limit must be > 0 or None, got {limit}.")
  return tf.nest.map_structure(lambda g: tf.clip_by_value(g, -limit, limit), nest)
