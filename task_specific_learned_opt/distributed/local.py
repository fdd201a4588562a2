"""Local outer-training: the chief loop and W worker loops composed in one process (App. C).

The chief loop of loops.py runs over the in-process transport; whenever fewer than a batch of
samples are queued, the next workers (round robin) compute samples from their own inner runs at
the current theta, `parallel_samples` of them at once in threads (1 by default: one sample
already keeps 2 cores busy), put in turn order. The samples do not depend on how many run at
once: a run is deterministic, so a resumed run continues exactly as an uninterrupted one would.
The train dir holds what train_dir.py lists; here the checkpoint also holds every worker's inner
run (its estimator's state: with PES both unrolls' states and the sum of the perturbations, so a
resumed PES run is exact too) and the round-robin counter.

The chief and the workers are built here from one experiment record (outer_training.py): the
chief with its estimator and batch size, the workers with the same estimator
(`outer_training.estimator`, outer/estimators/), which says what they compute and carry.
"""

import io
import os
import pickle
from collections.abc import Callable
from concurrent import futures
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import cards, layout, nests
from task_specific_learned_opt.distributed import (
  batched_worker,
  chief_files,
  evaluator_role,
  in_process,
  loops,
  worker_step,
)
from task_specific_learned_opt.distributed import outer_training as outer_lib
from task_specific_learned_opt.distributed import train_dir as train_dir_lib
from task_specific_learned_opt.evaluation import reporting
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import persistent_es

# Samples computed at once (train_local.parallel_samples). 1: on 2 cores a second sample at once
# measured 0.93-0.99 of the outer steps per minute (docs/performance.md), since the + and -
# unrolls of one sample already keep both inter-op threads busy.
PARALLEL_SAMPLES = 1


# Modules renamed since checkpoints were first written: their pickled worker states name the
# classes by the old paths.
_PACKAGE = "task_specific_learned_opt."
_RENAMED_MODULES = {_PACKAGE + "distributed.worker": _PACKAGE + "distributed.worker_step"}
_NUMPY_NAMES = {"_reconstruct", "ndarray", "dtype", "scalar"}
_NUMPY_MODULES = ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
_BUILTIN_NAMES = {
  "tuple",
  "list",
  "dict",
  "set",
  "frozenset",
  "int",
  "float",
  "complex",
  "bool",
  "str",
  "bytes",
  "slice",
}


class _WorkerStateFields:
  """Makes a worker_step.WorkerState from its pickled fields, in either of its layouts.

  Checkpoints written before the estimators were classes (outer/estimators/) hold
  (task_index, truncation_index, inner_state, minus_state, accumulator), with the PES fields None
  for truncated ES; they load as the state the estimator now carries for the same inner run.
  """

  def __new__(cls, task_index: int, truncation_index: int, *fields: Any) -> Any:
    if len(fields) <= 1:  # The current layout: (estimator_state,).
      return worker_step.WorkerState(task_index, truncation_index, *fields)
    inner_state, minus_state, accumulator = (list(fields) + [None, None])[:3]
    if inner_state is None:
      estimator_state = None
    elif accumulator is None:
      estimator_state = estimator_base.UnrollState(inner_state)
    else:
      estimator_state = persistent_es.PESState(inner_state, minus_state, accumulator)
    return worker_step.WorkerState(task_index, truncation_index, estimator_state)


_WORKER_STATE = (worker_step.__name__, worker_step.WorkerState.__name__)


class _StateUnpickler(pickle.Unpickler):
  """Unpickles the workers' states: classes of this package (by their current module, also when
  the checkpoint names a renamed one), numpy arrays and plain containers, nothing else, so that
  reading a checkpoint cannot call arbitrary functions."""

  def find_class(self, module: str, name: str) -> Any:
    module = _RENAMED_MODULES.get(module, module)
    if (module, name) == _WORKER_STATE:
      return _WorkerStateFields
    if module.startswith(_PACKAGE):
      value = super().find_class(module, name)
      if isinstance(value, type):
        return value
    elif (
      (module in _NUMPY_MODULES and name in _NUMPY_NAMES)
      or (module == "builtins" and name in _BUILTIN_NAMES)
      or (module, name) == ("collections", "OrderedDict")
    ):
      return super().find_class(module, name)
    raise train_dir_lib.CheckpointError(
      f"The checkpoint's worker states name {module}.{name}, which is not a class of this "
      "package, a numpy array or a container: it was not written by train_local. Move its "
      "checkpoints/ away or use a new --train_dir."
    )


