"""Input features of the per-parameter learned optimizer (paper Sec. 4.1, App. D.1).

Pure functions, each with a worked-numbers test:
  - update_momenta: m_d <- d * m_d + (1 - d) * g for each decay d (no bias correction);
  - second_moment_normalize: x * rsqrt(mean(x^2) + eps), per column, the mean over all elements of
    one tensor (no mean subtraction, so the sign/direction of every feature is kept);
  - time_features: tanh(t / eta - 1) for each timescale eta (t optionally capped);
  - paper_columns / original_code_columns: the per-element feature columns, before normalisation.
"""

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

MOMENTUM_DECAYS = (0.5, 0.9, 0.99, 0.999, 0.9999)
NORMALIZER_EPSILON = 1e-5
# Paper App. D.1: "9 timescales logarithmically spaced from (3, 300k)".
PAPER_TIME_SCALES = tuple(float(x) for x in np.logspace(np.log10(3.0), np.log10(3e5), 9))
# The authors' code spaces them by hand.
ORIGINAL_CODE_TIME_SCALES = (3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0, 300000.0)
# The authors' code feeds rms statistics that are never updated (stay 0) and rsqrt(rms + 1e-6).
ORIGINAL_CODE_RMS_EPSILON = 1e-6
ORIGINAL_CODE_MOMENTUM_SCALE = 1000.0


def update_momenta(momenta: tf.Tensor, grad: tf.Tensor, decays: Sequence[float]) -> tf.Tensor:
  """m_d <- d * m_d + (1 - d) * g for every decay d.

  Args:
    momenta: [..., len(decays)], one column per decay.
    grad: [...], the gradient of the tensor.
    decays: the decay of each column.

  Returns:
    The new momenta, same shape as `momenta`.
  """
  decays = tf.constant(decays, tf.float32)
  return decays * momenta + (1.0 - decays) * grad[..., None]


def second_moment_normalize(x: tf.Tensor, epsilon: float = NORMALIZER_EPSILON) -> tf.Tensor:
  """x * rsqrt(mean(x^2) + epsilon), the mean over every axis but the last (the feature column).

  Args:
    x: [..., num_columns], the features of every element of one parameter tensor.
    epsilon: added to the second moment (1e-5 in the paper's code).
  """
  axes = list(range(x.shape.rank - 1))
  return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=axes, keepdims=True) + epsilon)


def time_features(
  iteration: tf.Tensor, time_scales: Sequence[float], max_step: int | None = None
) -> tf.Tensor:
  """tanh(t / eta - 1) for each timescale eta: [len(time_scales)] float32.

  Args:
    iteration: t, the inner step (int or float scalar).
    time_scales: the timescales eta.
    max_step: None (the paper) or a step the features stop at: t is read as min(t, max_step),
      so an optimizer run past the horizon it was trained on keeps the features it had there.
  """
  t = tf.cast(iteration, tf.float32)
  if max_step is not None:
    t = tf.minimum(t, float(max_step))
  return tf.tanh(t / tf.constant(time_scales, tf.float32) - 1.0)


def paper_columns(
  grad: tf.Tensor, param: tf.Tensor, momenta: tf.Tensor, use_momentum: bool = True
) -> tf.Tensor:
  """Columns [g, w, m_0.5, m_0.9, m_0.99, m_0.999, m_0.9999] (App. D.1): [..., 7].

  With use_momentum=False (the "No Mom" ablation, Sec. 4.5): [g, w], [..., 2].
  """
  columns = [grad[..., None], param[..., None]]
  if use_momentum:
    columns.append(momenta)
  return tf.concat(columns, axis=-1)


def original_code_columns(grad: tf.Tensor, param: tf.Tensor, momenta: tf.Tensor) -> tf.Tensor:
  """The authors' code's 22 columns: [g, 1000*m x5, w, m x5, rms x5, rsqrt(rms + 1e-6) x5].

  Its rms accumulators are never updated, so those 5 columns are 0 and the next 5 the constant
  1000; after normalisation they are 0 and ~1 (a bias). Kept so that the 1090 meta-parameters of
  the authors' optimizer are reproduced.
  """
  rms = tf.zeros_like(momenta)
  return tf.concat(
    [
      grad[..., None],
      ORIGINAL_CODE_MOMENTUM_SCALE * momenta,
      param[..., None],
      momenta,
      rms,
      tf.math.rsqrt(rms + ORIGINAL_CODE_RMS_EPSILON),
    ],
    axis=-1,
  )
