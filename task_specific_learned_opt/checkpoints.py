"""What outer-training writes to disk, and how it is read back (the chief's two artifacts).

Two artifacts in a train dir (their names are layout.py's):
  - checkpoints/: full outer-state checkpoints (theta, the outer optimizer's slots, the outer
    step, schedule and RNG state), written by tf.train.CheckpointManager, to resume from;
  - theta/: theta alone, for evaluation and benchmarking;
  - operative_config.gin: the gin values the run used.

A theta export is a tf.train.Checkpoint whose `theta` is the nest of meta-parameters, plus a
JSON file of facts about it (its shapes, the outer step, ...). Every reader of a theta, an export
or one handed over in memory, checks its shapes against the learned optimizer it is for with
`check_theta_shapes`, so restoring into another architecture fails with one line naming both.
"""

import os
import shutil
from collections.abc import Callable, Mapping, Sequence

import gin
import tensorflow as tf

from task_specific_learned_opt import cards, errors, files, layout, nests
from task_specific_learned_opt.learned_optimizers import base as lopt_base

# How a theta export's checkpoint names the array at PATH: f"{_THETA_KEY}{PATH}/{_VALUE_KEY}".
_THETA_KEY = "theta/"
_VALUE_KEY = ".ATTRIBUTES/VARIABLE_VALUE"

# (the learned optimizer, the theta's {path: shape}) -> (what reads theta, how to fix a mismatch).
Advice = Callable[[lopt_base.LearnedOptimizer, dict], tuple[str, str]]


def write_operative_config(directory: str) -> str:
  """Writes gin's operative config (the values the run actually used) into `directory`."""
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, layout.OPERATIVE_CONFIG_FILENAME)
  with tf.io.gfile.GFile(path, "w") as f:
    f.write(gin.operative_config_str())
  return path


class ThetaMismatchError(errors.UserError, ValueError):
  """An exported theta whose shapes do not match the learned optimizer it is loaded into."""


def save_theta(
  directory: str, theta: nests.Theta, info: dict | None = None, card: dict | None = None
) -> str:
  """Writes `theta` (a nest of tensors or variables) to `directory`; returns the checkpoint path.

  A folder that holds only an export (or nothing) gets the new one whole, written under a
  temporary name and swapped in, so a full disk or a crash never leaves a half-written theta
  there: the earlier export stays. In a folder that also holds other files, the export's files
  are overwritten in place.

  Args:
    directory: the export folder (created if needed); an earlier export there is replaced.
    theta: the meta-parameters.
    info: JSON-serialisable facts stored beside it (outer step, optimizer config, ...).
    card: its card (cards.py: family, objective, horizon, steps, options), written as
      card.json in the export.
  """
  directory = directory.rstrip("/") or "/"
  partial, old = f"{directory}.partial", f"{directory}.old"
  if not os.path.exists(directory) and os.path.exists(old):
    os.replace(old, directory)  # A swap cut short: the earlier export is the one there is.
  if not _holds_only_an_export(directory):
    return _write_theta(directory, theta, info, card)
  shutil.rmtree(partial, ignore_errors=True)
  shutil.rmtree(old, ignore_errors=True)
  try:
    _write_theta(partial, theta, info, card)
  except BaseException:
    shutil.rmtree(partial, ignore_errors=True)
    raise
  if os.path.exists(directory):
    os.replace(directory, old)
  os.replace(partial, directory)
  shutil.rmtree(old, ignore_errors=True)
  return os.path.join(directory, layout.THETA_PREFIX)


def _holds_only_an_export(directory: str) -> bool:
  if not os.path.isdir(directory):
    return True
  return all(
    name in (layout.THETA_INFO_FILENAME, cards.CARD_FILENAME)
    or name.startswith(f"{layout.THETA_PREFIX}.")
    for name in os.listdir(directory)
  )


def _write_theta(
  directory: str, theta: nests.Theta, info: dict | None, card: dict | None = None
) -> str:
  tf.io.gfile.makedirs(directory)
  variables = tf.nest.map_structure(lambda x: tf.Variable(x, trainable=False), theta)
  path = tf.train.Checkpoint(theta=variables).write(os.path.join(directory, layout.THETA_PREFIX))
  shapes = tf.nest.map_structure(lambda x: list(x.shape), theta)
  info_path = os.path.join(directory, layout.THETA_INFO_FILENAME)
  files.write_json(info_path, {"shapes": shapes, **(info or {})}, indent=2, sort_keys=True)
  if card is not None:
    cards.write_card(directory, card)
  return path


def find_theta_dir(directory: str) -> str:
  """`directory`, or the project root's directory of that relative name if only it holds an export.

  So a shipped theta (pretrained/<name>/theta) is found from any working directory.
  """
  in_project = os.path.join(files.PROJECT_ROOT, directory)
  if (
    not tf.io.gfile.exists(os.path.join(directory, layout.THETA_PREFIX) + ".index")
    and not os.path.isabs(directory)
    and tf.io.gfile.exists(os.path.join(in_project, layout.THETA_PREFIX) + ".index")
  ):
    return in_project
  return directory


