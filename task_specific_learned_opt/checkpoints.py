"""What outer-training writes to disk, and how it is read back (the chief's two artifacts).

Two artifacts in a train dir:
  - CHECKPOINT_DIRNAME/: full outer-state checkpoints (theta, the outer optimizer's slots, the
    outer step, schedule and RNG state), written by tf.train.CheckpointManager, to resume from;
  - THETA_DIRNAME/: theta alone, for evaluation and benchmarking;
  - OPERATIVE_CONFIG_FILENAME: the gin values the run used.

A theta export is a tf.train.Checkpoint whose `theta` is the nest of meta-parameters, plus a
JSON file naming the learned optimizer's gin config, so a reader can check it restores theta
into the same architecture (same shapes) it was trained with.
"""

import json
import os

import gin
import tensorflow as tf

from task_specific_learned_opt.learned_optimizers import base as lopt_base

CHECKPOINT_DIRNAME = "checkpoints"
THETA_DIRNAME = "theta"
THETA_PREFIX = "theta"
THETA_INFO_FILENAME = "theta_info.json"
OPERATIVE_CONFIG_FILENAME = "operative_config.gin"
# The project's root: a relative theta directory not found from the working directory is looked
# up here, so the shipped thetas (pretrained/) load from anywhere.
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_operative_config(directory: str) -> str:
  """Writes gin's operative config (the values the run actually used) into `directory`."""
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, OPERATIVE_CONFIG_FILENAME)
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(gin.operative_config_str())
  return path


class ThetaMismatchError(ValueError):
  """An exported theta whose shapes do not match the learned optimizer it is loaded into."""


def save_theta(directory: str, theta: lopt_base.Theta, info: dict | None = None) -> str:
  """Writes `theta` (a nest of tensors or variables) to `directory`; returns the checkpoint path.

  Args:
    directory: the export folder (created if needed); an earlier export there is replaced.
    theta: the meta-parameters.
    info: JSON-serialisable facts stored beside it (outer step, optimizer config, ...).
  """
  tf.io.gfile.makedirs(directory)
  variables = tf.nest.map_structure(lambda x: tf.Variable(x, trainable=False), theta)
  path = tf.train.Checkpoint(theta=variables).write(os.path.join(directory, THETA_PREFIX))
  shapes = tf.nest.map_structure(lambda x: list(x.shape), theta)
  with tf.io.gfile.GFile(os.path.join(directory, THETA_INFO_FILENAME), "w") as f:
    json.dump({"shapes": shapes, **(info or {})}, f, indent=2, sort_keys=True)
  return path


def find_theta_dir(directory: str) -> str:
  """`directory`, or the project root's directory of that relative name if only it holds an export.

  So a shipped theta (pretrained/<name>/theta) is found from any working directory.
  """
  in_project = os.path.join(PROJECT_ROOT, directory)
  if (
    not tf.io.gfile.exists(os.path.join(directory, THETA_PREFIX) + ".index")
    and not os.path.isabs(directory)
    and tf.io.gfile.exists(os.path.join(in_project, THETA_PREFIX) + ".index")
  ):
    return in_project
  return directory


def load_theta(directory: str, lopt: lopt_base.LearnedOptimizer) -> lopt_base.Theta:
  """Reads the theta exported in `directory` into the structure of `lopt.init`.

  A relative `directory` that holds no export from the working directory is read from the
  project's root (e.g. the shipped pretrained/<name>/theta).

  Raises:
    FileNotFoundError: no export in `directory`.
    ThetaMismatchError: the export's shapes differ from `lopt`'s (another architecture or
      feature set); the message names both.
  """
  directory = find_theta_dir(directory)
  prefix = os.path.join(directory, THETA_PREFIX)
  if not tf.io.gfile.exists(prefix + ".index"):
    raise FileNotFoundError(f"No theta export in {directory} (expected {prefix}.index).")
  template = lopt.init(0)
  expected = tf.nest.map_structure(lambda x: list(x.shape), template)
  info_path = os.path.join(directory, THETA_INFO_FILENAME)
  if tf.io.gfile.exists(info_path):
    with tf.io.gfile.GFile(info_path) as f:
      saved = json.load(f).get("shapes")
    if saved is not None and saved != expected:
      raise ThetaMismatchError(
        f"The theta in {directory} has shapes {saved}, but the learned optimizer configured here "
        f"expects {expected}: load it with the gin config it was trained with."
      )
  variables = tf.nest.map_structure(lambda x: tf.Variable(tf.zeros_like(x)), template)
  tf.train.Checkpoint(theta=variables).read(prefix).assert_consumed()
  return tf.nest.map_structure(tf.convert_to_tensor, variables)
