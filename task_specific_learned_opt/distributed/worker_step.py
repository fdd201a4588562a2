"""The worker's truncation step (paper App. C): one sample of its estimator per truncation.

A worker keeps one inner-training run going across truncations: its task, the inner optimizer
state (params, momenta, inner step t). Each truncation:
  1. K from the curriculum at the current outer step, capped at the steps left before the
     horizon (10,000 inner steps);
  2. one perturbation e ~ N(0, sigma^2 I); the + and - unrolls of K steps on identical data;
  3. the sample (g_rp, g_es, L+, L-, theta version, K); the estimator's end state is kept (for
     truncated ES the + unroll's end state);
  4. past the horizon, the next truncation starts a new task (new classes, new weights, zero
     momenta, t = 0).
With `stagger=True` a worker's first inner run is cut at a fraction u ~ U(0, 1] of the horizon
(u from the worker's seed), so workers that start together drift apart: after their first reset
their inner runs are at independent points of the horizon, as the paper's asynchronous workers
are, and a batch's samples no longer all share their inner step.
Every random choice comes from seeds derived from (seed, worker id, task index, truncation
index), so a sample is reproducible from theta, the worker state and the seed.

What a truncation computes and carries is the estimator's (outer/estimators/base.py): the
worker keeps the estimator's state (the inner state the next unroll starts from; for persistent
ES also the - unroll's state and the sum of the perturbations) and calls its `sample` inside its
one compiled function. The worker itself never asks which estimator it runs.
"""

import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds, tracing
from task_specific_learned_opt.distributed import base
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import schedules, task_batch, truncated_unroll
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import base as task_base

HORIZON = 10000  # Paper App. D.3: inner problems are trained for 10k steps, then reset.
SIGMA = 0.1  # Paper Sec. 3: sigma^2 = 0.01.
_SAMPLE_FNS = {}
_SAMPLE_FNS_LOCK = threading.Lock()  # Local mode's workers compute in threads.


class WorkerState(NamedTuple):
  """Everything a worker carries between truncations (all of it checkpointable)."""

  task_index: int  # Tasks this worker has started; the current one is task_index - 1.
  truncation_index: int  # Truncations this worker has run.
  # The estimator's state of the current inner run (estimator.state_type); None: start a new task.
  estimator_state: Any = None


def compiled_sample(
  worker: "Worker",
  template: task_base.Task,
  num_tasks: int | None = None,
  vectorize_updates: bool = False,
) -> Callable[..., tuple[estimator_base.Sample, Any]]:
  """The worker's estimator's `sample`, compiled once per configuration and shared.

  Workers of one process with the same configuration share one trace: the task's data is an
  argument, so any task of the family with the template's trace key runs through it.

  Args:
    worker: the worker whose family, learned optimizer, estimator and settings it computes with.
    template: a task of the family (for a task batch, an outer/task_batch.TaskBatch).
    num_tasks: None for one task; B for a task batch, whose theta is B copies of the one given.
    vectorize_updates: for a task batch, its B learned updates as one vectorised computation
      (outer/task_batch.LOptBatch).

  Returns:
    fn(theta, estimator_state, task_data, num_steps, data_seed, perturbation_seed) -> (sample,
    next estimator state).
  """
  key = (
    id(worker.family),
    template.trace_key,
    id(worker.lopt),
    worker.sigma,
    worker.objective,
    worker.recompute,
    id(worker.estimator),
    num_tasks,
    bool(vectorize_updates),
  )
  with _SAMPLE_FNS_LOCK:  # Local mode may call this from several threads.
    if key not in _SAMPLE_FNS:
      lopt, estimator = worker.lopt, worker.estimator
      sigma, objective, recompute = key[3:6]
      loss_shape = () if num_tasks is None else (num_tasks,)
      if num_tasks is not None:
        lopt = task_batch.LOptBatch(lopt, num_tasks, vectorize_updates)

      @tf.function(autograph=False, reduce_retracing=True)
      def sample_fn(
        theta: nests.Theta,
        estimator_state: Any,
        task_data: Any,
        num_steps: tf.Tensor,
        data_seed: tf.Tensor,
        perturbation_seed: tf.Tensor,
      ) -> tuple[estimator_base.Sample, Any]:
        if num_tasks is not None:
          theta = task_batch.copies(theta, num_tasks)
        unroll = truncated_unroll.Unroll(
          template.with_data(task_data), lopt, objective, recompute, loss_shape
        )
        return estimator.sample(
          unroll, theta, estimator_state, num_steps, data_seed, perturbation_seed, sigma
        )

      tracing.traces_per_variant(sample_fn)
      # Holding the family, lopt and estimator keeps their ids from being reused.
      _SAMPLE_FNS[key] = (sample_fn, worker.family, worker.lopt, estimator)
    return _SAMPLE_FNS[key][0]


