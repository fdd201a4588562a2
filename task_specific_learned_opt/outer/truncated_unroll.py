"""The unrolls of one truncation side by side on shared batches, and their outer losses (Sec. 3).

From inner states at step t0, N unrolls (the + and - unrolls of an antithetic pair: N = 2) apply
u(.; theta_n) for K steps on identical batches (step t trains on task.batch("train",
fold_in(train_seed, t))). Their outer losses are means over the truncation of the clipped inner
loss:
  - L_train ("train"): the mean loss of the K post-update states w_{t+1} on the training batch
    of step t+1, which is the loss the next step computes anyway before its update; the K-th term
    is evaluated after the loop on the batch the next truncation starts with. No extra forward
    pass per step.
  - L_valid ("valid"): the mean loss of w_{t+1} on task.batch("valid", fold_in(valid_seed, t)).
  - "steps": the mean of the losses the K steps compute before their updates (w_t0 ..
    w_{t0+K-1}), the outer loss of Sec. 2.4 (Fig. 3).

What the truncations of an outer-training share (the task, the learned optimizer, the objective,
how the backward pass stores the unroll) is one `Unroll` record; what varies per call (theta, the
start states, K, the seeds) are arguments and tensors, so a compiled caller does not retrace.

A task may be N independent inner problems whose loss is a vector [N] (`Unroll.loss_shape`): the
outer losses are then [N] too (tests vectorise many perturbation samples this way).

Memory. With `recompute` the unroll runs as a loop of chunks whose backward pass reruns them
(outer/recomputation.py); with two levels (the default) each chunk reruns as a loop of smaller
recomputed chunks. Everything a chunk reads (theta, the states, the task's data, seeds) is passed
in as tensors, never captured, and the while loops run with parallel_iterations=2, which bounds
how far iterations run ahead of each other (and so the memory they hold).
"""

from collections.abc import Sequence
from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import inner_training, nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import recomputation
from task_specific_learned_opt.tasks import base as task_base

OBJECTIVES = ("train", "valid")  # The outer-training objectives (Sec. 3).
STEP_LOSSES = "steps"  # Sec. 2.4's outer loss: the mean of the steps' pre-update losses.
_PARALLEL_ITERATIONS = 2
# What a run of the unrolls gives: (end states, sums of their outer-loss terms), one per unroll.
_Output = tuple[tuple[opt_base.OptState, ...], tuple[tf.Tensor, ...]]


class Unroll(NamedTuple):
  """What every truncation of one outer-training shares: the problem, the rule, the objective.

  Attributes:
    task: the inner problem.
    lopt: the learned optimizer.
    objective: "train" (L_train), "valid" (L_valid) or STEP_LOSSES (see the module docstring).
    recompute: recompute chunks of the unroll in the backward pass instead of storing every
      step; False is plain backpropagation.
    loss_shape: the shape of task.loss's value: () for one inner problem, [N] for a task that is
      N independent problems with a loss each (the outer losses then have shape [N] too).
    segment_lengths: int32 [levels], steps per recomputed chunk at each level;
      recomputation.segment_lengths_for(K) when None.
  """

  task: task_base.Task
  lopt: lopt_base.LearnedOptimizer
  objective: str = "train"
  recompute: bool = True
  loss_shape: Sequence[int] = ()
  segment_lengths: Sequence[int] | tf.Tensor | None = None


def data_seeds(seed: random_seeds.SeedLike) -> tuple[tf.Tensor, tf.Tensor]:
  """The training-batch and validation-batch seeds of an inner run's data stream."""
  return random_seeds.stream(seed, "unroll_train"), random_seeds.stream(seed, "unroll_valid")


class _SegmentInputs(NamedTuple):
  """What a segment reads besides theta and the states; passed in, never captured, so the
  recomputing gradient graph holds no captured constants."""

  task_data: object
  train_seed: tf.Tensor
  valid_seed: tf.Tensor
  first_term_step: tf.Tensor  # A step's pre-update loss counts from this step on.
  start: tf.Tensor
  length: tf.Tensor
  chunks: tf.Tensor  # int32 [levels]: steps per recomputed chunk at each level.


