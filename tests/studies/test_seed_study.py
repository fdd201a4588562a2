"""The seed study: the seeds' evaluations overlaid, when each passed the reference."""

import json
import os

import pytest

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import evaluator_role
from task_specific_learned_opt.studies import processes, seed_study


@pytest.mark.integration
def test_a_seed_study_overlays_the_seeds_evaluations(tmp_path, write_config):
  evaluated = [
    "outer_training.snapshot_every = 2",
    "outer_training.num_outer_steps = 4",
    "Evaluator.test_family = @eval/QuadraticFamily()",
    "eval/QuadraticFamily.dim = 4",
    "eval/QuadraticFamily.noise_std = 0.1",
    "Evaluator.num_tasks = 2",
    "Evaluator.num_steps = 12",
    "Evaluator.learning_rates = (0.01, 0.1, 1.0)",
  ]
  configurations = {"quadratic": write_config("quadratic", evaluated)}
  out = str(tmp_path / "seeds")
  gin_config.parse()
  summary = seed_study.seed_study(out, configurations=configurations, num_seeds=2, num_parallel=1)
  s = summary["quadratic"]
  assert sorted(s["seeds"]) == ["0", "1"]
  for r in s["seeds"].values():
    assert [x["outer_step"] for x in r["records"]] == [0, 2, 4]
  # Seed 1's run was given seed 0's reference (the same tasks) instead of computing it again.
  runs = os.path.join(out, "runs", "quadratic")
  references = [evaluator_role.read_reference(os.path.join(runs, f"seed_{k}")) for k in (0, 1)]
  # As JSON (nan as "nan"), since nan != nan.
  json_references = [files.to_json(r) for r in (*references, s["reference"])]
  assert json_references[0] == json_references[1] == json_references[2]
  for k, computed in ((0, True), (1, False)):
    with open(os.path.join(runs, f"seed_{k}", processes.LOG_FILENAME)) as f:
      assert ("Computing the adam" in f.read()) == computed
  last = {k: r["last"]["outer_train"]["mean_train_loss"] for k, r in s["seeds"].items()}
  assert s["best_seed_by_outer_train"] == int(min(last, key=last.get))
  assert os.path.getsize(summary["paths"]["quadratic"]) > 0
  with open(summary["paths"]["json"]) as f:
    assert json.load(f)["quadratic"]["best_seed_by_outer_train"] == s["best_seed_by_outer_train"]
  # Other study bindings (more outer steps): the finished runs resume to them.
  longer = seed_study.seed_study(
    out,
    configurations=configurations,
    num_seeds=1,
    bindings=("train_local.evaluate_snapshots = True", "outer_training.num_outer_steps = 6"),
  )
  steps = [x["outer_step"] for x in longer["quadratic"]["seeds"]["0"]["records"]]
  assert steps == [0, 2, 4, 6]


def test_passing_the_reference_is_the_first_snapshot_below_it():
  reference = {"outer_test": {"mean_train_loss": 1.0}}
  records = [
    {"outer_step": s, "inner_steps": 10 * s, "outer_test": {"mean_train_loss": v}}
    for s, v in ((0, 2.0), (10, 1.0), (20, 0.9), (30, 1.1))
  ]
  assert seed_study.passed_at(records, reference) == {"outer_step": 20, "inner_steps": 200}
  assert seed_study.passed_at(records[:2], reference) == {}


def test_an_l_valid_reference_is_passed_on_final_test_loss():
  reference = {"metric": "final_test_loss", "outer_test": {"final_test_loss": 0.5}}
  records = [
    {"outer_step": s, "inner_steps": 10 * s, "outer_test": {"final_test_loss": v}}
    for s, v in ((0, 2.0), (10, 0.4))
  ]
  assert seed_study.passed_at(records, reference) == {"outer_step": 10, "inner_steps": 100}
