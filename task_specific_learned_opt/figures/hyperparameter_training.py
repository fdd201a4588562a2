"""Outer-training a hand-designed rule's hyper-parameters with truncations (Sec. 2.4, Fig. 3).

theta holds hyper-parameters of a hand-designed rule (learned_optimizers/hyperparameters.py, e.g.
log lr of Adam). An inner run of `horizon` steps is split into truncations; each truncation is
one outer step (figures/hyperparameter_truncations.py, built from outer/):

  loss_k, g_k = the truncation's outer loss (truncated_unroll.outer_losses, the STEP_LOSSES
                objective: the mean of the losses its steps compute before their updates) and
                its gradient by backpropagation through the truncation only
  theta <- outer-optimizer(theta, g_k)

The inner state is carried from one truncation to the next with its gradient stopped, so g_k
ignores how theta shaped the state the truncation starts from (the truncation bias, Sec. 2.4).
The outer step has the chief's form: the samples are checked with estimates.finite_mask,
combined by the estimator's `combine` (outer/estimators/: "rp" for backpropagation, "pes" for
Persistent ES) and applied by the outer-optimizer's pure update; a step with a non-finite sample
is skipped.

Persistent ES (outer/pes.py, beyond the paper) keeps `pairs` antithetic pairs of + and - inner
states, e redrawn every truncation (antithetic.perturbation) and summed since the run's reset
(pes.accumulate); g = the mean over pairs of pes.gradient. Its unrolls run forward only, each a
truncated_unroll.outer_losses, vectorized over the 2 * pairs particles (tf.vectorized_map).
"""

import math
import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.figures import hyperparameter_truncations as truncations
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import pes
from task_specific_learned_opt.tasks import base as task_base


def _scalar(theta: nests.Theta) -> float:
  return float(theta[truncations.PARAMETER])