def _segment(
  unroll: Unroll,
  thetas: tuple[nests.Theta, ...],
  states: tuple[opt_base.OptState, ...],
  inputs: _SegmentInputs,
) -> _Output:
  """`length` steps of every unroll from inner step `start` on shared batches.

  Returns:
    (end states, sums of this segment's outer-loss terms), each sum of shape `loss_shape`. For
    L_train and STEP_LOSSES a step's term is its pre-update loss and counts only from
    `first_term_step` on (for L_train the truncation's first w is not a post-update state).
  """
  task = unroll.task.with_data(inputs.task_data)
  opts = [unroll.lopt.opt_fn(theta) for theta in thetas]

  def body(
    i: tf.Tensor, states: tuple[opt_base.OptState, ...], sums: tuple[tf.Tensor, ...]
  ) -> tuple[tf.Tensor, tuple[opt_base.OptState, ...], tuple[tf.Tensor, ...]]:
    t = inputs.start + i
    batch = task.batch("train", random_seeds.fold_in(inputs.train_seed, t))
    new_states, new_sums = [], []
    for opt, state, total in zip(opts, states, sums, strict=True):
      loss, grads = inner_training.loss_and_grads(task, opt.get_params(state), batch)
      new_state = opt.update(state, grads, loss=loss)
      if unroll.objective == "valid":
        valid_batch = task.batch("valid", random_seeds.fold_in(inputs.valid_seed, t))
        term = inner_training.clip_loss(task.loss(opt.get_params(new_state), valid_batch))
      else:
        term = loss * tf.cast(t >= inputs.first_term_step, tf.float32)
      new_states.append(new_state)
      new_sums.append(total + term)
    return i + 1, tuple(new_states), tuple(new_sums)

  zeros = tuple(tf.zeros(unroll.loss_shape) for _ in states)
  _, states, sums = tf.while_loop(
    lambda i, *_: i < inputs.length,
    body,
    (tf.constant(0, tf.int32), tuple(states), zeros),
    parallel_iterations=_PARALLEL_ITERATIONS,
  )
  return states, sums


def _run_range(
  unroll: Unroll,
  output_structure: _Output,
  thetas: tuple[nests.Theta, ...],
  states: tuple[opt_base.OptState, ...],
  inputs: _SegmentInputs,
  level: int,
) -> _Output:
  """Steps [start, start + length) of every unroll, as a loop of recomputed chunks.

  At the last level the steps run plainly (_segment); above it, each chunk of
  inputs.chunks[level] steps is a recomputation.recomputed call of the next level, so the
  backward pass of a chunk reruns it, itself in recomputed sub-chunks.
  """
  if level == inputs.chunks.shape[0]:
    return _segment(unroll, thetas, states, inputs)
  end = inputs.start + inputs.length

  def run_chunk(
    thetas: tuple[nests.Theta, ...],
    states: tuple[opt_base.OptState, ...],
    chunk_inputs: _SegmentInputs,
  ) -> _Output:
    return _run_range(unroll, output_structure, thetas, states, chunk_inputs, level + 1)

  def body(
    position: tf.Tensor, states: tuple[opt_base.OptState, ...], sums: tuple[tf.Tensor, ...]
  ) -> tuple[tf.Tensor, tuple[opt_base.OptState, ...], tuple[tf.Tensor, ...]]:
    chunk_inputs = inputs._replace(
      start=position, length=tf.minimum(inputs.chunks[level], end - position)
    )
    states, chunk_sums = recomputation.recomputed(
      run_chunk, output_structure, (thetas, states), chunk_inputs
    )
    sums = tuple(total + chunk for total, chunk in zip(sums, chunk_sums, strict=True))
    return position + chunk_inputs.length, states, sums

  zeros = tuple(tf.zeros(unroll.loss_shape) for _ in states)
  _, states, sums = tf.while_loop(
    lambda position, *_: position < end,
    body,
    (inputs.start, tuple(states), zeros),
    parallel_iterations=_PARALLEL_ITERATIONS,
  )
  return states, sums


