"""Graph-mode inner training: K steps of an Optimizer on a Task in one tf.while_loop (Sec. 2.1).

  state, losses = unroll(task, opt, opt.init(params), num_steps, seed)

The loop carries the optimizer state (params included) as loop variables and records each step's
training loss; it reads and writes no tf.Variable, so the outer-training can differentiate through
it with respect to the learned optimizer's theta. Step i trains on task.batch("train",
fold_in(seed, i)), so a run is a pure function of (task, optimizer, initial state, seed).

Every inner loss is clipped at min(loss, 10) before it is differentiated and recorded (the
authors' code does this; gin `clip_loss.max_loss`, None turns it off): above 10 the gradient is 0.
`make_train_fn` wraps `unroll` in a tf.function whose step count, seed and theta are arguments, so
it does not retrace; `train` is a fresh run of it, the wall-clock benchmark times it.
"""

from collections.abc import Callable
from typing import NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
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
  task: task_base.Task, params: nests.Params, batch: nests.Batch
) -> tuple[tf.Tensor, nests.Params]:
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
  seed: random_seeds.SeedLike,
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
  data_seed = random_seeds.as_seed(seed)
  steps = tf.convert_to_tensor(num_steps, tf.int32)
  offset = tf.convert_to_tensor(first_step, tf.int32)

  def body(
    i: tf.Tensor, state: opt_base.OptState, losses: tf.TensorArray
  ) -> tuple[tf.Tensor, opt_base.OptState, tf.TensorArray]:
    state, loss = train_step(task, opt, state, random_seeds.fold_in(data_seed, offset + i))
    return i + 1, state, losses.write(i, loss)

  _, final_state, losses = tf.while_loop(
    lambda i, *_: i < steps,
    body,
    (tf.constant(0, tf.int32), state, tf.TensorArray(tf.float32, size=steps, element_shape=[])),
    parallel_iterations=parallel_iterations,
  )
  return final_state, losses.stack()


# make_train_fn's result: (state, num_steps, seed) -> (final state, losses).
TrainFn = Callable[
  [opt_base.OptState, int | tf.Tensor, random_seeds.SeedLike], tuple[opt_base.OptState, tf.Tensor]
]


class InnerTrainResult(NamedTuple):
  """What a fresh inner-training run gives (`train`)."""

  state: opt_base.OptState  # The optimizer state after the last step.
  losses: tf.Tensor  # [num_steps] clipped training losses.


def make_train_fn(
  task: task_base.Task,
  opt_fn: Callable[[nests.Theta | None], opt_base.Optimizer],
  theta: nests.Theta | None = None,
) -> TrainFn:
  """A compiled function (state, num_steps, seed) -> (final state, losses), as `unroll` gives.

  The optimizer is opt_fn(theta), built inside the graph: theta (a learned optimizer's
  meta-parameters, or None for a hand-designed rule: `lambda _: opt`) is an argument of the
  tf.function, not a graph constant, as in outer-training. num_steps and seed become tensors, so
  new values of either reuse the same trace; the function's `tracing_count()` says how often it
  was traced.

  Args:
    task: the inner problem.
    opt_fn: theta -> the inner update rule.
    theta: the meta-parameters every call runs at.

  Returns:
    A function of (state, num_steps, seed) giving (final state, losses) as `unroll` does.
  """

  @tf.function(autograph=False)
  def train_graph(
    state: opt_base.OptState, theta: nests.Theta | None, num_steps: tf.Tensor, seed: tf.Tensor
  ) -> tuple[opt_base.OptState, tf.Tensor]:
    return unroll(task, opt_fn(theta), state, num_steps, seed)

  def run(
    state: opt_base.OptState, num_steps: int | tf.Tensor, seed: random_seeds.SeedLike
  ) -> tuple[opt_base.OptState, tf.Tensor]:
    steps = tf.convert_to_tensor(num_steps, tf.int32)
    return train_graph(state, theta, steps, random_seeds.as_seed(seed))

  run.tracing_count = train_graph.experimental_get_tracing_count
  return run


def train(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  num_steps: int,
  seed: random_seeds.SeedLike,
) -> InnerTrainResult:
  """A fresh inner-training run of `num_steps` steps, compiled (make_train_fn).

  Params come from task.init_params(stream(seed, "run_params")) and data from
  stream(seed, "run_data") (random_seeds.STREAMS).
  """
  state = opt.init(task.init_params(random_seeds.stream(seed, "run_params")))
  run = make_train_fn(task, lambda _: opt)
  return InnerTrainResult(*run(state, num_steps, random_seeds.stream(seed, "run_data")))
