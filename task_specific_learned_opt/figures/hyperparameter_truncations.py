"""The compiled truncations of a hand-designed rule's hyper-parameter outer-training (Sec. 2.4).

theta holds hyper-parameters of a hand-designed rule (learned_optimizers/hyperparameters.py, e.g.
log lr of Adam). The truncations are an estimator's (outer/estimators/), used as local mode's
workers and the chief use it:
  - make_sample_fn: one truncation of N worker states of the named estimator, each its
    `sample` (estimator.sample over the states, one compiled call; the unroll's objective is
    STEP_LOSSES: the mean of the losses its steps compute before their updates). "backprop" is
    Fig. 3's truncated backpropagation at theta; "pes" is Persistent ES (beyond the paper), one
    antithetic pair per worker state;
  - make_run_loss_fn: an untruncated run's outer loss at fixed theta, on the same batches;
  - make_outer_step_fn: the outer step in the chief's form: the samples checked with
    estimates.finite_mask (a non-finite one is dropped), the rest combined by the estimator's
    `combine` and applied by the outer-optimizer's pure update; a step with no finite sample
    is skipped.
hyperparameter_training.OuterTrainer runs them over inner runs and resets.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import estimates, truncated_unroll
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.tasks import base as task_base

PARAMETER = "learning_rate"  # The hyper-parameter theta holds (as its natural logarithm).
# Seed tags: the inner runs' initialisations and batches, the estimators' perturbations, the
# evaluation.
RUN_TAG, PES_TAG, EVAL_TAG = 0, 1, 2


class TruncationOutput(NamedTuple):
  """One backpropagated truncation: its outer loss, d loss / d theta and the end state."""

  loss: tf.Tensor  # Mean inner training loss over the truncation's steps.
  gradient: nests.Theta
  state: opt_base.OptState


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


def stack_states(state: Any, num: int) -> Any:
  """`num` copies of a state (an inner state, an estimator's worker state), on a new axis 0.

  Args:
    state: one state.
    num: copies.
  """
  return tf.nest.map_structure(lambda x: tf.stack([x] * num), state)


def _unroll(task: task_base.Task, lopt: lopt_base.LearnedOptimizer) -> truncated_unroll.Unroll:
  """The unrolls of this outer-training: Sec. 2.4's outer loss, plain backpropagation."""
  return truncated_unroll.Unroll(task, lopt, truncated_unroll.STEP_LOSSES, recompute=False)


def make_sample_fn(
  task: task_base.Task,
  lopt: lopt_base.LearnedOptimizer,
  estimator: estimator_base.Estimator,
  length: int,
  sigma: float,
) -> Callable[..., tuple[estimator_base.Sample, Any]]:
  """One compiled truncation of N worker states of `estimator`, as N workers would compute it.

  Worker state n gives estimator.sample(unroll, theta, state_n, length, data_seed, seed_n,
  sigma), with every unroll on the run's batches (all states are at the same inner step). The N
  samples are computed in one call (tf.map_fn over the states); the task's data is passed in as
  an argument, never captured.

  Args:
    task: the inner problem.
    lopt: the learned optimizer; theta is what it `init`s.
    estimator: the outer-gradient estimator (outer/estimators/registry.py).
    length: steps per truncation, a Python int (one trace per length).
    sigma: the standard deviation of the estimator's perturbation of theta (if it has one).

  Returns:
    fn(theta, states, data_seed, perturbation_seeds) -> (samples, states): `states` the N
    worker states stacked on axis 0 of every leaf (stack_states), `perturbation_seeds` [N, 2];
    the samples' leaves and the next states have the leading axis N.
  """

  @tf.function(autograph=False)
  def sample_fn(
    theta: nests.Theta,
    states: Any,
    data_seed: tf.Tensor,
    perturbation_seeds: tf.Tensor,
    data: Any,
  ) -> tuple[estimator_base.Sample, Any]:
    unroll = _unroll(task.with_data(data), lopt)

    def one(args: tuple) -> tuple[estimator_base.Sample, Any]:
      state, seed = args
      return estimator.sample(unroll, theta, state, length, data_seed, seed, sigma)

    state_spec = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape[1:], x.dtype), states)
    theta_spec = tf.nest.map_structure(lambda x: tf.TensorSpec(x.shape, tf.float32), theta)
    scalar = tf.TensorSpec([], tf.float32)
    output_spec = (estimator_base.Sample(theta_spec, theta_spec, scalar, scalar), state_spec)
    return tf.map_fn(one, (states, perturbation_seeds), fn_output_signature=output_spec)

  return lambda theta, states, data_seed, perturbation_seeds: sample_fn(
    theta,
    states,
    random_seeds.as_seed(data_seed),
    tf.convert_to_tensor(perturbation_seeds, tf.int32),
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
    outer loss an untruncated unroll would have), on the batches the truncations read.
  """

  @tf.function(autograph=False)
  def run_loss(
    theta: nests.Theta, state: opt_base.OptState, data_seed: tf.Tensor, data: Any
  ) -> tf.Tensor:
    (loss,), _ = truncated_unroll.outer_losses(
      _unroll(task.with_data(data), lopt),
      (theta,),
      (state,),
      horizon,
      truncated_unroll.data_seeds(data_seed),
    )
    return loss

  return lambda theta, state, data_seed: run_loss(
    theta, state, random_seeds.as_seed(data_seed), task.data
  )


def make_outer_step_fn(
  outer_optimizer: opt_base.Optimizer, estimator: estimator_base.Estimator
) -> Callable[..., tuple[opt_base.OptState, nests.Theta, tf.Tensor]]:
  """The compiled outer step from N samples, in the chief's form (module docstring).

  Args:
    outer_optimizer: the pure-function rule that updates theta.
    estimator: the estimator whose `combine` makes the gradient from the samples.

  Returns:
    fn(outer_state, samples) -> (outer_state, gradient, num_kept): `samples` an
    estimator_base.Sample with leaves [N, ...]; the non-finite samples are dropped and the state
    is updated with the rest's combined gradient, or left as it was when none is finite.
  """

  @tf.function(autograph=False)
  def outer_step(
    outer_state: opt_base.OptState, samples: estimator_base.Sample
  ) -> tuple[opt_base.OptState, nests.Theta, tf.Tensor]:
    keep = estimates.finite_mask(samples.rp, samples.es, samples.loss_plus, samples.loss_minus)
    num_kept = tf.reduce_sum(tf.cast(keep, tf.int32))
    rp, es = (
      tf.nest.map_structure(lambda x: tf.boolean_mask(x, keep), nest)
      for nest in (samples.rp, samples.es)
    )
    gradient = estimator.combine(rp, es)
    new_state = tf.cond(
      num_kept > 0, lambda: outer_optimizer.update(outer_state, gradient), lambda: outer_state
    )
    return new_state, gradient, num_kept

  return outer_step