@gin.configurable(denylist=["worker_id", "estimator"])
class Worker:
  """Produces samples of its estimator from truncations of its own inner-training run."""

  def __init__(
    self,
    family: task_base.TaskFamily,
    lopt: lopt_base.LearnedOptimizer,
    worker_id: int = 0,
    seed: int = 0,
    sigma: float = SIGMA,
    objective: str = "train",
    horizon: int = HORIZON,
    schedule: schedules.TruncationSchedule | None = None,
    recompute: bool = True,
    estimator: estimator_base.Estimator | None = None,
    stagger: bool = False,
  ):
    """Makes a worker.

    Args:
      family: the task family inner problems are sampled from.
      lopt: the learned optimizer being outer-trained.
      worker_id: this worker's index (it changes every seed it uses).
      seed: the experiment's seed.
      sigma: standard deviation of the ES perturbation (sigma^2 = 0.01 in the paper).
      objective: "train" (L_train) or "valid" (L_valid).
      horizon: inner steps before an inner problem is reset (10,000).
      schedule: truncation lengths; the paper's LinearCurriculum by default.
      recompute: chunks rerun in the backward pass (memory ~ K^(1/3) with two levels).
      estimator: what each truncation computes and carries (outer/estimators/); None: the
        paper's ("merged", whose workers run truncated antithetic pairs). Not a gin parameter:
        local mode and the cluster's workers make it from the experiment's estimator
        (`outer_training.estimator`), the one binding that also sets the chief's combination.
      stagger: cut the first inner run at u * horizon, u ~ U(0, 1] from the worker's seed, so
        workers started together reach their resets at different times (module docstring).

    Raises:
      ValueError: an unknown objective.
    """
    if objective not in truncated_unroll.OBJECTIVES:
      raise ValueError(
        f"Unknown objective {objective!r}; expected one of {truncated_unroll.OBJECTIVES}."
      )
    self.family = family
    self.lopt = lopt
    self.worker_id = int(worker_id)
    self.seed = random_seeds.fold_in(random_seeds.as_seed(seed), self.worker_id)
    self.sigma = float(sigma)
    self.objective = objective
    self.horizon = int(horizon)
    self.schedule = schedule if schedule is not None else schedules.LinearCurriculum()
    self.recompute = bool(recompute)
    self.estimator = estimator if estimator is not None else registry.get("merged")
    self.stagger = bool(stagger)
    self._task: task_base.Task | None = None
    self._task_index: int | None = None

  def initial_state(self) -> WorkerState:
    """The state of a worker that has not started: its first step starts a task."""
    return WorkerState(task_index=0, truncation_index=0)

  def task_seed(self, task_index: int) -> tf.Tensor:
    """The seed of this worker's `task_index`-th task: its classes, init and data.

    Args:
      task_index: which of this worker's tasks, counting from 0.

    Returns:
      An int32 [2] seed, a run seed: its "run_params" stream seeds the task's init and its
      "run_data" stream its data (random_seeds.STREAMS).
    """
    return random_seeds.fold_in(random_seeds.stream(self.seed, "worker_tasks"), task_index)

  def task(self, task_index: int) -> task_base.Task:
    """This worker's `task_index`-th task (the last one is kept in memory).

    Args:
      task_index: which of this worker's tasks, counting from 0.

    Returns:
      The task the family samples with task_seed(task_index).
    """
    if self._task_index != task_index:
      self._task = self.family.sample(self.task_seed(task_index))
      self._task_index = task_index
    return self._task

  def new_inner_state(self, theta: nests.Theta, task_index: int) -> opt_base.OptState:
    """A fresh inner run: the task's initial params, zero optimizer accumulators, t = 0.

    Args:
      theta: the meta-parameters whose optimizer makes the state (opt_fn(theta).init).
      task_index: which of this worker's tasks the run trains.

    Returns:
      The learned optimizer's initial state for the task's initial parameters.
    """
    init_seed = random_seeds.stream(self.task_seed(task_index), "run_params")
    params = self.task(task_index).init_params(init_seed)
    return self.lopt.opt_fn(theta).init(params)

  def _compiled(self, task: task_base.Task) -> Callable[..., tuple[estimator_base.Sample, Any]]:
    return compiled_sample(self, task)

  def data_seed(self, task_index: int) -> tf.Tensor:
    """The data seed of this worker's `task_index`-th inner run (its batches' stream)."""
    return random_seeds.stream(self.task_seed(task_index), "run_data")

  def perturbation_seed(self, state: WorkerState) -> tf.Tensor:
    """The seed of the perturbation of the truncation `state` is about to run."""
    return random_seeds.fold_in(
      random_seeds.stream(self.seed, "worker_perturbations"), state.truncation_index
    )

  def _start_task(self, theta: nests.Theta, state: WorkerState) -> WorkerState:
    """`state` with a new task's inner run started (the estimator's initial state for it)."""
    inner_state = self.new_inner_state(theta, state.task_index)
    return WorkerState(
      state.task_index + 1, state.truncation_index, self.estimator.init_state(inner_state, theta)
    )

  def run_horizon(self, task_index: int) -> int:
    """The inner steps of this worker's `task_index`-th run: the horizon, or less if staggered.

    Args:
      task_index: which of this worker's tasks, counting from 0.

    Returns:
      The horizon; with `stagger`, the first run's is ceil(u * horizon), u ~ U(0, 1] drawn
      from the worker's seed.
    """
    if not self.stagger or task_index > 0:
      return self.horizon
    first = random_seeds.stream(self.seed, "worker_first_truncation")
    u = 1.0 - schedules.truncation_uniform(first)  # In (0, 1].
    return max(1, int(np.ceil(u * self.horizon)))

  def truncation_length(self, outer_step: int, state: WorkerState, inner_step: int) -> int:
    """K for this truncation: the schedule at `outer_step`, jittered, capped at the run's end.

    Args:
      outer_step: the outer step of the theta the truncation runs at (the curriculum's clock).
      state: the worker's state (after its current task started); its truncation index seeds
        the jitter.
      inner_step: the inner step t0 the truncation starts from.

    Returns:
      K >= 1, at most run_horizon - inner_step (the steps left in the current inner run).
    """
    truncation_seed = random_seeds.fold_in(
      random_seeds.stream(self.seed, "worker_truncations"), state.truncation_index
    )
    u = schedules.truncation_uniform(truncation_seed)
    steps_left = self.run_horizon(state.task_index - 1) - int(inner_step)
    return self.schedule.length(int(outer_step), u, steps_left)

  def step(
    self, theta: nests.Theta, theta_version: int, state: WorkerState
  ) -> tuple[base.Sample, WorkerState]:
    """One truncation at `theta` (published at outer step `theta_version`).

    Args:
      theta: the meta-parameters (a nest of tensors or arrays).
      theta_version: the outer step theta was published at (the sample carries it).
      state: the worker's state after its previous truncation.

    Returns:
      (the sample, with the estimator's theta-shaped estimates flattened; the worker's next
      state).
    """
    theta = tf.nest.map_structure(tf.convert_to_tensor, theta)
    # A state of another estimator (e.g. of a run that was not persistent ES) starts a new task
    # rather than invent what this estimator carries.
    if not isinstance(state.estimator_state, self.estimator.state_type):
      state = self._start_task(theta, state)
    task_index = state.task_index - 1
    task = self.task(task_index)
    inner_step = self.estimator.inner_step(state.estimator_state)
    num_steps = self.truncation_length(theta_version, state, inner_step)
    args = (
      task.data,
      tf.constant(num_steps, tf.int32),
      self.data_seed(task_index),
      self.perturbation_seed(state),
    )
    done = inner_step + num_steps >= self.run_horizon(task_index)
    estimate, estimator_state = self._compiled(task)(theta, state.estimator_state, *args)
    next_state = WorkerState(
      task_index=state.task_index,
      truncation_index=state.truncation_index + 1,
      estimator_state=None if done else estimator_state,
    )
    sample = base.Sample(
      g_rp=nests.flatten_numpy(estimate.rp),
      g_es=nests.flatten_numpy(estimate.es),
      loss_plus=float(estimate.loss_plus),
      loss_minus=float(estimate.loss_minus),
      theta_version=int(theta_version),
      num_steps=num_steps,
      inner_step=inner_step,
      worker_id=self.worker_id,
    )
    return sample, next_state
