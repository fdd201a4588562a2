"""Running candidate optimizers on the held-out protocol's runs: per-step losses and metrics.

`evaluate_run` trains one task from one initialisation with one candidate (an exported theta, a
hand-designed optimizer, a search's winner; candidates.py) and measures train, validation and
test loss and accuracy at given steps, and the training speed. `evaluate_candidates` does that
for every run of the protocol (protocol.py) and every candidate, on the same tasks, inits and
data, and adds per run:

  mean_loss        the mean minibatch training loss over the run;
  mean_valid_loss  the mean validation loss at the evenly spaced steps (step 0 excluded): the
                   L_valid of baseline_search.py, so a search's L_valid and an evaluation's agree;
  mean_test_loss   the mean test loss at the same steps.

The compiled functions of a (family, candidate kind) pair take the task's data and the
candidate's values as arguments, so every task and every grid value reuses one trace.

Runs are independent: `evaluate_candidates.parallel_runs` runs that many of a task's runs at once
in threads, which on a machine with more cores than one run keeps busy (with one intra-op thread
an inner run, a sequence of small ops, uses about one core) finishes the evaluation sooner. The
numbers are the same either way; only the speeds the runs measure then share the cores, so the
wall-clock curves of such an evaluation should come from its timing rounds (`timing_rounds`).
"""

import collections
import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import inner_training, random_seeds, tracing
from task_specific_learned_opt.evaluation import candidates as candidates_lib
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import run_cache, wallclock
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base

# A Candidate's `make`: its values (theta, or hyper-parameters, a nest of tensors) -> Optimizer.
_Make = Callable[[Any], opt_base.Optimizer]


class _Compiled:
  """The compiled functions of one (family, make) pair: task data and values are arguments."""

  def __init__(self, template: task_base.Task, make: _Make, num_eval_batches: int):
    """Wraps (but does not yet trace) init, run and the metrics of each split.

    Args:
      template: a task of the family; the compiled functions read other tasks' data through it.
      make: the candidates' values -> Optimizer.
      num_eval_batches: batches averaged by each metrics function.
    """

    def task_opt(task_data: Any, values: Any) -> tuple[task_base.Task, opt_base.Optimizer]:
      return template.with_data(task_data), make(values)

    @tf.function(autograph=False, reduce_retracing=True)
    def init(task_data: Any, values: Any, seed: tf.Tensor) -> opt_base.OptState:
      task, opt = task_opt(task_data, values)
      return opt.init(task.init_params(seed))

    @tf.function(autograph=False, reduce_retracing=True)
    def run(
      task_data: Any,
      values: Any,
      state: opt_base.OptState,
      first: tf.Tensor,
      num_steps: tf.Tensor,
      seed: tf.Tensor,
    ) -> tuple[opt_base.OptState, tf.Tensor]:
      task, opt = task_opt(task_data, values)
      return inner_training.unroll(task, opt, state, num_steps, seed, first)

    def metrics_fn(split: str) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
      @tf.function(autograph=False, reduce_retracing=True)
      def metrics(
        task_data: Any, values: Any, state: opt_base.OptState, seed: tf.Tensor
      ) -> tuple[tf.Tensor, tf.Tensor]:
        task, opt = task_opt(task_data, values)
        params = opt.get_params(state)
        losses, accuracies = [], []
        for i in range(num_eval_batches):
          batch = task.batch(split, random_seeds.fold_in(seed, i))
          losses.append(task.loss(params, batch))
          if hasattr(task, "accuracy"):
            accuracies.append(task.accuracy(params, batch))
        accuracy = tf.reduce_mean(accuracies) if accuracies else tf.constant(np.nan)
        return tf.reduce_mean(losses), accuracy

      return metrics

    self.init, self.run = init, run
    self.metrics = {split: metrics_fn(split) for split in ("train", "valid", "test")}
    for function in (init, run, *self.metrics.values()):
      tracing.traces_per_variant(function)


