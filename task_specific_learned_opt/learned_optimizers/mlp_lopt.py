"""The paper's learned optimizer: one small MLP applied to every scalar parameter (App. D.1).

For each parameter tensor w with gradient g at inner step t (before the step is counted):
  1. momenta first: m_d <- d * m_d + (1 - d) * g, d in (0.5, 0.9, 0.99, 0.999, 0.9999);
  2. features: columns [g, w, m_0.5, ..., m_0.9999], each divided by its root mean square over the
     tensor's elements (x * rsqrt(mean(x^2) + 1e-5)), then the 9 time features tanh(t / eta - 1)
     appended unnormalised: 16 inputs;
  3. MLP: 16 -> 32 ReLU -> 2 linear outputs (o_dir, o_mag) per element;
  4. step: w <- w - lambda_lin * o_dir * exp(lambda_exp * o_mag), lambda_lin = lambda_exp = 1e-3.
theta = {"hidden": {"w": [16, 32], "b": [32]}, "output": {"w": [32, 2], "b": [2]}}: 610 numbers.
Weights are truncated normal with stddev 1/sqrt(fan_in), biases zero.

feature_set="original_code" gives the authors' code's 22 normalised columns + 9 time features
(1090 meta-parameters); use_momentum / use_time drop features for the ablations of Sec. 4.5.

Two implementations of this one update rule (App. I: the update should cost little next to the
gradient). `reference_opt_fn` writes the steps above out per tensor. `opt_fn`, used everywhere,
computes the same function with a few small matmuls. With n elements and the momenta stored
decay-major ([num_decays, *shape]), every row below is a contiguous [n] vector:
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
Three things keep the number and cost of ops per step down (each measured, see the README):
  - what depends on theta alone ([W_0^T, b], [W_1^T, b_1], where the time features go) is built
    once where opt_fn(theta) is called, outside the inner loop; a step adds time(t) @ W_time;
  - unless ops run on one thread, the ReLU runs inside the hidden layer's matmul kernel;
  - tensors of at most GROUP_MAX_ELEMENTS elements share one pipeline: their columns side by side
    in one [k, sum(n)] matrix, each normalised per element by its own tensor's root mean squares
    (a tiny [k, tensors] matrix spread by a matmul), so that biases and small layers cost a few
    ops together instead of ~20 each.

Note: the time features are the same for every element of every tensor, so their contribution to
the hidden layer is computed once per step and added as a bias. Both implementations compute the
same function as the MLP on the concatenated 16 columns (the tests check the reference against a
numpy forward pass of the concatenation, and the two implementations against each other).
"""

from collections.abc import Sequence
from typing import NamedTuple

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import base, features
from task_specific_learned_opt.optimizers import base as opt_base

FEATURE_SETS = ("paper", "original_code")
IMPLEMENTATIONS = ("fast", "reference")
STEP_SCALE = 1e-3  # lambda_lin and lambda_exp, App. D.1.
# Rows of Z and Y in the fast update: g, w, a row of ones, then the momenta.
ONES_ROW = 2
MOMENTA_ROW = 3
# Tensors this small share one pipeline in the fast update (see _MLPLOptOptimizer).
GROUP_MAX_ELEMENTS = 4096


class MLPLOptState(NamedTuple):
  """The inner state: parameters, their momenta and the step count.

  The momenta of a parameter are stored decay-major, [num_decays, *param.shape], so that each
  decay's momenta are one contiguous row of the fast update's Z (a [*shape, num_decays] layout
  would need a transpose each way, measured at a quarter of the update's time).
  """

  params: opt_base.Params
  momenta: opt_base.Params  # Each [num_decays, *param.shape].
  iteration: tf.Tensor  # int32 scalar: inner steps taken.


def mlp_hidden(x: tf.Tensor, hidden: dict, time_bias: tf.Tensor | None) -> tf.Tensor:
  """ReLU(x @ W + b [+ time_bias]) for x [..., num_columns]."""
  num_columns = x.shape[-1]
  flat = tf.reshape(x, [-1, num_columns])
  pre = tf.matmul(flat, hidden["w"][:num_columns]) + hidden["b"]
  if time_bias is not None:
    pre += time_bias
  return tf.nn.relu(pre)


