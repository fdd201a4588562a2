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
Two options for applying a trained theta past the horizon it was outer-trained on, both off by
default (the paper): time_max_step makes the time features read min(t, time_max_step), so they
stay at their value at the last trained step; weight_decay (lambda, from step weight_decay_start)
adds a decoupled weight decay to the learned step, w_t+1 = w_t - step - lambda * w_t
(docs/longer_unrolls.md); step_weight_decay (kappa) adds one that scales with the step,
w_t+1 = w_t - step - kappa * rms(step) / rms(w_t) * w_t; max_weight_rms (c) bounds each kernel's
rms by c / sqrt(fan_in) (docs/evaluation.md).

Two implementations of this one update rule (App. I: the update should cost little next to the
gradient). `reference_opt_fn` (`_ReferenceMLPLOptOptimizer`) writes the steps above out per
tensor: it is the specification. `opt_fn`, used everywhere, computes the same function with a few
small matmuls per tensor, the normalisation, the feature map and the time features folded into
the hidden layer's weights: the kernel in fast_update.py, whose docstring derives it, called on
the flattened state by `_MLPLOptOptimizer`. Both share the state `MLPLOptState`.

Note: the time features are the same for every element of every tensor, so their contribution to
the hidden layer is computed once per step and added as a bias. Both implementations compute the
same function as the MLP on the concatenated 16 columns (the tests check the reference against a
numpy forward pass of the concatenation, and the two implementations against each other).
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import gin_config, nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base, fast_update, features, mlp_options
from task_specific_learned_opt.optimizers import base as opt_base

FEATURE_SETS = mlp_options.FEATURE_SETS
IMPLEMENTATIONS = mlp_options.IMPLEMENTATIONS
STEP_SCALE = mlp_options.STEP_SCALE


# The paper's columns are [g, w, m_0.5, m_0.9, ...]: m_0.9 (Adam's beta1) is column 3.
MOMENTUM_INIT_COLUMN = 3


def _momentum_theta(theta: dict, scale: float, column: int) -> dict:
  """`theta` with units 0 and 1 made relu(+x_column), relu(-x_column), o_dir = scale * (h0 - h1)."""
  hidden_w = theta["hidden"]["w"].numpy()
  output_w = theta["output"]["w"].numpy()
  hidden_w[:, :2] = 0.0
  hidden_w[column, 0], hidden_w[column, 1] = 1.0, -1.0
  output_w[:2] = 0.0
  output_w[0, 0], output_w[1, 0] = scale, -scale
  return {
    "hidden": {"w": tf.constant(hidden_w), "b": theta["hidden"]["b"]},
    "output": {"w": tf.constant(output_w), "b": theta["output"]["b"]},
  }


class MLPLOptState(NamedTuple):
  """The inner state: parameters, their momenta and the step count.

  The momenta of a parameter are stored decay-major, [num_decays, *param.shape], so that each
  decay's momenta are one contiguous row of Z in fast_update.py (a [*shape, num_decays] layout
  would need a transpose each way, measured at a quarter of the update's time).
  """

  params: nests.Params
  momenta: nests.Params  # Each [num_decays, *param.shape].
  iteration: tf.Tensor  # int32 scalar: inner steps taken.


def mlp_hidden(x: tf.Tensor, hidden: dict, time_bias: tf.Tensor | None) -> tf.Tensor:
  """The MLP's hidden layer on the normalised columns: ReLU(x @ W + b [+ time_bias]).

  Args:
    x: the normalised feature columns, [..., num_columns].
    hidden: theta["hidden"]; only the first num_columns rows of its "w" are used (the rest are
      the time features', which enter through `time_bias`).
    time_bias: time_features(t) @ W_time, [hidden], or None without time features.

  Returns:
    The activations, [num_elements, hidden].
  """
  num_columns = x.shape[-1]
  flat = tf.reshape(x, [-1, num_columns])
  pre = tf.matmul(flat, hidden["w"][:num_columns]) + hidden["b"]
  if time_bias is not None:
    pre += time_bias
  return tf.nn.relu(pre)


def _decays_last(momenta: tf.Tensor) -> tf.Tensor:
  rank = momenta.shape.rank
  return tf.transpose(momenta, list(range(1, rank)) + [0])


def _decays_first(momenta: tf.Tensor) -> tf.Tensor:
  rank = momenta.shape.rank
  return tf.transpose(momenta, [rank - 1] + list(range(rank - 1)))


