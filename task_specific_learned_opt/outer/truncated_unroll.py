"""One antithetic truncation and its gradient estimates (paper Sec. 3, App. C).

From an inner state at step t0, the + and - unrolls apply u(.; theta + e) and u(.; theta - e)
for K steps on identical batches (step t trains on task.batch("train", fold_in(train_seed, t))).
Their outer losses are the mean over the K post-update states of the clipped inner loss:
  - L_train: the loss of w_{t+1} on the training batch of step t+1, which is the loss the next
    step computes anyway before its update; the K-th term is evaluated after the loop on the
    batch the next truncation starts with. No extra forward pass per step.
  - L_valid: the loss of w_{t+1} on task.batch("valid", fold_in(valid_seed, t)).
Then
  g_rp = d/dtheta (L+ + L-) / 2      (backpropagation through both unrolls)
  g_es = (L+ - L-) / 2 * e / sigma^2 (antithetic ES)
and the + unroll's end state is the state the next truncation starts from.

Persistent ES (pes_truncation_sample; outer/pes.py, beyond the paper) runs the same pair of
unrolls but from two start states, each unroll continuing its own trajectory, and returns both
end states and g_pes = (L+ - L-) / (2 sigma^2) * (e_1 + ... + e_k) in place of g_es.

A task may be N independent inner problems whose loss is a vector [N] (`loss_shape`): the outer
losses are then [N] too, g_es and g_pes are per problem, and g_rp is the gradient of their sum,
which is per problem when each problem reads only its own slice of theta (tests vectorise
many perturbation samples this way).

Memory. Backpropagating through K steps stores every step (measured: ~26 MiB per inner step of
both unrolls for the paper's CNN at batch 128; docs/outer_training.md). With `recompute=True`
the unroll runs as a loop of chunks whose backward pass reruns them (a tf.custom_gradient); with
two levels (the default) each chunk reruns as a loop of smaller recomputed chunks, so the
backward pass holds ~2 K^(1/3) stored states and a few steps' activations (segment_lengths_for),
for two extra forward passes. Everything a chunk reads (theta, the states, the task's data,
seeds) is passed in as tensors, never captured, and the while loops run with
parallel_iterations=2, which bounds how far iterations run ahead of each other (and so the
memory they hold).
"""

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import inner_training
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import estimators, pes
from task_specific_learned_opt.tasks import base as task_base

OBJECTIVES = ("train", "valid")
SEGMENT_SCALE = 0.2
LEVELS = 2
_PARALLEL_ITERATIONS = 2
# (theta + e, theta - e) and the states of the + and - unrolls, in that order.
_ThetaPair = tuple[lopt_base.Theta, lopt_base.Theta]
_StatePair = tuple[opt_base.OptState, opt_base.OptState]
# (state_plus, state_minus, sum_plus, sum_minus): what a run of both unrolls gives.
_PairOutput = tuple[opt_base.OptState, opt_base.OptState, tf.Tensor, tf.Tensor]


class TruncationSample(NamedTuple):
  """What one truncation gives: both estimates, both outer losses and the + end state."""

  g_rp: lopt_base.Theta
  g_es: lopt_base.Theta
  loss_plus: tf.Tensor
  loss_minus: tf.Tensor
  state: opt_base.OptState  # The + unroll's end state.


def data_seeds(seed: seeds_lib.SeedLike) -> tuple[tf.Tensor, tf.Tensor]:
  """The training-batch and validation-batch seeds of an inner run's data stream."""
  return seeds_lib.fold_in(seed, 0), seeds_lib.fold_in(seed, 1)


def perturbation(theta: lopt_base.Theta, seed: seeds_lib.SeedLike, sigma: float) -> lopt_base.Theta:
  """e ~ N(0, sigma^2 I) in the shape of theta, drawn statelessly from `seed`.

  Args:
    theta: the meta-parameters; only the structure and shapes of its leaves are read.
    seed: the perturbation's stateless seed (each leaf gets its own split of it).
    sigma: the standard deviation of every coordinate of e.

  Returns:
    e, a float32 nest of the structure and shapes of `theta`.
  """
  leaves = tf.nest.flatten(theta)
  leaf_seeds = seeds_lib.split(seed, len(leaves))
  return tf.nest.pack_sequence_as(
    theta,
    [sigma * tf.random.stateless_normal(tf.shape(x), leaf_seeds[i]) for i, x in enumerate(leaves)],
  )


