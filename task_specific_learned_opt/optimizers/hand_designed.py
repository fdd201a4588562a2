"""What the hand-designed baselines share: schedules, l1/l2 and the update skeleton (Sec. 4.4).

The paper's tuned baselines (Sec. 4.4, App. F) add to a base rule (SGD+Momentum, RMSProp, Adam) a
learning-rate schedule with linear and exponential decay, and l1/l2 penalties added to the inner
loss. Both are pure functions here; `HandDesignedOptimizer` applies them around a subclass's
`_apply`, so every baseline has the same five common hyper-parameters (the learning rate and
`RegDecay`'s four):

  g_t  = g + l1 sign(w) + l2 w
  lr_t = learning_rate * max(0, 1 - linear_decay t) * exp(-exponential_decay t)
  state_{t+1} = _apply(state_t, g_t, lr_t)

Hyper-parameters may be Python floats or scalar tensors. Tensors are read at `update` time, never
converted to Python numbers, so a hyper-parameter search feeds them to one traced graph and
gradients flow to them through the updates.
"""

import abc
import dataclasses

import tensorflow as tf

from task_specific_learned_opt import nests
from task_specific_learned_opt.optimizers import base

HParam = float | tf.Tensor


def _is_python_zero(value: HParam) -> bool:
  # Only a literal Python zero may be dropped from the graph: a tensor could be fed a non-zero value
  # later, and its gradient must exist. Dropping the unused terms keeps unregularised, unscheduled
  # baselines as cheap as the plain rule in the wall-clock benchmark (App. I).
  return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def _as_float(value: HParam) -> tf.Tensor:
  return tf.cast(value, tf.float32)


def learning_rate_at(
  iteration: tf.Tensor,
  learning_rate: HParam,
  linear_decay: HParam,
  exponential_decay: HParam,
) -> tf.Tensor:
  """The scheduled learning rate after `iteration` steps (Sec. 4.4).

  lr_t = learning_rate * max(0, 1 - linear_decay * t) * exp(-exponential_decay * t),

  with t = `iteration` as float32, so the first step (t = 0) uses `learning_rate` itself and the
  linear factor stays at 0 from t = 1 / linear_decay on.

  Args:
    iteration: number of steps already taken, an integer scalar (tensor or Python int).
    learning_rate: the base learning rate.
    linear_decay: the per-step slope of the linear factor.
    exponential_decay: the per-step rate of the exponential factor.

  Returns:
    The learning rate for step `iteration`, a float32 scalar tensor.
  """
  lr = _as_float(learning_rate)
  t = tf.cast(iteration, tf.float32)
  if not _is_python_zero(linear_decay):
    lr *= tf.maximum(0.0, 1.0 - _as_float(linear_decay) * t)
  if not _is_python_zero(exponential_decay):
    lr *= tf.exp(-_as_float(exponential_decay) * t)
  return lr


def add_regularization(
  params: nests.Params, grads: nests.Params, l1: HParam, l2: HParam
) -> nests.Params:
  """Adds the gradient of the l1 and l2 penalties to `grads` (Sec. 4.4).

  The penalty l1 * sum|w| + l2 * sum(w^2) / 2 is added to the inner loss, so its gradient is added
  to the loss gradient:

    g <- g + l1 * sign(w) + l2 * w,   with sign(0) = 0.

  Only the update sees the penalty: losses reported by training and evaluation are those of the
  task and exclude it.

  Args:
    params: a nest of parameters w.
    grads: a nest of the same structure, the gradients of the task loss at `params`.
    l1: the l1 coefficient.
    l2: the l2 coefficient.

  Returns:
    The regularised gradients, a nest of the same structure as `grads`.
  """
  grads = tf.nest.map_structure(tf.convert_to_tensor, grads)
  if not _is_python_zero(l1):
    l1 = _as_float(l1)
    grads = tf.nest.map_structure(lambda g, w: g + l1 * tf.sign(w), grads, params)
  if not _is_python_zero(l2):
    l2 = _as_float(l2)
    grads = tf.nest.map_structure(lambda g, w: g + l2 * w, grads, params)
  return grads


