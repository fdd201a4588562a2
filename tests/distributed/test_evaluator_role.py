"""The evaluator role: snapshots, catching up, no redone work, the numbers of bin/eval."""

import json
import os

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import checkpoints, files, layout
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import (
  cluster_spec,
  evaluator_role,
  local,
  outer_training,
)
from task_specific_learned_opt.evaluation import held_out, tuning
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import schedules
from task_specific_learned_opt.tasks import quadratic

# One family, held-out family and learned optimizer for every run: they share compiled functions.
FAMILY, HELD_OUT = quadratic.QuadraticFamily(dim=4), quadratic.QuadraticFamily(dim=4, noise_std=0.1)
LOPT = mlp_lopt.MLPLOpt()
NUM_TASKS, NUM_STEPS = 2, 12


def _bind_small():
  gin.bind_parameter("outer_training.batch_size", 2)
  gin.bind_parameter("Worker.horizon", 12)
  gin.bind_parameter("Worker.schedule", schedules.FixedLength(4))
  gin.bind_parameter("Evaluator.test_family", HELD_OUT)
  gin.bind_parameter("Evaluator.num_tasks", NUM_TASKS)
  gin.bind_parameter("Evaluator.num_steps", NUM_STEPS)
  gin.bind_parameter("Evaluator.learning_rates", (0.01, 0.1, 1.0))


def _train(train_dir, steps, evaluate=False, snapshot_every=2):
  _bind_small()
  setup = outer_training.outer_training(
    family=FAMILY, lopt=LOPT, num_outer_steps=steps, snapshot_every=snapshot_every
  )
  return local.train_local(str(train_dir), num_workers=2, setup=setup, evaluate_snapshots=evaluate)


def _evaluator(train_dir):
  _bind_small()
  return evaluator_role.Evaluator(str(train_dir), LOPT, FAMILY)


@pytest.fixture
def count_references(monkeypatch):
  """Counts the tuned-baseline searches (one per family per reference computed)."""
  calls = []
  tune = tuning.tune_learning_rate_per_task

  def counted(*args, **kwargs):
    calls.append(args[0])
    return tune(*args, **kwargs)

  monkeypatch.setattr(tuning, "tune_learning_rate_per_task", counted)
  return calls


@pytest.mark.integration
def test_in_process_evaluation_of_every_snapshot_equals_bin_eval(tmp_path, count_references):
  _train(tmp_path, 5, evaluate=True)
  # Snapshots at step 0, every 2 steps, and the last step.
  assert list(layout.snapshots(str(tmp_path))) == [0, 2, 4, 5]
  records = evaluator_role.read_progress(str(tmp_path))
  assert [r["outer_step"] for r in records] == [0, 2, 4, 5]
  assert [r["inner_steps"] for r in records] == [0, 16, 32, 40]  # 2 samples of K = 4 a step.
  assert (tmp_path / "finished.json").exists()
  # The reference was computed once (one search per family) for the 4 snapshots, and cached.
  assert len(count_references) == 2
  # Equal, NaN included (quadratic tasks have no accuracy).
  np.testing.assert_equal(
    _evaluator(tmp_path).reference(), evaluator_role.read_reference(str(tmp_path))
  )
  assert len(count_references) == 2
  assert (tmp_path / layout.EVALUATION_PLOT_FILENAME).exists()
  assert os.listdir(tmp_path / layout.EVALUATION_SUMMARY_DIRNAME)
  # bin/eval's numbers for the last snapshot on the same held-out tasks, inits and seed.
  snapshot = layout.snapshot_dir(str(tmp_path), 5)
  gin.clear_config()
  result = held_out.evaluate(
    str(tmp_path / "eval"),
    {"learned": snapshot},
    family=HELD_OUT,
    lopt=LOPT,
    tuned_baselines=(),
    num_tasks=NUM_TASKS,
    num_inits=1,
    num_steps=NUM_STEPS,
    num_points=2,
  )["results"]["learned"]
  assert records[-1]["outer_test"]["mean_train_loss"] == pytest.approx(
    float(np.mean(result["mean_loss"])), rel=1e-6
  )
  assert records[-1]["outer_test"]["final_test_loss"] == pytest.approx(
    float(np.mean(result["test_loss"][..., -1])), rel=1e-6
  )
  # Training moved theta: the first and last snapshots' numbers differ.
  assert (
    records[0]["outer_train"]["mean_train_loss"] != records[-1]["outer_train"]["mean_train_loss"]
  )