class OuterTrainer:
  """Outer-trains theta with truncated backpropagation or PES on one task.

  Args:
    task: the inner problem (one task for every inner run).
    lopt: the learned optimizer (LearnedHyperparameters of Adam).
    outer_optimizer: a pure-function rule (optimizers/*) applied to the theta dict.
    horizon: inner steps per inner run before the reset.
    num_runs: inner runs (resets) per curve.
    seed: the experiment's seed (initialisations, batches, perturbations).
  """

  def __init__(
    self,
    task: task_base.Task,
    lopt: lopt_base.LearnedOptimizer,
    outer_optimizer: opt_base.Optimizer,
    horizon: int,
    num_runs: int,
    seed: int,
  ):
    """Stores the settings; see the class docstring for the arguments."""
    self.task = task
    self.lopt = lopt
    self.outer_optimizer = outer_optimizer
    self.horizon = int(horizon)
    self.num_runs = int(num_runs)
    self.seed = int(seed)
    self._outer_steps = {
      e: truncations.make_outer_step_fn(outer_optimizer, e) for e in ("rp", "pes")
    }
    self._truncation_fns: dict[int, Callable[..., truncations.TruncationOutput]] = {}

  def truncation_fn(self, length: int) -> Callable[..., truncations.TruncationOutput]:
    """The compiled truncation of `length` steps (made once per length)."""
    if length not in self._truncation_fns:
      self._truncation_fns[length] = truncations.make_truncation_fn(self.task, self.lopt, length)
    return self._truncation_fns[length]

  def truncations_per_run(self, length: int) -> int:
    """horizon / length.

    Raises:
      ValueError: if `length` does not divide the horizon.
    """
    if length < 1 or self.horizon % length:
      raise ValueError(f"Truncation length {length} must divide the horizon {self.horizon}.")
    return self.horizon // length

  def fresh_state(self, theta: nests.Theta, run: int) -> tuple[opt_base.OptState, tf.Tensor]:
    """(inner state at the start of run `run`, the run's data seed).

    Args:
      theta: the current meta-parameters.
      run: the index of the inner run.
    """
    init_seed, data_seed = truncations.run_seeds(self.seed, run)
    return truncations.initial_state(self.task, self.lopt, theta, init_seed), data_seed

  def outer_step(
    self,
    outer_state: opt_base.OptState,
    estimator: str,
    samples: nests.Theta,
    losses: tuple[tf.Tensor, tf.Tensor],
    record: dict,
  ) -> tuple[opt_base.OptState, bool]:
    """Applies one outer step (make_outer_step_fn) and records its gradient and theta.

    Args:
      outer_state: the outer-optimizer's state.
      estimator: "rp" or "pes".
      samples: the per-sample gradients, leaves [N, ...].
      losses: (loss_plus, loss_minus), each [N].
      record: gets the step's "gradient" and "learning_rate" (exp(theta) after the step).

    Returns:
      (new outer state, whether it was applied): the state is unchanged when a sample is not
      finite.
    """
    outer_state, gradient, applied = self._outer_steps[estimator](outer_state, samples, *losses)
    record["gradient"].append(_scalar(gradient))
    theta = self.outer_optimizer.get_params(outer_state)
    record["learning_rate"].append(math.exp(_scalar(theta)))
    return outer_state, bool(applied)

  def train_truncated(self, length: int) -> dict:
    """Outer-trains theta from lopt.init with truncations of `length` steps.

    Args:
      length: steps per truncation; it must divide the horizon.

    Returns:
      {"inner_step": [steps trained when each truncation ended], "outer_loss": [its loss],
       "gradient": [its d loss / d log lr], "learning_rate": [exp(theta) after its outer step],
       "skipped": outer steps skipped for a non-finite loss or gradient, "seconds": wall time}.
    """
    truncations_per_run = self.truncations_per_run(length)
    truncation = self.truncation_fn(length)
    start = time.time()
    outer_state = self.outer_optimizer.init(self.lopt.init(self.seed))
    record = {"inner_step": [], "outer_loss": [], "gradient": [], "learning_rate": []}
    skipped = 0
    for run in range(self.num_runs):
      state, data_seed = self.fresh_state(self.outer_optimizer.get_params(outer_state), run)
      for k in range(truncations_per_run):
        out = truncation(self.outer_optimizer.get_params(outer_state), state, data_seed)
        samples = tf.nest.map_structure(lambda g: g[None], out.gradient)
        losses = (out.loss[None], out.loss[None])
        outer_state, applied = self.outer_step(outer_state, "rp", samples, losses, record)
        skipped += int(not applied)
        state = out.state
        record["inner_step"].append((run * truncations_per_run + k + 1) * length)
        record["outer_loss"].append(float(out.loss))
    record.update(skipped=skipped, seconds=round(time.time() - start, 3))
    return record

  def train_pes(
    self,
    length: int,
    pairs: int,
    sigma: float,
    hook: Callable[[int, int, pes.Accumulator, nests.Theta], None] | None = None,
  ) -> dict:
    """Outer-trains theta from lopt.init with Persistent ES over truncations of `length` steps.

    Every pair keeps its own + and - inner states and its own sum of perturbations (one
    pes.Accumulator whose leaves have a leading [pairs] axis), all reset at the start of each
    inner run (the run's fresh state for + and -). The outer gradient is the mean over pairs of
    pes.gradient(L+, L-, xi, sigma).

    Args:
      length: steps per truncation; it must divide the horizon.
      pairs: antithetic pairs.
      sigma: the standard deviation of each perturbation of theta.
      hook: called after every truncation as hook(run, k, accumulator, perturbation), for
        tests.

    Returns:
      As train_truncated, with "outer_loss" the mean of L+ and L- over the pairs, "gradient"
      the mean PES gradient, and "accumulator_count" the accumulator's num_truncations.
    """
    truncations_per_run = self.truncations_per_run(length)
    pes_truncation = truncations.make_pes_fn(self.task, self.lopt, length, sigma)
    start = time.time()
    outer_state = self.outer_optimizer.init(self.lopt.init(self.seed))
    record = {"inner_step": [], "outer_loss": [], "gradient": [], "learning_rate": []}
    record["accumulator_count"] = []
    skipped = 0
    pes_seed = random_seeds.fold_in(self.seed, truncations.PES_TAG)
    for run in range(self.num_runs):
      theta = self.outer_optimizer.get_params(outer_state)
      state, data_seed = self.fresh_state(theta, run)
      states = truncations.stack_states(state, 2 * pairs)
      accumulator = pes.initial_state(tf.nest.map_structure(lambda t: tf.fill([pairs], t), theta))
      run_seed = random_seeds.fold_in(pes_seed, run)
      for k in range(truncations_per_run):
        theta = self.outer_optimizer.get_params(outer_state)
        out = pes_truncation(theta, states, data_seed, random_seeds.fold_in(run_seed, k))
        accumulator = pes.accumulate(accumulator, out.perturbation)
        if hook is not None:
          hook(run, k, accumulator, out.perturbation)
        per_pair = pes.gradient(out.loss_plus, out.loss_minus, accumulator.perturbation_sum, sigma)
        losses = (out.loss_plus, out.loss_minus)
        outer_state, applied = self.outer_step(outer_state, "pes", per_pair, losses, record)
        skipped += int(not applied)
        states = out.states
        record["inner_step"].append((run * truncations_per_run + k + 1) * length)
        record["outer_loss"].append(float(tf.reduce_mean(out.loss_plus + out.loss_minus) / 2.0))
        record["accumulator_count"].append(accumulator.num_truncations)
    record.update(skipped=skipped, seconds=round(time.time() - start, 3))
    return record

  def gradients_over_run(self, length: int, theta: nests.Theta, run: int = 0) -> dict:
    """The outer-gradient of every truncation of one inner run at fixed theta (panel (c)).

    Args:
      length: steps per truncation; it must divide the horizon.
      theta: held fixed over the run (no outer step).
      run: which inner run's initialisation and batches (0: the first run of every curve).

    Returns:
      {"start_step": [first inner step of each truncation], "gradient": [its d loss / d log lr],
       "outer_loss": [its loss], "sum": the sum of the gradients over the run}.
    """
    truncations_per_run = self.truncations_per_run(length)
    truncation = self.truncation_fn(length)
    state, data_seed = self.fresh_state(theta, run)
    record = {"start_step": [], "gradient": [], "outer_loss": []}
    for k in range(truncations_per_run):
      out = truncation(theta, state, data_seed)
      state = out.state
      record["start_step"].append(k * length)
      record["gradient"].append(_scalar(out.gradient))
      record["outer_loss"].append(float(out.loss))
    record["sum"] = float(np.sum(record["gradient"]))
    return record
