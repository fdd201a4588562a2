"""Gin plumbing: every experiment file parses strictly; bad input gets a clear error."""

import glob
import os

import gin
import pytest
import testing_utils

from task_specific_learned_opt import checkpoints, configurables, gin_config  # noqa: F401
from task_specific_learned_opt.optimizers import adam

GIN_FILES = sorted(
  glob.glob(os.path.join(testing_utils.REPO, "gin", "**", "*.gin"), recursive=True)
)


def test_there_are_experiment_files():
  assert GIN_FILES


@pytest.mark.parametrize("path", GIN_FILES, ids=lambda p: os.path.relpath(p, testing_utils.REPO))
def test_every_gin_file_parses_with_unknown_names_refused(path):
  gin_config.parse([path])


def test_unknown_configurable_names_the_binding():
  with pytest.raises(gin_config.GinConfigError, match="Adamm"):
    gin_config.parse([], ["Adamm.learning_rate = 0.1"])


def test_unknown_parameter_names_the_parameter():
  with pytest.raises(gin_config.GinConfigError, match="learning_rat"):
    gin_config.parse([], ["Adam.learning_rat = 0.1"])


def test_missing_file_is_named():
  with pytest.raises(gin_config.GinConfigError, match="nope.gin"):
    gin_config.parse(["nope.gin"])


def test_bindings_override_files_and_the_config_stays_unlocked():
  gin_config.parse(
    [os.path.join(testing_utils.REPO, "gin", "inner", "generated_cnn.gin")],
    ["Adam.learning_rate = 0.5"],
  )
  assert gin.query_parameter("Adam.learning_rate") == 0.5
  gin.bind_parameter("Adam.learning_rate", 0.25)  # Would raise if the config were finalized.


def test_operative_config_is_written(tmp_path):
  gin_config.parse([], ["Adam.learning_rate = 0.5"])
  adam.Adam()
  path = checkpoints.write_operative_config(str(tmp_path))
  assert "Adam.learning_rate = 0.5" in open(path).read()
