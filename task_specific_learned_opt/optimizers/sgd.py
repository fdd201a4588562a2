"""SGD and SGD with (Nesterov) momentum, the paper's SGD+Momentum baseline (Sec. 4.4, App. F).

Both share the schedule and l1/l2 penalties of `hand_designed.HandDesignedOptimizer`; g below is
the regularised gradient and lr_t the scheduled learning rate.
"""

from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import gin_config, nests
from task_specific_learned_opt.optimizers import base, hand_designed


@gin.configurable
class SGD(hand_designed.HandDesignedOptimizer):
  """Stochastic gradient descent: w <- w - lr_t * g."""

  name = "sgd"

  @gin_config.takes_fields_of(hand_designed.RegDecay)
  def __init__(
    self,
    learning_rate: hand_designed.HParam,
    **reg_decay: hand_designed.HParam,
  ) -> None:
    """Builds the rule.

    Args:
      learning_rate: the base learning rate.
      **reg_decay: hand_designed.RegDecay's linear_decay, exponential_decay, l1 and l2.
    """
    super().__init__(learning_rate, **reg_decay)

  def init(self, params: nests.Params) -> base.ParamsState:
    """The state before the first step.

    Args:
      params: the initial parameters, a nest of float32 tensors.

    Returns:
      A `base.ParamsState` with iteration 0.
    """
    return base.ParamsState(
      params=hand_designed.init_params(params), iteration=hand_designed.init_iteration()
    )

  def _apply(
    self, state: base.ParamsState, grads: nests.Params, lr_t: tf.Tensor
  ) -> base.ParamsState:
    params = tf.nest.map_structure(lambda w, g: w - lr_t * g, state.params, grads)
    return state._replace(params=params)


class MomentumState(NamedTuple):
  """State of `Momentum`: the parameters and the momentum accumulator m."""

  params: nests.Params
  momentum: nests.Params
  iteration: tf.Tensor


@gin.configurable
class Momentum(hand_designed.HandDesignedOptimizer):
  """SGD with heavy-ball or Nesterov momentum, m starting at 0:

    m <- mu * m + g
    w <- w - lr_t * m                    (heavy ball)
    w <- w - lr_t * (g + mu * m)         (Nesterov, with the new m)

  Note: the Nesterov step is the reformulation used by TensorFlow and Keras; the paper does not
  spell out which form its SGDM baseline used.
  """

  name = "momentum"

  @gin_config.takes_fields_of(hand_designed.RegDecay)
  def __init__(
    self,
    learning_rate: hand_designed.HParam,
    momentum: hand_designed.HParam = 0.9,
    nesterov: bool = False,
    **reg_decay: hand_designed.HParam,
  ) -> None:
    """Builds the rule.

    Args:
      learning_rate: the base learning rate.
      momentum: the decay mu of the momentum accumulator.
      nesterov: whether to take the Nesterov step; a Python bool, as it changes the graph.
      **reg_decay: hand_designed.RegDecay's linear_decay, exponential_decay, l1 and l2.
    """
    super().__init__(learning_rate, **reg_decay)
    self.momentum = momentum
    self.nesterov = nesterov

  def init(self, params: nests.Params) -> MomentumState:
    """The state before the first step.

    Args:
      params: the initial parameters, a nest of float32 tensors.

    Returns:
      A `MomentumState` with zero momentum and iteration 0.
    """
    params = hand_designed.init_params(params)
    return MomentumState(
      params=params,
      momentum=hand_designed.zeros_like(params),
      iteration=hand_designed.init_iteration(),
    )

  def _apply(self, state: MomentumState, grads: nests.Params, lr_t: tf.Tensor) -> MomentumState:
    mu = tf.cast(self.momentum, tf.float32)
    momentum = tf.nest.map_structure(lambda m, g: mu * m + g, state.momentum, grads)
    if self.nesterov:
      step = tf.nest.map_structure(lambda g, m: g + mu * m, grads, momentum)
    else:
      step = momentum
    params = tf.nest.map_structure(lambda w, s: w - lr_t * s, state.params, step)
    return state._replace(params=params, momentum=momentum)
