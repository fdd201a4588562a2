"""The inner update rule: Optimizer (paper Sec. 2.1; learned_optimization's Optimizer API).

An Optimizer is a pure (init, update) pair over nests of tensors. Its state is a NamedTuple that
holds the parameters, so learned and hand-designed optimizers are used the same way:

  state = opt.init(params)
  for t in range(num_steps):
    loss, grads = value_and_grad(task.loss)(opt.get_params(state), batch_t)
    state = opt.update(state, grads, loss=loss)
  params = opt.get_params(state)

No tf.Variable is read or written in `update`, so the inner loop can be differentiated through
(the reparameterisation gradient) and rerun at other meta-parameters (ES).
"""

import abc
from typing import Any, NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests

OptState = Any  # A NamedTuple with at least `params` and `iteration` fields.


class Optimizer(abc.ABC):
  """An inner update rule: init(params) -> state, update(state, grads) -> state."""

  name: str = "optimizer"

  @abc.abstractmethod
  def init(self, params: nests.Params) -> OptState:
    """The state before the first step: the parameters plus the rule's accumulators."""

  @abc.abstractmethod
  def update(self, state: OptState, grads: nests.Params, loss: tf.Tensor | None = None) -> OptState:
    """One step: the new state given gradients of the loss at `get_params(state)`."""

  def get_params(self, state: OptState) -> nests.Params:
    """The parameters held in `state`."""
    return state.params


class ParamsState(NamedTuple):
  """State of a rule with no accumulators (SGD)."""

  params: nests.Params
  iteration: tf.Tensor