class _SegmentInputs(NamedTuple):
  """What a segment reads besides theta and the states; passed in, never captured, so the
  recomputing gradient graph holds no captured constants."""

  task_data: object
  train_seed: tf.Tensor
  valid_seed: tf.Tensor
  first_term_step: tf.Tensor  # L_train counts a step's pre-update loss from this step on.
  start: tf.Tensor
  length: tf.Tensor
  chunks: tf.Tensor  # int32 [levels]: steps per recomputed chunk at each level.


def _pair_segment(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  objective: str,
  theta_pair: _ThetaPair,
  states: _StatePair,
  inputs: _SegmentInputs,
  loss_shape: tuple[int, ...],
) -> _PairOutput:
  """`length` steps of the + and - unrolls from inner step `start` on shared batches.

  Returns:
    (state_plus, state_minus, sum_plus, sum_minus): the end states and the sums of this
    segment's outer-loss terms, each of shape `loss_shape`. For L_train a step's term is its
    pre-update loss and counts only from `first_term_step` on (the truncation's first w is not a
    post-update state).
  """
  task = task.with_data(inputs.task_data)
  opts = [lopt.opt_fn(theta) for theta in theta_pair]

  def body(
    i: tf.Tensor,
    state_plus: opt_base.OptState,
    state_minus: opt_base.OptState,
    sum_plus: tf.Tensor,
    sum_minus: tf.Tensor,
  ) -> tuple[tf.Tensor, opt_base.OptState, opt_base.OptState, tf.Tensor, tf.Tensor]:
    t = inputs.start + i
    batch = task.batch("train", seeds_lib.fold_in(inputs.train_seed, t))
    new_states, sums = [], []
    for opt, state, total in zip(
      opts, (state_plus, state_minus), (sum_plus, sum_minus), strict=True
    ):
      loss, grads = inner_training.loss_and_grads(task, opt.get_params(state), batch)
      new_state = opt.update(state, grads, loss=loss)
      if objective == "train":
        term = loss * tf.cast(t >= inputs.first_term_step, tf.float32)
      else:
        valid_batch = task.batch("valid", seeds_lib.fold_in(inputs.valid_seed, t))
        term = inner_training.clip_loss(task.loss(opt.get_params(new_state), valid_batch))
      new_states.append(new_state)
      sums.append(total + term)
    return (i + 1, *new_states, *sums)

  zero = tf.zeros(loss_shape)
  _, state_plus, state_minus, sum_plus, sum_minus = tf.while_loop(
    lambda i, *_: i < inputs.length,
    body,
    (tf.constant(0, tf.int32), states[0], states[1], zero, zero),
    parallel_iterations=_PARALLEL_ITERATIONS,
  )
  return state_plus, state_minus, sum_plus, sum_minus


def _is_float(x: tf.Tensor) -> bool:
  return x.dtype.is_floating


