"""The chief and worker roles of a cluster (bin/chief, bin/worker; paper App. C).

Each role starts its task's server (cluster_spec.py), opens the TensorFlow-runtime transport
(tf_runtime.py) and runs the loop every mode shares (loops.py):
  - the chief keeps theta's master copy, Adam's slots and the outer step in its own process
    (chief_update.Chief, built here from the experiment and checkpointed in its train dir by
    chief_files.ChiefFiles), runs the chief loop, and when training is over waits for the
    workers that are still there to leave;
  - a worker runs the worker loop on its own inner runs and never waits for other workers; a
    restarted worker gets a new run id (it seeds its inner runs), so it does not repeat samples.
A chief that restarts resumes from its checkpoint under a new incarnation; samples computed with
a theta it never restored are dropped (loops.SampleFilter).

Both roles parse the same gin files and read one experiment record from them (outer_training.py):
its estimator (`outer_training.estimator`, outer/estimators/) is how the chief combines a batch
and what the workers compute and carry.
"""

import random
import time

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import nests
from task_specific_learned_opt.distributed import (
  batched_worker,
  chief_files,
  cluster_spec,
  loops,
  stopping,
  tf_runtime,
  worker_step,
)
from task_specific_learned_opt.distributed import outer_training as outer_lib

WAITING_LOG_SECS = 60.0  # How often an idle chief says it is waiting for samples.


def _random_id() -> int:
  return random.SystemRandom().randrange(1, 2**62)


class _Waiting:
  """The cluster chief's idle: a short sleep, and a line now and then saying what it waits for."""

  def __init__(self, transport: tf_runtime.TFRuntimeTransport, batch_size: int, poll_secs: float):
    self.transport, self.batch_size, self.poll_secs = transport, batch_size, poll_secs
    self.last_log = time.time()

  def __call__(self) -> None:
    if time.time() - self.last_log > WAITING_LOG_SECS:
      logging.info(
        "Waiting for samples: %d of %d queued.", self.transport.queued(), self.batch_size
      )
      self.last_log = time.time()
    time.sleep(self.poll_secs)


