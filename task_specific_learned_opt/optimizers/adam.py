"""Adam, and with its decays and penalties the paper's Adam+Reg+Decay baseline (Sec. 4.4, App. F).

The eight hyper-parameters of Adam+Reg+Decay are learning_rate, beta1, beta2, epsilon,
linear_decay, exponential_decay, l1 and l2; the plain Adam baseline leaves the last four at 0.
"""

from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import gin_config, nests
from task_specific_learned_opt.optimizers import hand_designed


class AdamState(NamedTuple):
  """State of `Adam`: the parameters and the first and second moment accumulators."""

  params: nests.Params
  m: nests.Params
  v: nests.Params
  iteration: tf.Tensor


@gin.configurable
class Adam(hand_designed.HandDesignedOptimizer):
  """Bias-corrected Adam (Kingma & Ba, 2015), m and v starting at 0.

  With g the regularised gradient, lr_t the scheduled learning rate and t = iteration + 1:

    m <- beta1 * m + (1 - beta1) * g
    v <- beta2 * v + (1 - beta2) * g^2
    m_hat = m / (1 - beta1^t),   v_hat = v / (1 - beta2^t)
    w <- w - lr_t * m_hat / (sqrt(v_hat) + epsilon)
  """

  name = "adam"

  @gin_config.takes_fields_of(hand_designed.RegDecay)
  def __init__(
    self,
    learning_rate: hand_designed.HParam = 1e-3,
    beta1: hand_designed.HParam = 0.9,
    beta2: hand_designed.HParam = 0.999,
    epsilon: hand_designed.HParam = 1e-8,
    **reg_decay: hand_designed.HParam,
  ) -> None:
    """Builds the rule.

    Args:
      learning_rate: the base learning rate.
      beta1: decay of the first moment.
      beta2: decay of the second moment.
      epsilon: added to sqrt(v_hat) in the denominator.
      **reg_decay: hand_designed.RegDecay's linear_decay, exponential_decay, l1 and l2.
    """
    super().__init__(learning_rate, **reg_decay)
    self.beta1 = beta1
    self.beta2 = beta2
    self.epsilon = epsilon

  def init(self, params: nests.Params) -> AdamState:
    """The state before the first step.

    Args:
      params: the initial parameters, a nest of float32 tensors.

    Returns:
      An `AdamState` with m = v = 0 and iteration 0.
    """
    params = hand_designed.init_params(params)
    return AdamState(
      params=params,
      m=hand_designed.zeros_like(params),
      v=hand_designed.zeros_like(params),
      iteration=hand_designed.init_iteration(),
    )

  def _apply(self, state: AdamState, grads: nests.Params, lr_t: tf.Tensor) -> AdamState:
    beta1 = tf.cast(self.beta1, tf.float32)
    beta2 = tf.cast(self.beta2, tf.float32)
    epsilon = tf.cast(self.epsilon, tf.float32)
    t = tf.cast(state.iteration + 1, tf.float32)
    m = tf.nest.map_structure(lambda m, g: beta1 * m + (1.0 - beta1) * g, state.m, grads)
    v = tf.nest.map_structure(lambda v, g: beta2 * v + (1.0 - beta2) * tf.square(g), state.v, grads)
    m_correction = 1.0 - tf.pow(beta1, t)
    v_correction = 1.0 - tf.pow(beta2, t)

    def step(w: tf.Tensor, m: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
      m_hat = m / m_correction
      v_hat = v / v_correction
      return w - lr_t * m_hat / (tf.sqrt(v_hat) + epsilon)

    params = tf.nest.map_structure(step, state.params, m, v)
    return state._replace(params=params, m=m, v=v)
