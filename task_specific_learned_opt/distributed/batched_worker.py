"""A worker of B tasks: the samples of B inner runs from one compiled call (outer/task_batch.py).

`BatchedWorker` holds B `Worker`s (worker ids id * B ... id * B + B - 1) and steps their inner
runs together: one call of the estimator's `sample` on their task batch gives B samples, each
the sample its worker would compute alone from the same state, seeds and K
(tests/outer/test_task_batch.py). The chief sees B workers' samples, each with its own worker
id and sample index, so that staleness, duplicates, checkpoints and the inner-step counts work
as for B workers.

The B inner runs are in lockstep: each truncation's K is the first worker's (its curriculum
jitter, capped at the steps its run has left), every run starts and resets together, and
`stagger` staggers the group as one. The tasks, initial weights, data and perturbations are each
worker's own: they are those B separate workers with the same ids would use.
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import gin
import tensorflow as tf

from task_specific_learned_opt import nests
from task_specific_learned_opt.distributed import base, worker_step
from task_specific_learned_opt.outer import task_batch


class BatchedWorkerState(NamedTuple):
  """The B workers' counters and the estimator's state of their task batch."""

  workers: tuple  # B worker_step.WorkerState, each with estimator_state None.
  estimator_state: Any = None  # Of the task batch (LOptBatch's theta copies, BatchState).


@gin.configurable(denylist=["workers"])
class BatchedWorker:
  """Produces B samples per call, one per inner run of its B workers."""

  def __init__(
    self,
    workers: Sequence[worker_step.Worker],
    group_models: bool = False,
    vectorize_updates: bool = False,
  ):
    """Makes the worker.

    Args:
      workers: the B workers; they must share their family, learned optimizer, estimator and
        settings (sigma, objective, horizon, schedule, recomputation), and differ in worker id.
      group_models: run the B tasks' convolutional networks as one network of B groups, one
        grouped convolution per layer (outer/task_batch.TaskBatch); the same samples to float
        rounding. For families of image classifiers with one ConvNet. On CPU it is faster for
        small networks only (the quickstart's), slower at the paper's size
        (docs/performance.md).
      vectorize_updates: compute the B tasks' learned updates of each inner step as one
        vectorised computation (tf.vectorized_map; outer/task_batch.LOptBatch) instead of B
        side by side; the same samples to float rounding. For tasks of one parameter
        structure. Meant for GPUs, where B small updates are B times the kernel launches; on
        CPU it is slower (docs/performance.md).

    Raises:
      ValueError: no workers, or workers with different settings.
    """
    self.workers = tuple(workers)
    if not self.workers:
      raise ValueError("A batched worker needs at least one worker.")
    first = self.workers[0]
    for w in self.workers[1:]:
      if (w.family, w.lopt, w.estimator, w.sigma, w.objective, w.horizon, w.recompute) != (
        first.family,
        first.lopt,
        first.estimator,
        first.sigma,
        first.objective,
        first.horizon,
        first.recompute,
      ):
        raise ValueError("The workers of a batched worker must share their experiment.")
    self.num_tasks = len(self.workers)
    self.worker_id = first.worker_id  # For the logs.
    self.lopt = first.lopt
    self.estimator = first.estimator
    self.group_models = bool(group_models)
    self.vectorize_updates = bool(vectorize_updates)

  def initial_state(self) -> BatchedWorkerState:
    """The state of workers that have not started: the first step starts their tasks."""
    return BatchedWorkerState(tuple(w.initial_state() for w in self.workers))

  def _start_tasks(self, theta: nests.Theta, state: BatchedWorkerState) -> BatchedWorkerState:
    """`state` with each worker's next task started and the batch's estimator state for them."""
    inner = []
    counters = []
    for w, s in zip(self.workers, state.workers, strict=True):
      inner.append(w.new_inner_state(theta, s.task_index))
      counters.append(worker_step.WorkerState(s.task_index + 1, s.truncation_index))
    batch_theta = task_batch.copies(theta, self.num_tasks)
    estimator_state = self.estimator.init_state(task_batch.BatchState(tuple(inner)), batch_theta)
    return BatchedWorkerState(tuple(counters), estimator_state)

  def step(
    self, theta: nests.Theta, theta_version: int, state: BatchedWorkerState
  ) -> tuple[list[base.Sample], BatchedWorkerState]:
    """One truncation of every inner run at `theta` (published at outer step `theta_version`).

    Args:
      theta: the meta-parameters (a nest of tensors or arrays).
      theta_version: the outer step theta was published at (the samples carry it).
      state: the workers' state after their previous truncation.

    Returns:
      (the B samples, in the workers' order; the next state).
    """
    theta = tf.nest.map_structure(tf.convert_to_tensor, theta)
    if not isinstance(state.estimator_state, self.estimator.state_type):
      state = self._start_tasks(theta, state)
    first, first_state = self.workers[0], state.workers[0]
    inner_step = self.estimator.inner_step(state.estimator_state)
    num_steps = first.truncation_length(theta_version, first_state, inner_step)
    tasks, data_seeds, perturbation_seeds = [], [], []
    for w, s in zip(self.workers, state.workers, strict=True):
      task_index = s.task_index - 1
      tasks.append(w.task(task_index))
      data_seeds.append(w.data_seed(task_index))
      perturbation_seeds.append(w.perturbation_seed(s))
    sample_fn = worker_step.compiled_sample(
      first,
      task_batch.TaskBatch(tasks, self.group_models),
      self.num_tasks,
      self.vectorize_updates,
    )
    estimate, estimator_state = sample_fn(
      theta,
      state.estimator_state,
      tuple(t.data for t in tasks),
      tf.constant(num_steps, tf.int32),
      tf.stack(data_seeds),
      tf.stack(perturbation_seeds),
    )
    done = inner_step + num_steps >= first.run_horizon(first_state.task_index - 1)
    next_state = BatchedWorkerState(
      tuple(s._replace(truncation_index=s.truncation_index + 1) for s in state.workers),
      None if done else estimator_state,
    )
    rp = task_batch.unstack(estimate.rp, self.num_tasks)
    es = task_batch.unstack(estimate.es, self.num_tasks)
    samples = [
      base.Sample(
        g_rp=nests.flatten_numpy(rp[b]),
        g_es=nests.flatten_numpy(es[b]),
        loss_plus=float(estimate.loss_plus[b]),
        loss_minus=float(estimate.loss_minus[b]),
        theta_version=int(theta_version),
        num_steps=num_steps,
        inner_step=inner_step,
        worker_id=w.worker_id,
      )
      for b, w in enumerate(self.workers)
    ]
    return samples, next_state