def _recomputed(
  segment_fn: Callable[..., Any], output_structure: Any, differentiable: Any, constants: Any
) -> Any:
  """segment_fn(*differentiable, constants), with a gradient that reruns the segment.

  The forward pass keeps only the segment's inputs; the backward pass reruns the segment under
  a tape and backpropagates the upstream gradients through it. Gradients flow to the float
  leaves of `differentiable`; `constants` get none. The result is a nest like `output_structure`.
  """
  flat_diff = tf.nest.flatten(differentiable)
  flat_const = tf.nest.flatten(constants)
  float_index = [i for i, x in enumerate(flat_diff) if _is_float(x)]
  num_float = len(float_index)

  def call(float_values: Sequence[tf.Tensor], const_values: Sequence[tf.Tensor]) -> Any:
    values = list(flat_diff)
    for i, value in zip(float_index, float_values, strict=True):
      values[i] = value
    return segment_fn(
      *tf.nest.pack_sequence_as(differentiable, values),
      tf.nest.pack_sequence_as(constants, list(const_values)),
    )

  @tf.custom_gradient
  def forward(*args: tf.Tensor) -> tuple[list[tf.Tensor], Callable[..., list[tf.Tensor | None]]]:
    float_values, const_values = args[:num_float], args[num_float:]
    flat_outputs = tf.nest.flatten(call(float_values, const_values))

    def grad_fn(*upstream: tf.Tensor | None) -> list[tf.Tensor | None]:
      with tf.GradientTape() as tape:
        tape.watch(float_values)
        rerun = tf.nest.flatten(call(float_values, const_values))
      targets, output_grads = [], []
      for out, grad in zip(rerun, upstream, strict=True):
        if _is_float(out):
          targets.append(out)
          output_grads.append(tf.zeros_like(out) if grad is None else grad)
      grads = tape.gradient(
        targets,
        list(float_values),
        output_gradients=output_grads,
        unconnected_gradients=tf.UnconnectedGradients.ZERO,
      )
      return list(grads) + [None] * len(const_values)

    return flat_outputs, grad_fn

  flat_outputs = forward(*[flat_diff[i] for i in float_index], *flat_const)
  return tf.nest.pack_sequence_as(output_structure, flat_outputs)


@gin.configurable
def segment_lengths_for(
  num_steps: int | tf.Tensor, scale: float = SEGMENT_SCALE, levels: int = LEVELS
) -> tf.Tensor:
  """Steps per recomputed chunk at each of `levels` levels of recomputation: int32 [levels].

  The innermost chunks are S_L = ceil(scale * K^(1 / (levels + 1))) steps and each level's chunk
  is r = (K / S_L)^(1 / levels) of the next one's, so every level stores about r states. Memory
  is ~ levels * r stored states plus S_L steps being rerun: O(sqrt(K)) for one level,
  O(K^(1/3)) for two, each level costing one more forward pass.

  Measured for one sample of the paper's CNN at batch 128 at K = 10,000 (docs/outer_training.md):
  one level peaks at 4.4 GiB, two levels at 2.2 GiB; plain backpropagation would hold ~26 MiB per
  step (~260 GiB).
  """
  k = tf.cast(num_steps, tf.float32)
  innermost = tf.maximum(tf.math.ceil(scale * k ** (1.0 / (levels + 1))), 1.0)
  ratio = tf.maximum(k / innermost, 1.0) ** (1.0 / levels)
  lengths = [tf.math.ceil(innermost * ratio ** (levels - level)) for level in range(1, levels + 1)]
  return tf.cast(tf.stack(lengths), tf.int32)


def _run_range(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  objective: str,
  output_structure: _PairOutput,
  theta_pair: _ThetaPair,
  states: _StatePair,
  inputs: _SegmentInputs,
  level: int,
  loss_shape: tuple[int, ...],
) -> _PairOutput:
  """Steps [start, start + length) of both unrolls, as a loop of recomputed chunks.

  At the last level the steps run plainly (_pair_segment); above it, each chunk of
  inputs.chunks[level] steps is a _recomputed call of the next level, so the backward pass of a
  chunk reruns it, itself in recomputed sub-chunks.
  """
  if level == inputs.chunks.shape[0]:
    return _pair_segment(task, lopt, objective, theta_pair, states, inputs, loss_shape)
  end = inputs.start + inputs.length

  def run_chunk(
    theta_pair: _ThetaPair, states: _StatePair, chunk_inputs: _SegmentInputs
  ) -> _PairOutput:
    return _run_range(
      task,
      lopt,
      objective,
      output_structure,
      theta_pair,
      states,
      chunk_inputs,
      level + 1,
      loss_shape,
    )

  def body(
    position: tf.Tensor, states: _StatePair, sum_plus: tf.Tensor, sum_minus: tf.Tensor
  ) -> tuple[tf.Tensor, _StatePair, tf.Tensor, tf.Tensor]:
    chunk_inputs = inputs._replace(
      start=position, length=tf.minimum(inputs.chunks[level], end - position)
    )
    state_plus, state_minus, chunk_plus, chunk_minus = _recomputed(
      run_chunk, output_structure, (theta_pair, states), chunk_inputs
    )
    return (
      position + chunk_inputs.length,
      (state_plus, state_minus),
      sum_plus + chunk_plus,
      sum_minus + chunk_minus,
    )

  zero = tf.zeros(loss_shape)
  _, (state_plus, state_minus), sum_plus, sum_minus = tf.while_loop(
    lambda position, *_: position < end,
    body,
    (inputs.start, states, zero, zero),
    parallel_iterations=_PARALLEL_ITERATIONS,
  )
  return state_plus, state_minus, sum_plus, sum_minus


