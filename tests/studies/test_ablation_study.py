"""The ablation study: the window's average, the curves, the claims, a study run and resumed."""

import json
import math
import os
import subprocess

import gin
import pytest
import testing_utils

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import progress
from task_specific_learned_opt.studies import ablation_study, processes


def test_the_window_average_weights_each_step_by_its_inner_steps():
  records = [
    {"inner_steps": 10, "outer_loss": 4.0},
    {"inner_steps": 30, "outer_loss": 3.0},
    {"inner_steps": 60, "outer_loss": 2.0},
    {"inner_steps": 100, "outer_loss": 1.0},
  ]
  # (20, 60]: the steps ending at 30 (20 inner steps, loss 3) and 60 (30 inner steps, loss 2).
  assert ablation_study.window_mean(records, (20, 60)) == pytest.approx((20 * 3 + 30 * 2) / 50)
  assert math.isnan(ablation_study.window_mean(records, (100, 200)))  # No record in the window.
  # A grid interval without a record keeps the value before it.
  curve = ablation_study.curve(records, [0, 10, 20, 30, 100])
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
  claims = {c["claim"]: c["holds"] for c in ablation_study.claims(results)}
  assert claims == {
    "merged beats g_rp only": True,
    "merged beats ES only": False,
    "a fixed truncation of 10 converges poorly": True,
    "a fixed truncation of 500 has high variance over seeds": True,
    "no momentum features fails": True,
    "no time features is nearly as good": True,
  }
  margins = {
    c["claim"]: (c.get("margin"), c.get("resolved")) for c in ablation_study.claims(results)
  }
  # g_rp only: 0.2 above merged, beyond merged's and its own interquartile range (0.2, 0.2)? No:
  # equal to them, so not resolved. No momentum: 1.1 above, beyond both (0.2, 0.2): resolved.
  assert margins["merged beats g_rp only"] == (pytest.approx(0.2), False)
  assert margins["no momentum features fails"] == (pytest.approx(1.1), True)
  assert margins["merged beats ES only"] == (pytest.approx(-0.05), False)
  assert margins["no time features is nearly as good"] == (None, None)  # Not a comparison.
  results["no_time"]["median"] = 1.25  # More than the spread (0.2) above merged's 1.0.
  claims = {c["claim"]: c["holds"] for c in ablation_study.claims(results)}
  assert not claims["no time features is nearly as good"]
  assert ablation_study.claims({k: v for k, v in results.items() if k != "merged"}) == []


@pytest.mark.integration
def test_a_study_runs_resumes_without_redoing_runs_and_draws_its_figures(
  tmp_path, monkeypatch, write_config
):
  configurations = {
    "merged": write_config("merged"),
    "no_time": write_config("no_time", ["MLPLOpt.use_time = False"]),
  }
  out = str(tmp_path / "study")
  gin_config.parse()
  study = ablation_study.ablation_study(
    out, configurations=configurations, num_seeds=2, max_inner_steps=12, window=(6, 12)
  )
  for name in configurations:
    result = study["results"][name]
    assert result["seeds"] == [0, 1] and len(result["window_loss"]) == 2
    assert not any(math.isnan(v) for v in result["window_loss"])  # The window holds records.
  for path in study["paths"].values():
    assert os.path.getsize(path) > 0
  with open(study["paths"]["json"]) as f:
    assert json.load(f)["max_inner_steps"] == 12
  run_dir = os.path.join(out, "runs", "merged", "seed_1")
  records = progress.read_records(run_dir)
  assert records[-1]["inner_steps"] >= 12 > records[-2]["inner_steps"]  # Stopped at the budget.
  # The seeds differ (outer_training.seed), so the runs are not copies.
  assert (
    study["results"]["merged"]["window_loss"][0] != study["results"]["merged"]["window_loss"][1]
  )

  # Again: every run is finished, so no process starts and the numbers are the same.
  started = []
  popen = subprocess.Popen
  monkeypatch.setattr(
    processes.subprocess, "Popen", lambda *a, **k: started.append(a) or popen(*a, **k)
  )
  again = ablation_study.ablation_study(
    out, configurations=configurations, num_seeds=2, max_inner_steps=12, window=(6, 12)
  )
  assert started == []
  assert json.dumps(files.to_json(again["results"])) == json.dumps(files.to_json(study["results"]))

  # A larger budget resumes each run from its checkpoint; a broken configuration fails alone,
  # named with its log, and the others' results are still written.
  configurations["broken"] = write_config("broken", ["Chief.no_such_parameter = 1"])
  with pytest.raises(processes.AblationError, match="broken seed 0 exited with status 1"):
    ablation_study.ablation_study(
      out, configurations=configurations, num_seeds=1, max_inner_steps=18, window=(12, 18)
    )
  assert len(started) == 3  # merged and no_time seed 0, and broken seed 0.
  resumed = progress.read_records(os.path.join(out, "runs", "merged", "seed_0"))
  steps = [r["outer_step"] for r in resumed]
  assert steps == list(range(1, len(steps) + 1)) and resumed[-1]["inner_steps"] >= 18
  with open(os.path.join(out, "runs", "merged", "seed_0", processes.LOG_FILENAME)) as f:
    assert "Resumed from" in f.read()
  with open(os.path.join(out, ablation_study.RESULTS_FILENAME)) as f:
    written = json.load(f)
  assert written["max_inner_steps"] == 18 and set(written["results"]) == {"merged", "no_time"}


def test_bin_ablations_parses_the_shipped_studies():
  for name in ("ablations_small/study.gin", "paper/ablations/study.gin"):
    gin_config.parse([os.path.join(testing_utils.REPO, "gin", name)])
    bindings = gin.get_bindings("ablation_study")
    assert len(bindings["configurations"]) == 8
    for gin_file in bindings["configurations"].values():
      gin_config.parse([gin_file])  # Each configuration parses on its own.
