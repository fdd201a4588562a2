"""The experiment record: its estimator and batch size reach the chief; what makes it the same."""

import dataclasses
import inspect
import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import outer_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import quadratic

FAMILY = quadratic.QuadraticFamily(dim=4)
LOPT = mlp_lopt.MLPLOpt()


def test_the_experiments_estimator_and_batch_size_reach_the_chief():
  default = outer_training.outer_training(family=FAMILY, lopt=LOPT)
  assert (default.estimator, default.batch_size) == ("merged", 128)  # Sec. 3 eq. 1; App. D.3.
  gin.parse_config(
    [
      "ESTIMATOR = 'pes_merged'",
      "outer_training.estimator = %ESTIMATOR",
      "outer_training.batch_size = 3",
      "Chief.learning_rate = 0.01",
    ]
  )
  setup = outer_training.outer_training(family=FAMILY, lopt=LOPT)
  assert (setup.estimator, setup.batch_size) == ("pes_merged", 3)
  chief = outer_training.make_chief(setup)
  assert (chief.estimator, chief.batch_size) == ("pes_merged", 3)
  assert chief.optimizer.learning_rate == 0.01  # The rest of the chief is still gin's Chief.


def test_an_unknown_estimator_or_an_empty_batch_is_refused_before_anything_runs():
  with pytest.raises(ValueError, match="both"):
    outer_training.outer_training(family=FAMILY, lopt=LOPT, estimator="both")
  with pytest.raises(ValueError, match="batch_size"):
    outer_training.outer_training(family=FAMILY, lopt=LOPT, batch_size=0)


def test_bindings_under_their_old_names_are_the_same_experiment():
  before = {
    "theta_shapes": [[2]],
    "bindings": {"Chief.batch_size": "8", "s/Chief.estimator": "'es'"},
  }
  now = {
    "theta_shapes": [[2]],
    "bindings": {"outer_training.batch_size": "8", "s/outer_training.estimator": "'es'"},
  }
  assert outer_training.differences(before, now) is None
  now["bindings"]["outer_training.batch_size"] = "4"
  assert "outer_training.batch_size 8 there, 4 here" in outer_training.differences(before, now)


def test_the_shipped_train_dir_holds_the_experiment_of_its_gin_file():
  directory = os.path.join(files.PROJECT_ROOT, "pretrained", "generated_bn_cnn_train")
  gin_config.parse(["gin/pretrained/generated_bn_cnn_train.gin"])
  theta = tf.nest.map_structure(np.asarray, mlp_lopt.MLPLOpt().init(0))
  saved = json.load(open(os.path.join(directory, "experiment.json")))
  assert "Chief.batch_size" in saved["bindings"]  # Written before the settings moved.
  assert outer_training.differences(saved, outer_training.experiment_record(theta)) is None


def test_settings_of_speed_and_evaluation_leave_it_the_same_experiment():
  """A quickstart train dir written before a speed setting was added to gin/quickstart.gin (or
  with other thread, evaluation or length settings) resumes; a learning rate does not."""
  theta = tf.nest.map_structure(np.asarray, LOPT.init(0))
  gin_config.parse(["gin/quickstart.gin"])
  now = outer_training.experiment_record(theta)
  gin.clear_config()
  gin_config.parse(
    ["gin/quickstart.gin"],
    [
      "evaluate_candidates.parallel_runs = 1",
      "configure_threads.intra_op_threads = 0",
      "outer_training.num_outer_steps = 80",
      "compare_with_tuned_baseline.num_tasks = 2",
    ],
  )
  before = outer_training.experiment_record(theta)
  assert outer_training.differences(before, now) is None
  gin.clear_config()
  gin_config.parse(["gin/quickstart.gin"], ["Chief.learning_rate = 0.01"])
  changed = outer_training.experiment_record(theta)
  assert "Chief.learning_rate" in outer_training.differences(changed, now)


def test_outer_training_takes_exactly_the_records_fields_each_documented():
  parameters = inspect.signature(outer_training.outer_training).parameters
  fields = dataclasses.fields(outer_training.OuterTraining)
  assert list(parameters) == [field.name for field in fields]
  for field in fields:
    required = field.default is dataclasses.MISSING
    assert parameters[field.name].default == (gin.REQUIRED if required else field.default)
    assert f"    {field.name}: " in outer_training.OuterTraining.__doc__, field.name


def test_a_binding_that_names_no_field_fails_when_parsed():
  with pytest.raises(ValueError, match="num_outer_step"):
    gin.parse_config("outer_training.num_outer_step = 3")
  gin.parse_config(
    "outer_training.family = @QuadraticFamily()\nouter_training.lopt = @MLPLOpt()\n"
    "outer_training.num_outer_steps = 3"
  )
  setup = outer_training.outer_training()
  assert setup.num_outer_steps == 3 and setup.seed == 0 and isinstance(setup.lopt, mlp_lopt.MLPLOpt)


def test_a_setting_added_later_counts_as_its_earlier_value_only_where_it_is_set_now():
  before = {"bindings": {"Chief.learning_rate": "0.003"}}
  assert outer_training.differences(before, {"bindings": dict(before["bindings"])}) is None
  moments = {"bindings": {**before["bindings"], "paper_cnn.batch_norm_gradient": "'moments'"}}
  assert outer_training.differences(before, moments) is None  # What the earlier run did.
  closed = {"bindings": {**before["bindings"], "paper_cnn.batch_norm_gradient": "'closed_form'"}}
  assert "batch_norm_gradient" in outer_training.differences(before, closed)
