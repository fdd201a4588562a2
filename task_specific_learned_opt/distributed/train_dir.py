"""The chief's train dir: checkpoints, theta export, records and plots (paper App. C).

What the chief writes, in local mode and on a cluster alike:
  checkpoints/       full state (theta, Adam slots, outer step, plus what the mode adds), on a
                     timer and at exit, the last few kept (CheckpointManager);
  theta/             theta alone, for evaluation (checkpoints.save_theta);
  events.*           TensorBoard summaries, one point per outer step;
  progress.jsonl     the same numbers, one JSON line per outer step;
  outer_training.png the curves (outer loss, K, variances of g_rp and g_es, ES weight);
  operative_config.gin;
  experiment.json    the experiment this train dir holds (outer_training.experiment_record);
                     a restart with another experiment is refused, nothing overwritten;
  experiment_changes.jsonl  experiments it held before a deliberate change
                     (resume_changed_experiment), with the outer step of the change;
  theta_history/step_<outer step>/  theta every `outer_training.snapshot_every` outer steps, at
                     step 0 and at the last step (kept; a few KB each), for the evaluator
                     (evaluator.py), each with a snapshot id that changes if a restart redoes
                     that step;
  finished.json      written when the run reached its last outer step or its budget, removed
                     when it resumes (the evaluator stops once it has evaluated the last
                     snapshot).
Every record counts the inner steps behind it (InnerSteps: the K of every sample the chief has
taken, in all and per worker), so curves can be drawn against inner steps as the paper's Fig. 8
is, and `outer_training.max_inner_steps` stops a run at a budget of them.
A restart resumes from the latest checkpoint and forgets records of steps after it. The
checkpoint also holds the inner-step counts and the lineage of theta: which (chief incarnation,
theta version) ranges led to it, so that samples of a theta from a lost branch are never applied
(loops.SampleFilter).
"""

import contextlib
import json
import os
import re
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import checkpoints, plots
from task_specific_learned_opt.distributed import chief as chief_lib
from task_specific_learned_opt.distributed import outer_training as outer_lib

EXPERIMENT_FILENAME = "experiment.json"
EXPERIMENT_CHANGES_FILENAME = "experiment_changes.jsonl"
PROGRESS_FILENAME = "progress.jsonl"
PLOT_FILENAME = "outer_training.png"
THETA_HISTORY_DIRNAME = "theta_history"
FINISHED_FILENAME = "finished.json"
SUMMARY_KEYS = (
  "outer_loss",
  "loss_plus",
  "loss_minus",
  "mean_num_steps",
  "mean_inner_step",
  "rp_variance",
  "es_variance",
  "es_weight",
  "merged_variance",
  "gradient_norm",
  "num_dropped",
  "num_stale",
  "samples_per_second",
  "mean_staleness",
  "max_staleness",
  "num_lost_theta",  # Cluster mode: samples of a theta a restarted chief never had.
  "num_duplicate",
  "num_workers_in_batch",
  "inner_steps",
)


class CheckpointError(RuntimeError):
  """A checkpoint in the train dir that cannot be restored into this experiment."""


class ExperimentChangedError(CheckpointError):
  """A train dir that holds another experiment than the one being started."""


class Lineage(tf.train.experimental.PythonState):
  """The (chief incarnation, first version, last version) ranges that led to the current theta.

  A chief run that resumed at outer step s and reached t contributed the versions s..t of its
  incarnation; the ranges of the runs before it come from the checkpoint it resumed. Saved in
  the checkpoint, with the current run's range ending at the step being saved.
  """

  def __init__(self, chief: chief_lib.Chief):
    """Makes an empty lineage for `chief` (whose step ends the current range when saved)."""
    self.chief = chief
    self.past: list[tuple[int, int, int]] = []
    self.current: tuple[int, int] | None = None

  def begin(self, incarnation: int) -> None:
    """This chief run (`incarnation`) starts publishing at the chief's current step."""
    self.current = (int(incarnation), self.chief.step)

  def ranges(self) -> list[tuple[int, int, int | None]]:
    """Every range; the current run's is open-ended (last None)."""
    current = [(*self.current, None)] if self.current is not None else []
    return [*self.past, *current]

  def serialize(self) -> bytes:
    """The ranges, the current one ending at the chief's step (JSON)."""
    current = [(*self.current, self.chief.step)] if self.current is not None else []
    return json.dumps([*self.past, *current]).encode()

  def deserialize(self, string_value: bytes) -> None:
    """Restores the ranges of the runs before this one."""
    self.past = [tuple(r) for r in json.loads(string_value.decode())]