@pytest.mark.integration
def test_a_restarted_evaluator_skips_finished_snapshots_and_catches_up(tmp_path):
  _train(tmp_path, 3, snapshot_every=1)
  first = _evaluator(tmp_path)
  assert first.run_pending() == 4  # Steps 0, 1, 2, 3.
  assert _evaluator(tmp_path).run_pending() == 0  # A restarted evaluator redoes nothing.
  _train(tmp_path, 5, snapshot_every=1)  # The chief resumes while no evaluator runs ...
  assert [s for s, _, _ in _evaluator(tmp_path).pending()] == [4, 5]
  assert _evaluator(tmp_path).run_pending() == 2  # ... and a new one catches up.
  steps = [r["outer_step"] for r in evaluator_role.read_progress(str(tmp_path))]
  assert steps == [0, 1, 2, 3, 4, 5]


@pytest.mark.integration
def test_snapshots_of_steps_a_restarted_chief_dropped_are_removed_and_reevaluated(tmp_path):
  _train(tmp_path, 2, snapshot_every=1)
  evaluator = _evaluator(tmp_path)
  evaluator.run_pending()
  # A snapshot of step 3 from a branch the checkpoint (step 2) does not hold: a chief killed
  # after keeping it and before checkpointing. The restarted chief removes it, and keeps its own
  # step 3 with a new id, which the evaluator evaluates again.
  dropped = layout.snapshot_dir(str(tmp_path), 3)
  checkpoints.save_theta(dropped, LOPT.init(1), info={"outer_step": 3, "snapshot_id": "lost"})
  evaluator.run_pending()
  _train(tmp_path, 3, snapshot_every=1)
  info = files.read_json(os.path.join(dropped, layout.THETA_INFO_FILENAME))
  assert info["snapshot_id"] != "lost"
  assert evaluator.run_pending() == 1
  current = evaluator_role.current_records(str(tmp_path))
  assert [r["outer_step"] for r in current] == [0, 1, 2, 3]
  assert current[-1]["snapshot_id"] == info["snapshot_id"]


def test_the_evaluator_watches_until_the_chief_has_finished(tmp_path):
  _train(tmp_path, 2)
  evaluator = _evaluator(tmp_path)
  assert evaluator.watch(poll_secs=0.01) == 2  # Steps 0 and 2; the chief had finished.
  os.remove(tmp_path / layout.FINISHED_FILENAME)  # As while a chief is still running:
  polls = []
  evaluated = evaluator.watch(poll_secs=0.01, should_stop=lambda: len(polls.append(1) or polls) > 3)
  assert evaluated == 0 and len(polls) == 4  # it keeps watching.


def test_evaluating_snapshots_needs_snapshots(tmp_path):
  _bind_small()
  setup = outer_training.outer_training(family=FAMILY, lopt=LOPT, num_outer_steps=1)
  train_dir = tmp_path / "train"
  with pytest.raises(ValueError, match="outer_training.snapshot_every"):
    local.train_local(str(train_dir), num_workers=1, setup=setup, evaluate_snapshots=True)
  assert not train_dir.exists()  # Refused before anything was written.


