"""The chief's train dir: what it holds, where, and which experiment (paper App. C).

What the chief writes, and where, is layout.py's: the name of every file and directory, and the
paths that writers and readers share. This module reads and writes experiment.json and
experiment_changes.jsonl, the record of which experiment the train dir holds: a restart with
another experiment is refused, nothing overwritten.
Every record counts the inner steps behind it (checkpoint_state.InnerSteps), so curves can be
drawn against inner steps as the paper's Fig. 8 is. A restart resumes from the latest checkpoint
and forgets records and snapshots of steps after it.
"""

import os

from absl import logging

from task_specific_learned_opt import errors, files, layout
from task_specific_learned_opt.distributed import outer_training as outer_lib


class CheckpointError(errors.UserError, RuntimeError):
  """A checkpoint in the train dir that cannot be restored into this experiment."""


class ExperimentChangedError(CheckpointError):
  """A train dir that holds another experiment than the one being started."""


def read_experiment(train_dir: str) -> dict | None:
  """The experiment record in the train dir's experiment.json; None if it has none.

  Raises:
    CheckpointError: experiment.json is there but cannot be read.
  """
  path = os.path.join(train_dir, layout.EXPERIMENT_FILENAME)
  if not os.path.exists(path):
    return None
  try:
    return files.read_json(path)
  except (OSError, ValueError) as e:
    raise CheckpointError(
      f"Cannot read {path} ({e}). Restore it, or move the train dir's files away to start anew."
    ) from e


def resumable_change(train_dir: str, record: dict, resume_changed: bool) -> dict | None:
  """The experiment in `train_dir` if it differs from `record` and may be resumed, else None.

  Args:
    train_dir: a train dir with a checkpoint to resume.
    record: the experiment being started (outer_training.experiment_record).
    resume_changed: whether a changed experiment (same theta shapes) may be resumed.

  Raises:
    ExperimentChangedError: it differs and `resume_changed` is False (or theta's shapes
      differ, which no resume can bridge).
    CheckpointError: experiment.json cannot be read.
  """
  saved = read_experiment(train_dir)
  if saved is None:
    return None  # A train dir written before records were kept.
  difference = outer_lib.differences(saved, record)
  if difference is None:
    return None
  if resume_changed and saved.get("theta_shapes") == record["theta_shapes"]:
    logging.warning("Resuming %s with a changed experiment: %s.", train_dir, difference)
    return saved
  raise ExperimentChangedError(
    f"{train_dir} holds another experiment: {difference}. Start this one in a new "
    "--train_dir, or pass --resume_changed_experiment to continue this run under the new "
    "settings on purpose (theta's shapes must match). Nothing was overwritten."
  )


def write_experiment(
  train_dir: str, record: dict, change: dict | None = None, outer_step: int = 0
) -> None:
  """Writes experiment.json; a `change` (the experiment before) goes to experiment_changes.jsonl.

  Args:
    train_dir: the train dir.
    record: the experiment it holds from now on.
    change: the experiment it held until `outer_step`, if it was changed on purpose.
    outer_step: the outer step of the change.
  """
  if change is not None:
    files.append_jsonl(
      os.path.join(train_dir, layout.EXPERIMENT_CHANGES_FILENAME),
      [{"until_outer_step": outer_step, "experiment": change}],
    )
  files.write_json(
    os.path.join(train_dir, layout.EXPERIMENT_FILENAME), record, indent=1, sort_keys=True
  )