def feature_maps(lopt: "MLPLOpt") -> tuple[np.ndarray, np.ndarray]:
  """The constant matrices of the fast update: Y = B Z and X = C Y (see the module docstring).

  Z = [g; w; 1; m_old] and Y = [g; w; 1; m_new] have k = 3 + num_decays rows; C has one row per
  normalised feature column of `lopt.columns`, in its order, with at most one non-zero per row.

  Returns:
    (B [k, k], C [num_normalized_inputs, k]), float32.
  """
  num_decays = len(lopt.decays)
  k = 3 + num_decays
  b = np.eye(k, dtype=np.float32)
  for j, decay in enumerate(np.float32(lopt.decays)):
    b[MOMENTA_ROW + j, MOMENTA_ROW + j] = decay
    b[MOMENTA_ROW + j, 0] = np.float32(1.0) - decay  # Rounds as (1 - d) does in update_momenta.

  def row(index: int | None, value: float = 1.0) -> np.ndarray:
    r = np.zeros(k, np.float32)
    if index is not None:
      r[index] = value
    return r

  momenta = [row(MOMENTA_ROW + j) for j in range(num_decays)]
  if lopt.feature_set == "original_code":
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
    rows = [row(0), row(1)] + (momenta if lopt.use_momentum else [])
  return b, np.stack(rows)


def _num_elements(x: tf.Tensor):
  n = x.shape.num_elements()
  return n if n is not None else tf.size(x)


def _shape(x: tf.Tensor):
  return x.shape if x.shape.is_fully_defined() else tf.shape(x)


def _decays_last(momenta: tf.Tensor) -> tf.Tensor:
  rank = momenta.shape.rank
  return tf.transpose(momenta, list(range(1, rank)) + [0])


def _decays_first(momenta: tf.Tensor) -> tf.Tensor:
  rank = momenta.shape.rank
  return tf.transpose(momenta, [rank - 1] + list(range(rank - 1)))


class _Optimizer(opt_base.Optimizer):
  """What both implementations share: theta and the state."""

  name = "mlp_lopt"

  def __init__(self, lopt: "MLPLOpt", theta: base.Theta):
    self.lopt = lopt
    self.theta = theta

  def init(self, params: opt_base.Params) -> MLPLOptState:
    num_decays = len(self.lopt.decays)
    return MLPLOptState(
      params=params,
      momenta=tf.nest.map_structure(
        lambda p: tf.zeros(tf.concat([[num_decays], tf.shape(p)], 0), tf.float32), params
      ),
      iteration=tf.constant(0, tf.int32),
    )

  def _pack(self, state: MLPLOptState, new: list) -> MLPLOptState:
    """The next state from [(new param, new momenta)] in the order of tf.nest.flatten."""
    return MLPLOptState(
      params=tf.nest.pack_sequence_as(state.params, [p for p, _ in new]),
      momenta=tf.nest.pack_sequence_as(state.momenta, [m for _, m in new]),
      iteration=state.iteration + 1,
    )


class _ReferenceMLPLOptOptimizer(_Optimizer):
  """The update written out per tensor, as in the paper: the specification of `opt_fn`."""

  def _time_bias(self, iteration: tf.Tensor) -> tf.Tensor | None:
    """time_features(t) @ W_time: the time features' share of the hidden pre-activation."""
    if not self.lopt.use_time:
      return None
    time = features.time_features(iteration, self.lopt.time_scales)
    w_time = self.theta["hidden"]["w"][-len(self.lopt.time_scales) :]
    return tf.linalg.matvec(w_time, time, transpose_a=True)

  def _apply(self, state: MLPLOptState, grads: opt_base.Params, update_tensor) -> MLPLOptState:
    new = [
      update_tensor(p, g, m)
      for p, g, m in zip(
        tf.nest.flatten(state.params),
        tf.nest.flatten(grads),
        tf.nest.flatten(state.momenta),
        strict=True,
      )
    ]
    return self._pack(state, new)

  def update(
    self, state: MLPLOptState, grads: opt_base.Params, loss: tf.Tensor | None = None
  ) -> MLPLOptState:
    del loss  # The paper's optimizer does not see the loss.
    lopt, theta = self.lopt, self.theta
    time_bias = self._time_bias(state.iteration)

    def update_tensor(param, grad, momenta):
      momenta = features.update_momenta(_decays_last(momenta), grad, lopt.decays)
      columns = lopt.columns(grad, param, momenta)
      normalized = features.second_moment_normalize(columns, lopt.normalizer_epsilon)
      hidden = mlp_hidden(normalized, theta["hidden"], time_bias)
      out = tf.matmul(hidden, theta["output"]["w"]) + theta["output"]["b"]
      step = lopt.step_scale_lin * out[:, 0] * tf.exp(lopt.step_scale_exp * out[:, 1])
      return param - tf.reshape(step, tf.shape(param)), _decays_first(momenta)

    return self._apply(state, grads, update_tensor)


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


