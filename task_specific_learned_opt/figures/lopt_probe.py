"""What the learned optimizer reads and emits at one inner step, per kind of tensor (App. D.1).

For the longer unrolls (longer_unrolls.py), `probe` takes the state at inner step t and the
gradient the update of step t uses, and recomputes that update with the specification's
arithmetic (`mlp_lopt.tensor_step`, the reference implementation's), recording:
  time               the time features tanh(min(t, time_max_step) / eta - 1), [num_time];
and per kind of tensor (`kind_of`: "conv/w" gathers every conv layer's kernel), over the kind's
elements together:
  param_norm         |w|_2;
  column_rms         the RMS of each raw feature column (g, w, m_0.5, ..., m_0.9999), [columns];
  normalized_rms     the RMS of each column after the per-tensor normaliser
                     x * rsqrt(mean(x^2) + eps): sqrt(ms / (ms + eps)) for a single tensor, ~1
                     while the column's RMS is well above sqrt(eps) (3.2e-3 at eps = 1e-5), smaller
                     when epsilon dominates;
  o_dir_rms, o_mag_mean, o_mag_max   the MLP's two outputs;
  step_rms           the RMS of the step lambda_lin * o_dir * exp(lambda_exp * o_mag);
  relative_step      |step|_2 / |w|_2, the step relative to the weights (for weights that a batch
                     norm follows, what sets the effective learning rate);
  median_relative_step   the median over elements of |step| / |w|;
  step_grad_cosine   cos(step, g): positive when the update w - step descends;
  outward_cosine     cos(-step, w): positive when the step pushes w away from 0 (grows |w|);
  drift_fraction     |drift|_2 / |step|_2, drift being the step the MLP emits at the same w and t
                     with zero gradient and zero momenta (what it does without a gradient signal);
  drift_outward_cosine   cos(-drift, w).
The steps are the MLP's: an MLPLOpt weight decay is not in them. Every value is a float32 tensor,
so `probe` runs inside a tf.function.
"""

import re
from collections.abc import Mapping

import tensorflow as tf

from task_specific_learned_opt import nests
from task_specific_learned_opt.learned_optimizers import features, mlp_lopt

SCALAR_STATISTICS = (
  "param_norm",
  "o_dir_rms",
  "o_mag_mean",
  "o_mag_max",
  "step_rms",
  "relative_step",
  "median_relative_step",
  "step_grad_cosine",
  "outward_cosine",
  "drift_fraction",
  "drift_outward_cosine",
)
COLUMN_STATISTICS = ("column_rms", "normalized_rms")


def kind_of(path: str) -> str:
  """A parameter tensor's kind: its path without the layer numbers ("conv2/w" -> "conv/w").

  Args:
    path: the tensor's path in the params nest, keys joined by "/".
  """
  return re.sub(r"\d+(?=/|$)", "", path)


def leaves_with_paths(nest: nests.Nest, path: str = "") -> list[tuple[str, tf.Tensor]]:
  """The leaves of a nest of dicts with their "/"-joined paths, in tf.nest.flatten order.

  Args:
    nest: a nest of dicts (tf.nest orders a dict's keys by sorting them).
    path: the path of `nest` itself.
  """
  if isinstance(nest, Mapping):
    return [
      leaf
      for key in sorted(nest)
      for leaf in leaves_with_paths(nest[key], f"{path}/{key}".lstrip("/"))
    ]
  return [(path, nest)]


def column_names(lopt: mlp_lopt.MLPLOpt) -> list[str]:
  """The names of the normalised feature columns of the paper's feature set, in input order.

  Args:
    lopt: the learned optimizer (feature_set "paper").

  Raises:
    ValueError: another feature set.
  """
  if lopt.feature_set != "paper":
    raise ValueError("The probe names the columns of feature_set='paper' only.")
  momenta = [f"m_{d:g}" for d in lopt.decays] if lopt.use_momentum else []
  return ["g", "w", *momenta]


