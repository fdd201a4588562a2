"""A train dir's layout on disk: the name of every file and directory in it, written once (App. C).

The chief writes a train dir (distributed/chief_files.py), in local mode and on a cluster alike;
the evaluator, bin/eval, the studies, the cards and the tests read it. All of them name its parts
by the constants here, and build the paths that two of them share with the functions here:

  checkpoints/       full state (theta, Adam slots, outer step, the lineage and inner steps of
                     distributed/checkpoint_state.py, local mode's pickled worker states of
                     distributed/local.py), on a timer and at exit, the last few kept
                     (tf.train.CheckpointManager; its index file is `checkpoint`);
  theta/             theta alone, for evaluation (checkpoints.save_theta): theta.index,
                     theta.data-*, theta_info.json and, once it has one, card.json;
  events.*           TensorBoard summaries, one point per outer step (progress.py);
  progress.jsonl     the same numbers, one JSON line per outer step;
  outer_training.png the curves (outer loss, K, variances of g_rp and g_es, ES weight);
  operative_config.gin;
  experiment.json    the experiment this train dir holds (outer_training.experiment_record);
                     a restart with another experiment is refused, nothing overwritten;
  experiment_changes.jsonl  experiments it held before a deliberate change
                     (resume_changed_experiment), with the outer step of the change;
  theta_history/step_<outer step, 8 digits>/  theta every `outer_training.snapshot_every` outer
                     steps, at step 0 and at the last step (kept; a few KB each), for the
                     evaluator (evaluator_role.py), each with a snapshot id that changes if a
                     restart redoes that step;
  finished.json      written when the run reached its last outer step or its budget, removed
                     when it resumes (the evaluator stops once it has evaluated the last
                     snapshot);
  eval/              local mode's evaluation after the last step (train_local.final_evaluation);
  evaluation_progress.jsonl, evaluation_reference.json, evaluation/, outer_training_eval.png
                     the evaluator's records of the snapshots, the reference it compares them
                     with, its summaries and its curves (distributed/evaluator_role.py).

Renaming any of these orphans the train dirs already written: a resumed run would not find them.
"""

import os
import re

CHECKPOINT_DIRNAME = "checkpoints"
CHECKPOINT_INDEX_FILENAME = "checkpoint"  # tf.train.CheckpointManager's, in checkpoints/.
THETA_DIRNAME = "theta"
THETA_PREFIX = "theta"  # theta/theta.index, theta/theta.data-*: a tf.train.Checkpoint's prefix.
THETA_INFO_FILENAME = "theta_info.json"
OPERATIVE_CONFIG_FILENAME = "operative_config.gin"
EXPERIMENT_FILENAME = "experiment.json"
EXPERIMENT_CHANGES_FILENAME = "experiment_changes.jsonl"
PROGRESS_FILENAME = "progress.jsonl"
PLOT_FILENAME = "outer_training.png"
THETA_HISTORY_DIRNAME = "theta_history"
FINISHED_FILENAME = "finished.json"
EVAL_DIRNAME = "eval"
EVALUATION_PROGRESS_FILENAME = "evaluation_progress.jsonl"
EVALUATION_REFERENCE_FILENAME = "evaluation_reference.json"
EVALUATION_SUMMARY_DIRNAME = "evaluation"
EVALUATION_PLOT_FILENAME = "outer_training_eval.png"
_SNAPSHOT = re.compile(r"step_(\d{8})")


def checkpoint_dir(train_dir: str) -> str:
  """Where the chief's full-state checkpoints are (checkpoints/)."""
  return os.path.join(train_dir, CHECKPOINT_DIRNAME)


def theta_dir(train_dir: str) -> str:
  """Where the chief exports theta (theta/)."""
  return os.path.join(train_dir, THETA_DIRNAME)


def snapshot_dir(train_dir: str, outer_step: int) -> str:
  """Where the theta of `outer_step` is kept (theta_history/step_<8 digits>)."""
  return os.path.join(train_dir, THETA_HISTORY_DIRNAME, f"step_{outer_step:08d}")


def snapshots(train_dir: str) -> dict[int, str]:
  """{outer step: directory} of the snapshot directories in theta_history/, by step."""
  root = os.path.join(train_dir, THETA_HISTORY_DIRNAME)
  found = {}
  for name in os.listdir(root) if os.path.isdir(root) else []:
    match = _SNAPSHOT.fullmatch(name)
    if match:
      found[int(match.group(1))] = os.path.join(root, name)
  return dict(sorted(found.items()))