class _MLPLOptOptimizer(_Optimizer):
  """The same update with the normalisation and features folded into one matrix per tensor.

  What depends on theta alone is computed once, where `opt_fn(theta)` is called (outside the inner
  training loop), so each step only adds the time features' share to the hidden bias. Tensors of
  at most `GROUP_MAX_ELEMENTS` elements (biases, a first conv layer, a last linear layer) share one
  pipeline, normalised per element, so that their dozens of tiny ops become a few.
  """

  def __init__(self, lopt: "MLPLOpt", theta: base.Theta):
    super().__init__(lopt, theta)
    b, c = feature_maps(lopt)
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

  def _make_theta_weights(self) -> _ThetaWeights:
    lopt, theta = self.lopt, self.theta
    num_columns = self._c.shape[0] - 1
    bias_column = num_columns
    w0 = tf.concat(
      [tf.transpose(theta["hidden"]["w"][:num_columns]), theta["hidden"]["b"][:, None]], 1
    )
    w0 = tf.concat([w0, tf.one_hot([num_columns], num_columns + 1)], 0)
    epsilon = np.full([num_columns + 1], lopt.normalizer_epsilon, np.float32)
    epsilon[-1] = 0.0  # rsqrt(mean(1^2) + 0) = 1 exactly: the bias column is not rescaled.
    c = c_squared = None
    if self._permutation is None:
      c, c_squared = tf.constant(self._c), tf.constant(self._c * self._c)
    else:
      w0 = tf.gather(w0, self._permutation, axis=1)
      epsilon = epsilon[self._permutation]
      bias_column = int(np.argmax(self._permutation == num_columns))
    time_to_w0 = None
    if lopt.use_time:
      w_time = theta["hidden"]["w"][-len(lopt.time_scales) :]  # [num_time, hidden]
      w_time = tf.pad(w_time, [[0, 0], [0, 1]])  # The always-on unit gets no time bias.
      column = tf.one_hot(bias_column, num_columns + 1)
      time_to_w0 = tf.reshape(w_time[:, :, None] * column, [len(lopt.time_scales), -1])
    output = tf.concat([tf.transpose(theta["output"]["w"]), theta["output"]["b"][:, None]], 1)
    scale = tf.constant([[lopt.step_scale_lin], [lopt.step_scale_exp]], tf.float32)
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
    if not _usable_here(weights.w0):  # opt_fn ran in a graph this update cannot read from.
      weights = self._make_theta_weights()
    weights = weights._replace(zero=tf.cast(iteration, tf.float32) * 0.0)
    if weights.time_to_w0 is None:
      return weights
    time = features.time_features(iteration, self.lopt.time_scales)
    w0 = weights.w0 + tf.reshape(tf.matmul(time[None], weights.time_to_w0), weights.w0.shape)
    return weights._replace(w0=w0)

  def _inputs(self, param, grad, momenta, n) -> tf.Tensor:
    """Z = [g; w; 1; m_old], [k, n]."""
    return tf.concat(
      [
        tf.reshape(grad, [1, n]),
        tf.reshape(param, [1, n]),
        tf.ones([1, n]),
        tf.reshape(momenta, [len(self.lopt.decays), n]),
      ],
      axis=0,
    )

  def _used_rows(self, weights: _ThetaWeights, y: tf.Tensor) -> tf.Tensor:
    rows = weights.w0.shape[1]
    return y if weights.c is not None or rows == y.shape[0] else y[:rows]

  def _steps(self, weights: _ThetaWeights, hidden: tf.Tensor) -> tf.Tensor:
    o_dir, o_mag = tf.unstack(tf.matmul(weights.w1, hidden, name="output"))
    return o_dir * tf.exp(o_mag)

  def _update_tensor(self, weights: _ThetaWeights, param, grad, momenta) -> tuple:
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
    return param - tf.reshape(step, _shape(param)), tf.reshape(y[MOMENTA_ROW:], _shape(momenta))

  def _update_group(self, weights: _ThetaWeights, params, grads, momenta) -> list:
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
    steps = tf.split(self._steps(weights, hidden), sizes)
    new_momenta = tf.split(y[MOMENTA_ROW:], sizes, axis=1)
    return [
      (p - tf.reshape(s, p.shape), tf.reshape(m_new, m.shape))
      for p, m, s, m_new in zip(params, momenta, steps, new_momenta, strict=True)
    ]

  def update(
    self, state: MLPLOptState, grads: opt_base.Params, loss: tf.Tensor | None = None
  ) -> MLPLOptState:
    del loss  # The paper's optimizer does not see the loss.
    weights = self._weights(state.iteration)
    params, flat_grads, momenta = (
      tf.nest.flatten(state.params),
      tf.nest.flatten(grads),
      tf.nest.flatten(state.momenta),
    )
    group = [i for i, p in enumerate(params) if _groupable(p)]
    if len(group) < 2:
      group = []
    new = {}
    if group:
      grouped = self._update_group(
        weights, *([x[i] for i in group] for x in (params, flat_grads, momenta))
      )
      new = dict(zip(group, grouped, strict=True))
    for i, (p, g, m) in enumerate(zip(params, flat_grads, momenta, strict=True)):
      if i not in new:
        new[i] = self._update_tensor(weights, p, g, m)
    return self._pack(state, [new[i] for i in range(len(params))])