_COMPILED = {}
_COMPILED_LOCK = threading.Lock()  # Runs may be evaluated in threads (parallel_runs).


def _compiled(
  family: task_base.TaskFamily, task: task_base.Task, make: _Make, num_eval_batches: int
) -> _Compiled:
  # `make` by equality: the bound opt_fn of one learned optimizer is a new object each time it is
  # read, and equal to the others, so the candidates of one lopt (thetas) share one trace.
  key = (id(family), task.trace_key, make, num_eval_batches)
  with _COMPILED_LOCK:
    if key not in _COMPILED:
      # Holding family keeps its id from being reused by another object.
      _COMPILED[key] = (_Compiled(task, make, num_eval_batches), family)
    return _COMPILED[key][0]


def evaluate_run(
  family: task_base.TaskFamily,
  task: task_base.Task,
  candidate: candidates_lib.Candidate,
  num_steps: int,
  seed: random_seeds.SeedLike,
  points: np.ndarray,
  num_eval_batches: int = 5,
  splits: Sequence[str] = ("train", "test"),
) -> dict:
  """One inner run of `candidate` on `task`, measured at `points` (steps, starting with 0).

  Args:
    family: the family `task` belongs to (its tasks share compiled functions).
    task: the inner problem.
    candidate: the optimizer.
    num_steps: inner steps of the run.
    seed: the run's seed (random_seeds.STREAMS "run_params" and "run_data").
    points: increasing steps where the metrics are measured.
    num_eval_batches: batches averaged for each measurement (the same batches every time).
    splits: the splits measured ("train", "valid", "test").

  Returns:
    {"losses": [num_steps] clipped minibatch training losses (as inner_training.train),
     "<split>_loss", "<split>_accuracy" for each of `splits`: [len(points)] arrays,
     "steps_per_second": training speed, over every chunk but the first}.
  """
  compiled = _compiled(family, task, candidate.make, num_eval_batches)
  init_seed, data_seed, eval_seed = random_seeds.run_seeds(seed)
  values = tf.nest.map_structure(tf.convert_to_tensor, candidate.values)
  state = compiled.init(task.data, values, init_seed)
  record = {f"{s}_{m}": [] for s in splits for m in ("loss", "accuracy")}
  losses, timed_steps, timed_seconds, done = [], 0, 0.0, 0

  def measure() -> None:
    for split in splits:
      loss, accuracy = compiled.metrics[split](
        task.data, values, state, random_seeds.measured_split_seed(eval_seed, split)
      )
      record[f"{split}_loss"].append(float(loss))
      record[f"{split}_accuracy"].append(float(accuracy))

  for point in points:
    n = int(point) - done
    if n > 0:
      start = time.perf_counter()
      state, chunk = compiled.run(
        task.data, values, state, tf.constant(done), tf.constant(n), data_seed
      )
      chunk = chunk.numpy()
      if done > 0:  # The first chunk (one step) may include tracing.
        timed_steps, timed_seconds = timed_steps + n, timed_seconds + time.perf_counter() - start
      losses.append(chunk)
      done += n
    measure()
  result = {k: np.asarray(v) for k, v in record.items()}
  result["losses"] = np.concatenate(losses) if losses else np.zeros([0])
  result["steps_per_second"] = timed_steps / timed_seconds if timed_seconds else float("nan")
  return result