def pair_losses(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  theta_plus: lopt_base.Theta,
  theta_minus: lopt_base.Theta,
  state_plus: opt_base.OptState,
  state_minus: opt_base.OptState,
  num_steps: int | tf.Tensor,
  data_seed: seeds_lib.SeedLike,
  objective: str = "train",
  recompute: bool = True,
  segment_lengths: Sequence[int] | tf.Tensor | None = None,
  loss_shape: Sequence[int] = (),
) -> tuple[tf.Tensor, tf.Tensor, opt_base.OptState, opt_base.OptState]:
  """L+ and L- of one truncation of the + and - unrolls, each from its own start state.

  Truncated ES starts both from one state (antithetic_losses); PES continues each from where it
  ended (pes_truncation_sample). Both start states must be at the same inner step t0 (their
  `iteration`): the two unrolls read the same batches. Differentiable with respect to
  theta_plus, theta_minus and both start states.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta_plus: theta + e.
    theta_minus: theta - e.
    state_plus: the + unroll's inner optimizer state at the start (its `iteration` is t0).
    state_minus: the - unroll's, at the same inner step.
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see data_seeds).
    objective: "train" (L_train) or "valid" (L_valid).
    recompute: recompute chunks of the unroll in the backward pass instead of storing every
      step; False is plain backpropagation.
    segment_lengths: int32 [levels], steps per recomputed chunk at each level;
      segment_lengths_for(K) by default.
    loss_shape: the shape of task.loss's value: () for one inner problem, [N] for a task that is
      N independent problems with a loss each (the outer losses then have shape [N] too).

  Returns:
    (loss_plus, loss_minus, end_state_plus, end_state_minus): the outer losses L+ and L-,
    float32 of shape `loss_shape`, and both unrolls' states after the K steps.

  Raises:
    ValueError: an unknown objective.
  """
  if objective not in OBJECTIVES:
    raise ValueError(f"Unknown objective {objective!r}; expected one of {OBJECTIVES}.")
  loss_shape = tuple(int(n) for n in loss_shape)
  train_seed, valid_seed = data_seeds(data_seed)
  num_steps = tf.convert_to_tensor(num_steps, tf.int32)
  first_step = tf.convert_to_tensor(state_plus.iteration, tf.int32)
  if segment_lengths is None:
    segment_lengths = segment_lengths_for(num_steps)
  inputs = _SegmentInputs(
    task_data=task.data,
    train_seed=train_seed,
    valid_seed=valid_seed,
    first_term_step=first_step + 1,
    start=first_step,
    length=num_steps,
    chunks=tf.convert_to_tensor(segment_lengths if recompute else [], tf.int32),
  )
  zero = tf.zeros(loss_shape)
  output_structure = (state_plus, state_minus, zero, zero)
  end_plus, end_minus, sum_plus, sum_minus = _run_range(
    task,
    lopt,
    objective,
    output_structure,
    (theta_plus, theta_minus),
    (state_plus, state_minus),
    inputs,
    0,
    loss_shape,
  )
  if objective == "train":
    # The K-th post-update state's loss, on the batch the next truncation starts with.
    last_batch = task.batch("train", seeds_lib.fold_in(train_seed, first_step + num_steps))
    params_plus = lopt.opt_fn(theta_plus).get_params(end_plus)
    params_minus = lopt.opt_fn(theta_minus).get_params(end_minus)
    sum_plus += inner_training.clip_loss(task.loss(params_plus, last_batch))
    sum_minus += inner_training.clip_loss(task.loss(params_minus, last_batch))
  k = tf.cast(num_steps, tf.float32)
  return sum_plus / k, sum_minus / k, end_plus, end_minus


