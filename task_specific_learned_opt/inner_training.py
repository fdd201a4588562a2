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


def loss_and_grads(task: task_base.Task, params: task_base.Params, batch: task_base.Batch):
  """The (clipped) loss of `params` on `batch` and its gradient with respect to `params`."""
  with tf.GradientTape() as tape:
    tape.watch(params)
    loss = clip_loss(task.loss(params, batch))
  return loss, tape.gradient(loss, params)


def train_step(
  task: task_base.Task, opt: opt_base.Optimizer, state: opt_base.OptState, seed: tf.Tensor
) -> tuple:
  """One inner step on task.batch("train", seed): returns (new state, clipped loss)."""
  batch = task.batch("train", seed)
  loss, grads = loss_and_grads(task, opt.get_params(state), batch)
  return opt.update(state, grads, loss=loss), loss


def unroll(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  state: opt_base.OptState,
  num_steps,
  seed: seeds_lib.SeedLike,
  parallel_iterations: int = 2,
) -> tuple:
  """Trains for `num_steps` steps inside one tf.while_loop.

  Args:
    task: the inner problem.
    opt: the inner update rule (hand-designed or opt_fn(theta) of a learned optimizer).
    state: the optimizer state to start from (opt.init(params) for a fresh run).
    num_steps: int or int32 scalar tensor (a tensor keeps a tf.function from retracing).
    seed: the data seed; step i uses fold_in(seed, i).
    parallel_iterations: of the while loop. Small values bound the memory held by iterations
      that run ahead of each other; 2 keeps both cores busy.

  Returns:
    (final state, losses): losses is a float32 [num_steps] tensor of the clipped training loss
    at each step, measured before that step's update.
  """
  seed = seeds_lib.as_seed(seed)
  num_steps = tf.convert_to_tensor(num_steps, tf.int32)
  losses = tf.TensorArray(tf.float32, size=num_steps, element_shape=[])

  def body(i, state, losses):
    state, loss = train_step(task, opt, state, seeds_lib.fold_in(seed, i))
    return i + 1, state, losses.write(i, loss)

  _, state, losses = tf.while_loop(
    lambda i, *_: i < num_steps,
    body,
    (tf.constant(0, tf.int32), state, losses),
    parallel_iterations=parallel_iterations,
  )
  return state, losses.stack()


class InnerTrainResult(NamedTuple):
  state: opt_base.OptState
  losses: tf.Tensor  # [num_steps] clipped training losses.


def train(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  num_steps: int,
  seed: seeds_lib.SeedLike,
) -> InnerTrainResult:
  """A fresh inner-training run: params from fold_in(seed, 0), data from fold_in(seed, 1).

  The whole run is one graph-mode tf.while_loop (one tf.function call).
  """
  init_seed, data_seed = seeds_lib.fold_in(seed, 0), seeds_lib.fold_in(seed, 1)

  @tf.function
  def run(init_seed, data_seed, num_steps):
    state = opt.init(task.init_params(init_seed))
    return unroll(task, opt, state, num_steps, data_seed)

  state, losses = run(init_seed, data_seed, tf.constant(num_steps, tf.int32))
  return InnerTrainResult(state, losses)