@gin.configurable(denylist=["train_dir", "spec", "setup", "resume_changed_experiment"])
def run_chief(
  train_dir: str,
  spec: cluster_spec.TaskSpec,
  setup: outer_lib.OuterTraining | None = None,
  poll_secs: float = 0.005,
  linger_secs: float = 60.0,
  resume_changed_experiment: bool = False,
) -> dict:
  """bin/chief: the chief loop over the cluster's transport; resumes from the train dir.

  Args:
    train_dir: where checkpoints, theta exports, summaries and plots go.
    spec: the cluster and this task (the chief).
    setup: the experiment; gin's `outer_training()` if None.
    poll_secs: how long to sleep when the queue holds less than a batch.
    linger_secs: after the last step, the longest to wait for workers to learn that training is
      over (it ends as soon as every worker has left or is gone).
    resume_changed_experiment: resume a train dir of another experiment (same theta shapes) on
      purpose (see chief_files.ChiefFiles).

  Returns:
    The last outer step's statistics.

  Raises:
    cluster_spec.ClusterError: the chief's port is taken or its server cannot start.
    train_dir_lib.CheckpointError: the train dir's checkpoint cannot be restored.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  num_workers = len(spec.cluster["worker"])
  server = cluster_spec.start_server(spec)
  files = chief_files.ChiefFiles(
    train_dir,
    outer_lib.make_chief(setup),
    setup,
    f"{setup.family.name}, {setup.lopt.name}, {num_workers} workers (cluster)",
    resume_changed_experiment=resume_changed_experiment,
  )
  template = files.chief.theta_numpy()
  transport = tf_runtime.TFRuntimeTransport(
    server.target,
    nests.flatten_numpy(template).size,
    tf_runtime.fingerprint(template),
    batch_size=setup.batch_size,
  )
  incarnation = _random_id()
  transport.start(nests.flatten_numpy(template), files.chief.step, incarnation)
  logging.info(
    "Chief ready at outer step %d on %s, waiting for samples from %d worker task(s).",
    files.chief.step,
    spec.cluster["chief"][0],
    num_workers,
  )
  idle = _Waiting(transport, files.chief.batch_size, poll_secs)
  stats = loops.chief_loop(files, transport, incarnation, idle)
  _let_workers_leave(transport, spec, linger_secs)
  return stats


def _let_workers_leave(
  transport: tf_runtime.TFRuntimeTransport, spec: cluster_spec.TaskSpec, linger_secs: float
) -> None:
  """Waits until every worker has left or is gone (its port refuses), at most `linger_secs`."""
  addresses = spec.cluster["worker"]
  deadline = time.time() + linger_secs
  while time.time() < deadline and not stopping.requested():
    transport.take_samples(transport.queued() or 1)  # Unblocks workers waiting on a full queue.
    left = transport.workers_left()
    gone = sum(cluster_spec.nobody_listens(a, timeout=0.2) for a in addresses)
    if left >= len(addresses) or gone == len(addresses):
      break
    time.sleep(0.1)
  logging.info(
    "Training finished; %d of %d worker task(s) were told to stop.",
    transport.workers_left(),
    len(addresses),
  )


def make_worker(
  setup: outer_lib.OuterTraining, index: int, worker_run: int, tasks_per_worker: int = 1
) -> worker_step.Worker | batched_worker.BatchedWorker:
  """The worker of a worker task: gin's Worker, with the experiment's estimator.

  Args:
    setup: the experiment.
    index: the worker task's index (its worker id; with B tasks per worker, its workers' ids
      are index * B ... index * B + B - 1).
    worker_run: this worker process's id; it seeds the inner runs, so a restarted worker does
      not repeat its samples.
    tasks_per_worker: B, inner runs computed in one call (distributed/batched_worker.py).

  Returns:
    A worker_step.Worker computing the samples of `setup.estimator`, or a batched worker of B.

  Raises:
    ValueError: tasks_per_worker < 1.
  """
  if tasks_per_worker < 1:
    raise ValueError(f"run_worker.tasks_per_worker must be >= 1, got {tasks_per_worker}.")
  estimator = outer_lib.make_estimator(setup)
  workers = [
    worker_step.Worker(
      family=setup.family,
      lopt=setup.lopt,
      worker_id=index * tasks_per_worker + b,
      seed=(setup.seed, worker_run % 2**31),
      estimator=estimator,
    )
    for b in range(tasks_per_worker)
  ]
  return workers[0] if tasks_per_worker == 1 else batched_worker.BatchedWorker(workers)


@gin.configurable(denylist=["spec", "setup"])
def run_worker(
  spec: cluster_spec.TaskSpec,
  setup: outer_lib.OuterTraining | None = None,
  chief_timeout_secs: float = 600.0,
  max_samples: int | None = None,
  tasks_per_worker: int = 1,
) -> int:
  """bin/worker: the worker loop over the cluster's transport, until the chief says done.

  Args:
    spec: the cluster and this worker's task.
    setup: the experiment; gin's `outer_training()` if None.
    chief_timeout_secs: how long the chief may be unreachable (at start or after it went away)
      before the worker gives up with an error; meanwhile it retries with backoff.
    max_samples: stop after this many samples (None: until the chief finishes).
    tasks_per_worker: B, inner runs this worker computes in one call, giving B samples
      (distributed/batched_worker.py).

  Returns:
    The number of samples this worker enqueued.

  Raises:
    tf_runtime.ChiefUnreachableError: the chief did not answer for `chief_timeout_secs`.
    tf_runtime.ExperimentMismatchError: the chief runs another experiment.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  cluster_spec.start_server(spec)
  chief_address = spec.cluster["chief"][0]
  template = tf.nest.map_structure(np.asarray, setup.lopt.init(setup.seed))
  transport = tf_runtime.TFRuntimeTransport(
    f"grpc://{chief_address}",
    nests.flatten_numpy(template).size,
    tf_runtime.fingerprint(template),
    batch_size=setup.batch_size,
    chief_timeout_secs=chief_timeout_secs,
  )
  worker_run = _random_id()
  worker = make_worker(setup, spec.index, worker_run, tasks_per_worker)
  logging.info(
    "Worker %d (run %d) connecting to the chief at %s.", spec.index, worker_run, chief_address
  )
  return loops.WorkerLoop(worker, transport, worker_run).run(max_samples)