def antithetic_losses(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  theta_plus: lopt_base.Theta,
  theta_minus: lopt_base.Theta,
  state: opt_base.OptState,
  num_steps: int | tf.Tensor,
  data_seed: seeds_lib.SeedLike,
  objective: str = "train",
  recompute: bool = True,
  segment_lengths: Sequence[int] | tf.Tensor | None = None,
  loss_shape: Sequence[int] = (),
) -> tuple[tf.Tensor, tf.Tensor, opt_base.OptState]:
  """L+ and L- of one truncation of `num_steps` steps from `state`, and the + end state.

  Differentiable with respect to theta_plus and theta_minus (and the start state).

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta_plus: theta + e.
    theta_minus: theta - e.
    state: the inner optimizer state at the start (its `iteration` is the inner step t0).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see data_seeds).
    objective: "train" (L_train) or "valid" (L_valid).
    recompute: recompute chunks of the unroll in the backward pass instead of storing every
      step; False is plain backpropagation.
    segment_lengths: int32 [levels], steps per recomputed chunk at each level;
      segment_lengths_for(K) by default.
    loss_shape: the shape of task.loss's value (see pair_losses); () for one inner problem.

  Returns:
    (loss_plus, loss_minus, end_state_plus): the outer losses L+ and L-, float32 of shape
    `loss_shape`, and the + unroll's state after the K steps.

  Raises:
    ValueError: an unknown objective.
  """
  loss_plus, loss_minus, end_plus, _ = pair_losses(
    task,
    lopt,
    theta_plus,
    theta_minus,
    state,
    state,
    num_steps,
    data_seed,
    objective,
    recompute,
    segment_lengths,
    loss_shape,
  )
  return loss_plus, loss_minus, end_plus


