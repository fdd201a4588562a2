"""Outer-training a hand-designed rule's hyper-parameters with truncations (Sec. 2.4, Fig. 3).

theta holds hyper-parameters of a hand-designed rule (learned_optimizers/hyperparameters.py, e.g.
log lr of Adam). An inner run of `horizon` steps is split into truncations; each truncation is
one outer step, computed and applied as local mode's workers and chief do, with any registered
estimator (outer/estimators/):

  samples = estimator.sample(...) of each of N worker states   (their states carried, stopped)
  theta  <- outer-optimizer(theta, estimator.combine(the finite samples))

"backprop" (Fig. 3's truncated backpropagation: one unroll at theta, the gradient of the
truncation's loss alone, N = 1) ignores how theta shaped the state the truncation starts from
(the truncation bias, Sec. 2.4); "pes" (Persistent ES, beyond the paper, N antithetic pairs, each
worker state with its own + and - inner states and sum of perturbations, all reset with the run)
does not. The outer loss is Sec. 2.4's: the mean of the losses the truncation's steps compute
before their updates (figures/hyperparameter_truncations.py).
"""

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.figures import hyperparameter_truncations as truncations
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import base as task_base

BACKPROP = "backprop"  # The estimator of Fig. 3's curves and panel (c).
# Called after every truncation as hook(run, k, worker states, samples, perturbation seeds).
Hook = Callable[[int, int, Any, estimator_base.Sample, tf.Tensor], None]


def _scalar(theta: nests.Theta) -> float:
  return float(theta[truncations.PARAMETER])


class OuterTrainer:
  """Outer-trains theta on one task with any estimator, over inner runs and resets.

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
    self._estimators: dict[str, estimator_base.Estimator] = {}
    self._sample_fns: dict[tuple, Callable[..., tuple[estimator_base.Sample, Any]]] = {}
    self._outer_steps: dict[str, Callable[..., Any]] = {}

  def estimator(self, name: str) -> estimator_base.Estimator:
    """The registered estimator `name` (one instance per trainer)."""
    if name not in self._estimators:
      self._estimators[name] = registry.get(name)
    return self._estimators[name]

  def sample_fn(
    self, name: str, length: int, sigma: float = 0.0
  ) -> Callable[..., tuple[estimator_base.Sample, Any]]:
    """The compiled truncation of estimator `name` (truncations.make_sample_fn), made once."""
    key = (name, int(length), float(sigma))
    if key not in self._sample_fns:
      self._sample_fns[key] = truncations.make_sample_fn(
        self.task, self.lopt, self.estimator(name), int(length), float(sigma)
      )
    return self._sample_fns[key]

  def truncation_fn(self, length: int) -> Callable[..., truncations.TruncationOutput]:
    """One backpropagated truncation at theta: (theta, inner state, data seed) -> its output.

    The "backprop" estimator's sample of a single worker state: the truncation's loss, its
    gradient (this truncation alone) and the inner state it ends in.
    """
    sample_fn, estimator = self.sample_fn(BACKPROP, length), self.estimator(BACKPROP)

    def truncation(
      theta: nests.Theta, state: opt_base.OptState, data_seed: tf.Tensor
    ) -> truncations.TruncationOutput:
      states = truncations.stack_states(estimator.init_state(state, theta), 1)
      sample, states = sample_fn(theta, states, data_seed, tf.zeros([1, 2], tf.int32))
      sample, states = tf.nest.map_structure(lambda x: x[0], (sample, states))
      return truncations.TruncationOutput(sample.loss_plus, sample.rp, states.inner_state)

    return truncation

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

  def train(
    self,
    name: str,
    length: int,
    num_samples: int = 1,
    sigma: float = 0.0,
    hook: Hook | None = None,
  ) -> dict:
    """Outer-trains theta from lopt.init with estimator `name` over truncations of `length`.

    Every inner run starts `num_samples` worker states from the run's fresh inner state
    (estimator.init_state); each truncation gives one sample per worker state, on the run's
    batches, with perturbation seeds new for every run, truncation and state; the outer step
    drops the non-finite samples and applies the estimator's combination of the rest.

    Args:
      name: a registered estimator ("backprop": Fig. 3's curves; "pes": Persistent ES).
      length: steps per truncation; it must divide the horizon.
      num_samples: worker states (PES: antithetic pairs) per outer step.
      sigma: the standard deviation of the estimator's perturbation of theta.
      hook: called after every truncation as hook(run, k, states, samples, perturbation seeds),
        for tests.

    Returns:
      {"inner_step": [steps trained when each truncation ended], "outer_loss": [the mean over
       the samples of (L+ + L-) / 2], "gradient": [the combined d loss / d log lr],
       "learning_rate": [exp(theta) after each outer step], "skipped": outer steps with no
       finite sample, "dropped": non-finite samples, "seconds": wall time}.
    """
    truncations_per_run = self.truncations_per_run(length)
    estimator = self.estimator(name)
    sample_fn = self.sample_fn(name, length, sigma)
    if name not in self._outer_steps:
      self._outer_steps[name] = truncations.make_outer_step_fn(self.outer_optimizer, estimator)
    outer_step = self._outer_steps[name]
    start = time.time()
    outer_state = self.outer_optimizer.init(self.lopt.init(self.seed))
    record = {"inner_step": [], "outer_loss": [], "gradient": [], "learning_rate": []}
    skipped = dropped = 0
    perturbation_seed = random_seeds.fold_in(self.seed, truncations.PES_TAG)
    for run in range(self.num_runs):
      theta = self.outer_optimizer.get_params(outer_state)
      inner_state, data_seed = self.fresh_state(theta, run)
      states = truncations.stack_states(estimator.init_state(inner_state, theta), num_samples)
      run_seed = random_seeds.fold_in(perturbation_seed, run)
      for k in range(truncations_per_run):
        theta = self.outer_optimizer.get_params(outer_state)
        truncation_seed = random_seeds.fold_in(run_seed, k)
        seeds = tf.stack([random_seeds.fold_in(truncation_seed, n) for n in range(num_samples)])
        samples, states = sample_fn(theta, states, data_seed, seeds)
        if hook is not None:
          hook(run, k, states, samples, seeds)
        outer_state, gradient, num_kept = outer_step(outer_state, samples)
        skipped += int(num_kept == 0)
        dropped += num_samples - int(num_kept)
        record["gradient"].append(_scalar(gradient))
        record["learning_rate"].append(
          math.exp(_scalar(self.outer_optimizer.get_params(outer_state)))
        )
        record["inner_step"].append((run * truncations_per_run + k + 1) * length)
        record["outer_loss"].append(
          float(tf.reduce_mean(samples.loss_plus + samples.loss_minus) / 2.0)
        )
    record.update(skipped=skipped, dropped=dropped, seconds=round(time.time() - start, 3))
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
