"""The compiled truncations of a hand-designed rule's hyper-parameter outer-training (Sec. 2.4).

theta holds hyper-parameters of a hand-designed rule (learned_optimizers/hyperparameters.py, e.g.
log lr of Adam). Built from outer/:
  - make_truncation_fn: one truncation's outer loss (truncated_unroll.outer_losses with the
    STEP_LOSSES objective: the mean of the losses its steps compute before their updates) and its
    gradient by backpropagation through the truncation only, the start state's gradient stopped;
  - make_pes_fn: one Persistent ES truncation (outer/pes.py, beyond the paper) of every antithetic
    pair, forward only, e drawn by antithetic.perturbation, the 2 * pairs unrolls vectorized;
  - make_run_loss_fn: an untruncated run's outer loss at fixed theta;
  - make_outer_step_fn: the outer step in the chief's form: the samples checked with
    estimates.finite_mask, combined by the named estimator's `combine` (outer/estimators/: "rp"
    for backpropagation, "pes" for PES) and applied by the outer-optimizer's pure update; a step
    with a non-finite sample is skipped.
hyperparameter_training.OuterTrainer runs them over inner runs and resets.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import antithetic, estimates, truncated_unroll
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import base as task_base

PARAMETER = "learning_rate"  # The hyper-parameter theta holds (as its natural logarithm).
# Seed tags: the inner runs' initialisations and batches, the PES perturbations, the evaluation.
RUN_TAG, PES_TAG, EVAL_TAG = 0, 1, 2


class TruncationOutput(NamedTuple):
  """What one truncation gives: its outer loss, d loss / d theta and the end state."""

  loss: tf.Tensor  # Mean inner training loss over the truncation's steps.
  gradient: nests.Theta
  state: opt_base.OptState


class PESOutput(NamedTuple):
  """What one PES truncation of every antithetic pair gives; pairs on axis 0 of every leaf."""

  loss_plus: tf.Tensor  # [pairs]
  loss_minus: tf.Tensor  # [pairs]
  perturbation: nests.Theta  # e, like theta with a leading [pairs] axis.
  states: opt_base.OptState  # The + states then the - states: leading axis [2 * pairs].


def run_seeds(seed: int, run: int, tag: int = RUN_TAG) -> tuple[tf.Tensor, tf.Tensor]:
  """(init seed, data seed) of inner run `run`: the same for every truncation length and PES.

  Args:
    seed: the experiment's seed.
    run: the index of the inner run (0, 1, ...).
    tag: which stream: the outer-training runs, or the evaluation runs.
  """
  run_seed = random_seeds.fold_in(random_seeds.fold_in(seed, tag), run)
  return random_seeds.stream(run_seed, "run_params"), random_seeds.stream(run_seed, "run_data")


def initial_state(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, theta: nests.Theta, seed: tf.Tensor
) -> opt_base.OptState:
  """A fresh inner state: the rule's init of task.init_params(seed).

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta: the meta-parameters (Adam's init does not read the learning rate).
    seed: the initialisation seed.
  """
  return lopt.opt_fn(theta).init(task.init_params(seed))


def stack_states(state: opt_base.OptState, num: int) -> opt_base.OptState:
  """`num` copies of an inner state, stacked on a new leading axis of every leaf.

  Args:
    state: one inner state.
    num: copies.
  """
  return tf.nest.map_structure(lambda x: tf.stack([x] * num), state)


def _step_loss(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  theta: nests.Theta,
  state: opt_base.OptState,
  length: int,
  data_seed: tf.Tensor,
) -> tuple[tf.Tensor, opt_base.OptState]:
  """(mean pre-update loss, end state) of one unroll of `length` steps from `state`.

  Step t of the run trains on the batch fold_in(data_seed, t), t counted by state.iteration.
  """
  unroll = truncated_unroll.Unroll(task, lopt, truncated_unroll.STEP_LOSSES, recompute=False)
  # Only the training stream is read: the validation seed is a placeholder.
  (loss,), (end_state,) = truncated_unroll.outer_losses(
    unroll, (theta,), (state,), length, (data_seed, data_seed)
  )
  return loss, end_state


def make_truncation_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, length: int
) -> Callable[[nests.Theta, opt_base.OptState, tf.Tensor], TruncationOutput]:
  """A compiled truncation of `length` steps: (theta, state, data_seed) -> TruncationOutput.

  The unroll runs under a tf.GradientTape watching theta; the start state's gradient is
  stopped, so the gradient is that of this truncation alone. The task's data is passed in as an
  argument, never captured.

  Args:
    task: the inner problem.
    lopt: the learned optimizer; theta is what it `init`s.
    length: steps per truncation, a Python int (one trace per length).

  Returns:
    fn(theta, state, data_seed) -> TruncationOutput, where the truncation's steps train on the
    batches of inner steps state.iteration, ... of the run's data stream `data_seed`.
  """

  @tf.function(autograph=False)
  def truncation(
    theta: nests.Theta, state: opt_base.OptState, data_seed: tf.Tensor, data: Any
  ) -> TruncationOutput:
    state = tf.nest.map_structure(tf.stop_gradient, state)
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss, end_state = _step_loss(task.with_data(data), lopt, theta, state, length, data_seed)
    gradient = tape.gradient(loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return TruncationOutput(loss, gradient, end_state)

  return lambda theta, state, data_seed: truncation(
    theta, state, random_seeds.as_seed(data_seed), task.data
  )


def make_pes_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, length: int, sigma: float
) -> Callable[..., PESOutput]:
  """A compiled PES truncation of every antithetic pair (forward only, no backpropagation).

  Pair p draws e_p (antithetic.perturbation, one N(0, sigma^2) draw per pair and leaf of theta)
  and unrolls its + state at theta + e_p and its - state at theta - e_p for `length` steps on the
  run's batches. The 2 * pairs unrolls are vectorized over the particles (tf.vectorized_map):
  the same numbers as separate unrolls, in fewer ops.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    length: steps per truncation.
    sigma: the standard deviation of each coordinate of e.

  Returns:
    fn(theta, states, data_seed, perturbation_seed) -> PESOutput, with `states` the + states
    then the - states stacked on axis 0 (stack_states of a fresh state, 2 * pairs copies, at the
    start of an inner run), all at the same inner step.
  """

  @tf.function(autograph=False)
  def pes_truncation(
    theta: nests.Theta,
    states: opt_base.OptState,
    data_seed: tf.Tensor,
    perturbation_seed: tf.Tensor,
    data: Any,
  ) -> PESOutput:
    inner_task = task.with_data(data)
    pairs = tf.shape(tf.nest.flatten(states)[0])[0] // 2
    template = tf.nest.map_structure(lambda t: tf.fill([pairs], t), theta)
    e = antithetic.perturbation(template, perturbation_seed, sigma)
    thetas = tf.nest.map_structure(lambda t, e: tf.concat([t + e, t - e], 0), theta, e)
    # The particles share their inner step: one step count for all reads the batches once.
    first_step = states.iteration[0]

    def particle(args: tuple) -> tuple[opt_base.OptState, tf.Tensor]:
      particle_theta, state = args
      state = state._replace(iteration=first_step)
      loss, end_state = _step_loss(inner_task, lopt, particle_theta, state, length, data_seed)
      return end_state, loss

    end_states, losses = tf.vectorized_map(particle, (thetas, states))
    return PESOutput(losses[:pairs], losses[pairs:], e, end_states)

  return lambda theta, states, data_seed, perturbation_seed: pes_truncation(
    theta,
    states,
    random_seeds.as_seed(data_seed),
    random_seeds.as_seed(perturbation_seed),
    task.data,
  )


def make_run_loss_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, horizon: int
) -> Callable[[nests.Theta, opt_base.OptState, tf.Tensor], tf.Tensor]:
  """A compiled untruncated inner run at fixed theta: (theta, start state, data seed) -> loss.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    horizon: the run's length in inner steps.

  Returns:
    fn(theta, state, data_seed) -> the mean training loss over the whole run from `state` (the
    outer loss an untruncated unroll would have).
  """

  @tf.function(autograph=False)
  def run_loss(
    theta: nests.Theta, state: opt_base.OptState, data_seed: tf.Tensor, data: Any
  ) -> tf.Tensor:
    return _step_loss(task.with_data(data), lopt, theta, state, horizon, data_seed)[0]

  return lambda theta, state, data_seed: run_loss(
    theta, state, random_seeds.as_seed(data_seed), task.data
  )


def make_outer_step_fn(
  outer_optimizer: opt_base.Optimizer, estimator: str
) -> Callable[..., tuple[opt_base.OptState, nests.Theta, tf.Tensor]]:
  """The compiled outer step from N samples, in the chief's form (module docstring).

  Args:
    outer_optimizer: the pure-function rule that updates theta.
    estimator: the estimator's name (outer/estimators/registry.py) whose `combine` makes the
      gradient: "rp" (samples of backpropagated gradients) or "pes" (samples of g_pes).

  Returns:
    fn(outer_state, samples, loss_plus, loss_minus) -> (outer_state, gradient, applied): the
    samples a nest like theta with leaves [N, ...], their losses [N]; the state is updated with
    the combined gradient only when every sample is finite.
  """

  combine = registry.get(estimator).combine

  @tf.function(autograph=False)
  def outer_step(
    outer_state: opt_base.OptState,
    samples: nests.Theta,
    loss_plus: tf.Tensor,
    loss_minus: tf.Tensor,
  ) -> tuple[opt_base.OptState, nests.Theta, tf.Tensor]:
    applied = tf.reduce_all(estimates.finite_mask(samples, samples, loss_plus, loss_minus))
    # One kind of sample, given as both of a sample's estimates: "rp" reads the first, "pes" the
    # second.
    gradient = combine(samples, samples)
    new_state = tf.cond(
      applied, lambda: outer_optimizer.update(outer_state, gradient), lambda: outer_state
    )
    return new_state, gradient, applied

  return outer_step