def theta_shapes(theta: nests.Theta) -> dict[str, list[int]]:
  """The shape of every array of `theta` by its path, e.g. {"hidden/w": [16, 32], ...}.

  Args:
    theta: a nest (dicts, lists) of tensors or numpy arrays; paths follow the nest's own order.
  """
  return {path: [int(d) for d in leaf.shape] for path, leaf in _leaves_with_paths(theta)}


def _leaves_with_paths(nest: object, path: str = "") -> list[tuple[str, object]]:
  if isinstance(nest, Mapping):
    items = nest.items()
  elif isinstance(nest, (list, tuple)):
    items = enumerate(nest)
  else:
    return [(path, nest)]
  return [
    pair for key, value in items for pair in _leaves_with_paths(value, f"{path}/{key}".lstrip("/"))
  ]


def saved_theta_shapes(directory: str) -> dict[str, list[int]]:
  """The shape of every array of the theta exported in `directory`, read from its checkpoint.

  Args:
    directory: an export (save_theta).

  Returns:
    {path: shape} as `theta_shapes` gives them for the theta that was saved.
  """
  shapes = {}
  for key, shape in tf.train.list_variables(os.path.join(directory, layout.THETA_PREFIX)):
    if key.startswith(_THETA_KEY) and key.endswith(_VALUE_KEY):
      shapes[key[len(_THETA_KEY) : -len(_VALUE_KEY)].rstrip("/")] = [int(d) for d in shape]
  return shapes


def _generic_advice(lopt: lopt_base.LearnedOptimizer, shapes: dict) -> tuple[str, str]:
  del lopt, shapes  # The same words for every learned optimizer.
  return "the learned optimizer configured here", "load it with the gin config it was trained with"


def _format_shapes(shapes: Mapping, order: Sequence[str]) -> str:
  paths = [*order, *(path for path in shapes if path not in order)]
  return ", ".join(f"{path} {shapes.get(path, 'missing')}" for path in paths)


def check_theta_shapes(
  shapes: Mapping[str, Sequence[int]],
  lopt: lopt_base.LearnedOptimizer,
  where: str,
  advice: Advice | None = None,
) -> None:
  """Raises a one-line ThetaMismatchError unless theta's shapes are those `lopt.init` gives.

  Args:
    shapes: {path: shape} of the theta (theta_shapes, saved_theta_shapes).
    lopt: the learned optimizer the theta is for.
    where: what the theta is, starting the message ("The theta in DIR", "theta").
    advice: names what reads theta and the fix (e.g. the options an MLPLOpt would need); by
      default "the learned optimizer configured here" and its gin config.

  Raises:
    ThetaMismatchError: the shapes differ; the message names both, what reads theta and the fix.
  """
  shapes = {path: [int(d) for d in shape] for path, shape in shapes.items()}
  expected = theta_shapes(lopt.init(0))
  if shapes == expected:
    return
  reader, fix = (advice or _generic_advice)(lopt, shapes)
  raise ThetaMismatchError(
    f"{where} has shapes {_format_shapes(shapes, list(expected))}, but {reader} reads "
    f"{_format_shapes(expected, list(expected))}; {fix}."
  )


def _export_prefix(directory: str) -> str:
  """The checkpoint prefix of the export in `directory`; FileNotFoundError if there is none."""
  prefix = os.path.join(directory, layout.THETA_PREFIX)
  if tf.io.gfile.exists(prefix + ".index"):
    return prefix
  inner = layout.theta_dir(directory)
  hint = (
    f" It is a train dir: pass {inner}."
    if tf.io.gfile.exists(os.path.join(inner, layout.THETA_PREFIX + ".index"))
    else " bin/train_local exports theta to <train_dir>/theta."
  )
  raise FileNotFoundError(
    f"No theta export in {directory} (expected {prefix}.index, as checkpoints.save_theta "
    f"writes).{hint}"
  )


def load_theta(
  directory: str, lopt: lopt_base.LearnedOptimizer, advice: Advice | None = None
) -> nests.Theta:
  """Reads the theta exported in `directory` into the structure of `lopt.init`.

  A relative `directory` that holds no export from the working directory is read from the
  project's root (e.g. the shipped pretrained/<name>/theta).

  Args:
    directory: the export (save_theta), e.g. <train_dir>/theta.
    lopt: the learned optimizer it was trained for.
    advice: how a shape mismatch is explained (see check_theta_shapes).

  Raises:
    FileNotFoundError: no export in `directory` (the message says where one is, if the
      directory is a train dir).
    ThetaMismatchError: the export's shapes differ from `lopt`'s (another architecture or
      feature set); the message names both.
    cards.CardMismatchError: the export's card (card.json) names other options that change
      the update (cards.PINNED_OPTIONS) than `lopt` has; the message names the first and the fix.
  """
  directory = find_theta_dir(directory)
  prefix = _export_prefix(directory)
  cards.check_options(directory, lopt)
  check_theta_shapes(saved_theta_shapes(directory), lopt, f"The theta in {directory}", advice)
  template = lopt.init(0)
  variables = tf.nest.map_structure(lambda x: tf.Variable(tf.zeros_like(x)), template)
  tf.train.Checkpoint(theta=variables).read(prefix).assert_consumed()
  return tf.nest.map_structure(tf.convert_to_tensor, variables)
