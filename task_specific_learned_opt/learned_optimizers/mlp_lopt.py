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

Note: the time features are the same for every element of every tensor, so their contribution to
the hidden layer, time_features @ W_time, is computed once per step and added as a bias. This is
the same function as the MLP on the concatenated 16 columns (the tests check it against a numpy
forward pass of the concatenation).
"""

from collections.abc import Sequence
from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import base, features
from task_specific_learned_opt.optimizers import base as opt_base

FEATURE_SETS = ("paper", "original_code")
STEP_SCALE = 1e-3  # lambda_lin and lambda_exp, App. D.1.


class MLPLOptState(NamedTuple):
  params: opt_base.Params
  momenta: opt_base.Params  # Each [*param.shape, num_decays].
  iteration: tf.Tensor  # int32 scalar: inner steps taken.


def mlp_hidden(x: tf.Tensor, hidden: dict, time_bias: tf.Tensor | None) -> tf.Tensor:
  """ReLU(x @ W + b [+ time_bias]) for x [..., num_columns]."""
  num_columns = x.shape[-1]
  flat = tf.reshape(x, [-1, num_columns])
  pre = tf.matmul(flat, hidden["w"][:num_columns]) + hidden["b"]
  if time_bias is not None:
    pre += time_bias
  return tf.nn.relu(pre)


class _MLPLOptOptimizer(opt_base.Optimizer):
  """The inner Optimizer for one theta."""

  name = "mlp_lopt"

  def __init__(self, lopt: "MLPLOpt", theta: base.Theta):
    self.lopt = lopt
    self.theta = theta

  def init(self, params: opt_base.Params) -> MLPLOptState:
    num_decays = len(self.lopt.decays)
    return MLPLOptState(
      params=params,
      momenta=tf.nest.map_structure(
        lambda p: tf.zeros(tf.concat([tf.shape(p), [num_decays]], 0), tf.float32), params
      ),
      iteration=tf.constant(0, tf.int32),
    )

  def update(
    self, state: MLPLOptState, grads: opt_base.Params, loss: tf.Tensor | None = None
  ) -> MLPLOptState:
    del loss  # The paper's optimizer does not see the loss.
    lopt, theta = self.lopt, self.theta
    time_bias = None
    if lopt.use_time:
      time = features.time_features(state.iteration, lopt.time_scales)
      time_bias = tf.linalg.matvec(theta["hidden"]["w"][-len(lopt.time_scales) :], time, True)

    def update_one(param, grad, momenta):
      momenta = features.update_momenta(momenta, grad, lopt.decays)
      columns = lopt.columns(grad, param, momenta)
      normalized = features.second_moment_normalize(columns, lopt.normalizer_epsilon)
      hidden = mlp_hidden(normalized, theta["hidden"], time_bias)
      out = tf.matmul(hidden, theta["output"]["w"]) + theta["output"]["b"]
      step = lopt.step_scale_lin * out[:, 0] * tf.exp(lopt.step_scale_exp * out[:, 1])
      return param - tf.reshape(step, tf.shape(param)), momenta

    flat_params = tf.nest.flatten(state.params)
    flat = [
      update_one(p, g, m)
      for p, g, m in zip(
        flat_params, tf.nest.flatten(grads), tf.nest.flatten(state.momenta), strict=True
      )
    ]
    return MLPLOptState(
      params=tf.nest.pack_sequence_as(state.params, [p for p, _ in flat]),
      momenta=tf.nest.pack_sequence_as(state.momenta, [m for _, m in flat]),
      iteration=state.iteration + 1,
    )


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

    Raises:
      ValueError: an unknown feature set, or an ablation of the original-code feature set.
    """
    if feature_set not in FEATURE_SETS:
      raise ValueError(f"Unknown feature_set {feature_set!r}; expected one of {FEATURE_SETS}.")
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

  @property
  def num_normalized_inputs(self) -> int:
    if self.feature_set == "original_code":
      return 2 + 4 * len(self.decays)
    return 2 + (len(self.decays) if self.use_momentum else 0)

  @property
  def num_inputs(self) -> int:
    return self.num_normalized_inputs + len(self.time_scales)

  def columns(self, grad: tf.Tensor, param: tf.Tensor, momenta: tf.Tensor) -> tf.Tensor:
    """The feature columns of one tensor, before normalisation: [*param.shape, columns]."""
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
    return _MLPLOptOptimizer(self, theta)


def num_meta_parameters(theta: base.Theta) -> int:
  """Scalars in theta (610 for the paper's features, 1090 for the original code's)."""
  return int(sum(int(tf.size(x)) for x in tf.nest.flatten(theta)))
