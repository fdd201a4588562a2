"""The one chief loop and the one worker loop, for local mode and the cluster alike (App. C).

  chief_loop(files, transport, incarnation, idle):
    publish theta; until the last outer step:
      take a batch (or, if fewer samples are queued, call idle() and try again);
      filter (samples of a theta this chief never had, duplicates);
      apply (drop stale and non-finite, merge, Adam); publish theta; record; checkpoint if due.
      (stop early once outer_training.max_inner_steps inner steps are taken)
    save; tell the workers training has finished.
  WorkerLoop(worker, transport).run():
    until training has finished: read theta, compute one sample from the worker's inner run
    (worker_step.Worker.step), put it.

Local mode (local.py) runs the chief loop with idle = "the next worker computes a sample", over
the in-process transport; the cluster roles (cluster.py) run it with idle = "sleep a moment" and
one WorkerLoop per worker process, over the TensorFlow-runtime transport.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import nests
from task_specific_learned_opt.distributed import base, chief_files, stopping, worker_step

WORKER_LOG_SECS = 30.0  # At most one progress line per worker this often (and the first sample).


class SampleFilter:
  """Which samples of a batch the chief may apply (beyond the Chief's non-finite/stale checks).

  Keeps a sample only if theta's lineage holds the theta it was computed with: its (chief
  incarnation, version) lies in one of the ranges of checkpoint_state.Lineage. So samples of a
  theta from a lost branch (versions an earlier chief run reached past the checkpoint this one
  resumed, however many restarts ago) are dropped. Drops any (worker, worker run, sample index)
  seen before, too.
  """

  def __init__(self, ranges: Sequence[tuple[int, int, int | None]]):
    """Makes the filter of one chief run.

    Args:
      ranges: (incarnation, first version, last version or None for open-ended) of every chief
        run that led to the current theta, this one last.
    """
    self.ranges = [tuple(r) for r in ranges]
    self._last_index = {}  # (worker_id, worker_run) -> highest sample index seen.

  def __call__(self, batch: base.SampleBatch) -> tuple[np.ndarray, int, int]:
    """(keep mask [B], number from a lost theta, number of duplicates) for `batch`."""
    incarnation = np.asarray(batch.incarnation)
    version = np.asarray(batch.theta_version)
    kept = np.zeros(incarnation.shape, bool)
    for owner, first, last in self.ranges:
      kept |= (incarnation == owner) & (version >= first) & (last is None or version <= last)
    lost = ~kept
    duplicate = np.zeros_like(lost)
    ids, runs = np.asarray(batch.worker_id).tolist(), np.asarray(batch.worker_run).tolist()
    for i, key in enumerate(zip(ids, runs, strict=True)):
      if lost[i]:
        continue
      index = int(batch.sample_index[i])
      if index <= self._last_index.get(key, -1):
        duplicate[i] = True
      else:
        self._last_index[key] = index
    return ~(lost | duplicate), int(np.sum(lost)), int(np.sum(duplicate))


def chief_loop(
  files: chief_files.ChiefFiles,
  transport: base.Transport,
  incarnation: int,
  idle: Callable[[], None],
  after_step: Callable[[], None] | None = None,
) -> dict:
  """Outer-trains until the experiment's last outer step; saves at exit; tells workers it is over.

  Every update (apply, publish, record) runs with SIGINT/SIGTERM held, so an interrupt never
  leaves theta published but unrecorded; a checkpoint is written at exit, interrupted or not. A
  SIGTERM stops the loop before its next outer step (stopping.py).

  Args:
    files: the chief and its train dir, restored from the latest checkpoint.
    transport: where samples come from and theta goes.
    incarnation: this chief run's id (the samples computed from its theta carry it).
    idle: called whenever fewer than a batch of samples are queued (local mode: the next worker
      computes a sample; a cluster: a short sleep).
    after_step: called after every outer step once it is recorded (local mode: the in-process
      evaluator).

  Returns:
    The last outer step's statistics (empty if no step was taken).

  Raises:
    stopping.Terminated: a SIGTERM asked the chief to stop (after the checkpoint is saved).
  """
  chief, setup = files.chief, files.setup
  files.lineage.begin(incarnation)
  accept = SampleFilter(files.lineage.ranges())
  transport.publish_theta(nests.flatten_numpy(chief.theta_numpy()), chief.step)
  files.snapshot()  # Step 0's theta (or the step resumed from, if due and not yet kept).
  if chief.step >= setup.num_outer_steps:
    logging.info(
      "Outer step %d already reached %d; nothing to train.", chief.step, setup.num_outer_steps
    )
  stats, samples_taken, active = {}, 0, False
  try:
    while chief.step < setup.num_outer_steps:
      if files.budget_reached():
        logging.info(
          "The budget of %d inner steps is reached (%d taken) at outer step %d; stopping.",
          setup.max_inner_steps,
          files.inner_steps.total,
          chief.step,
        )
        files.finish()
        break
      stopping.check()  # Between outer steps: the safe point for SIGTERM.
      active = True
      batch = transport.take_samples(chief.batch_size)
      if batch is None:
        idle()
        continue
      samples_taken += len(batch.loss_plus)
      files.inner_steps.add(batch.num_steps, batch.worker_id)
      keep, num_lost, num_duplicate = accept(batch)
      if not keep.any():
        logging.warning("A whole batch was from a lost theta or seen before; skipped.")
        continue
      with stopping.interrupts_deferred():  # Apply, publish and record: all or nothing.
        kept = base.select(batch, keep)
        stats = chief.apply(kept)
        transport.publish_theta(nests.flatten_numpy(chief.theta_numpy()), chief.step)
        stats.update(
          num_lost_theta=num_lost,
          num_duplicate=num_duplicate,
          num_workers_in_batch=len(set(kept.worker_id.tolist())),
          num_queued=transport.queued(),
        )
        if setup.record_samples:
          fields = ("worker_id", "worker_run", "sample_index", "incarnation", "theta_version")
          stats["samples"] = np.stack([getattr(kept, f) for f in fields], 1).tolist()
        stats = files.record(stats, samples_taken)
        files.snapshot()
      files.save_if_due()
      if after_step is not None:
        after_step()
    else:  # The last outer step, not an interrupt.
      files.finish()
  finally:
    if active:  # Else nothing changed since the checkpoint it resumed from.
      files.save()
  transport.finish()
  return stats


class Computed(NamedTuple):
  """The samples a worker loop computed and has not delivered yet (WorkerLoop.compute)."""

  samples: list[base.Sample]  # One, or a batched worker's B (batched_worker.py).
  state: Any  # The worker's state after them.
  seconds: float


class WorkerLoop:
  """One worker's loop: read theta, compute a sample from its inner run, put it; until it is over.

  `step` is one pass (local mode interleaves the passes of its workers); `run` repeats it.
  `state` (the worker's inner run) is public so local mode can checkpoint it.
  """

  def __init__(
    self,
    worker: worker_step.Worker,
    transport: base.Transport,
    worker_run: int = 0,
    state: worker_step.WorkerState | None = None,
  ):
    """Makes the loop.

    Args:
      worker: computes samples.
      transport: where theta comes from and samples go.
      worker_run: an id of this worker process, put on its samples (duplicates are told apart
        per (worker, run)).
      state: the worker's state to continue from; a fresh one if None.
    """
    self.worker = worker
    self.transport = transport
    self.worker_run = int(worker_run)
    self.state = state if state is not None else worker.initial_state()
    self.num_put = 0
    self.num_lost = 0  # Samples computed but not delivered (the chief did not answer).
    self._template = tf.nest.map_structure(np.asarray, worker.lopt.init(0))
    self._last_log = -float("inf")

  def step(self) -> bool:
    """Computes and puts one sample; False, computing nothing, once training has finished."""
    computed = self.compute()
    if computed is None:
      return False
    self.deliver(computed)
    return True

  def compute(self) -> Computed | None:
    """Reads theta and computes one sample from the worker's inner run; None once training has
    finished. Changes nothing: `deliver` takes the worker's next state and puts the sample.

    Local mode calls `compute` of several loops at once, in threads (each loop has its own
    worker and state), then `deliver` of each in the loops' order, so an interrupt while they
    compute leaves every loop as it was.
    """
    published = self.transport.read_theta()
    if published is None:
      return None
    theta, version = published
    start = time.time()
    samples, state = self.worker.step(base.unflatten(theta, self._template), version, self.state)
    if isinstance(samples, base.Sample):
      samples = [samples]
    return Computed(samples, state, time.time() - start)

  def deliver(self, computed: Computed) -> None:
    """Takes the worker's next state from `computed` and puts its samples, numbered."""
    put_start = time.time()
    self.state = computed.state
    for sample in computed.samples:
      # Every sample gets a new index, delivered or not: a put whose answer was lost may still
      # have reached the queue, and the next sample must not look like its duplicate.
      index = self.num_put + self.num_lost
      sample = sample._replace(worker_run=self.worker_run, sample_index=index)
      if not self.transport.put_sample(sample):
        self.num_lost += 1
        continue
      self.num_put += 1
    if self.num_put and time.time() - self._last_log > WORKER_LOG_SECS:
      logging.info(
        "worker %d: sample %d at theta version %d, K %d, L+ %.4f, %.2f s for %d (put %.1f ms)",
        self.worker.worker_id,
        self.num_put,
        sample.theta_version,
        sample.num_steps,
        sample.loss_plus,
        computed.seconds,
        len(computed.samples),
        1000 * (time.time() - put_start),
      )
      self._last_log = time.time()

  def run(self, max_samples: int | None = None) -> int:
    """Steps until training has finished (or `max_samples` were put); returns samples put."""
    while max_samples is None or self.num_put < max_samples:
      if not self.step():
        logging.info(
          "The chief has finished; worker %d leaves after %d samples.",
          self.worker.worker_id,
          self.num_put,
        )
        break
    return self.num_put
