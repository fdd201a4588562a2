"""The fast kernel of MLPLOpt's update (paper App. D.1, kept cheap as App. I asks of it).

It computes the same function as the per-tensor reference in mlp_lopt.py (the specification)
with a few small matmuls. With n elements and the momenta stored decay-major
([num_decays, *shape]), every row below is a contiguous [n] vector:
  Z = [g; w; 1; m_old]                       the inputs, one concat              [k, n], k = 3 + D
  Y = B Z = [g; w; 1; m_new]                 the momentum update as one matmul
  X = C Y                                    the feature columns (never materialised)
  s = rsqrt(C^2 mean(Y^2) + eps)             the per-column normalisers (one non-zero per row of C)
  hidden = relu(A Y),  A = [W_0^T, b_t] diag(s, 1) [C; e_1]    (b_t = b + W_time^T time(t); e_1
                                                                 picks the ones row of Y)
  step = o_dir * exp(o_mag),  [o_dir; o_mag] = diag(lambda_lin, lambda_exp) (W_1^T hidden + b_1)
The normalisation, the feature map and the time features fold into the [hidden, k] matrix A per
tensor (x_c s_c W_0[c] = x_c (s_c W_0[c])), and the output bias rides on an extra hidden unit that
is always relu(1) = 1. For the paper's features and the ablations C only selects rows of Y, so A is
[W_0^T, b_t] with its columns scaled and permuted, and the hidden layer reads only the rows it uses.
Three things keep the number and cost of ops per step down (each measured, docs/performance.md):
  - what depends on theta alone ([W_0^T, b], [W_1^T, b_1], where the time features go) is built
    once where opt_fn(theta) is called, outside the inner loop; a step adds time(t) @ W_time;
  - unless ops run on one thread, the ReLU runs inside the hidden layer's matmul kernel;
  - tensors of at most GROUP_MAX_ELEMENTS elements share one pipeline: their columns side by side
    in one [k, sum(n)] matrix, each normalised per element by its own tensor's root mean squares
    (a tiny [k, tensors] matrix spread by a matmul), so that biases and small layers cost a few
    ops together instead of ~20 each.

The kernel knows MLPLOpt only through its options (mlp_options.MLPLOptOptions) and works on flat
lists of tensors (params, grads, momenta and the step count in; new params and momenta out), so it
depends on features.py and mlp_options.py alone and MLPLOpt's optimizer keeps the state.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests
from task_specific_learned_opt.learned_optimizers import features, mlp_options

# Rows of Z and Y: g, w, a row of ones, then the momenta.
ONES_ROW = 2
MOMENTA_ROW = 3
# Tensors this small share one pipeline (see FastUpdate).
GROUP_MAX_ELEMENTS = 4096

# {"hidden": {"w": [inputs, hidden], "b": [hidden]}, "output": {"w": [hidden, 2], "b": [2]}}.


# Added to a step's mean square before its rsqrt, so that a zero step has a finite gradient.
STEP_RMS_EPSILON = 1e-20
# The smallest weight rms a relative step cap scales with (max_relative_step).
RELATIVE_STEP_FLOOR = 1e-2


def gate_growth(step: tf.Tensor, param: tf.Tensor, grad: tf.Tensor) -> tf.Tensor:
  """`step` with the elements that grow |w| unasked set to 0 (w <- w - step).

  An element's step grows |w| when step * w < 0; the gradient asks for that when g * w < 0
  (-g has w's sign). Where the step would grow |w| and the gradient does not ask, it is 0, so no
  parameter drifts away from zero without its gradient pointing there.

  Args:
    step: the steps, any shape.
    param: w, the same shape.
    grad: g, the same shape.

  Returns:
    The gated steps.
  """
  unasked = tf.logical_and(step * param < 0.0, grad * param >= 0.0)
  return tf.where(unasked, tf.zeros_like(step), step)


def step_rms_factor(mean_square: tf.Tensor, max_step_rms: float) -> tf.Tensor:
  """min(1, max_step_rms / rms): what scales a tensor's step down to an rms of max_step_rms.

  Args:
    mean_square: the mean of the squared step over the tensor's elements (any shape).
    max_step_rms: the largest root mean square a step may have.

  Returns:
    The factors, the shape of `mean_square`.
  """
  return tf.minimum(1.0, max_step_rms * tf.math.rsqrt(mean_square + STEP_RMS_EPSILON))


def relative_step_factor(
  step_mean_square: tf.Tensor, param_mean_square: tf.Tensor, max_relative_step: float
) -> tf.Tensor:
  """What scales a tensor's step down to an rms of r * max(rms(w), RELATIVE_STEP_FLOOR).

  The floor lets a tensor that starts at zero (a bias) move: its steps are capped at
  r * RELATIVE_STEP_FLOOR until it has grown.

  Args:
    step_mean_square: the mean of the squared step over the tensor's elements (any shape).
    param_mean_square: the mean of the squared weights w before the step (the same shape).
    max_relative_step: r, the largest step rms as a fraction of the tensor's rms.

  Returns:
    The factors, the shape of `step_mean_square`.
  """
  return step_rms_factor(step_mean_square, max_relative_step * relative_scale(param_mean_square))


def relative_scale(param_mean_square: tf.Tensor) -> tf.Tensor:
  """max(rms(w), RELATIVE_STEP_FLOOR): the scale a tensor's steps are measured against.

  Args:
    param_mean_square: the mean of the squared weights w (any shape).
  """
  return tf.sqrt(tf.maximum(param_mean_square, RELATIVE_STEP_FLOOR**2))


def feature_maps(config: mlp_options.MLPLOptOptions) -> tuple[np.ndarray, np.ndarray]:
  """The constant matrices of the fast update: Y = B Z and X = C Y (see the module docstring).

  Z = [g; w; 1; m_old] and Y = [g; w; 1; m_new] have k = 3 + num_decays rows; C has one row per
  normalised feature column, in the order of MLPLOpt.columns, with at most one non-zero per row.

  Args:
    config: the update's hyperparameters (decays and feature set are read).

  Returns:
    (B [k, k], C [num_normalized_inputs, k]), float32.
  """
  num_decays = len(config.decays)
  k = 3 + num_decays
  b = np.eye(k, dtype=np.float32)
  for j, decay in enumerate(np.float32(config.decays)):
    b[MOMENTA_ROW + j, MOMENTA_ROW + j] = decay
    b[MOMENTA_ROW + j, 0] = np.float32(1.0) - decay  # Rounds as (1 - d) does in update_momenta.

  def row(index: int | None, value: float = 1.0) -> np.ndarray:
    r = np.zeros(k, np.float32)
    if index is not None:
      r[index] = value
    return r

  momenta = [row(MOMENTA_ROW + j) for j in range(num_decays)]
  if config.feature_set == "original_code":
    scale = features.ORIGINAL_CODE_MOMENTUM_SCALE
    rms_feature = np.float32(1.0) / np.sqrt(np.float32(features.ORIGINAL_CODE_RMS_EPSILON))
    rows = (
      [row(0)]
      + [row(MOMENTA_ROW + j, scale) for j in range(num_decays)]
      + [row(1)]
      + momenta
      + [row(None)] * num_decays  # rms accumulators that stay 0.
      + [row(ONES_ROW, rms_feature)] * num_decays  # rsqrt(0 + 1e-6): a constant column.
    )
  else:
    rows = [row(0), row(1)] + (momenta if config.use_momentum else [])
  return b, np.stack(rows)


def _num_elements(x: tf.Tensor) -> int | tf.Tensor:
  n = x.shape.num_elements()
  return n if n is not None else tf.size(x)


def _shape(x: tf.Tensor) -> tf.TensorShape | tf.Tensor:
  return x.shape if x.shape.is_fully_defined() else tf.shape(x)


class _ThetaWeights(NamedTuple):
  """What every tensor's fast update shares and what depends on theta alone (not on the step)."""

  w0: tf.Tensor  # [hidden + 1, columns + 1]: [[W_0^T, b], [0, 1]] (the last unit is always on).
  time_to_w0: tf.Tensor | None  # [num_time_features, w0.size]: time(t) @ this adds W_time^T time(t)
  # to w0's bias column; None without time features.
  w1: tf.Tensor  # [2, hidden + 1]: diag(lambda_lin, lambda_exp) [W_1^T, b_1].
  b: tf.Tensor  # [k, k]: Y = B Z.
  c: tf.Tensor | None  # [columns + 1, k]: [C; e_1]; None when it only selects rows of Y.
  c_squared: tf.Tensor | None  # c ** 2 (elementwise).
  epsilon: tf.Tensor  # [columns + 1]: the normaliser's epsilon, 0 for the bias column.
  zero: tf.Tensor | None = None  # 0.0, but not a graph constant (see _relu_matmul); set per step.


class FastUpdate:
  """App. D.1's update for one theta, the normalisation and features folded into one matrix.

  What depends on theta alone is computed once, when this is made (where `opt_fn(theta)` is
  called, outside the inner training loop), so each step only adds the time features' share to the
  hidden bias. Tensors of at most `GROUP_MAX_ELEMENTS` elements (biases, a first conv layer, a last
  linear layer) share one pipeline, normalised per element, so that their dozens of tiny ops
  become a few.
  """

  def __init__(self, config: mlp_options.MLPLOptOptions, theta: nests.Theta):
    """Builds the constant matrices and theta's share of the weights.

    Args:
      config: the update's hyperparameters.
      theta: the MLP's weights, {"hidden": {"w", "b"}, "output": {"w", "b"}}, tensors or arrays;
        "hidden"/"w" has the normalised columns' rows first, then the time features'.
    """
    self.config = config
    self.theta = theta
    b, c = feature_maps(config)
    c = np.concatenate([c, np.eye(1, c.shape[1], ONES_ROW, np.float32)])  # The bias column.
    # numpy, not tensors: the constants go into whichever graph builds the update.
    self._b, self._c = b, c
    # When column j of [X, 1] is row rows[j] of Y and those rows are Y's first ones, A is w0 with
    # its columns permuted, and the hidden layer needs only those rows.
    rows = np.argmax(c, axis=1)
    selects = np.array_equal(c, np.eye(c.shape[1], dtype=np.float32)[rows])
    self._permutation = None
    if selects and sorted(rows) == list(range(len(rows))):
      self._permutation = np.argsort(rows)
    self._theta_weights = self._make_theta_weights()

  def __call__(
    self,
    params: Sequence[tf.Tensor],
    grads: Sequence[tf.Tensor],
    momenta: Sequence[tf.Tensor],
    iteration: tf.Tensor,
  ) -> tuple[list[tf.Tensor], list[tf.Tensor]]:
    """One step of every tensor.

    Args:
      params: the parameter tensors, float32.
      grads: their gradients, in the same order.
      momenta: their momenta, each [num_decays, *param.shape].
      iteration: int32 scalar, inner steps taken before this one.

    Returns:
      (new params, new momenta), lists in the order of `params`.
    """
    weights = self._weights(iteration)
    group = [i for i, p in enumerate(params) if _groupable(p)]
    if len(group) < 2:
      group = []
    new = {}
    if group:
      grouped = self._update_group(
        weights, *([x[i] for i in group] for x in (params, grads, momenta))
      )
      new = dict(zip(group, grouped, strict=True))
    for i, (p, g, m) in enumerate(zip(params, grads, momenta, strict=True)):
      if i not in new:
        new[i] = self._update_tensor(weights, p, g, m)
    ordered = [new[i] for i in range(len(params))]
    return [p for p, _ in ordered], [m for _, m in ordered]

  def _make_theta_weights(self) -> _ThetaWeights:
    config, theta = self.config, self.theta
    num_columns = self._c.shape[0] - 1
    bias_column = num_columns
    w0 = tf.concat(
      [tf.transpose(theta["hidden"]["w"][:num_columns]), theta["hidden"]["b"][:, None]], 1
    )
    w0 = tf.concat([w0, tf.one_hot([num_columns], num_columns + 1)], 0)
    epsilon = np.full([num_columns + 1], config.normalizer_epsilon, np.float32)
    epsilon[-1] = 0.0  # rsqrt(mean(1^2) + 0) = 1 exactly: the bias column is not rescaled.
    c = c_squared = None
    if self._permutation is None:
      c, c_squared = tf.constant(self._c), tf.constant(self._c * self._c)
    else:
      w0 = tf.gather(w0, self._permutation, axis=1)
      epsilon = epsilon[self._permutation]
      bias_column = int(np.argmax(self._permutation == num_columns))
    time_to_w0 = None
    if config.use_time:
      w_time = theta["hidden"]["w"][-len(config.time_scales) :]  # [num_time, hidden]
      w_time = tf.pad(w_time, [[0, 0], [0, 1]])  # The always-on unit gets no time bias.
      column = tf.one_hot(bias_column, num_columns + 1)
      time_to_w0 = tf.reshape(w_time[:, :, None] * column, [len(config.time_scales), -1])
    output = tf.concat([tf.transpose(theta["output"]["w"]), theta["output"]["b"][:, None]], 1)
    scale = tf.constant([[config.step_scale_lin], [config.step_scale_exp]], tf.float32)
    return _ThetaWeights(
      w0=w0,
      time_to_w0=time_to_w0,
      w1=scale * output,
      b=tf.constant(self._b),
      c=c,
      c_squared=c_squared,
      epsilon=tf.constant(epsilon),
    )

  def _weights(self, iteration: tf.Tensor) -> _ThetaWeights:
    """The shared weights at this step: w0 with the time features added to its bias column."""
    weights = self._theta_weights
    if not _usable_here(weights.w0):  # Made in a graph this update cannot read from.
      weights = self._make_theta_weights()
    weights = weights._replace(zero=tf.cast(iteration, tf.float32) * 0.0)
    if weights.time_to_w0 is None:
      return weights
    time = features.time_features(iteration, self.config.time_scales, self.config.time_max_step)
    w0 = weights.w0 + tf.reshape(tf.matmul(time[None], weights.time_to_w0), weights.w0.shape)
    return weights._replace(w0=w0)

  def _inputs(
    self, param: tf.Tensor, grad: tf.Tensor, momenta: tf.Tensor, n: int | tf.Tensor
  ) -> tf.Tensor:
    """Z = [g; w; 1; m_old], [k, n]."""
    return tf.concat(
      [
        tf.reshape(grad, [1, n]),
        tf.reshape(param, [1, n]),
        tf.ones([1, n]),
        tf.reshape(momenta, [len(self.config.decays), n]),
      ],
      axis=0,
    )

  def _used_rows(self, weights: _ThetaWeights, y: tf.Tensor) -> tf.Tensor:
    rows = weights.w0.shape[1]
    return y if weights.c is not None or rows == y.shape[0] else y[:rows]

  def _steps(self, weights: _ThetaWeights, hidden: tf.Tensor) -> tf.Tensor:
    o_dir, o_mag = tf.unstack(tf.matmul(weights.w1, hidden, name="output"))
    return o_dir * tf.exp(o_mag)

  def _update_tensor(
    self, weights: _ThetaWeights, param: tf.Tensor, grad: tf.Tensor, momenta: tf.Tensor
  ) -> tuple[tf.Tensor, tf.Tensor]:
    n = _num_elements(param)
    y = tf.matmul(weights.b, self._inputs(param, grad, momenta, n), name="momenta")
    used = self._used_rows(weights, y)
    # The diagonal of the Gram matrix: one efficient matmul instead of a square and a reduction.
    mean_squares = tf.linalg.diag_part(tf.matmul(used, used, transpose_b=True, name="gram"))
    mean_squares /= tf.cast(n, tf.float32)
    if weights.c is None:
      a = weights.w0 * tf.math.rsqrt(mean_squares + weights.epsilon)
    else:
      scale = tf.math.rsqrt(tf.linalg.matvec(weights.c_squared, mean_squares) + weights.epsilon)
      a = tf.matmul(weights.w0 * scale, weights.c)
    step = self._steps(weights, _relu_matmul(a, used, weights.zero, n))
    if self.config.gate_growth:
      step = gate_growth(step, y[1], y[0])
    if self.config.max_step_rms is not None:
      mean_square = tf.reduce_mean(tf.square(step))
      step *= step_rms_factor(mean_square, self.config.max_step_rms)
    if self.config.max_relative_step is not None:
      step *= relative_step_factor(
        tf.reduce_mean(tf.square(step)),
        tf.reduce_mean(tf.square(y[1])),
        self.config.max_relative_step,
      )
    return param - tf.reshape(step, _shape(param)), tf.reshape(y[MOMENTA_ROW:], _shape(momenta))

  def _update_group(
    self,
    weights: _ThetaWeights,
    params: Sequence[tf.Tensor],
    grads: Sequence[tf.Tensor],
    momenta: Sequence[tf.Tensor],
  ) -> list[tuple[tf.Tensor, tf.Tensor]]:
    """The update of several small tensors side by side in one [k, sum(n)] pipeline.

    Each tensor's features are normalised by its own root mean squares, now per element (the
    segment of every element is a constant), then one hidden layer serves all of them.
    """
    sizes = [p.shape.num_elements() for p in params]
    segment = np.repeat(np.arange(len(sizes)), sizes)
    owner = np.zeros([len(sizes), len(segment)], np.float32)
    owner[segment, np.arange(len(segment))] = 1.0  # [tensors, sum(n)]: which tensor owns a column.
    z = tf.concat(
      [self._inputs(p, g, m, n) for p, g, m, n in zip(params, grads, momenta, sizes, strict=True)],
      axis=1,
    )
    y = tf.matmul(weights.b, z, name="group_momenta")
    used = self._used_rows(weights, y)
    sums = tf.matmul(tf.square(used), owner.T, name="group_sums")  # [rows, tensors]
    mean_squares = sums / np.float32(sizes)
    if weights.c is None:
      columns = used
    else:
      columns = tf.matmul(weights.c, used)
      mean_squares = tf.matmul(weights.c_squared, mean_squares)
    scale = tf.math.rsqrt(mean_squares + weights.epsilon[:, None])
    normalized = columns * tf.matmul(scale, owner, name="group_scale")  # A gather is slower.
    hidden = _relu_matmul(weights.w0, normalized, weights.zero, len(segment))
    step = self._steps(weights, hidden)
    if self.config.gate_growth:
      step = gate_growth(step, y[1], y[0])
    if self.config.max_step_rms is not None:
      mean_squares = tf.linalg.matvec(owner, tf.square(step)) / np.float32(sizes)  # [tensors]
      factors = step_rms_factor(mean_squares, self.config.max_step_rms)
      step *= tf.linalg.matvec(owner, factors, transpose_a=True)
    if self.config.max_relative_step is not None:
      sizes_f = np.float32(sizes)
      factors = relative_step_factor(
        tf.linalg.matvec(owner, tf.square(step)) / sizes_f,
        tf.linalg.matvec(owner, tf.square(y[1])) / sizes_f,
        self.config.max_relative_step,
      )
      step *= tf.linalg.matvec(owner, factors, transpose_a=True)
    steps = tf.split(step, sizes)
    new_momenta = tf.split(y[MOMENTA_ROW:], sizes, axis=1)
    return [
      (p - tf.reshape(s, p.shape), tf.reshape(m_new, m.shape))
      for p, m, s, m_new in zip(params, momenta, steps, new_momenta, strict=True)
    ]


def _relu_matmul(a: tf.Tensor, x: tf.Tensor, zero: tf.Tensor, n: int | tf.Tensor) -> tf.Tensor:
  """relu(a @ x) for x [k, n]; with several intra-op threads, one kernel with the ReLU fused in.

  Grappler's remapper fuses MatMul + BiasAdd + Relu into one kernel (oneDNN on x86 CPUs); here the
  bias, over the n columns, is zero. It must not be a constant zero, which grappler removes before
  it fuses: `zero` is a 0 computed from the step count. With two intra-op threads a separate Relu
  on the [hidden + 1, n] activations is split across both and costs more than the matmul; on one
  thread the unfused pair is faster (benchmarks/learned_update.py measures both).
  """
  if tf.config.threading.get_intra_op_parallelism_threads() == 1:
    return _relu_matmul_unfused(a, x, zero, n)
  return _relu_matmul_fused(a, x, zero, n)


def _relu_matmul_unfused(
  a: tf.Tensor, x: tf.Tensor, zero: tf.Tensor, n: int | tf.Tensor
) -> tf.Tensor:
  """relu(a @ x) as a matmul and a Relu op (the one-thread case)."""
  del zero, n
  return tf.nn.relu(tf.matmul(a, x, name="hidden"))


def _relu_matmul_fused(
  a: tf.Tensor, x: tf.Tensor, zero: tf.Tensor, n: int | tf.Tensor
) -> tf.Tensor:
  """relu(a @ x + zero) that grappler fuses into one kernel (see _relu_matmul)."""
  return tf.nn.relu(tf.nn.bias_add(tf.matmul(a, x, name="hidden"), tf.fill([n], zero)))


def _groupable(param: tf.Tensor) -> bool:
  return param.shape.is_fully_defined() and param.shape.num_elements() <= GROUP_MAX_ELEMENTS


def _usable_here(x: tf.Tensor) -> bool:
  """Whether the graph being built can use x: x is eager or from this graph or one it is in."""
  if not hasattr(x, "graph") or tf.executing_eagerly():
    return not hasattr(x, "graph")
  graph = tf.compat.v1.get_default_graph()
  while graph is not None:
    if graph is x.graph:
      return True
    graph = getattr(graph, "outer_graph", None)
  return False