class InnerSteps(tf.train.experimental.PythonState):
  """Inner steps behind theta: the sum of K over every sample the chief has taken, per worker.

  A sample of K steps advanced its worker's inner run by K steps (its + and - unrolls ran K steps
  each). Samples the chief took and then dropped (stale, non-finite, from a lost theta) count
  too: their inner steps were run. Saved in the checkpoint, so a resumed run keeps counting.
  """

  def __init__(self) -> None:
    """Starts from zero."""
    self.total = 0
    self.per_worker: dict[int, int] = {}

  def add(self, num_steps: Any, worker_ids: Any) -> None:
    """Counts a batch: `num_steps` [B] (each sample's K) by `worker_ids` [B]."""
    for k, worker in zip(
      np.asarray(num_steps).tolist(), np.asarray(worker_ids).tolist(), strict=True
    ):
      self.total += int(k)
      self.per_worker[int(worker)] = self.per_worker.get(int(worker), 0) + int(k)

  def serialize(self) -> bytes:
    """The counts as JSON."""
    return json.dumps({"total": self.total, "per_worker": self.per_worker}).encode()

  def deserialize(self, string_value: bytes) -> None:
    """Restores the counts."""
    value = json.loads(string_value.decode())
    self.total = int(value["total"])
    self.per_worker = {int(k): int(v) for k, v in value["per_worker"].items()}


def snapshot_dir(train_dir: str, outer_step: int) -> str:
  """Where the theta of `outer_step` is kept (theta_history/step_<8 digits>)."""
  return os.path.join(train_dir, THETA_HISTORY_DIRNAME, f"step_{outer_step:08d}")


def snapshots(train_dir: str) -> dict[int, str]:
  """{outer step: directory} of the complete snapshots in theta_history/, by step."""
  root = os.path.join(train_dir, THETA_HISTORY_DIRNAME)
  found = {}
  for name in os.listdir(root) if os.path.isdir(root) else []:
    match = re.fullmatch(r"step_(\d{8})", name)
    if match:
      found[int(match.group(1))] = os.path.join(root, name)
  return dict(sorted(found.items()))


def format_seconds(seconds: float) -> str:
  """`seconds` as "1h02m03s" (whole seconds, negative counts as 0), for the log's ETA."""
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


class Recorder:
  """Summaries, the progress file and the plot."""

  def __init__(self, train_dir: str):
    """Opens the summary writer; the progress file and plot are made on first use.

    Args:
      train_dir: where events.*, progress.jsonl and outer_training.png go.
    """
    self.writer = tf.summary.create_file_writer(train_dir)
    self.path = os.path.join(train_dir, PROGRESS_FILENAME)
    self.plot_path = os.path.join(train_dir, PLOT_FILENAME)

  def record(self, stats: Mapping[str, float]) -> None:
    """Writes one outer step: SUMMARY_KEYS as TensorBoard scalars, all of it to progress.jsonl.

    Args:
      stats: the step's numbers (Chief.apply's and ChiefFiles.record's), with "outer_step".
    """
    with self.writer.as_default(step=stats["outer_step"]):
      for key in SUMMARY_KEYS:
        if key in stats:
          tf.summary.scalar(key, stats[key])
    with open(self.path, "a") as f:
      f.write(json.dumps(stats) + "\n")

  def forget_after(self, outer_step: int) -> None:
    """Drops records of steps after `outer_step` (run after a kill, before the checkpoint)."""
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      lines = [line for line in f if line.strip() and json.loads(line)["outer_step"] <= outer_step]
    with open(self.path + ".tmp", "w") as f:
      f.writelines(lines)
    os.replace(self.path + ".tmp", self.path)

  def plot(self, title: str) -> None:
    """Redraws outer_training.png from progress.jsonl (nothing while it has no records)."""
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      records = [json.loads(line) for line in f if line.strip()]
    if records:
      plots.plot_outer_training(records, self.plot_path, title)