class TensorStep(NamedTuple):
  """One tensor's update written out as App. D.1 states it, with what the MLP reads and emits."""

  momenta: tf.Tensor  # The new momenta, decays last: [*param.shape, num_decays].
  columns: tf.Tensor  # The feature columns before normalisation, [*param.shape, columns].
  normalized: tf.Tensor  # The columns after the second-moment normaliser, same shape.
  outputs: tf.Tensor  # (o_dir, o_mag) of every element, [num_elements, 2].
  step: tf.Tensor  # lambda_lin * o_dir * exp(lambda_exp * o_mag), [*param.shape]: w <- w - step.


def time_bias(lopt: "MLPLOpt", theta: nests.Theta, iteration: tf.Tensor) -> tf.Tensor | None:
  """time_features(t) @ W_time: the time features' share of the hidden pre-activation.

  Args:
    lopt: the learned optimizer (its time scales and time_max_step).
    theta: its meta-parameters.
    iteration: t, the inner steps taken before this one.

  Returns:
    [hidden_size], or None without time features.
  """
  if not lopt.use_time:
    return None
  time = features.time_features(iteration, lopt.time_scales, lopt.time_max_step)
  w_time = theta["hidden"]["w"][-len(lopt.time_scales) :]
  return tf.linalg.matvec(w_time, time, transpose_a=True)


def tensor_step(
  lopt: "MLPLOpt",
  theta: nests.Theta,
  param: tf.Tensor,
  grad: tf.Tensor,
  momenta: tf.Tensor,
  bias: tf.Tensor | None,
) -> TensorStep:
  """Steps 1-4 of the module docstring for one tensor (the reference update's arithmetic).

  Args:
    lopt: the learned optimizer.
    theta: its meta-parameters.
    param: the tensor w.
    grad: its gradient g.
    momenta: its momenta before this step, as the state stores them: [num_decays, *param.shape].
    bias: time_bias(lopt, theta, t), or None without time features.

  Returns:
    The new momenta, the columns before and after normalisation, the MLP's outputs and the step.
  """
  momenta = features.update_momenta(_decays_last(momenta), grad, lopt.decays)
  columns = lopt.columns(grad, param, momenta)
  normalized = features.second_moment_normalize(columns, lopt.normalizer_epsilon)
  hidden = mlp_hidden(normalized, theta["hidden"], bias)
  out = tf.matmul(hidden, theta["output"]["w"]) + theta["output"]["b"]
  step = lopt.step_scale_lin * out[:, 0] * tf.exp(lopt.step_scale_exp * out[:, 1])
  step = tf.reshape(step, tf.shape(param))
  if lopt.gate_growth:
    step = fast_update.gate_growth(step, param, grad)
  if lopt.max_step_rms is not None:
    step *= fast_update.step_rms_factor(tf.reduce_mean(tf.square(step)), lopt.max_step_rms)
  if lopt.max_relative_step is not None:
    step *= fast_update.relative_step_factor(
      tf.reduce_mean(tf.square(step)), tf.reduce_mean(tf.square(param)), lopt.max_relative_step
    )
  return TensorStep(momenta, columns, normalized, out, step)


def step_decay_factor(step: tf.Tensor, param: tf.Tensor, kappa: float) -> tf.Tensor:
  """kappa * rms(step) / max(rms(w), RELATIVE_STEP_FLOOR): the fraction of w that
  MLPLOpt.step_weight_decay takes off with the step, so that the decay's rms is kappa * rms(step)
  (for a tensor at the floor, less).

  Args:
    step: the tensor's step (w_t - w_t+1 before the decay).
    param: w_t, the same shape.
    kappa: the decay's size as a multiple of the step's.

  Returns:
    A scalar.
  """
  step_rms = tf.sqrt(tf.reduce_mean(tf.square(step)))
  return kappa * step_rms / fast_update.relative_scale(tf.reduce_mean(tf.square(param)))


def max_norm(param: tf.Tensor, c: float) -> tf.Tensor:
  """`param` scaled back to an rms of c / sqrt(fan_in) where above it, if it is a kernel.

  Args:
    param: a parameter tensor; one of rank below 2 (a bias, a scale) is returned as it is.
    c: the bound, in units of 1 / sqrt(fan_in), fan_in the product of all but the last dimension.

  Returns:
    The tensor, the same shape.
  """
  if param.shape.rank is None or param.shape.rank < 2:
    return param
  bound = c / math.prod(param.shape[:-1]) ** 0.5
  rms = tf.sqrt(tf.reduce_mean(tf.square(param)))
  return param * tf.minimum(1.0, bound / tf.maximum(rms, 1e-30))