def load_workers_state(string_value: bytes) -> dict:
  """The value `_WorkersState.serialize` wrote (also by an older version of the package)."""
  return _StateUnpickler(io.BytesIO(string_value)).load()


def _numpy_state(state: Any) -> Any:
  """`state` (a worker_step.WorkerState or a batched_worker.BatchedWorkerState) with its tensors
  (the estimator's state) as numpy arrays, for pickling."""
  if state.estimator_state is None:
    return state
  return state._replace(estimator_state=tf.nest.map_structure(np.asarray, state.estimator_state))


def _tasks_per_worker(state: Any) -> int:
  """B of a worker's state: its batched worker's tasks, or 1."""
  if isinstance(state, batched_worker.BatchedWorkerState):
    return len(state.workers)
  return 1


class _WorkersState(tf.train.experimental.PythonState):
  """The worker loops' states and the round-robin counter, saved inside the TF checkpoint."""

  def __init__(
    self,
    worker_loops: list[loops.WorkerLoop],
    transport: in_process.InProcessTransport | None = None,
    batch_size: int = 1,
    parallel_samples: int = 1,
  ):
    self.worker_loops = worker_loops
    self.num_samples = 0
    self.transport = transport
    self.batch_size = int(batch_size)
    self.parallel_samples = max(1, min(int(parallel_samples), len(worker_loops)))
    self._pool = None
    if self.parallel_samples > 1:
      self._pool = futures.ThreadPoolExecutor(self.parallel_samples, "local_worker")

  def serialize(self) -> bytes:
    states = [_numpy_state(loop.state) for loop in self.worker_loops]
    # Each worker's sample counters too, so that a resumed run goes on numbering its samples
    # where the checkpoint left off: a sample's (worker, run, index) stays unique.
    counts = [(loop.num_put, loop.num_lost) for loop in self.worker_loops]
    buffer = io.BytesIO()
    pickle.dump({"states": states, "num_samples": self.num_samples, "counts": counts}, buffer)
    return buffer.getvalue()

  def deserialize(self, string_value: bytes) -> None:
    value = load_workers_state(string_value)
    if len(value["states"]) != len(self.worker_loops):
      raise train_dir_lib.CheckpointError(
        f"The checkpoint holds {len(value['states'])} workers, this run has "
        f"{len(self.worker_loops)}: resume with --gin_bindings "
        f"'train_local.num_workers = {len(value['states'])}'."
      )
    for loop, state in zip(self.worker_loops, value["states"], strict=True):
      if type(state) is not type(loop.state):
        saved = _tasks_per_worker(state)
        raise train_dir_lib.CheckpointError(
          f"The checkpoint's workers compute {saved} task(s) per call, this run's "
          f"{_tasks_per_worker(loop.state)}: resume with --gin_bindings "
          f"'train_local.tasks_per_worker = {saved}'."
        )
    for loop, state in zip(self.worker_loops, value["states"], strict=True):
      loop.state = state
    counts = value.get("counts", [(0, 0)] * len(self.worker_loops))  # Older checkpoints: none.
    for loop, (num_put, num_lost) in zip(self.worker_loops, counts, strict=True):
      loop.num_put, loop.num_lost = num_put, num_lost
    self.num_samples = value["num_samples"]

  def next_worker(self) -> None:
    """The next worker in turn computes one sample."""
    loop = self.worker_loops[self.num_samples % len(self.worker_loops)]
    loop.step()
    self.num_samples += 1

  def next_workers(self) -> None:
    """The next workers in turn compute the samples the batch still needs, up to
    `parallel_samples` at once (each in a thread); they are put in turn order.

    The same samples, in the same order, as calling next_worker that many times: the chief does
    not step while they compute, so all of them see the same theta, and each worker's sample
    depends only on theta and its own state. Nothing changes until all of them are done.
    """
    wanted = self.batch_size - (self.transport.queued() if self.transport is not None else 0)
    count = max(1, min(wanted, self.parallel_samples))
    if count == 1:
      self.next_worker()
      return
    chosen = [
      self.worker_loops[(self.num_samples + i) % len(self.worker_loops)] for i in range(count)
    ]
    computed = list(self._pool.map(loops.WorkerLoop.compute, chosen))
    for loop, result in zip(chosen, computed, strict=True):
      if result is not None:
        loop.deliver(result)
    self.num_samples += count

  def close(self) -> None:
    """Stops the threads of parallel samples."""
    if self._pool is not None:
      self._pool.shutdown(wait=True)