def restore(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager) -> None:
  """Restores the manager's latest checkpoint, if any.

  Raises:
    CheckpointError: it cannot be read, or belongs to another experiment; nothing is changed.
  """
  path = manager.latest_checkpoint
  if path is None:
    return
  try:
    checkpoint.restore(path).assert_existing_objects_matched()
  except Exception as e:  # noqa: BLE001 - damaged files fail in many ways; all are reported.
    others = [p for p in manager.checkpoints if p != path]
    raise CheckpointError(
      f"Cannot restore the checkpoint {path} into this experiment: "
      f"{' '.join(str(e).split())[:300]}. If it belongs to another experiment, use a new "
      "--train_dir or the gin config it was written with; if it is damaged, move its files "
      f"away to resume from an older one ({', '.join(others) if others else 'none kept'}). "
      "Nothing was overwritten."
    ) from e
  logging.info("Resumed from %s.", path)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
  """Holds SIGINT/SIGTERM until the block is done (a checkpoint is never cut short).

  A signal that came meanwhile then goes to the handler that was in place: Ctrl-C raises
  KeyboardInterrupt, the chief's SIGTERM asks it to stop (stopping.py).
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []
  previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
  for sig in previous:
    signal.signal(sig, lambda signum, frame: received.append(signum))
  try:
    yield
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  for signum in received:
    handler = previous[signum]
    if callable(handler):
      handler(signum, None)
    elif handler == signal.SIG_DFL:
      signal.raise_signal(signum)


class ChiefFiles:
  """The chief's state on disk and its records: restore at start, save on a timer and at exit."""

  def __init__(
    self,
    train_dir: str,
    setup: outer_lib.OuterTraining,
    title: str,
    resume_changed_experiment: bool = False,
    **checkpoint_items: Any,
  ):
    """Makes the chief (theta = lopt.init(seed)) and restores the latest checkpoint into it.

    Args:
      train_dir: where everything is written.
      setup: the experiment.
      title: the plot's title (the batch size is added).
      resume_changed_experiment: resume a train dir that holds another experiment (same theta
        shapes, other gin bindings) on purpose; the change is logged and recorded.
      **checkpoint_items: what the mode saves besides the chief (trackables, or nests of them,
        as tf.train.Checkpoint takes).

    Raises:
      ExperimentChangedError: the train dir holds another experiment; nothing is changed.
      CheckpointError: see `restore`.
    """
    tf.io.gfile.makedirs(train_dir)
    self.train_dir = train_dir
    self.setup = setup
    self.chief = chief_lib.Chief(lopt=setup.lopt, seed=setup.seed)
    self.lineage = Lineage(self.chief)
    self.inner_steps = InnerSteps()
    self.title = f"{title}, batch {self.chief.batch_size}"
    self.checkpoint = tf.train.Checkpoint(
      **self.chief.checkpoint_items(),
      lineage=self.lineage,
      inner_steps=self.inner_steps,
      **checkpoint_items,
    )
    self.manager = tf.train.CheckpointManager(
      self.checkpoint,
      os.path.join(train_dir, checkpoints.CHECKPOINT_DIRNAME),
      setup.keep_checkpoints,
    )
    record = outer_lib.experiment_record(self.chief.theta_numpy())
    change = self._check_experiment(record, resume_changed_experiment)
    restore(self.checkpoint, self.manager)
    self._write_experiment(record, change)
    self.recorder = Recorder(train_dir)
    self.recorder.forget_after(self.chief.step)
    self._forget_snapshots_after(self.chief.step)
    with contextlib.suppress(FileNotFoundError):  # A run that goes on is not finished.
      os.remove(os.path.join(train_dir, FINISHED_FILENAME))
    self.start_time = self.last_save = time.time()
    self.start_step = self.chief.step
    self.start_inner_steps = self.inner_steps.total

  def _check_experiment(self, record: dict, resume_changed: bool) -> dict | None:
    """The experiment already in the train dir if it differs and may be resumed, else None.

    Raises:
      ExperimentChangedError: it differs and `resume_changed` is False (or theta's shapes
        differ, which no resume can bridge).
      CheckpointError: experiment.json cannot be read.
    """
    path = os.path.join(self.train_dir, EXPERIMENT_FILENAME)
    if self.manager.latest_checkpoint is None or not os.path.exists(path):
      return None  # Nothing to resume, or a train dir written before records were kept.
    try:
      with open(path) as f:
        saved = json.load(f)
    except (OSError, ValueError) as e:
      raise CheckpointError(
        f"Cannot read {path} ({e}). Restore it, or move the train dir's files away to start anew."
      ) from e
    difference = outer_lib.differences(saved, record)
    if difference is None:
      return None
    if resume_changed and saved.get("theta_shapes") == record["theta_shapes"]:
      logging.warning("Resuming %s with a changed experiment: %s.", self.train_dir, difference)
      return saved
    raise ExperimentChangedError(
      f"{self.train_dir} holds another experiment: {difference}. Start this one in a new "
      "--train_dir, or pass --resume_changed_experiment to continue this run under the new "
      "settings on purpose (theta's shapes must match). Nothing was overwritten."
    )

  def _write_experiment(self, record: dict, change: dict | None) -> None:
    if change is not None:
      with open(os.path.join(self.train_dir, EXPERIMENT_CHANGES_FILENAME), "a") as f:
        f.write(json.dumps({"until_outer_step": self.chief.step, "experiment": change}) + "\n")
    path = os.path.join(self.train_dir, EXPERIMENT_FILENAME)
    with open(path + ".tmp", "w") as f:
      json.dump(record, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)

  def _forget_snapshots_after(self, outer_step: int) -> None:
    """Removes snapshots of steps after `outer_step` (thetas of a branch a restart dropped)."""
    for step, directory in snapshots(self.train_dir).items():
      if step > outer_step:
        shutil.rmtree(directory, ignore_errors=True)

  def snapshot(self, final: bool = False) -> str | None:
    """Keeps theta in theta_history/ if this step is due (or `final`); returns its directory.

    A snapshot is written under a temporary name and renamed, so a reader never sees half of
    one; a step already kept is not rewritten.
    """
    every, step = self.setup.snapshot_every, self.chief.step
    if every is None or (step % every and not final):
      return None
    directory = snapshot_dir(self.train_dir, step)
    if os.path.exists(directory):
      return directory
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    checkpoints.save_theta(
      partial,
      self.chief.theta(),
      info={
        "outer_step": step,
        "inner_steps": self.inner_steps.total,
        "snapshot_id": uuid.uuid4().hex,
        "time": time.time(),
      },
    )
    os.replace(partial, directory)
    return directory

  def finish(self) -> None:
    """The run reached its last outer step or its budget: last snapshot, finished.json."""
    self.snapshot(final=True)
    path = os.path.join(self.train_dir, FINISHED_FILENAME)
    with open(path + ".tmp", "w") as f:
      json.dump({"outer_step": self.chief.step, "inner_steps": self.inner_steps.total}, f)
    os.replace(path + ".tmp", path)

  def save(self) -> None:
    """Checkpoint, theta export, operative config and plot (SIGTERM/Ctrl-C wait for it).

    Raises:
      CheckpointError: something could not be written (disk full, permissions).
    """
    step = self.chief.step
    with interrupts_deferred():
      try:
        self.manager.save(checkpoint_number=step)
        checkpoints.save_theta(
          os.path.join(self.train_dir, checkpoints.THETA_DIRNAME),
          self.chief.theta(),
          info={"outer_step": step},
        )
        checkpoints.write_operative_config(self.train_dir)
        self.recorder.plot(self.title)
        self.recorder.writer.flush()
      except (OSError, tf.errors.OpError) as e:
        raise CheckpointError(
          f"Could not save outer step {step} in {self.train_dir}: "
          f"{' '.join(str(e).split())[:300]}. The last complete checkpoint is "
          f"{self.manager.latest_checkpoint}; free space or fix the permissions and run the same "
          "command to resume from it."
        ) from e
    self.last_save = time.time()
    logging.info("Saved checkpoint and theta at outer step %d in %s.", step, self.train_dir)

  def save_if_due(self) -> None:
    """Saves (see `save`) if checkpoint_every_secs have passed since the last save."""
    if time.time() - self.last_save >= self.setup.checkpoint_every_secs:
      self.save()

  def budget_reached(self) -> bool:
    """Whether the inner steps taken have reached outer_training.max_inner_steps (if set)."""
    budget = self.setup.max_inner_steps
    return budget is not None and self.inner_steps.total >= budget

  def record(self, stats: dict, samples_done: int) -> dict:
    """Adds the step, rates, inner steps and elapsed time to `stats`, records them, logs a line."""
    step, total = self.chief.step, self.setup.num_outer_steps
    elapsed = time.time() - self.start_time
    stats.update(
      outer_step=step,
      samples_per_second=samples_done / max(elapsed, 1e-9),
      elapsed_seconds=elapsed,
      inner_steps=self.inner_steps.total,
      inner_steps_per_worker={str(k): v for k, v in sorted(self.inner_steps.per_worker.items())},
    )
    self.recorder.record(stats)
    if step % self.setup.log_every == 0 or step == total:
      steps_per_second = (step - self.start_step) / max(elapsed, 1e-9)
      eta = (total - step) / max(steps_per_second, 1e-9)
      if self.setup.max_inner_steps is not None:  # The budget may end the run first.
        rate = (self.inner_steps.total - self.start_inner_steps) / max(elapsed, 1e-9)
        left = max(self.setup.max_inner_steps - self.inner_steps.total, 0)
        eta = min(eta, left / max(rate, 1e-9))
      logging.info(
        "outer step %d/%d  inner steps %d  outer loss %.4f  K %.0f  %.2f samples/s  "
        "ES weight %.2f  dropped %d  staleness %.1f  ETA %s",
        step,
        total,
        stats["inner_steps"],
        stats["outer_loss"],
        stats["mean_num_steps"],
        stats["samples_per_second"],
        stats["es_weight"],
        stats["num_dropped"] + stats.get("num_stale", 0),
        stats["mean_staleness"],
        format_seconds(eta),
      )
    return stats
