"""The worked example examples/own_keras_model/: its gin file builds, and it runs end to end.

The example's experiment lives outside gin/, so test_gin_config.py does not see it: it is parsed
and built here, as bin/train_local would with its --import_module. The end-to-end test runs what
examples/own_keras_model/run.sh runs, bin/train_local's main and then the model.fit script's,
at a tiny size.
"""

import importlib.util
import json
import logging
import math
import os
import sys

import gin
import pytest
import testing_utils

from task_specific_learned_opt import gin_config, layout
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import cluster, outer_training
from task_specific_learned_opt.evaluation import held_out
from task_specific_learned_opt.tasks import keras_task

pytest.importorskip("sklearn", reason="the example needs scikit-learn: pip install -e .[examples]")

EXAMPLE_DIR = os.path.join(testing_utils.REPO, "examples", "own_keras_model")
GIN_FILE = os.path.join(EXAMPLE_DIR, "digits.gin")
USER_MODULE = os.path.join(EXAMPLE_DIR, "digits_tasks.py")
# The whole pipeline, shrunk: one MLP variant, 2 workers, 2 outer steps of 3 inner steps, one
# held-out task of 6 steps against Adam at 2 learning rates.
TINY = [
  'KerasModelFamily.variations = {"width": [8], "depth": [1], "activation": ["relu"]}',
  "train_local.num_workers = 2",
  "outer_training.batch_size = 2",
  "Worker.horizon = 6",
  "LinearCurriculum.min_length = 3",
  "LinearCurriculum.max_length = 3",
  "compare_with_tuned_baseline.num_tasks = 1",
  "compare_with_tuned_baseline.num_steps = 6",
  "compare_with_tuned_baseline.num_points = 3",
  "compare_with_tuned_baseline.learning_rates = (1e-3, 1e-1)",
]


@pytest.fixture(autouse=True)
def imports_undone(monkeypatch):
  """sys.path and the record of imported user modules as they were (digits_tasks stays loaded:
  gin registers its configurables once per process)."""
  monkeypatch.setattr(sys, "path", list(sys.path))
  monkeypatch.setattr(gin_config, "_imported_modules", [])


def _fit_script():
  """examples/own_keras_model/fit_with_theta.py, imported."""
  spec = importlib.util.spec_from_file_location(
    "fit_with_theta", os.path.join(EXAMPLE_DIR, "fit_with_theta.py")
  )
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_the_example_experiment_parses_strictly_and_builds(tmp_path):
  gin_config.parse([GIN_FILE], modules=[USER_MODULE])
  setup = outer_training.outer_training()
  assert outer_training.make_chief(setup) is not None
  assert cluster.make_worker(setup, index=0, worker_run=0) is not None
  assert gin.query_parameter("train_local.final_evaluation").selector.endswith(
    "compare_with_tuned_baseline"
  )
  held_out_family = gin.get_bindings(held_out.compare_with_tuned_baseline)["family"]
  train_family = setup.family
  assert isinstance(train_family, keras_task.KerasModelFamily)
  assert held_out_family.split == "outer_test"
  # The held-out tasks' digits are those no outer-training task draws.
  assert not set(train_family.class_ids) & set(held_out_family.class_ids)
  assert sorted([*train_family.class_ids, *held_out_family.class_ids]) == list(range(10))
  assert gin.query_parameter("compare_with_tuned_baseline.num_steps") == gin.query_parameter(
    "Worker.horizon"
  )


@pytest.mark.integration
def test_the_example_runs_end_to_end(tmp_path, capsys):
  train_dir = str(tmp_path / "digits")
  argv = ["train_local", f"--import_module={USER_MODULE}", f"--gin_file={GIN_FILE}"]
  argv += [f"--train_dir={train_dir}", "--num_outer_steps=2"]
  testing_utils.run_main("train_local", argv + [f"--gin_bindings={b}" for b in TINY])
  theta_dir = os.path.join(train_dir, layout.THETA_DIRNAME)
  assert os.path.exists(os.path.join(theta_dir, layout.THETA_INFO_FILENAME))
  evaluation = json.load(open(os.path.join(train_dir, layout.EVAL_DIRNAME, "evaluation.json")))
  assert len(evaluation["tuned_learning_rates"]["adam (lr tuned per task on train loss)"]) == 1
  assert "learned vs adam (lr tuned per task on train loss) on 1 held-out tasks" in (
    capsys.readouterr().out
  )

  gin.clear_config()
  fit_json = str(tmp_path / "fit_with_theta.json")
  argv = [f"--theta_dir={theta_dir}", "--adam_learning_rates", "0.01", f"--output={fit_json}"]
  results = _fit_script().main(argv + [f"--gin_bindings={b}" for b in TINY])
  assert sorted(results) == ["adam lr=0.01", "learned"]
  assert json.load(open(fit_json)) == {"task_seed": 0, "results": results}
  assert all(math.isfinite(v) for losses in results.values() for v in losses.values())
  output = capsys.readouterr().out
  assert "model.fit for 6 steps of batch 32" in output and "learned " in output


@pytest.mark.integration
def test_a_run_over_several_model_variants_logs_no_retracing_warnings(tmp_path, caplog):
  # Each variant is another graph: the workers' and the evaluation's functions trace once per
  # variant on purpose (tracing.py), which TensorFlow's detector would report page by page.
  train_dir = str(tmp_path / "digits")
  argv = ["train_local", f"--import_module={USER_MODULE}", f"--gin_file={GIN_FILE}"]
  argv += [f"--train_dir={train_dir}", "--num_outer_steps=1"]
  variants = 'KerasModelFamily.variations = {"width": [8, 12, 16], "depth": [1, 2]}'
  bindings = [variants, "train_local.num_workers = 6", "outer_training.batch_size = 6"]
  bindings += TINY[3:] + ["compare_with_tuned_baseline.num_tasks = 3"]
  caplog.set_level(logging.INFO)
  testing_utils.run_main("train_local", argv + [f"--gin_bindings={b}" for b in bindings])
  assert os.path.exists(os.path.join(train_dir, layout.EVAL_DIRNAME, "evaluation.json"))
  messages = [r.getMessage() for r in caplog.records]  # TensorFlow's warnings reach the root.
  assert not [m for m in messages if "retracing" in m]
  assert not [m for m in messages if "system_path_file_exists" in m]
