"""Named random streams: each name keeps the integer every run so far was seeded with."""

import ast
import inspect
import os

import numpy as np
import testing_utils

from task_specific_learned_opt import random_seeds

# The integers folded in before the streams had names; changing one changes every run's numbers.
HISTORICAL = {
  "run_params": 0,
  "run_data": 1,
  "run_eval": 2,
  "unroll_train": 0,
  "unroll_valid": 1,
  "worker_tasks": 1,
  "worker_truncations": 2,
  "worker_perturbations": 3,
  "worker_first_truncation": 4,
  "held_out_tasks": 1_000_003,
  "mixture_member": 0,  # Named from its start (tasks/families.MixtureFamily).
}


def _streams_literal() -> ast.Dict:
  tree = ast.parse(inspect.getsource(random_seeds))
  for node in tree.body:
    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "STREAMS":
      return node.value
  raise AssertionError("random_seeds.STREAMS is not a dict literal")


def test_each_name_maps_to_its_historical_integer():
  assert random_seeds.STREAMS == HISTORICAL


def test_names_are_written_once():
  # A dict literal silently keeps the last of two equal keys: read the source.
  names = [key.value for key in _streams_literal().keys]
  assert len(names) == len(set(names)), names


def test_a_stream_is_the_fold_in_of_its_integer():
  seed = random_seeds.as_seed([3, 7])
  for name, data in HISTORICAL.items():
    np.testing.assert_array_equal(random_seeds.stream(seed, name), random_seeds.fold_in(seed, data))
  params, data, evaluation = random_seeds.run_seeds(5)
  for got, number in ((params, 0), (data, 1), (evaluation, 2)):
    np.testing.assert_array_equal(got, random_seeds.fold_in(5, number))
  for index, split in enumerate(("train", "test", "valid")):
    np.testing.assert_array_equal(
      random_seeds.measured_split_seed(evaluation, split), random_seeds.fold_in(evaluation, index)
    )


def test_no_module_folds_in_a_bare_number():
  root = os.path.join(testing_utils.REPO, "task_specific_learned_opt")
  found = []
  for directory, _, names in os.walk(root):
    for name in names:
      path = os.path.join(directory, name)
      if not name.endswith(".py") or name == "random_seeds.py":
        continue
      with open(path) as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        if (
          isinstance(node, ast.Call)
          and getattr(node.func, "attr", getattr(node.func, "id", None)) == "fold_in"
          and len(node.args) == 2
          and isinstance(node.args[1], ast.Constant)
        ):
          found.append(f"{os.path.relpath(path, root)}:{node.lineno}")
  assert not found, found
