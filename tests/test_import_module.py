"""--import_module: a user's module of gin configurables, found without editing the project."""

import sys

import gin
import pytest
import testing_utils

from task_specific_learned_opt import gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import launch
from task_specific_learned_opt.studies import processes
from task_specific_learned_opt.tasks import keras_task

USER_MODULE = """
import gin
import keras
import numpy as np


@gin.configurable
def build_model(width=4, activation="relu", num_classes=3):
  return keras.Sequential([
    keras.Input((5,)),
    keras.layers.Dense(width, activation=activation),
    keras.layers.Dense(num_classes),
  ])


@gin.configurable
def load_data(num_examples=24):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(num_examples, 5)).astype(np.float32)
  return {"train": (x, rng.integers(0, 3, num_examples)), "test": (x, np.zeros(num_examples))}
"""

EXPERIMENT = """
KerasModelFamily.model_fn = @{module}.build_model
KerasModelFamily.data = @{module}.load_data()
KerasModelFamily.variations = {{"width": [4, 6]}}
KerasModelFamily.batch_size = 2
KerasModelFamily.split = "all"
build_model.activation = "tanh"
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch, request):
  """A module of the user's in tmp_path (a name of its own per test); imports are undone after."""
  name = f"user_tasks_{request.node.name.split('[')[0][5:25]}"
  (tmp_path / f"{name}.py").write_text(USER_MODULE)
  monkeypatch.setattr(sys, "path", list(sys.path))
  monkeypatch.setattr(gin_config, "_imported_modules", [])
  yield name
  for module in (name, "needs_more"):
    sys.modules.pop(module, None)


def test_a_model_function_of_a_users_module_is_named_in_gin(tmp_path, monkeypatch, user_module):
  monkeypatch.chdir(tmp_path)  # Found in the working directory, as a binary run from there.
  gin_file = tmp_path / "experiment.gin"
  gin_file.write_text(EXPERIMENT.format(module=user_module))
  gin_config.parse([str(gin_file)], modules=[user_module])
  task = keras_task.KerasModelFamily().sample(0)
  assert task.model.model.layers[0].activation.__name__ == "tanh"
  assert task.loss(task.init_params(0), task.batch("train", 0)).shape == ()
  assert gin_config.registering_modules()[-1] == user_module  # A spawned process imports it.


def test_processes_started_as_commands_are_given_the_modules(tmp_path, user_module):
  module_file = str(tmp_path / f"{user_module}.py")
  gin_config.import_modules([module_file])  # A .py file works too.
  flag = f"--import_module={module_file}"
  run = processes.Run("config", "config.gin", 0, str(tmp_path / "run"))
  assert flag in processes.command(run, None)
  assert flag in launch.role_command("worker", {"chief": []}, ["a.gin"], [], "--task_index=0")
  assert gin_config.registering_modules()[-1] == user_module


def test_a_missing_module_is_one_line_with_the_fix(tmp_path, user_module):
  with pytest.raises(gin_config.ImportModuleError) as error:
    gin_config.parse([], [], modules=["no_such_user_module"])
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith("--import_module no_such_user_module: no module 'no_such_user_module'")
  assert "add that directory to PYTHONPATH" in message


def test_a_module_whose_import_is_missing_names_the_missing_one(tmp_path, monkeypatch, user_module):
  (tmp_path / "needs_more.py").write_text("import not_installed_package_xyz\n")
  monkeypatch.chdir(tmp_path)
  with pytest.raises(gin_config.ImportModuleError, match="it imports 'not_installed_package_xyz'"):
    gin_config.import_modules(["needs_more"])


def test_a_configurable_gin_does_not_know_names_the_flag(user_module):
  with pytest.raises(gin_config.GinConfigError) as error:
    gin_config.parse([], [f"KerasModelFamily.model_fn = @{user_module}.build_model"])
  assert f"pass --import_module {user_module}" in str(error.value)
  assert gin.config_str() == ""


def test_every_binary_takes_the_flag_and_fails_in_one_line(user_module):
  with pytest.raises(SystemExit) as exit_:
    testing_utils.run_main("train_inner", ["train_inner", "--import_module=no_such_user_module"])
  message = exit_.value.code
  assert message.startswith("error: --import_module no_such_user_module: no module")
  assert "\n" not in message


def test_the_gin_file_of_a_user_does_not_parse_without_its_module(tmp_path, user_module):
  text = EXPERIMENT.format(module=user_module)
  gin_file = tmp_path / "experiment.gin"
  gin_file.write_text(text)
  with pytest.raises(gin_config.GinConfigError, match=f"--import_module {user_module}"):
    gin_config.parse([str(gin_file)])
