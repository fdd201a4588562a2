"""A train dir's layout is written once: its names keep their values, and no module copies them."""

import ast
import os

import testing_utils

from task_specific_learned_opt import layout

# The names train dirs already on disk were written with: changing one orphans them.
WRITTEN = {
  "CHECKPOINT_DIRNAME": "checkpoints",
  "CHECKPOINT_INDEX_FILENAME": "checkpoint",
  "THETA_DIRNAME": "theta",
  "THETA_PREFIX": "theta",
  "THETA_INFO_FILENAME": "theta_info.json",
  "OPERATIVE_CONFIG_FILENAME": "operative_config.gin",
  "EXPERIMENT_FILENAME": "experiment.json",
  "EXPERIMENT_CHANGES_FILENAME": "experiment_changes.jsonl",
  "PROGRESS_FILENAME": "progress.jsonl",
  "PLOT_FILENAME": "outer_training.png",
  "THETA_HISTORY_DIRNAME": "theta_history",
  "FINISHED_FILENAME": "finished.json",
  "EVAL_DIRNAME": "eval",
  "EVALUATION_PROGRESS_FILENAME": "evaluation_progress.jsonl",
  "EVALUATION_REFERENCE_FILENAME": "evaluation_reference.json",
  "EVALUATION_SUMMARY_DIRNAME": "evaluation",
  "EVALUATION_PLOT_FILENAME": "outer_training_eval.png",
}
# Names that are also ordinary words in the code (a dict key "theta", an "eval" gin scope).
_COMMON_WORDS = {"theta", "eval", "evaluation", "checkpoint", "checkpoints"}


def test_every_name_keeps_the_value_train_dirs_were_written_with():
  names = {k: v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)}
  assert names == WRITTEN


def test_no_other_package_module_writes_a_train_dir_name_out():
  root = os.path.join(testing_utils.REPO, "task_specific_learned_opt")
  distinctive = set(WRITTEN.values()) - _COMMON_WORDS
  found = []
  for directory, _, names in os.walk(root):
    for name in names:
      path = os.path.join(directory, name)
      if not name.endswith(".py") or path == layout.__file__:
        continue
      with open(path) as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in distinctive:
          found.append(f"{os.path.relpath(path, root)}:{node.lineno} {node.value!r}")
  assert not found, found


def test_snapshots_are_listed_by_step_from_the_directories_snapshot_dir_names(tmp_path):
  for step in (12, 3):
    os.makedirs(layout.snapshot_dir(str(tmp_path), step))
  os.makedirs(tmp_path / layout.THETA_HISTORY_DIRNAME / "step_3")  # Not 8 digits: not one.
  assert layout.snapshots(str(tmp_path)) == {
    3: str(tmp_path / "theta_history" / "step_00000003"),
    12: str(tmp_path / "theta_history" / "step_00000012"),
  }
  assert layout.snapshots(str(tmp_path / "none")) == {}
  assert layout.checkpoint_dir("d") == os.path.join("d", "checkpoints")
  assert layout.theta_dir("d") == os.path.join("d", "theta")