@gin.configurable(denylist=["train_dir", "setup", "resume_changed_experiment"])
def train_local(
  train_dir: str,
  num_workers: int | None = None,
  setup: outer_lib.OuterTraining | None = None,
  final_evaluation: Callable[[str, lopt_base.LearnedOptimizer, nests.Theta], object] | None = None,
  resume_changed_experiment: bool = False,
  evaluate_snapshots: bool = False,
  parallel_samples: int = PARALLEL_SAMPLES,
  tasks_per_worker: int = 1,
) -> dict:
  """Outer-trains theta with a chief and `num_workers` workers in this process.

  Resumes from the train dir's latest checkpoint if there is one.

  Args:
    train_dir: where checkpoints, theta exports, summaries and plots go.
    num_workers: W, workers, each with its own inner-training run; None: the experiment's batch
      size (outer_training.batch_size), so that every batch holds one sample of each of W
      independent inner runs, as the paper's asynchronous workers give. A smaller W makes each
      batch hold consecutive truncations of fewer inner runs (correlated samples, which distort
      the merge's variance estimates); it keeps fewer inner states in memory and advances each
      inner run faster per outer step.
    setup: the experiment; gin's `outer_training()` if None.
    final_evaluation: called as final_evaluation(output_dir, lopt, theta) once the last outer
      step is reached (e.g. evaluation.held_out.compare_with_tuned_baseline); results go to
      <train_dir>/eval.
    resume_changed_experiment: resume a train dir of another experiment (same theta shapes) on
      purpose (see chief_files.ChiefFiles).
    evaluate_snapshots: run the evaluator (evaluator_role.Evaluator, gin) in this process after
      every outer step that kept a snapshot (outer_training.snapshot_every), and on the last
      one: performance over outer-training (Fig. 5). Its time counts in the outer steps'.
    parallel_samples: samples computed at once, each by its own worker in a thread, while the
      batch needs that many more (the same samples as one at a time: `_WorkersState`); for
      machines with more cores than one sample keeps busy. 1 (one at a time) measured best on
      2 cores (docs/performance.md).
    tasks_per_worker: B, inner runs each worker computes in one call, giving B samples
      (distributed/batched_worker.py; their runs are in lockstep). With W workers a batch of
      outer_training.batch_size samples takes batch_size / (W * B) calls per worker.

  Returns:
    The last outer step's statistics (empty if no step was taken).

  Raises:
    train_dir_lib.CheckpointError: the latest checkpoint cannot be read, or belongs to another
      experiment.
    ValueError: evaluate_snapshots without outer_training.snapshot_every.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  if evaluate_snapshots and setup.snapshot_every is None:  # Before anything is written.
    raise ValueError(
      "train_local.evaluate_snapshots needs snapshots to evaluate: bind "
      "outer_training.snapshot_every (e.g. 10)."
    )
  if final_evaluation is not None:
    _check_final_evaluation(final_evaluation)
  num_workers = setup.batch_size if num_workers is None else num_workers
  transport = in_process.InProcessTransport()
  workers_state = _WorkersState(
    _worker_loops(setup, num_workers, transport, tasks_per_worker),
    transport,
    setup.batch_size,
    parallel_samples,
  )
  files = chief_files.ChiefFiles(
    train_dir,
    outer_lib.make_chief(setup),
    setup,
    f"{setup.family.name}, {setup.lopt.name}, {num_workers} workers"
    + (f" of {tasks_per_worker} tasks each" if tasks_per_worker > 1 else ""),
    resume_changed_experiment=resume_changed_experiment,
    workers=workers_state,
  )
  evaluator = None
  if evaluate_snapshots:
    evaluator = evaluator_role.Evaluator(train_dir, setup.lopt, setup.family)
  try:
    stats = loops.chief_loop(
      files,
      transport,
      transport.incarnation,
      workers_state.next_workers,
      after_step=evaluator.run_pending if evaluator is not None else None,
    )
  finally:
    workers_state.close()
  if evaluator is not None:
    evaluator.run_pending()  # The last step's snapshot.
  if final_evaluation is not None:
    logging.info("Evaluating theta on held-out tasks (train_local.final_evaluation).")
    final_evaluation(os.path.join(train_dir, layout.EVAL_DIRNAME), setup.lopt, files.chief.theta())
    _add_final_evaluation_to_card(train_dir)
  return stats


def _add_final_evaluation_to_card(train_dir: str) -> None:
  """Puts the final comparison's results (eval/summary.json, theta "learned") on the card of the
  theta export, so that its one-line summary says how it did on held-out tasks of its family."""
  theta_dir = os.path.join(train_dir, layout.THETA_DIRNAME)
  summary_path = os.path.join(train_dir, layout.EVAL_DIRNAME, reporting.SUMMARY_FILENAME)
  card = cards.read_card(theta_dir)
  if card is None or not os.path.exists(summary_path):
    return
  card["results"] = [cards.results_from(os.path.abspath(summary_path), "learned", "in_family")]
  card["summary"] = cards.summary(card)
  cards.write_card(theta_dir, card)
  logging.info("Theta card: %s", card["summary"])


def _check_final_evaluation(final_evaluation: Callable) -> None:
  """Builds what the final evaluation's gin bindings build (its held-out family) now.

  gin builds a configurable's arguments when it is called, so a held-out family that cannot be
  made (more classes per task than its split holds, a model that does not fit the data) would
  stop the run only after all of outer-training; built here, it stops it before the first step.
  """
  try:
    gin.get_bindings(final_evaluation, resolve_references=False)
  except ValueError:
    return  # Not a gin configurable (a function given in code): nothing gin would build.
  gin.get_bindings(final_evaluation)  # Builds every argument bound in gin, the family included.


def _worker_loops(
  setup: outer_lib.OuterTraining,
  num_workers: int,
  transport: in_process.InProcessTransport,
  tasks_per_worker: int = 1,
) -> list[loops.WorkerLoop]:
  """The experiment's `num_workers` workers (one estimator for all), each in its loop; with B
  tasks per worker, worker i is a batched worker of the workers i * B ... i * B + B - 1."""
  if tasks_per_worker < 1:
    raise ValueError(f"train_local.tasks_per_worker must be >= 1, got {tasks_per_worker}.")
  estimator = outer_lib.make_estimator(setup)

  def worker(worker_id: int) -> worker_step.Worker:
    return worker_step.Worker(
      family=setup.family,
      lopt=setup.lopt,
      worker_id=worker_id,
      seed=setup.seed,
      estimator=estimator,
    )

  if tasks_per_worker == 1:
    return [loops.WorkerLoop(worker(i), transport) for i in range(num_workers)]
  return [
    loops.WorkerLoop(
      batched_worker.BatchedWorker(
        [worker(i * tasks_per_worker + b) for b in range(tasks_per_worker)]
      ),
      transport,
    )
    for i in range(num_workers)
  ]