def test_the_evaluator_task_type_of_tf_config():
  cluster = {"chief": ["localhost:2222"], "worker": ["localhost:2223"]}
  environ = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "evaluator"}})}
  spec = cluster_spec.parse_cluster(None, cluster_spec.EVALUATOR, environ=environ)
  assert spec.job == "evaluator" and spec.cluster == cluster
  # TensorFlow's convention also lists the evaluator in the spec; it is not a server.
  with_evaluator = {**cluster, "evaluator": ["localhost:2224"]}
  assert cluster_spec.parse_cluster(with_evaluator, "evaluator").cluster == cluster
  worker_config = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker"}})}
  with pytest.raises(cluster_spec.ClusterError, match="runs the evaluator"):
    cluster_spec.parse_cluster(None, "evaluator", environ=worker_config)


def _experiment_gin(tmp_path):
  path = tmp_path / "experiment.gin"
  path.write_text(
    "\n".join(
      [
        "outer_training.family = @QuadraticFamily()",
        "QuadraticFamily.dim = 4",
        "outer_training.lopt = @MLPLOpt()",
        "outer_training.snapshot_every = 1",
        "outer_training.batch_size = 2",
        "Worker.horizon = 12",
        "Worker.schedule = @FixedLength()",
        "FixedLength.length = 4",
        "Evaluator.test_family = @eval/QuadraticFamily()",
        "eval/QuadraticFamily.noise_std = 0.1",
        f"Evaluator.num_tasks = {NUM_TASKS}",
        f"Evaluator.num_steps = {NUM_STEPS}",
        "Evaluator.learning_rates = (0.01, 0.1, 1.0)",
      ]
    )
  )
  return str(path)


@pytest.mark.integration
def test_bin_evaluator_evaluates_a_train_dir_and_refuses_another_experiment(tmp_path):
  gin_file, train_dir = _experiment_gin(tmp_path), str(tmp_path / "train")
  testing_utils.run_main(
    "train_local",
    ["train_local", f"--gin_file={gin_file}", f"--train_dir={train_dir}", "--num_outer_steps=2"],
  )
  common = [f"--gin_file={gin_file}", f"--train_dir={train_dir}", "--poll_secs=0.01"]
  testing_utils.run_main("evaluator", ["evaluator", *common])  # Exits: the chief has finished.
  assert [r["outer_step"] for r in evaluator_role.read_progress(train_dir)] == [0, 1, 2]
  with pytest.raises(SystemExit) as exit_info:
    testing_utils.run_main(
      "evaluator", ["evaluator", *common, "--gin_bindings=MLPLOpt.hidden_size = 8"]
    )
  message = str(exit_info.value.code)
  assert message.startswith("error: ") and "holds another experiment" in message
  assert "theta's shapes differ" in message and "\n" not in message
  with pytest.raises(SystemExit) as exit_info:
    testing_utils.run_main(
      "evaluator", ["evaluator", *common, '--cluster={"worker": ["localhost:2223"]}']
    )
  message = str(exit_info.value.code)
  assert message.startswith("error: ") and "'chief'" in message and "\n" not in message


def test_an_l_valid_experiments_reference_is_tuned_on_validation_loss(tmp_path):
  _bind_small()
  gin.bind_parameter("Evaluator.objective", "valid")
  evaluator = evaluator_role.Evaluator(str(tmp_path), LOPT, FAMILY)
  gin.clear_config()
  reference = evaluator.reference()
  assert reference["name"] == tuning.tuned_name("adam", "valid")
  assert reference["metric"] == "final_test_loss"
  # The learning rates chosen are those of the grid's validation-loss winners on the same runs.
  protocol = evaluator._protocol(HELD_OUT)
  tuned = tuning.tune_learning_rate_per_task(protocol, "adam", (0.01, 0.1, 1.0))
  assert reference["outer_test"]["learning_rates"] == tuned["valid"].learning_rates.tolist()
  assert tuned["valid"].learning_rates.tolist() != tuned["train"].learning_rates.tolist()
  # A reference of the other objective in the train dir is not reused.
  assert _evaluator(tmp_path).reference()["name"] == tuning.tuned_name("adam", "train")


def test_an_unknown_evaluator_objective_is_named():
  with pytest.raises(ValueError, match="Worker.objective"):
    evaluator_role.Evaluator("unused", LOPT, FAMILY, HELD_OUT, objective="test")