@gin.configurable("evaluate_candidates", allowlist=["parallel_runs"])
def evaluate_candidates(
  protocol: protocol_lib.HeldOutProtocol,
  candidates: Sequence[candidates_lib.Candidate],
  cache: run_cache.RunCache | None = None,
  parallel_runs: int = 1,
  tasks: Sequence[int] | None = None,
) -> dict:
  """Every candidate on the same tasks, inits and data of `protocol`.

  Each run is measured on every split at the log-spaced curve steps and at the evenly spaced
  steps of the run-averaged losses (one sorted set of points, `steps`).

  Args:
    protocol: the tasks, inits, steps and seeds.
    candidates: the optimizers (distinct names).
    cache: finished runs (of an evaluation that stopped) taken instead of running them again;
      each run made is added to it.
    parallel_runs: how many of a task's runs are made at once, each in a thread (gin:
      `evaluate_candidates.parallel_runs`). The same numbers for any value; the runs' own
      speeds then share the cores.
    tasks: only these of the protocol's task indices (e.g. a search refined per task), with
      their own seeds and cache entries; None: all of them.

  Returns:
    {"steps": every measured step, "average_steps": the evenly spaced ones, "results": {name:
    arrays}}. Arrays: train/valid/test loss/accuracy [num_tasks, num_inits, len(steps)];
    mean_loss [num_tasks, num_inits] (the mean minibatch training loss of the run);
    mean_valid_loss and mean_test_loss [num_tasks, num_inits] (the mean over average_steps);
    final_test_loss [num_tasks, num_inits] (the test loss at the last step);
    steps_per_second [num_tasks, num_inits]. With `tasks`, len(tasks) rows instead of num_tasks.

  Raises:
    ValueError: `parallel_runs` is below 1.
  """
  if parallel_runs < 1:
    raise ValueError(f"evaluate_candidates.parallel_runs must be at least 1, got {parallel_runs}.")
  averaged = protocol.average_steps()
  points = protocol.points()
  where = np.searchsorted(points, averaged)
  digests = {c.name: run_cache.digest(c.values, c.settings) for c in candidates}
  results = {c.name: {} for c in candidates}
  task_indices = range(protocol.num_tasks) if tasks is None else [int(t) for t in tasks]
  progress = _Progress(len(task_indices) * protocol.num_inits * len(candidates))

  def run(task: task_base.Task, t: int, r: int, c: candidates_lib.Candidate) -> dict:
    made = evaluate_run(
      protocol.family,
      task,
      c,
      protocol.num_steps,
      protocol_lib.run_seed(protocol.seed, t, r),
      points,
      protocol.num_eval_batches,
      protocol_lib.SPLITS,
    )
    measured = {k: v for k, v in made.items() if k != "losses"}
    measured.update(_run_means(made, where))
    return measured

  def finish(
    t: int,
    r: int,
    c: candidates_lib.Candidate,
    made: Callable[[], dict] | None,
    cached: dict | None,
  ) -> None:
    measured = cached
    if measured is None:
      measured = made()  # The run's future's result, or the run itself when serial.
      if cache is not None:
        cache.put(c.name, digests[c.name], t, r, measured)
    for key, value in measured.items():
      results[c.name].setdefault(key, []).append(value)
    progress.log(t, r, c.name, measured, measured["steps_per_second"])

  # Runs are started in order, at most 2 x parallel_runs ahead of the oldest unfinished one (a
  # task's data is held while runs of it are under way), and finished in order: results, cache
  # and log as a serial evaluation has them.
  pool = futures.ThreadPoolExecutor(parallel_runs, "eval_run") if parallel_runs > 1 else None
  window = collections.deque()
  task, task_index = None, None
  try:
    for t in task_indices:
      for r in range(protocol.num_inits):
        for c in candidates:
          cached = cache.get(c.name, digests[c.name], t, r) if cache is not None else None
          made = None
          if cached is None:
            if task_index != t:
              task, task_index = protocol.family.sample(protocol_lib.task_seed(protocol.seed, t)), t
            args = (task, t, r, c)
            made = pool.submit(run, *args).result if pool else functools.partial(run, *args)
          window.append((t, r, c, made, cached))
          while len(window) > (2 * parallel_runs if pool else 0):
            finish(*window.popleft())
    while window:
      finish(*window.popleft())
  finally:
    if pool:
      pool.shutdown(cancel_futures=True)
  shape = [len(task_indices), protocol.num_inits]
  for name in results:
    results[name] = {
      k: np.reshape(np.asarray(v), shape + list(np.shape(v[0]))) for k, v in results[name].items()
    }
  return {"steps": points, "average_steps": averaged, "results": results}


