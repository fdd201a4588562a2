"""Graph-mode inner training: K steps of an Optimizer on a Task in one tf.while_loop (Sec. 2.1).

  state, losses = unroll(task, opt, opt.init(params), num_steps, seed)

The loop carries the optimizer state (params included) as loop variables and records each step's
training loss; it reads and writes no tf.Variable, so the outer-training can differentiate through
it with respect to the learned optimizer's theta. Step i trains on task.batch("train",
fold_in(seed, i)), so a run is a pure function of (task, optimizer, initial state, seed).

Every inner loss is clipped at min(loss, 10) before it is differentiated and recorded (the
authors' code does this; gin `clip_loss.max_loss`, None turns it off): above 10 the gradient is 0.
`train` wraps `unroll` in a tf.function whose step count is a tensor, so it does not retrace.
"""

from collections.abc import Callable
from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base

MAX_LOSS = 10.0  # The authors' code: min(loss, 10) for every inner and outer loss.


@gin.configurable
def clip_loss(loss: tf.Tensor, max_loss: float | None = MAX_LOSS) -> tf.Tensor:
  """min(loss, max_loss), or loss unchanged when max_loss is None."""
  if max_loss is None:
    return loss
  return tf.minimum(loss, max_loss)


def loss_and_grads(
  task: task_base.Task, params: task_base.Params, batch: task_base.Batch
) -> tuple[tf.Tensor, task_base.Params]:
  """The (clipped) loss of `params` on `batch` and its gradient with respect to `params`.

  Args:
    task: the inner problem.
    params: where the loss is evaluated, a nest of float32 tensors.
    batch: the batch (task.batch).

  Returns:
    (loss, grads): the scalar clip_loss(task.loss(params, batch)) and a nest like `params`.
  """
  with tf.GradientTape() as tape:
    tape.watch(params)
    loss = clip_loss(task.loss(params, batch))
  return loss, tape.gradient(loss, params)


def train_step(
  task: task_base.Task, opt: opt_base.Optimizer, state: opt_base.OptState, seed: tf.Tensor
) -> tuple[opt_base.OptState, tf.Tensor]:
  """One inner step on task.batch("train", seed): returns (new state, clipped loss)."""
  batch = task.batch("train", seed)
  loss, grads = loss_and_grads(task, opt.get_params(state), batch)
  return opt.update(state, grads, loss=loss), loss


def unroll(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  state: opt_base.OptState,
  num_steps: int | tf.Tensor,
  seed: seeds_lib.SeedLike,
  first_step: int | tf.Tensor = 0,
  parallel_iterations: int = 2,
) -> tuple[opt_base.OptState, tf.Tensor]:
  """Trains for `num_steps` steps inside one tf.while_loop.

  Args:
    task: the inner problem.
    opt: the inner update rule (hand-designed or opt_fn(theta) of a learned optimizer).
    state: the optimizer state to start from (opt.init(params) for a fresh run).
    num_steps: int or int32 scalar tensor (a tensor keeps a tf.function from retracing).
    seed: the data seed; step i of the run uses fold_in(seed, first_step + i).
    first_step: int or int32 tensor, the number of the first step, so that a run split into
      several unrolls sees the same data as one unroll.
    parallel_iterations: of the while loop. Small values bound the memory held by iterations
      that run ahead of each other; 2 keeps both cores busy.

  Returns:
    (final state, losses): losses is a float32 [num_steps] tensor of the clipped training loss
    at each step, measured before that step's update.
  """
  data_seed = seeds_lib.as_seed(seed)
  steps = tf.convert_to_tensor(num_steps, tf.int32)
  offset = tf.convert_to_tensor(first_step, tf.int32)

  def body(
    i: tf.Tensor, state: opt_base.OptState, losses: tf.TensorArray
  ) -> tuple[tf.Tensor, opt_base.OptState, tf.TensorArray]:
    state, loss = train_step(task, opt, state, seeds_lib.fold_in(data_seed, offset + i))
    return i + 1, state, losses.write(i, loss)

  _, final_state, losses = tf.while_loop(
    lambda i, *_: i < steps,
    body,
    (tf.constant(0, tf.int32), state, tf.TensorArray(tf.float32, size=steps, element_shape=[])),
    parallel_iterations=parallel_iterations,
  )
  return final_state, losses.stack()


class InnerTrainResult(NamedTuple):
  """What a fresh inner-training run gives (`train`)."""

  state: opt_base.OptState  # The optimizer state after the last step.
  losses: tf.Tensor  # [num_steps] clipped training losses.


def make_train_fn(
  task: task_base.Task, opt: opt_base.Optimizer
) -> Callable[[seeds_lib.SeedLike, int | tf.Tensor], tuple[opt_base.OptState, tf.Tensor]]:
  """A compiled fresh-run function (seed, num_steps) -> (final state, losses) for this pair.

  Params come from task.init_params(fold_in(seed, 0)) and data from fold_in(seed, 1). The whole
  run is one graph-mode tf.while_loop; seed and num_steps are tensors, so new values of either
  reuse the same trace.

  Args:
    task: the inner problem.
    opt: the inner update rule.

  Returns:
    A function of (seed, num_steps) giving (final state, losses) as `unroll` does.
  """

  @tf.function(autograph=False)
  def run(seed: tf.Tensor, num_steps: tf.Tensor) -> tuple[opt_base.OptState, tf.Tensor]:
    state = opt.init(task.init_params(seeds_lib.fold_in(seed, 0)))
    return unroll(task, opt, state, num_steps, seeds_lib.fold_in(seed, 1))

  return lambda seed, num_steps: run(
    seeds_lib.as_seed(seed), tf.convert_to_tensor(num_steps, tf.int32)
  )


def train(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  num_steps: int,
  seed: seeds_lib.SeedLike,
) -> InnerTrainResult:
  """A fresh inner-training run of `num_steps` steps (see make_train_fn)."""
  return InnerTrainResult(*make_train_fn(task, opt)(seed, num_steps))