class _Optimizer(opt_base.Optimizer):
  """What both implementations share: theta and the state."""

  name = "mlp_lopt"

  def __init__(self, lopt: "MLPLOpt", theta: nests.Theta):
    self.lopt = lopt
    self.theta = theta

  def init(self, params: nests.Params) -> MLPLOptState:
    num_decays = len(self.lopt.decays)
    return MLPLOptState(
      params=params,
      momenta=tf.nest.map_structure(
        lambda p: tf.zeros(tf.concat([[num_decays], tf.shape(p)], 0), tf.float32), params
      ),
      iteration=tf.constant(0, tf.int32),
    )

  def _pack(self, state: MLPLOptState, params: list, momenta: list) -> MLPLOptState:
    """The next state from the new params and momenta in the order of tf.nest.flatten.

    With MLPLOpt.weight_decay = lambda > 0, each new param also loses lambda * (its old value)
    from step weight_decay_start on: w_t+1 = w_t - step - lambda * w_t. With
    MLPLOpt.step_weight_decay = kappa > 0, it loses kappa * rms(step) / rms(w_t) * w_t as well
    (mlp_options.MLPLOptOptions), the step being w_t minus the new param before either decay.
    With MLPLOpt.max_weight_rms = c, each new kernel is then scaled back to an rms of at most
    c / sqrt(fan_in) (max_norm).
    """
    old = tf.nest.flatten(state.params)
    if self.lopt.step_weight_decay:
      params = [
        p - step_decay_factor(w - p, w, self.lopt.step_weight_decay) * w
        for p, w in zip(params, old, strict=True)
      ]
    if self.lopt.weight_decay:
      active = tf.cast(state.iteration >= self.lopt.weight_decay_start, tf.float32)
      decay = self.lopt.weight_decay * active
      params = [p - decay * w for p, w in zip(params, old, strict=True)]
    if self.lopt.max_weight_rms is not None:
      params = [max_norm(p, self.lopt.max_weight_rms) for p in params]
    return MLPLOptState(
      params=tf.nest.pack_sequence_as(state.params, params),
      momenta=tf.nest.pack_sequence_as(state.momenta, momenta),
      iteration=state.iteration + 1,
    )


