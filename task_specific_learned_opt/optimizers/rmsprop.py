"""RMSProp, the paper's RMSProp baseline (Sec. 4.4, App. F).

It shares the schedule and l1/l2 penalties of `hand_designed.HandDesignedOptimizer`; g below is the
regularised gradient and lr_t the scheduled learning rate.
"""

from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import gin_config, nests
from task_specific_learned_opt.optimizers import hand_designed


class RMSPropState(NamedTuple):
  """State of `RMSProp`: the parameters and the running mean v of squared gradients."""

  params: nests.Params
  second_moment: nests.Params
  iteration: tf.Tensor


@gin.configurable
class RMSProp(hand_designed.HandDesignedOptimizer):
  """RMSProp without momentum, v starting at 0:

  v <- decay * v + (1 - decay) * g^2
  w <- w - lr_t * g / (sqrt(v) + epsilon)
  """

  name = "rmsprop"

  @gin_config.takes_fields_of(hand_designed.RegDecay)
  def __init__(
    self,
    learning_rate: hand_designed.HParam,
    decay: hand_designed.HParam = 0.9,
    epsilon: hand_designed.HParam = 1e-8,
    **reg_decay: hand_designed.HParam,
  ) -> None:
    """Builds the rule.

    Args:
      learning_rate: the base learning rate.
      decay: the decay of the running mean of squared gradients.
      epsilon: added to sqrt(v) in the denominator.
      **reg_decay: hand_designed.RegDecay's linear_decay, exponential_decay, l1 and l2.
    """
    super().__init__(learning_rate, **reg_decay)
    self.decay = decay
    self.epsilon = epsilon

  def init(self, params: nests.Params) -> RMSPropState:
    """The state before the first step.

    Args:
      params: the initial parameters, a nest of float32 tensors.

    Returns:
      An `RMSPropState` with v = 0 and iteration 0.
    """
    params = hand_designed.init_params(params)
    return RMSPropState(
      params=params,
      second_moment=hand_designed.zeros_like(params),
      iteration=hand_designed.init_iteration(),
    )

  def _apply(self, state: RMSPropState, grads: nests.Params, lr_t: tf.Tensor) -> RMSPropState:
    decay = tf.cast(self.decay, tf.float32)
    epsilon = tf.cast(self.epsilon, tf.float32)
    second_moment = tf.nest.map_structure(
      lambda v, g: decay * v + (1.0 - decay) * tf.square(g), state.second_moment, grads
    )
    params = tf.nest.map_structure(
      lambda w, g, v: w - lr_t * g / (tf.sqrt(v) + epsilon), state.params, grads, second_moment
    )
    return state._replace(params=params, second_moment=second_moment)