def outer_losses(
  unroll: Unroll,
  thetas: Sequence[nests.Theta],
  states: Sequence[opt_base.OptState],
  num_steps: int | tf.Tensor,
  streams: tuple[tf.Tensor, tf.Tensor],
) -> tuple[tuple[tf.Tensor, ...], tuple[opt_base.OptState, ...]]:
  """The outer losses of one truncation of N unrolls, unroll n at thetas[n] from states[n].

  All start states must be at the same inner step t0 (their `iteration`): the unrolls read the
  same batches. Differentiable with respect to every theta and start state.

  Args:
    unroll: the task, learned optimizer, objective and recomputation of the unrolls.
    thetas: the N meta-parameters, e.g. (theta + e, theta - e).
    states: the N inner optimizer states at the start (their `iteration` is t0).
    num_steps: K >= 1, int or int32 tensor.
    streams: (train_seed, valid_seed), the seeds of the training and validation batches
      (data_seeds of an inner run's data seed).

  Returns:
    (losses, end states): the N outer losses, float32 of shape `unroll.loss_shape`, and the N
    states after the K steps.

  Raises:
    ValueError: an unknown objective.
  """
  if unroll.objective not in (*OBJECTIVES, STEP_LOSSES):
    raise ValueError(
      f"Unknown objective {unroll.objective!r}; expected one of {OBJECTIVES} or {STEP_LOSSES!r}."
    )
  unroll = unroll._replace(loss_shape=tuple(int(n) for n in unroll.loss_shape))
  thetas, states = tuple(thetas), tuple(states)
  train_seed, valid_seed = streams
  num_steps = tf.convert_to_tensor(num_steps, tf.int32)
  first_step = tf.convert_to_tensor(states[0].iteration, tf.int32)
  segment_lengths = unroll.segment_lengths
  if segment_lengths is None:
    segment_lengths = recomputation.segment_lengths_for(num_steps)
  inputs = _SegmentInputs(
    task_data=unroll.task.data,
    train_seed=train_seed,
    valid_seed=valid_seed,
    first_term_step=first_step if unroll.objective == STEP_LOSSES else first_step + 1,
    start=first_step,
    length=num_steps,
    chunks=tf.convert_to_tensor(segment_lengths if unroll.recompute else [], tf.int32),
  )
  output_structure = (states, tuple(tf.zeros(unroll.loss_shape) for _ in states))
  end_states, sums = _run_range(unroll, output_structure, thetas, states, inputs, 0)
  if unroll.objective == "train":
    # The K-th post-update state's loss, on the batch the next truncation starts with.
    last_batch = unroll.task.batch(
      "train", random_seeds.fold_in(train_seed, first_step + num_steps)
    )
    params = [
      unroll.lopt.opt_fn(th).get_params(s) for th, s in zip(thetas, end_states, strict=True)
    ]
    sums = tuple(
      total + inner_training.clip_loss(unroll.task.loss(p, last_batch))
      for total, p in zip(sums, params, strict=True)
    )
  k = tf.cast(num_steps, tf.float32)
  return tuple(total / k for total in sums), end_states


def antithetic_losses(
  unroll: Unroll,
  theta_plus: nests.Theta,
  theta_minus: nests.Theta,
  state: opt_base.OptState,
  num_steps: int | tf.Tensor,
  data_seed: random_seeds.SeedLike,
) -> tuple[tf.Tensor, tf.Tensor, opt_base.OptState]:
  """L+ and L- of one truncation of `num_steps` steps from `state`, and the + end state.

  Differentiable with respect to theta_plus and theta_minus (and the start state).

  Args:
    unroll: the task, learned optimizer, objective and recomputation of the unrolls.
    theta_plus: theta + e.
    theta_minus: theta - e.
    state: the inner optimizer state at the start (its `iteration` is the inner step t0).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see data_seeds).

  Returns:
    (loss_plus, loss_minus, end_state_plus): the outer losses L+ and L-, float32 of shape
    `unroll.loss_shape`, and the + unroll's state after the K steps.

  Raises:
    ValueError: an unknown objective.
  """
  (loss_plus, loss_minus), (end_plus, _) = outer_losses(
    unroll, (theta_plus, theta_minus), (state, state), num_steps, data_seeds(data_seed)
  )
  return loss_plus, loss_minus, end_plus