class _ReferenceMLPLOptOptimizer(_Optimizer):
  """The update written out per tensor, as in the paper: the specification of `opt_fn`."""

  def _apply(
    self,
    state: MLPLOptState,
    grads: nests.Params,
    update_tensor: Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]],
  ) -> MLPLOptState:
    new = [
      update_tensor(p, g, m)
      for p, g, m in zip(
        tf.nest.flatten(state.params),
        tf.nest.flatten(grads),
        tf.nest.flatten(state.momenta),
        strict=True,
      )
    ]
    return self._pack(state, [p for p, _ in new], [m for _, m in new])

  def update(
    self, state: MLPLOptState, grads: nests.Params, loss: tf.Tensor | None = None
  ) -> MLPLOptState:
    del loss  # The paper's optimizer does not see the loss.
    lopt, theta = self.lopt, self.theta
    bias = time_bias(lopt, theta, state.iteration)

    def update_tensor(
      param: tf.Tensor, grad: tf.Tensor, momenta: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
      written_out = tensor_step(lopt, theta, param, grad, momenta, bias)
      return param - written_out.step, _decays_first(written_out.momenta)

    return self._apply(state, grads, update_tensor)


class _MLPLOptOptimizer(_Optimizer):
  """The same update computed by the folded kernel of fast_update.py (what `opt_fn` returns)."""

  def __init__(self, lopt: "MLPLOpt", theta: nests.Theta):
    super().__init__(lopt, theta)
    # Made here, where opt_fn(theta) is called, so that theta's share of the kernel's weights is
    # built once outside the inner training loop.
    self._kernel = fast_update.FastUpdate(lopt.options, theta)

  def update(
    self, state: MLPLOptState, grads: nests.Params, loss: tf.Tensor | None = None
  ) -> MLPLOptState:
    del loss  # The paper's optimizer does not see the loss.
    params, momenta = self._kernel(
      tf.nest.flatten(state.params),
      tf.nest.flatten(grads),
      tf.nest.flatten(state.momenta),
      state.iteration,
    )
    return self._pack(state, params, momenta)


@gin.configurable
class MLPLOpt(base.LearnedOptimizer):
  """The per-parameter MLP optimizer of paper App. D.1.

  Its options are `mlp_options.MLPLOptOptions`' fields, taken as keywords (MLPLOpt(hidden_size=
  16, use_time=False)) and kept as `self.options`; each is also readable as an attribute
  (`lopt.hidden_size`).
  """

  name = "mlp_lopt"

  @gin_config.takes_fields_of(mlp_options.MLPLOptOptions)
  def __init__(self, **options: object) -> None:
    """Makes the learned optimizer.

    Args:
      **options: any of the fields of mlp_options.MLPLOptOptions, which documents them.

    Raises:
      TypeError: an unknown option.
      ValueError: an option value MLPLOptOptions refuses.
    """
    self.options = mlp_options.MLPLOptOptions(**options)

  def __getattr__(self, name: str) -> object:
    if name in mlp_options.NAMES:
      return getattr(self.__dict__["options"], name)
    raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

  @property
  def num_normalized_inputs(self) -> int:
    """Feature columns that are normalised (7 for the paper's features, 22 for the code's)."""
    if self.feature_set == "original_code":
      return 2 + 4 * len(self.decays)
    return 2 + (len(self.decays) if self.use_momentum else 0)

  @property
  def num_inputs(self) -> int:
    """Inputs of the MLP: the normalised columns, then the time features."""
    return self.num_normalized_inputs + len(self.time_scales)

  def columns(self, grad: tf.Tensor, param: tf.Tensor, momenta: tf.Tensor) -> tf.Tensor:
    """The feature columns of one tensor, before normalisation: [*param.shape, columns].

    Args:
      grad: the tensor's gradient.
      param: the tensor.
      momenta: its updated momenta, [*param.shape, num_decays].

    Returns:
      The columns of `feature_set` (and the ablations), [*param.shape, num_normalized_inputs].
    """
    if self.feature_set == "original_code":
      return features.original_code_columns(grad, param, momenta)
    return features.paper_columns(grad, param, momenta, self.use_momentum)

  def init(self, seed: random_seeds.SeedLike) -> dict:
    """Initial theta: truncated normal weights with stddev 1/sqrt(fan_in), zero biases.

    Args:
      seed: a stateless seed.

    Returns:
      {"hidden": {"w": [num_inputs, hidden_size], "b": [hidden_size]},
       "output": {"w": [hidden_size, 2], "b": [2]}}, float32.
    """
    hidden_seed, output_seed = tf.unstack(random_seeds.split(seed, 2))

    def weights(seed: tf.Tensor, fan_in: int, fan_out: int, scale: float = 1.0) -> tf.Tensor:
      stddev = scale / fan_in**0.5
      return tf.random.stateless_truncated_normal([fan_in, fan_out], seed, stddev=stddev)

    theta = {
      "hidden": {
        "w": weights(hidden_seed, self.num_inputs, self.hidden_size),
        "b": tf.zeros([self.hidden_size], tf.float32),
      },
      "output": {
        "w": weights(output_seed, self.hidden_size, 2, self.output_init_scale),
        "b": tf.zeros([2], tf.float32),
      },
    }
    if self.momentum_init is not None:
      theta = _momentum_theta(theta, self.momentum_init, MOMENTUM_INIT_COLUMN)
    return theta

  def opt_fn(self, theta: nests.Theta) -> opt_base.Optimizer:
    """The inner Optimizer for `theta` (the fast implementation unless configured otherwise).

    Args:
      theta: the meta-parameters, as from `init`.

    Returns:
      An Optimizer whose state is an MLPLOptState.
    """
    if self.implementation == "reference":
      return self.reference_opt_fn(theta)
    return _MLPLOptOptimizer(self, theta)

  def reference_opt_fn(self, theta: nests.Theta) -> opt_base.Optimizer:
    """The same Optimizer written out per tensor as in App. D.1 (slower; tests compare them).

    Args:
      theta: the meta-parameters, as from `init`.

    Returns:
      An Optimizer whose state is interchangeable with that of `opt_fn(theta)`.
    """
    return _ReferenceMLPLOptOptimizer(self, theta)


def num_meta_parameters(theta: nests.Theta) -> int:
  """Scalars in theta (610 for the paper's features, 1090 for the original code's).

  Args:
    theta: the meta-parameters.

  Returns:
    Their number of scalars.
  """
  return int(sum(int(tf.size(x)) for x in tf.nest.flatten(theta)))
