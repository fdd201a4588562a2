"""What the chief's checkpoint holds beside theta and Adam's slots, and restoring it (App. C).

  Lineage     which (chief incarnation, theta version) ranges led to the current theta, so that
              samples of a theta from a lost branch are never applied (loops.SampleFilter);
  InnerSteps  the K of every sample the chief has taken, in all and per worker, so curves can be
              drawn against inner steps as the paper's Fig. 8 is, and
              `outer_training.max_inner_steps` stops a run at a budget of them.
Both are tf.train.experimental.PythonState, saved as JSON inside the TF checkpoint, so a resumed
run continues them.
"""

import json
import os
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt.distributed import chief_update
from task_specific_learned_opt.distributed import train_dir as train_dir_lib


class Lineage(tf.train.experimental.PythonState):
  """The (chief incarnation, first version, last version) ranges that led to the current theta.

  A chief run that resumed at outer step s and reached t contributed the versions s..t of its
  incarnation; the ranges of the runs before it come from the checkpoint it resumed. Saved in
  the checkpoint, with the current run's range ending at the step being saved.
  """

  def __init__(self, chief: chief_update.Chief):
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


def restore(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager) -> None:
  """Restores the manager's latest checkpoint, if any.

  Raises:
    train_dir.CheckpointError: it cannot be read, or belongs to another experiment; nothing is
      changed.
  """
  path = manager.latest_checkpoint
  if path is None:
    return
  try:
    checkpoint.restore(path).assert_existing_objects_matched()
  except Exception as e:  # noqa: BLE001 - damaged files fail in many ways; all are reported.
    others = [p for p in manager.checkpoints if p != path]
    older = ", ".join(others) if others else "none kept"
    detail = " ".join(str(e).split())[:300]
    if _damaged(e):
      raise train_dir_lib.CheckpointError(
        f"The checkpoint {path} is damaged (its files are truncated or corrupt): {detail}. Move "
        f"its files ({os.path.basename(path)}.*) away to resume from an older one ({older}). "
        "Nothing was overwritten."
      ) from e
    raise train_dir_lib.CheckpointError(
      f"Cannot restore the checkpoint {path} into this experiment: {detail}. If it belongs to "
      "another experiment, use a new --train_dir or the gin config it was written with; if it "
      f"is damaged, move its files away to resume from an older one ({older}). Nothing was "
      "overwritten."
    ) from e
  logging.info("Resumed from %s.", path)


def _damaged(error: Exception) -> bool:
  """Whether restoring failed on the checkpoint's bytes (truncated, corrupt), not its contents."""
  if isinstance(error, (tf.errors.DataLossError, tf.errors.OutOfRangeError)):
    return True
  words = str(error).lower()
  return any(w in words for w in ("read less bytes", "corrupt", "checksum", "truncated"))
