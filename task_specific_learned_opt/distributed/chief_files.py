"""The chief's state on disk: restore at start, save on a timer and at exit, records (App. C).

  chief = outer_training.make_chief(setup)            # built by the mode that runs it
  files = ChiefFiles(train_dir, chief, setup, title)  # restores the latest checkpoint into it
  files.record(stats, samples_taken); files.snapshot(); files.save_if_due()
  files.finish(); files.save()

What goes where in the train dir is train_dir.py's; the records and plot are progress.py's; the
checkpoint's lineage and inner-step counts are checkpoint_state.py's.
"""

import contextlib
import glob
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from typing import Any

import tensorflow as tf
from absl import logging

from task_specific_learned_opt import cards, checkpoints, files, layout
from task_specific_learned_opt.distributed import (
  checkpoint_state,
  chief_update,
  progress,
  stopping,
)
from task_specific_learned_opt.distributed import outer_training as outer_lib
from task_specific_learned_opt.distributed import train_dir as train_dir_lib


class ChiefFiles:
  """The chief's state on disk and its records: restore at start, save on a timer and at exit."""

  def __init__(
    self,
    train_dir: str,
    chief: chief_update.Chief,
    setup: outer_lib.OuterTraining,
    title: str,
    resume_changed_experiment: bool = False,
    **checkpoint_items: Any,
  ):
    """Restores the latest checkpoint of `train_dir` into `chief` (and `checkpoint_items`).

    Args:
      train_dir: where everything is written.
      chief: the experiment's chief (outer_training.make_chief), as initialised.
      setup: the experiment.
      title: the plot's title (the batch size is added).
      resume_changed_experiment: resume a train dir that holds another experiment (same theta
        shapes, other gin bindings) on purpose; the change is logged and recorded.
      **checkpoint_items: what the mode saves besides the chief (trackables, or nests of them,
        as tf.train.Checkpoint takes).

    Raises:
      train_dir.ExperimentChangedError: the train dir holds another experiment; nothing is
        changed.
      train_dir.CheckpointError: see checkpoint_state.restore.
    """
    tf.io.gfile.makedirs(train_dir)
    self.train_dir, self.chief, self.setup = train_dir, chief, setup
    self.lineage = checkpoint_state.Lineage(chief)
    self.inner_steps = checkpoint_state.InnerSteps()
    self.title = f"{title}, batch {chief.batch_size}"
    self.checkpoint = tf.train.Checkpoint(
      **chief.checkpoint_items(),
      lineage=self.lineage,
      inner_steps=self.inner_steps,
      **checkpoint_items,
    )
    self.manager = tf.train.CheckpointManager(
      self.checkpoint,
      layout.checkpoint_dir(train_dir),
      setup.keep_checkpoints,
    )
    self._previous_checkpoint, self._index_unsynced = None, False  # See kept().
    record = outer_lib.experiment_record(chief.theta_numpy())
    change = None
    if self.manager.latest_checkpoint is not None:  # Else nothing to resume.
      change = train_dir_lib.resumable_change(train_dir, record, resume_changed_experiment)
    missing = self._items_not_in_checkpoint(checkpoint_items)
    if missing:  # Written by a mode that does not save them (bin/chief: no local workers).
      logging.info(
        "The checkpoint %s holds no %s (another mode wrote it): they start anew.",
        self.manager.latest_checkpoint,
        ", ".join(missing),
      )
    restored = {k: v for k, v in checkpoint_items.items() if k not in missing}
    checkpoint_state.restore(
      tf.train.Checkpoint(
        **chief.checkpoint_items(),
        lineage=self.lineage,
        inner_steps=self.inner_steps,
        **restored,
      )
      if missing
      else self.checkpoint,
      self.manager,
    )
    with self._disk_checked():  # A disk still full when the run restarts: one line too.
      train_dir_lib.write_experiment(train_dir, record, change, chief.step)
      self.recorder = progress.Recorder(train_dir)
      self._forget_after(chief.step)
      self._remove_partial_checkpoints()
    self.start_time = self.last_save = time.time()
    self.recorded_step = chief.step  # The last outer step in progress.jsonl.
    self._record_error = None
    self.start_step = chief.step
    self.start_inner_steps = self.inner_steps.total

  def _items_not_in_checkpoint(self, checkpoint_items: dict) -> list[str]:
    """The names of `checkpoint_items` that the latest checkpoint does not hold (none if there is
    no checkpoint, or it cannot be read: restoring it then says why)."""
    path = self.manager.latest_checkpoint
    if path is None or not checkpoint_items:
      return []
    try:
      names = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)}
    except Exception:  # noqa: BLE001 - a damaged checkpoint: checkpoint_state.restore reports it.
      return []
    return [name for name in checkpoint_items if name not in names]

  def _forget_after(self, outer_step: int) -> None:
    """Forgets what was written after the checkpoint: records, snapshots, finished.json."""
    self.recorder.forget_after(outer_step)
    for step, directory in layout.snapshots(self.train_dir).items():
      if step > outer_step:  # Thetas of a branch a restart dropped.
        shutil.rmtree(directory, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):  # A run that goes on is not finished.
      os.remove(os.path.join(self.train_dir, layout.FINISHED_FILENAME))

  def _remove_partial_checkpoints(self) -> None:
    """Deletes what a save cut short left (TensorFlow's ckpt-N_temp folders): never read, and
    on a full disk it holds space."""
    pattern = os.path.join(self.train_dir, layout.CHECKPOINT_DIRNAME, "*_temp*")
    for path in glob.glob(pattern):
      shutil.rmtree(path, ignore_errors=True)

  def kept(self) -> str:
    """What a failed write leaves intact, in words (the last complete checkpoint).

    Between the index naming a new checkpoint and the index reaching the disk, a failing disk
    may keep either index: both checkpoints are whole (the new one's data is on the disk before
    the index names it), and the words name both. The index counts as on the disk only once the
    save has finished: an fsync on a file system that has just turned read-only (ext4's
    errors=remount-ro) can return without writing, and only the save's later writes show that
    the disk still took them. The words are checked against the disk as well: a checkpoint whose
    files are not all there is not named, and one that the index on the disk names (what a
    restart resumes from) is named even where the manager believes another was recorded.
    """
    named = []
    latest = self.manager.latest_checkpoint
    if latest is not None:
      named.append(latest)
    if self._index_unsynced and self._previous_checkpoint is not None:
      named.append(self._previous_checkpoint)
    on_disk = self._indexed_on_disk()
    if on_disk is not None:
      named.append(on_disk)
    named = [os.path.abspath(p) for p in named]
    whole = [p for i, p in enumerate(named) if p not in named[:i] and _whole_checkpoint(p)]
    if not whole:
      if latest is None:
        return "No complete checkpoint was saved yet"
      return "No complete checkpoint is on the disk"
    name = os.path.basename(whole[0])
    step = name.rsplit("-", 1)[-1]
    for other in whole[1:]:
      step += f"; or {os.path.basename(other)} if the disk lost the index naming {name}"
    return f"The last complete checkpoint, {name} (outer step {step}), is intact"

  def _indexed_on_disk(self) -> str | None:
    """The checkpoint that the index file on the disk names, or None (no index, unreadable)."""
    try:
      state = tf.train.get_checkpoint_state(layout.checkpoint_dir(self.train_dir))
    except Exception:  # noqa: BLE001 - a damaged index names nothing.
      return None
    if state is None or not state.model_checkpoint_path:
      return None
    path = state.model_checkpoint_path
    if not os.path.isabs(path):
      path = os.path.join(layout.checkpoint_dir(self.train_dir), path)
    return path

  @contextlib.contextmanager
  def _disk_checked(self) -> Iterator[None]:
    """Turns a write failing on a full or read-only disk into one files.DiskError line."""
    try:
      yield
    except (OSError, tf.errors.OpError) as e:
      if files.disk_problem(e) is None:
        raise
      self._remove_partial_checkpoints()
      raise files.disk_error(e, self.train_dir, self.kept()) from e

  def _card(self, info: dict) -> dict:
    """The card of a theta exported now (cards.export_card): no results until evaluated."""
    name = os.path.basename(os.path.normpath(self.train_dir))
    card = cards.export_card(name, self.chief.lopt, info)
    if card["family"]["name"] is None:  # A family passed in code rather than bound in gin.
      family = type(self.setup.family).__name__
      card["family"].update(name=family, description=family, short=family)
      card["summary"] = cards.summary(card)
    return card

  def snapshot(self, final: bool = False) -> str | None:
    """Keeps theta in theta_history/ if this step is due (or `final`); returns its directory.

    A snapshot is written under a temporary name and renamed, so a reader never sees half of
    one; a step already kept is not rewritten.
    """
    every, step = self.setup.snapshot_every, self.chief.step
    if every is None or (step % every and not final):
      return None
    directory = layout.snapshot_dir(self.train_dir, step)
    if os.path.exists(directory):
      return directory
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    info = {
      "outer_step": step,
      "inner_steps": self.inner_steps.total,
      "snapshot_id": uuid.uuid4().hex,
      "time": time.time(),
    }
    try:
      with self._disk_checked():
        checkpoints.save_theta(partial, self.chief.theta(), info=info, card=self._card(info))
        os.replace(partial, directory)
    except BaseException:
      shutil.rmtree(partial, ignore_errors=True)
      raise
    return directory

  def finish(self) -> None:
    """The run reached its last outer step or its budget: last snapshot, finished.json."""
    self.snapshot(final=True)
    with self._disk_checked():
      files.write_json(
        os.path.join(self.train_dir, layout.FINISHED_FILENAME),
        {"outer_step": self.chief.step, "inner_steps": self.inner_steps.total},
        indent=None,
      )

  def save(self) -> None:
    """Checkpoint, theta export, operative config and plot (SIGTERM/Ctrl-C wait for it).

    Raises:
      files.DiskError: the disk is full or read-only; the last complete checkpoint is intact
        (what this save left half-written is removed).
      train_dir.CheckpointError: something else could not be written (permissions).
    """
    step = self.chief.step
    if step != self.recorded_step:
      # A step whose record could not be written (a full disk) is not saved either: a resumed
      # run would miss its record. The run resumes from the checkpoint before it.
      if self._record_error is not None:
        raise self._record_error
      raise files.DiskError(
        f"Outer step {step} could not be recorded in {self.train_dir} "
        f"({files.free_space(self.train_dir)}), so it is not saved. {self.kept()}; free space "
        "(or make it writable) and run the same command to resume."
      )
    with stopping.interrupts_deferred(), self._disk_checked():
      try:
        self._previous_checkpoint = self.manager.latest_checkpoint
        # TF calls these after the checkpoint's files are written and before the manager writes
        # the index that names it: its data is on the disk before anything points to it.
        options = tf.train.CheckpointOptions(experimental_write_callbacks=[self._sync_data])
        self._index_unsynced = True
        saved = self.manager.save(checkpoint_number=step, options=options)
        self._sync_checkpoint(saved)
        theta_dir = layout.theta_dir(self.train_dir)
        card = self._card({"outer_step": step, "inner_steps": self.inner_steps.total})
        checkpoints.save_theta(theta_dir, self.chief.theta(), info={"outer_step": step}, card=card)
        files.sync(*glob.glob(os.path.join(theta_dir, "*")), theta_dir, self.train_dir)
        checkpoints.write_operative_config(self.train_dir)
        self.recorder.plot(self.title)
        self.recorder.writer.flush()
        self._index_unsynced = False  # Written after the index's fsync: that one wrote (kept()).
      except (OSError, tf.errors.OpError) as e:
        if files.disk_problem(e) is not None:
          raise  # _disk_checked's line.
        raise train_dir_lib.CheckpointError(
          f"Could not save outer step {step} in {self.train_dir}: "
          f"{' '.join(str(e).split())[:300]}. The last complete checkpoint is "
          f"{self.manager.latest_checkpoint}; free space or fix the permissions and run the same "
          "command to resume from it."
        ) from e
    self.last_save = time.time()
    logging.info("Saved checkpoint and theta at outer step %d in %s.", step, self.train_dir)

  def _sync_data(self, prefix: str) -> None:
    """Puts checkpoint `prefix`'s files, their folder and the records up to it on the disk, before
    its index exists: whichever index a failing disk keeps, its checkpoint and every record up to
    it are there (a record missing below the checkpoint would leave a hole in progress.jsonl)."""
    files.sync(*glob.glob(f"{prefix}.*"), os.path.dirname(prefix))
    files.sync(self.recorder.path, os.path.join(self.train_dir, layout.EXPERIMENT_FILENAME))

  def _sync_checkpoint(self, prefix: str) -> None:
    """Puts the index naming checkpoint `prefix` on the disk (its data and the records up to it are
    there already, `_sync_data`): a disk that fails (turns read-only, loses power) at any moment
    keeps an index that names a whole checkpoint, where files only in the page cache would be
    lost."""
    directory = os.path.dirname(prefix)
    files.sync(os.path.join(directory, layout.CHECKPOINT_INDEX_FILENAME), directory)

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
    try:
      with self._disk_checked():
        self.recorder.record(stats)
    except files.DiskError as e:
      self._record_error = e  # What save() says instead of saving this step.
      raise
    self.recorded_step = step
    if step % self.setup.log_every == 0 or step == total:
      progress.log_line(stats, total, self._eta_seconds(elapsed))
    return stats

  def _eta_seconds(self, elapsed: float) -> float:
    """Time to the last outer step at this run's rate, or to the inner-step budget if sooner."""
    steps_per_second = (self.chief.step - self.start_step) / max(elapsed, 1e-9)
    eta = (self.setup.num_outer_steps - self.chief.step) / max(steps_per_second, 1e-9)
    if self.setup.max_inner_steps is not None:  # The budget may end the run first.
      rate = (self.inner_steps.total - self.start_inner_steps) / max(elapsed, 1e-9)
      left = max(self.setup.max_inner_steps - self.inner_steps.total, 0)
      eta = min(eta, left / max(rate, 1e-9))
    return eta


def _whole_checkpoint(prefix: str) -> bool:
  """Whether checkpoint `prefix` has its index and every data shard on the disk."""
  shards = glob.glob(f"{prefix}.data-*-of-*")
  if not os.path.exists(f"{prefix}.index") or not shards:
    return False
  count = int(shards[0].rsplit("-of-", 1)[1])
  return len(shards) == count