def _rms(x: tf.Tensor, axis: int | None = None) -> tf.Tensor:
  return tf.sqrt(tf.reduce_mean(tf.square(x), axis=axis))


def _median(x: tf.Tensor) -> tf.Tensor:
  """The lower median of a vector (sorting is cheap at the sizes probed)."""
  return tf.sort(x)[(tf.size(x) - 1) // 2]


def _cosine(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
  return tf.reduce_sum(a * b) / tf.maximum(tf.norm(a) * tf.norm(b), 1e-30)


def _statistics(
  param: tf.Tensor, grad: tf.Tensor, steps: list[mlp_lopt.TensorStep], drift: tf.Tensor
) -> dict:
  """The statistics of one kind from its tensors' flattened params, grads, steps and drifts."""
  num_columns = steps[0].columns.shape[-1]
  columns = tf.concat([tf.reshape(s.columns, [-1, num_columns]) for s in steps], 0)
  normalized = tf.concat([tf.reshape(s.normalized, [-1, num_columns]) for s in steps], 0)
  outputs = tf.concat([s.outputs for s in steps], 0)
  step = tf.concat([tf.reshape(s.step, [-1]) for s in steps], 0)
  param_norm = tf.norm(param)
  tiny = tf.constant(1e-30, tf.float32)
  return {
    "param_norm": param_norm,
    "column_rms": _rms(columns, axis=0),
    "normalized_rms": _rms(normalized, axis=0),
    "o_dir_rms": _rms(outputs[:, 0]),
    "o_mag_mean": tf.reduce_mean(outputs[:, 1]),
    "o_mag_max": tf.reduce_max(outputs[:, 1]),
    "step_rms": _rms(step),
    "relative_step": tf.norm(step) / tf.maximum(param_norm, tiny),
    "median_relative_step": _median(tf.abs(step) / tf.maximum(tf.abs(param), tiny)),
    "step_grad_cosine": _cosine(step, grad),
    "outward_cosine": _cosine(-step, param),
    "drift_fraction": tf.norm(drift) / tf.maximum(tf.norm(step), tiny),
    "drift_outward_cosine": _cosine(-drift, param),
  }


def probe(
  lopt: mlp_lopt.MLPLOpt,
  theta: nests.Theta,
  state: mlp_lopt.MLPLOptState,
  grads: nests.Params,
) -> dict:
  """What the update of step t = state.iteration reads and emits (see the module docstring).

  Args:
    lopt: the learned optimizer (the paper's feature set).
    theta: its meta-parameters.
    state: the inner state before the update (params of a nest of dicts).
    grads: the gradient the update uses, structured like state.params.

  Returns:
    {"time": [num_time] (empty without time features), "kinds": {kind: {statistic: tensor}}}:
    SCALAR_STATISTICS as scalars and COLUMN_STATISTICS as [columns] vectors.
  """
  bias = mlp_lopt.time_bias(lopt, theta, state.iteration)
  time = features.time_features(state.iteration, lopt.time_scales, lopt.time_max_step)
  by_kind = {}
  leaves = zip(
    leaves_with_paths(state.params),
    tf.nest.flatten(grads),
    tf.nest.flatten(state.momenta),
    strict=True,
  )
  for (path, param), grad, momenta in leaves:
    written_out = mlp_lopt.tensor_step(lopt, theta, param, grad, momenta, bias)
    no_signal = (tf.zeros_like(grad), tf.zeros_like(momenta))
    drift = mlp_lopt.tensor_step(lopt, theta, param, *no_signal, bias).step
    by_kind.setdefault(kind_of(path), []).append((param, grad, written_out, drift))
  kinds = {}
  for kind, members in by_kind.items():
    param, grad, drift = (
      tf.concat([tf.reshape(member[i], [-1]) for member in members], 0) for i in (0, 1, 3)
    )
    kinds[kind] = _statistics(param, grad, [member[2] for member in members], drift)
  return {"time": time, "kinds": kinds}
