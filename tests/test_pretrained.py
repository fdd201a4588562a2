"""The thetas shipped in pretrained/: each loads with the gin config that made it and trains."""

import hashlib
import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import checkpoints, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.evaluation import held_out
from task_specific_learned_opt.keras import optimizer as keras_optimizer
from task_specific_learned_opt.learned_optimizers import mlp_lopt

from . import testing_utils

PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
SHIPPED = sorted(  # The directories holding a theta (others hold evaluations and searches).
  name for name in os.listdir(PRETRAINED) if os.path.isdir(os.path.join(PRETRAINED, name, "theta"))
)
# Each shipped theta, pinned: the first 16 hex digits of the sha256 of each array's float32 bytes
# (little-endian, C order). A theta exported again, or any coordinate moved, changes them.
PINNED = {
  "generated_bn_cnn_train": {
    "hidden/w": "2ecc725087f2d0fc",  # [16, 32]
    "hidden/b": "f3c3a33b5d1ae0fe",  # [32]
    "output/w": "95608621b5de456e",  # [32, 2]
    "output/b": "1ae577ac4ec6cb4e",  # [2]
  },
  "generated_cnn_train": {
    "hidden/w": "d0514e1839ec5493",  # [16, 32]
    "hidden/b": "584a6599de63d5c2",  # [32]
    "output/w": "1182d7ec338a710e",  # [32, 2]
    "output/b": "bd426790c26539b2",  # [2]
  },
  "generated_cnn_valid": {
    "hidden/w": "931402749a5581b5",  # [16, 32]
    "hidden/b": "2d8895cf7061fec5",  # [32]
    "output/w": "3680de06ac975e06",  # [32, 2]
    "output/b": "644f75968a960224",  # [2]
  },
  "mixed_app_e_valid": {
    "hidden/w": "505f1fd2ead5c6b3",  # [16, 32]
    "hidden/b": "08d33528a0de7c76",  # [32]
    "output/w": "aa6ba5dc1b44bdb9",  # [32, 2]
    "output/b": "d8d1ba417c8a3d1f",  # [2]
  },
  "generated_bn_cnn_valid": {
    "hidden/w": "f2743d0cee75f4a0",  # [16, 32]
    "hidden/b": "7a5934639f26cf7e",  # [32]
    "output/w": "987cf78b5bddf834",  # [32, 2]
    "output/b": "1618b4ad9ce9ee1c",  # [2]
  },
}


def fingerprint(theta) -> dict[str, str]:
  """{"layer/array": the first 16 hex digits of the sha256 of its float32 bytes} of an MLPLOpt
  theta."""
  return {
    f"{layer}/{name}": hashlib.sha256(np.asarray(array, "<f4").tobytes()).hexdigest()[:16]
    for layer, arrays in theta.items()
    for name, array in arrays.items()
  }


def test_the_theta_outer_trained_on_the_generated_family_is_shipped():
  assert "generated_bn_cnn_train" in SHIPPED
  directory = os.path.join(PRETRAINED, "generated_bn_cnn_train")
  for name in ("operative_config.gin", "outer_training.png", "outer_training_eval.png"):
    assert os.path.getsize(os.path.join(directory, name)) > 1000, name
  results = json.load(open(os.path.join(directory, "evaluation", "evaluation.json")))
  assert "shipped" in results["results"]


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_theta_loads_with_its_own_config_and_has_its_shapes(name):
  directory = os.path.join(PRETRAINED, name)
  gin_config.parse([os.path.join(directory, "operative_config.gin")])
  lopt = mlp_lopt.MLPLOpt()
  # A relative directory resolves against the project root, from any working directory.
  theta = checkpoints.load_theta(os.path.join("pretrained", name, "theta"), lopt)
  template = lopt.init(0)
  assert tf.nest.map_structure(lambda x: x.shape, theta) == tf.nest.map_structure(
    lambda x: x.shape, template
  )
  flat, initial = tf.nest.flatten(theta), tf.nest.flatten(template)
  assert sum(int(np.size(x)) for x in flat) == 610  # App. D.1's optimizer.
  assert all(np.all(np.isfinite(x)) for x in flat)
  # Outer-trained: it moved away from the initialisation of its seed.
  moved = [
    np.max(np.abs(np.asarray(a) - np.asarray(b))) for a, b in zip(flat, initial, strict=True)
  ]
  assert max(moved) > 1e-2


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_theta_is_exactly_the_one_pinned_here(name):
  assert name in PINNED, f"pretrained/{name}: pin its fingerprint in PINNED."
  gin_config.parse([os.path.join(PRETRAINED, name, "operative_config.gin")])
  theta = checkpoints.load_theta(os.path.join(PRETRAINED, name, "theta"), mlp_lopt.MLPLOpt())
  assert fingerprint(theta) == PINNED[name]


def test_the_fingerprint_sees_one_coordinate_move():
  theta = {"hidden": {"w": np.zeros([16, 32], np.float32)}}
  moved = {"hidden": {"w": theta["hidden"]["w"].copy()}}
  moved["hidden"]["w"][7, 3] = np.nextafter(np.float32(0), np.float32(1))  # The smallest step.
  assert fingerprint(moved) != fingerprint(theta)


def test_keras_loads_the_shipped_theta_from_any_working_directory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  optimizer = keras_optimizer.LearnedOptimizer.from_directory(
    "pretrained/generated_bn_cnn_train/theta"
  )
  shipped = checkpoints.load_theta(
    os.path.join(PRETRAINED, "generated_bn_cnn_train", "theta"), mlp_lopt.MLPLOpt()
  )
  for a, b in zip(tf.nest.flatten(optimizer.theta), tf.nest.flatten(shipped), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.integration
def test_a_short_evaluation_of_the_shipped_theta_runs_and_trains_held_out_tasks(tmp_path):
  gin_config.parse(
    ["gin/eval/pretrained.gin"],
    [
      "evaluate.num_tasks = 2",
      "evaluate.num_inits = 1",
      "evaluate.num_steps = 60",
      "evaluate.num_points = 4",
      "evaluate.learning_rates = (1e-3, 1e-2)",
      "evaluate.timing_rounds = 0",  # The wall-clock curves: tests/evaluation/test_wallclock.py.
    ],
  )
  result = held_out.evaluate(str(tmp_path), {"shipped": "pretrained/generated_bn_cnn_train/theta"})
  gin.clear_config()
  shipped = result["results"]["shipped"]
  losses = np.asarray(shipped["train_loss"])  # [tasks, inits, points]
  assert np.all(np.isfinite(losses))
  # Within 60 steps it takes both held-out tasks well below chance (log 10 = 2.30).
  assert np.all(losses[..., -1] < losses[..., 0] - 0.3)
  assert os.path.getsize(tmp_path / "curves.png") > 5000