def truncation_sample(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  theta: lopt_base.Theta,
  state: opt_base.OptState,
  num_steps: int | tf.Tensor,
  data_seed: seeds_lib.SeedLike,
  perturbation_seed: seeds_lib.SeedLike,
  sigma: float,
  objective: str = "train",
  recompute: bool = True,
  loss_shape: Sequence[int] = (),
) -> TruncationSample:
  """g_rp, g_es, L+, L- and the + end state of one antithetic truncation (see the module doc).

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta: the meta-parameters; the + and - unrolls run at theta + e and theta - e.
    state: the inner optimizer state at the start (its `iteration` is the inner step t0).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see data_seeds).
    perturbation_seed: the seed of e (see perturbation).
    sigma: the standard deviation of e.
    objective: "train" (L_train) or "valid" (L_valid).
    recompute: recompute chunks of the unroll in the backward pass (see antithetic_losses).
    loss_shape: the shape of task.loss's value (see pair_losses); () for one inner problem.

  Returns:
    The sample: g_rp and g_es nests like theta, L+ and L-, and the + unroll's end state with its
    gradient stopped, where the next truncation starts.

  Raises:
    ValueError: an unknown objective.
  """
  e = perturbation(theta, perturbation_seed, sigma)
  with tf.GradientTape() as tape:
    tape.watch(theta)
    theta_plus = tf.nest.map_structure(tf.add, theta, e)
    theta_minus = tf.nest.map_structure(tf.subtract, theta, e)
    loss_plus, loss_minus, end_state = antithetic_losses(
      task,
      lopt,
      theta_plus,
      theta_minus,
      state,
      num_steps,
      data_seed,
      objective,
      recompute,
      loss_shape=loss_shape,
    )
    mean_loss = (loss_plus + loss_minus) / 2.0
  g_rp = tape.gradient(mean_loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
  g_es = estimators.es_gradient(loss_plus, loss_minus, e, sigma)
  end_state = tf.nest.map_structure(tf.stop_gradient, end_state)
  return TruncationSample(g_rp, g_es, loss_plus, loss_minus, end_state)


class PESTruncationSample(NamedTuple):
  """What one PES truncation gives: both estimates, both losses, both end states, xi."""

  g_rp: lopt_base.Theta  # d/dtheta (L+ + L-) / 2 of this truncation, from both start states.
  g_pes: lopt_base.Theta  # (L+ - L-) / (2 sigma^2) * xi_k.
  loss_plus: tf.Tensor
  loss_minus: tf.Tensor
  state_plus: opt_base.OptState  # The + unroll's end state (gradient stopped).
  state_minus: opt_base.OptState  # The - unroll's end state (gradient stopped).
  accumulator: pes.Accumulator  # xi_k = e_1 + ... + e_k and k, this truncation's e included.


def pes_truncation_sample(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  theta: lopt_base.Theta,
  state_plus: opt_base.OptState,
  state_minus: opt_base.OptState,
  accumulator: pes.Accumulator,
  num_steps: int | tf.Tensor,
  data_seed: seeds_lib.SeedLike,
  perturbation_seed: seeds_lib.SeedLike,
  sigma: float,
  objective: str = "train",
  recompute: bool = True,
  loss_shape: Sequence[int] = (),
) -> PESTruncationSample:
  """One truncation of persistent ES (outer/pes.py): each unroll continues its own trajectory.

  Draws e_k, runs the + unroll at theta + e_k from `state_plus` and the - unroll at theta - e_k
  from `state_minus` for K steps on shared batches, adds e_k to the accumulator and returns

    g_pes = (L+ - L-) / (2 sigma^2) * xi_k,   xi_k = e_1 + ... + e_k,
    g_rp  = d/dtheta (L+ + L-) / 2            (this truncation only, start states held fixed),

  with both end states, where the next truncation of the inner run starts.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta: the meta-parameters.
    state_plus: the + unroll's state (the + trajectory since the inner run started).
    state_minus: the - unroll's state, at the same inner step.
    accumulator: xi_{k-1} and k - 1 (pes.initial_state(theta) at the start of an inner run).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see data_seeds).
    perturbation_seed: the seed of e_k (see perturbation).
    sigma: the standard deviation of e_k.
    objective: "train" (L_train) or "valid" (L_valid).
    recompute: recompute chunks of the unroll in the backward pass (see antithetic_losses).
    loss_shape: the shape of task.loss's value (see pair_losses); () for one inner problem.

  Returns:
    A PESTruncationSample.

  Raises:
    ValueError: an unknown objective.
  """
  e = perturbation(theta, perturbation_seed, sigma)
  accumulator = pes.accumulate(accumulator, e)
  with tf.GradientTape() as tape:
    tape.watch(theta)
    theta_plus = tf.nest.map_structure(tf.add, theta, e)
    theta_minus = tf.nest.map_structure(tf.subtract, theta, e)
    loss_plus, loss_minus, end_plus, end_minus = pair_losses(
      task,
      lopt,
      theta_plus,
      theta_minus,
      state_plus,
      state_minus,
      num_steps,
      data_seed,
      objective,
      recompute,
      loss_shape=loss_shape,
    )
    mean_loss = (loss_plus + loss_minus) / 2.0
  g_rp = tape.gradient(mean_loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
  g_pes = pes.gradient(loss_plus, loss_minus, accumulator.perturbation_sum, sigma)
  end_plus, end_minus = tf.nest.map_structure(tf.stop_gradient, (end_plus, end_minus))
  return PESTruncationSample(g_rp, g_pes, loss_plus, loss_minus, end_plus, end_minus, accumulator)