def _relu_matmul(a: tf.Tensor, x: tf.Tensor, zero: tf.Tensor, n) -> tf.Tensor:
  """relu(a @ x) for x [k, n]; with several intra-op threads, one kernel with the ReLU fused in.

  Grappler's remapper fuses MatMul + BiasAdd + Relu into one kernel (oneDNN on x86 CPUs); here the
  bias, over the n columns, is zero. It must not be a constant zero, which grappler removes before
  it fuses: `zero` is a 0 computed from the step count. With two intra-op threads a separate Relu
  on the [hidden + 1, n] activations is split across both and costs more than the matmul; on one
  thread the unfused pair is faster (benchmarks/learned_update.py measures both).
  """
  hidden = tf.matmul(a, x, name="hidden")
  if tf.config.threading.get_intra_op_parallelism_threads() == 1:
    return tf.nn.relu(hidden)
  return tf.nn.relu(tf.nn.bias_add(hidden, tf.fill([n], zero)))


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


@gin.configurable
class MLPLOpt(base.LearnedOptimizer):
  """The per-parameter MLP optimizer of paper App. D.1."""

  name = "mlp_lopt"

  def __init__(
    self,
    hidden_size: int = 32,
    decays: Sequence[float] = features.MOMENTUM_DECAYS,
    time_scales: Sequence[float] = features.PAPER_TIME_SCALES,
    feature_set: str = "paper",
    use_momentum: bool = True,
    use_time: bool = True,
    step_scale_lin: float = STEP_SCALE,
    step_scale_exp: float = STEP_SCALE,
    normalizer_epsilon: float = features.NORMALIZER_EPSILON,
    implementation: str = "fast",
  ):
    """Makes the learned optimizer.

    Args:
      hidden_size: ReLU units of the hidden layer (32).
      decays: momentum decays (0.5, 0.9, 0.99, 0.999, 0.9999).
      time_scales: eta of the time features tanh(t / eta - 1); 9 log-spaced in [3, 3e5].
      feature_set: "paper" (7 normalised columns) or "original_code" (22, the authors' code).
      use_momentum: False drops the momentum columns ("No Mom" ablation; paper features only).
      use_time: False drops the time features ("No Time" ablation).
      step_scale_lin: lambda_lin in w - lambda_lin * o_dir * exp(lambda_exp * o_mag).
      step_scale_exp: lambda_exp.
      normalizer_epsilon: epsilon of the second-moment normaliser (1e-5).
      implementation: what `opt_fn` returns: "fast" (the folded update) or "reference" (the
        same update written out per tensor, to time or check against; see the module docstring).

    Raises:
      ValueError: an unknown feature set or implementation, or an ablation of the original-code
        feature set.
    """
    if feature_set not in FEATURE_SETS:
      raise ValueError(f"Unknown feature_set {feature_set!r}; expected one of {FEATURE_SETS}.")
    if implementation not in IMPLEMENTATIONS:
      raise ValueError(
        f"Unknown implementation {implementation!r}; expected one of {IMPLEMENTATIONS}."
      )
    if feature_set == "original_code" and not use_momentum:
      raise ValueError("use_momentum=False is an ablation of feature_set='paper' only.")
    self.hidden_size = int(hidden_size)
    self.decays = tuple(float(d) for d in decays)
    self.time_scales = tuple(float(t) for t in time_scales) if use_time else ()
    self.feature_set = feature_set
    self.use_momentum = bool(use_momentum)
    self.use_time = bool(use_time)
    self.step_scale_lin = float(step_scale_lin)
    self.step_scale_exp = float(step_scale_exp)
    self.normalizer_epsilon = float(normalizer_epsilon)
    self.implementation = implementation

  @property
  def num_normalized_inputs(self) -> int:
    if self.feature_set == "original_code":
      return 2 + 4 * len(self.decays)
    return 2 + (len(self.decays) if self.use_momentum else 0)

  @property
  def num_inputs(self) -> int:
    return self.num_normalized_inputs + len(self.time_scales)

  def columns(self, grad: tf.Tensor, param: tf.Tensor, momenta: tf.Tensor) -> tf.Tensor:
    """The feature columns of one tensor, before normalisation: [*param.shape, columns].

    Args:
      grad: the tensor's gradient.
      param: the tensor.
      momenta: its updated momenta, [*param.shape, num_decays].
    """
    if self.feature_set == "original_code":
      return features.original_code_columns(grad, param, momenta)
    return features.paper_columns(grad, param, momenta, self.use_momentum)

  def init(self, seed: seeds_lib.SeedLike) -> dict:
    hidden_seed, output_seed = tf.unstack(seeds_lib.split(seed, 2))

    def weights(seed, fan_in, fan_out):
      stddev = 1.0 / fan_in**0.5
      return tf.random.stateless_truncated_normal([fan_in, fan_out], seed, stddev=stddev)

    return {
      "hidden": {
        "w": weights(hidden_seed, self.num_inputs, self.hidden_size),
        "b": tf.zeros([self.hidden_size], tf.float32),
      },
      "output": {
        "w": weights(output_seed, self.hidden_size, 2),
        "b": tf.zeros([2], tf.float32),
      },
    }

  def opt_fn(self, theta: base.Theta) -> opt_base.Optimizer:
    """The inner Optimizer for `theta` (the fast implementation unless configured otherwise)."""
    if self.implementation == "reference":
      return self.reference_opt_fn(theta)
    return _MLPLOptOptimizer(self, theta)

  def reference_opt_fn(self, theta: base.Theta) -> opt_base.Optimizer:
    """The same Optimizer written out per tensor as in App. D.1 (slower; tests compare them).

    Its state is interchangeable with that of `opt_fn(theta)`.
    """
    return _ReferenceMLPLOptOptimizer(self, theta)


def num_meta_parameters(theta: base.Theta) -> int:
  """Scalars in theta (610 for the paper's features, 1090 for the original code's)."""
  return int(sum(int(tf.size(x)) for x in tf.nest.flatten(theta)))