@dataclasses.dataclass(frozen=True)
class RegDecay:
  """The "+Reg+Decay" hyper-parameters every baseline adds to its base rule (Sec. 4.4, App. F).

  Each rule takes them as keywords after its own (`Adam(learning_rate, beta1, ..., l2=1e-4)`,
  gin_config.takes_fields_of); 0 leaves the term out of the graph.

  Attributes:
    linear_decay: slope of the linear learning-rate decay, per step.
    exponential_decay: rate of the exponential learning-rate decay, per step.
    l1: coefficient of the l1 penalty sum|w|.
    l2: coefficient of the l2 penalty sum(w^2) / 2.
  """

  linear_decay: HParam = 0.0
  exponential_decay: HParam = 0.0
  l1: HParam = 0.0
  l2: HParam = 0.0


class HandDesignedOptimizer(base.Optimizer):
  """A base rule plus the common schedule and l1/l2 penalties of the tuned baselines.

  `update` regularises the gradients with `add_regularization`, computes lr_t with
  `learning_rate_at`, calls the subclass's `_apply` and increments `iteration`, an int32 scalar
  tensor that is 0 in the state returned by `init`. The RegDecay fields are readable as
  attributes (`opt.l2`).
  """

  def __init__(self, learning_rate: HParam, **reg_decay: HParam) -> None:
    """Stores the common hyper-parameters.

    Args:
      learning_rate: the base learning rate.
      **reg_decay: the fields of RegDecay, which documents them.

    Raises:
      TypeError: a keyword that is not a field of RegDecay.
    """
    self.learning_rate = learning_rate
    self.reg_decay = RegDecay(**reg_decay)
    for field in dataclasses.fields(RegDecay):
      setattr(self, field.name, getattr(self.reg_decay, field.name))

  def update(
    self, state: base.OptState, grads: nests.Params, loss: tf.Tensor | None = None
  ) -> base.OptState:
    """One regularised, scheduled step of the base rule.

    Args:
      state: the current state.
      grads: gradients of the task loss at `get_params(state)`, a nest like the parameters.
      loss: unused; hand-designed rules see only gradients.

    Returns:
      The next state, with the same nest structure, dtypes and shapes as `state`.
    """
    del loss
    grads = add_regularization(state.params, grads, self.l1, self.l2)
    lr_t = learning_rate_at(
      state.iteration, self.learning_rate, self.linear_decay, self.exponential_decay
    )
    new_state = self._apply(state, grads, lr_t)
    return new_state._replace(iteration=state.iteration + 1)

  @abc.abstractmethod
  def _apply(self, state: base.OptState, grads: nests.Params, lr_t: tf.Tensor) -> base.OptState:
    """The base rule's step with regularised `grads` and learning rate `lr_t`.

    `state.iteration` is still the number of steps taken before this one; `update` increments it.
    """


def init_params(params: nests.Params) -> nests.Params:
  """`params` as a nest of tensors, so the state can be a tf.while_loop loop variable.

  Args:
    params: a nest of tensors or arrays.

  Returns:
    The same nest with every leaf a tensor.
  """
  return tf.nest.map_structure(tf.convert_to_tensor, params)


def init_iteration() -> tf.Tensor:
  """The iteration counter of a fresh state: 0 as an int32 scalar tensor."""
  return tf.constant(0, dtype=tf.int32)


def zeros_like(params: nests.Params) -> nests.Params:
  """Zeros in the shape of every leaf of `params`: an accumulator before the first step.

  Args:
    params: a nest of tensors.

  Returns:
    A nest of zeros with the structure, shapes and dtypes of `params`.
  """
  return tf.nest.map_structure(tf.zeros_like, params)
