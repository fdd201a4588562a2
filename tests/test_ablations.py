"""The ablation study runner: equal budgets, the window's average, resuming, figures, claims."""

import json
import os
import subprocess

import gin
import pytest
import testing_utils

from task_specific_learned_opt import ablations, configurables, gin_config  # noqa: F401


def test_the_window_average_weights_each_step_by_its_inner_steps():
  records = [
    {"inner_steps": 10, "outer_loss": 4.0},
    {"inner_steps": 30, "outer_loss": 3.0},
    {"inner_steps": 60, "outer_loss": 2.0},
    {"inner_steps": 100, "outer_loss": 1.0},
  ]
  # (20, 60]: the steps ending at 30 (20 inner steps, loss 3) and 60 (30 inner steps, loss 2).
  assert ablations.window_mean(records, (20, 60)) == pytest.approx((20 * 3 + 30 * 2) / 50)
  assert ablations.window_mean(records, (100, 200)) != ablations.window_mean(records, (100, 200))
  # A grid interval without a record keeps the value before it.
  curve = ablations.curve(records, [0, 10, 20, 30, 100])
  assert curve.tolist() == [4.0, 4.0, 3.0, pytest.approx((30 * 2 + 40 * 1) / 70)]


def _study(values):
  return {name: {"median": v[1], "q25": v[0], "q75": v[2]} for name, v in values.items()}


def test_the_papers_claims_are_checked_on_the_medians():
  results = _study(
    {
      "merged": (0.9, 1.0, 1.1),
      "estimator_rp": (1.1, 1.2, 1.3),
      "estimator_es": (0.8, 0.95, 1.0),  # Better than merged: that claim does not hold.
      "fixed_10": (1.5, 1.6, 1.7),
      "fixed_500": (0.5, 1.0, 2.0),  # The longest fixed truncation: a wide spread.
      "no_momentum": (2.0, 2.1, 2.2),
      "no_time": (1.0, 1.15, 1.2),  # 0.15 above merged, more than its spread of 0.2? No: holds.
    }
  )
  claims = {c["claim"]: c["holds"] for c in ablations._claims(results)}
  assert claims == {
    "merged beats g_rp only": True,
    "merged beats ES only": False,
    "a fixed truncation of 10 converges poorly": True,
    "a fixed truncation of 500 has high variance over seeds": True,
    "no momentum features fails": True,
    "no time features is nearly as good": True,
  }
  margins = {c["claim"]: (c.get("margin"), c.get("resolved")) for c in ablations._claims(results)}
  # g_rp only: 0.2 above merged, beyond merged's and its own interquartile range (0.2, 0.2)? No:
  # equal to them, so not resolved. No momentum: 1.1 above, beyond both (0.2, 0.2): resolved.
  assert margins["merged beats g_rp only"] == (pytest.approx(0.2), False)
  assert margins["no momentum features fails"] == (pytest.approx(1.1), True)
  assert margins["merged beats ES only"] == (pytest.approx(-0.05), False)
  assert margins["no time features is nearly as good"] == (None, None)  # Not a comparison.
  results["no_time"]["median"] = 1.25  # More than the spread (0.2) above merged's 1.0.
  claims = {c["claim"]: c["holds"] for c in ablations._claims(results)}
  assert not claims["no time features is nearly as good"]
  assert ablations._claims({k: v for k, v in results.items() if k != "merged"}) == []


def _config(tmp_path, name, extra=()):
  path = tmp_path / f"{name}.gin"
  path.write_text(
    "\n".join(
      [
        "outer_training.family = @QuadraticFamily()",
        "QuadraticFamily.dim = 4",
        "outer_training.lopt = @MLPLOpt()",
        "train_local.num_workers = 2",
        "Chief.batch_size = 2",
        "Worker.horizon = 12",
        "Worker.stagger = True",
        "Worker.schedule = @FixedLength()",
        "FixedLength.length = 3",
        "outer_training.num_outer_steps = 1000",
        "configure_threads.inter_op_threads = 1",
        *extra,
      ]
    )
  )
  return str(path)