def time_candidates(
  protocol: protocol_lib.HeldOutProtocol,
  candidates: Sequence[candidates_lib.Candidate],
  repetitions: int,
  num_steps: int | None = None,
  warmup: int = 1,
) -> dict[str, float]:
  """Each candidate's inner steps per second, timed in interleaved rounds in this process.

  The speeds an evaluation's runs measure depend on what ran beside each of them (and a long
  evaluation may be split over processes); the wall-clock curves of Fig. 6 compare speeds, so
  these are timed here alike: the protocol's first run of every candidate, `num_steps` steps from
  the same state, the candidates called in turn (A B C A B C ...) for `repetitions` rounds after
  `warmup` untimed ones (wallclock.time_interleaved, as bin/benchmark times).

  Args:
    protocol: the evaluation's runs (its first task and init are timed).
    candidates: the optimizers.
    repetitions: timed rounds.
    num_steps: steps per timed call (default: the protocol's).
    warmup: untimed rounds first (the first traces).

  Returns:
    {name: the median of its rounds' steps per second}.
  """
  num_steps = int(num_steps or protocol.num_steps)
  task = protocol.family.sample(protocol_lib.task_seed(protocol.seed, 0))
  seed = protocol_lib.run_seed(protocol.seed, 0, 0)
  init_seed, data_seed, _ = random_seeds.run_seeds(seed)
  train_fns = {
    c.name: _timed_run(protocol, task, c, init_seed, data_seed, num_steps) for c in candidates
  }
  rates, _ = wallclock.time_interleaved(train_fns, num_steps, repetitions, warmup)
  return {name: float(np.median(r)) for name, r in rates.items()}


def _timed_run(
  protocol: protocol_lib.HeldOutProtocol,
  task: task_base.Task,
  candidate: candidates_lib.Candidate,
  init_seed: tf.Tensor,
  data_seed: tf.Tensor,
  num_steps: int,
) -> Callable[[], tf.Tensor]:
  """What one timed call of time_candidates runs: `num_steps` steps from the same first state."""
  compiled = _compiled(protocol.family, task, candidate.make, protocol.num_eval_batches)
  values = tf.nest.map_structure(tf.convert_to_tensor, candidate.values)
  state = compiled.init(task.data, values, init_seed)
  first, steps = tf.constant(0), tf.constant(num_steps)
  return lambda: compiled.run(task.data, values, state, first, steps, data_seed)[1]


def _run_means(run: dict, where: np.ndarray) -> dict[str, float]:
  """A run's averages: its minibatch training loss, its validation and test loss at `where`;
  and its test loss at the last step."""
  return {
    "mean_loss": float(np.mean(run["losses"])),
    "mean_valid_loss": float(np.mean(run["valid_loss"][where])),
    "mean_test_loss": float(np.mean(run["test_loss"][where])),
    "final_test_loss": float(run["test_loss"][-1]),
  }


class _Progress:
  """Logs each finished run of an evaluation with its averages and the time left."""

  def __init__(self, total: int):
    self.total, self.done, self.start = total, 0, time.time()

  def log(self, t: int, r: int, name: str, means: dict, steps_per_second: float) -> None:
    self.done += 1
    rate = self.done / (time.time() - self.start)
    logging.info(
      "eval %d/%d: task %d init %d %s: mean train loss %.4f, mean valid loss %.4f, "
      "mean test loss %.4f, %.0f steps/s; ETA %.0fs",
      self.done,
      self.total,
      t,
      r,
      name,
      means["mean_loss"],
      means["mean_valid_loss"],
      means["mean_test_loss"],
      steps_per_second,
      (self.total - self.done) / rate,
    )
