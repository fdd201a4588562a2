"""The chief's train dir: what it holds, where, and which experiment (paper App. C).

What the chief writes, in local mode and on a cluster alike (chief_files.ChiefFiles):
  checkpoints/       full state (theta, Adam slots, outer step, plus what the mode adds), on a
                     timer and at exit, the last few kept (CheckpointManager);
  theta/             theta alone, for evaluation (checkpoints.save_theta);
  events.*           TensorBoard summaries, one point per outer step (progress.py);
  progress.jsonl     the same numbers, one JSON line per outer step;
  outer_training.png the curves (outer loss, K, variances of g_rp and g_es, ES weight);
  operative_config.gin;
  experiment.json    the experiment this train dir holds (outer_training.experiment_record);
                     a restart with another experiment is refused, nothing overwritten;
  experiment_changes.jsonl  experiments it held before a deliberate change
                     (resume_changed_experiment), with the outer step of the change;
  theta_history/step_<outer step>/  theta every `outer_training.snapshot_every` outer steps, at
                     step 0 and at the last step (kept; a few KB each), for the evaluator
                     (evaluator_role.py), each with a snapshot id that changes if a restart redoes
                     that step;
  finished.json      written when the run reached its last outer step or its budget, removed
                     when it resumes (the evaluator stops once it has evaluated the last
                     snapshot).
Every record counts the inner steps behind it (checkpoint_state.InnerSteps), so curves can be
drawn against inner steps as the paper's Fig. 8 is. A restart resumes from the latest checkpoint
and forgets records and snapshots of steps after it.
"""

import os
import re

from absl import logging

from task_specific_learned_opt import errors, files
from task_specific_learned_opt.distributed import outer_training as outer_lib

EXPERIMENT_FILENAME = "experiment.json"
EXPERIMENT_CHANGES_FILENAME = "experiment_changes.jsonl"
PROGRESS_FILENAME = "progress.jsonl"
PLOT_FILENAME = "outer_training.png"
THETA_HISTORY_DIRNAME = "theta_history"
FINISHED_FILENAME = "finished.json"


class CheckpointError(errors.UserError, RuntimeError):
  """A checkpoint in the train dir that cannot be restored into this experiment."""


class ExperimentChangedError(CheckpointError):
  """A train dir that holds another experiment than the one being started."""


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


def read_experiment(train_dir: str) -> dict | None:
  """The experiment record in the train dir's experiment.json; None if it has none.

  Raises:
    CheckpointError: experiment.json is there but cannot be read.
  """
  path = os.path.join(train_dir, EXPERIMENT_FILENAME)
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
      os.path.join(train_dir, EXPERIMENT_CHANGES_FILENAME),
      [{"until_outer_step": outer_step, "experiment": change}],
    )
  files.write_json(os.path.join(train_dir, EXPERIMENT_FILENAME), record, indent=1, sort_keys=True)