@pytest.mark.integration
def test_a_study_runs_resumes_without_redoing_runs_and_draws_its_figures(tmp_path, monkeypatch):
  configurations = {
    "merged": _config(tmp_path, "merged"),
    "no_time": _config(tmp_path, "no_time", ["MLPLOpt.use_time = False"]),
  }
  out = str(tmp_path / "study")
  gin_config.parse()
  study = ablations.ablation_study(
    out, configurations=configurations, num_seeds=2, max_inner_steps=12, window=(6, 12)
  )
  for name in configurations:
    result = study["results"][name]
    assert result["seeds"] == [0, 1] and len(result["window_loss"]) == 2
    assert all(v == v for v in result["window_loss"])  # Finite: the window holds records.
  for path in study["paths"].values():
    assert os.path.getsize(path) > 0
  with open(study["paths"]["json"]) as f:
    assert json.load(f)["max_inner_steps"] == 12
  run_dir = os.path.join(out, "runs", "merged", "seed_1")
  records = ablations.read_records(run_dir)
  assert records[-1]["inner_steps"] >= 12 > records[-2]["inner_steps"]  # Stopped at the budget.
  # The seeds differ (outer_training.seed), so the runs are not copies.
  assert (
    study["results"]["merged"]["window_loss"][0] != study["results"]["merged"]["window_loss"][1]
  )

  # Again: every run is finished, so no process starts and the numbers are the same.
  started = []
  popen = subprocess.Popen
  monkeypatch.setattr(
    ablations.subprocess, "Popen", lambda *a, **k: started.append(a) or popen(*a, **k)
  )
  again = ablations.ablation_study(
    out, configurations=configurations, num_seeds=2, max_inner_steps=12, window=(6, 12)
  )
  assert started == []
  assert json.dumps(ablations._jsonable(again["results"])) == json.dumps(
    ablations._jsonable(study["results"])
  )

  # A larger budget resumes each run from its checkpoint; a broken configuration fails alone,
  # named with its log, and the others' results are still written.
  configurations["broken"] = _config(tmp_path, "broken", ["Chief.no_such_parameter = 1"])
  with pytest.raises(ablations.AblationError, match="broken seed 0 exited with status 1"):
    ablations.ablation_study(
      out, configurations=configurations, num_seeds=1, max_inner_steps=18, window=(12, 18)
    )
  assert len(started) == 3  # merged and no_time seed 0, and broken seed 0.
  resumed = ablations.read_records(os.path.join(out, "runs", "merged", "seed_0"))
  steps = [r["outer_step"] for r in resumed]
  assert steps == list(range(1, len(steps) + 1)) and resumed[-1]["inner_steps"] >= 18
  with open(os.path.join(out, "runs", "merged", "seed_0", ablations.LOG_FILENAME)) as f:
    assert "Resumed from" in f.read()
  with open(os.path.join(out, ablations.RESULTS_FILENAME)) as f:
    written = json.load(f)
  assert written["max_inner_steps"] == 18 and set(written["results"]) == {"merged", "no_time"}


def test_bin_ablations_parses_the_shipped_studies():
  for name in ("ablations_small/study.gin", "paper/ablations/study.gin"):
    gin_config.parse([os.path.join(testing_utils.REPO, "gin", name)])
    bindings = gin.get_bindings("ablation_study")
    assert len(bindings["configurations"]) == 8
    for gin_file in bindings["configurations"].values():
      gin_config.parse([gin_file])  # Each configuration parses on its own.


@pytest.mark.integration
def test_a_seed_study_overlays_the_seeds_evaluations(tmp_path):
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
  configurations = {"quadratic": _config(tmp_path, "quadratic", evaluated)}
  out = str(tmp_path / "seeds")
  gin_config.parse()
  summary = ablations.seed_study(out, configurations=configurations, num_seeds=2, num_parallel=1)
  s = summary["quadratic"]
  assert sorted(s["seeds"]) == ["0", "1"]
  for r in s["seeds"].values():
    assert [x["outer_step"] for x in r["records"]] == [0, 2, 4]
  # Seed 1's run was given seed 0's reference (the same tasks) instead of computing it again.
  runs = os.path.join(out, "runs", "quadratic")
  references = [
    ablations.evaluator_lib.read_json(
      os.path.join(runs, f"seed_{k}", ablations.evaluator_lib.REFERENCE_FILENAME)
    )
    for k in (0, 1)
  ]
  assert references[0] == references[1] == s["reference"]
  for k, computed in ((0, True), (1, False)):
    with open(os.path.join(runs, f"seed_{k}", ablations.LOG_FILENAME)) as f:
      assert ("Computing the adam" in f.read()) == computed
  last = {k: r["last"]["outer_train"]["mean_train_loss"] for k, r in s["seeds"].items()}
  assert s["best_seed_by_outer_train"] == int(min(last, key=last.get))
  assert os.path.getsize(summary["paths"]["quadratic"]) > 0
  with open(summary["paths"]["json"]) as f:
    assert json.load(f)["quadratic"]["best_seed_by_outer_train"] == s["best_seed_by_outer_train"]
  # Other study bindings (more outer steps): the finished runs resume to them.
  longer = ablations.seed_study(
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
  assert ablations.passed_at(records, reference) == {"outer_step": 20, "inner_steps": 200}
  assert ablations.passed_at(records[:2], reference) == {}
