"""Theta export: round trip, and a clear error for another architecture."""

import os

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import checkpoints, files, layout
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def test_theta_round_trip(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(3)
  checkpoints.save_theta(str(tmp_path), theta, info={"outer_step": 7})
  loaded = checkpoints.load_theta(str(tmp_path), lopt)
  for a, b in zip(tf.nest.flatten(theta), tf.nest.flatten(loaded), strict=True):
    np.testing.assert_array_equal(a, b)


def test_loading_into_another_architecture_names_both_shapes(tmp_path):
  checkpoints.save_theta(str(tmp_path), mlp_lopt.MLPLOpt().init(0))
  with pytest.raises(checkpoints.ThetaMismatchError, match="16, 32"):
    checkpoints.load_theta(str(tmp_path), mlp_lopt.MLPLOpt(feature_set="original_code"))


def test_shapes_by_path_in_memory_and_in_an_export(tmp_path):
  theta = mlp_lopt.MLPLOpt().init(0)
  shapes = checkpoints.theta_shapes(theta)
  assert list(shapes) == ["hidden/w", "hidden/b", "output/w", "output/b"]  # The nest's order.
  assert shapes["hidden/w"] == [16, 32] and shapes["output/b"] == [2]
  checkpoints.save_theta(str(tmp_path), theta)
  assert checkpoints.saved_theta_shapes(str(tmp_path)) == shapes


def test_the_check_reads_the_checkpoint_itself(tmp_path):
  checkpoints.save_theta(str(tmp_path), mlp_lopt.MLPLOpt(use_time=False).init(0))
  os.remove(tmp_path / layout.THETA_INFO_FILENAME)
  with pytest.raises(checkpoints.ThetaMismatchError) as raised:
    checkpoints.load_theta(str(tmp_path), mlp_lopt.MLPLOpt())
  message = str(raised.value)
  assert "\n" not in message
  assert "has shapes hidden/w [7, 32]" in message and "reads hidden/w [16, 32]" in message
  assert message.endswith("load it with the gin config it was trained with.")


def test_missing_export(tmp_path):
  with pytest.raises(FileNotFoundError, match="No theta export"):
    checkpoints.load_theta(str(tmp_path), mlp_lopt.MLPLOpt())


def test_a_relative_directory_is_also_looked_up_in_the_project(tmp_path, monkeypatch):
  lopt = mlp_lopt.MLPLOpt()
  project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
  checkpoints.save_theta(str(project / "pretrained" / "x" / "theta"), lopt.init(5))
  elsewhere.mkdir()
  monkeypatch.chdir(elsewhere)
  monkeypatch.setattr(files, "PROJECT_ROOT", str(project))
  loaded = checkpoints.load_theta("pretrained/x/theta", lopt)
  np.testing.assert_array_equal(tf.nest.flatten(loaded)[0], tf.nest.flatten(lopt.init(5))[0])
  # The working directory comes first.
  checkpoints.save_theta(str(elsewhere / "pretrained" / "x" / "theta"), lopt.init(6))
  loaded = checkpoints.load_theta("pretrained/x/theta", lopt)
  np.testing.assert_array_equal(tf.nest.flatten(loaded)[0], tf.nest.flatten(lopt.init(6))[0])
  with pytest.raises(FileNotFoundError, match="No theta export"):
    checkpoints.load_theta("pretrained/y/theta", lopt)
