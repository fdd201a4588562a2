"""Baseline searches: the random-search space, the LR grid's answer, resuming, processes."""

import json
import os

import gin
import numpy as np
import pytest

from task_specific_learned_opt import gin_config  # noqa: F401
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.evaluation import baseline_search  # noqa: F401
from task_specific_learned_opt.tasks import quadratic


def _isotropic_quadratics(curvature):
  """Quadratics with every curvature equal to h: SGD's best learning rate is exactly 1/h."""
  return quadratic.QuadraticFamily(dim=4, min_curvature=curvature, max_curvature=curvature)


@pytest.fixture(autouse=True)
def _clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


def _setup(family, **kwargs):
  gin.bind_parameter("baseline_search.family", family)
  for name, value in kwargs.items():
    gin.bind_parameter(f"baseline_search.{name}", value)


def test_the_lr_grid_finds_the_known_optimum_per_task(tmp_path):
  _setup(_isotropic_quadratics(1.0), num_tasks=3, num_inits=1, num_steps=20)
  best = baseline_search.tune_baselines(str(tmp_path), mode="lr_grid", kinds=("sgd",))
  assert best["best"]["sgd"]["learning_rate_per_task"] == pytest.approx([1.0, 1.0, 1.0])
  saved = json.load(open(tmp_path / baseline_search.BEST_FILENAME))
  assert saved["best"]["sgd"]["learning_rate_per_task"] == pytest.approx([1.0] * 3)


def test_a_random_search_resumes_from_a_partial_results_file(tmp_path, monkeypatch):
  _setup(quadratic.QuadraticFamily(dim=4), num_tasks=2, num_steps=15, objective="valid")
  kwargs = dict(mode="random_search", kinds=("adam", "sgdm"), num_configs=3)
  straight = baseline_search.tune_baselines(str(tmp_path / "straight"), **kwargs)
  path = tmp_path / "straight" / baseline_search.RESULTS_FILENAME
  lines = open(path).read().splitlines()
  assert len(lines) == 1 + 6  # The signature and six configurations.
  os.makedirs(tmp_path / "resumed")
  with open(tmp_path / "resumed" / baseline_search.RESULTS_FILENAME, "w") as f:
    f.write("\n".join(lines[:5]) + "\n" + lines[5][:30])  # Killed while writing line 6.
  evaluated = []
  original = baseline_search.evaluate_config
  monkeypatch.setattr(
    baseline_search, "evaluate_config", lambda s, c: evaluated.append(c["id"]) or original(s, c)
  )
  resumed = baseline_search.tune_baselines(str(tmp_path / "resumed"), **kwargs)
  assert evaluated == [json.loads(lines[5])["id"], json.loads(lines[6])["id"]]
  assert resumed == straight
  for kind in ("adam", "sgdm"):
    assert np.isfinite(resumed["best"][kind]["objective"])


def test_a_results_file_of_another_search_is_refused(tmp_path):
  _setup(quadratic.QuadraticFamily(dim=4), num_tasks=1, num_steps=5)
  baseline_search.tune_baselines(
    str(tmp_path), mode="lr_grid", kinds=("sgd",), learning_rates=(0.1,)
  )
  gin.bind_parameter("baseline_search.num_steps", 6)
  with pytest.raises(baseline_search.SearchError, match="other settings"):
    baseline_search.tune_baselines(
      str(tmp_path), mode="lr_grid", kinds=("sgd",), learning_rates=(0.1,)
    )


@pytest.mark.integration
def test_processes_give_the_same_results_as_one(tmp_path):
  bindings = [
    "baseline_search.family = @QuadraticFamily()",
    "QuadraticFamily.dim = 4",
    "baseline_search.num_tasks = 2",
    "baseline_search.num_steps = 10",
    "tune_baselines.mode = 'lr_grid'",
    "tune_baselines.kinds = ('adam',)",
    "tune_baselines.learning_rates = (0.01, 0.1, 1.0)",
  ]
  results = []
  for processes in (1, 2):
    gin_config.parse([], bindings + [f"tune_baselines.num_processes = {processes}"])
    results.append(baseline_search.tune_baselines(str(tmp_path / str(processes))))
  assert results[0] == results[1]


def test_one_search_of_both_objectives_gives_each_objectives_own_answer(tmp_path):
  kwargs = dict(mode="random_search", kinds=("adam", "sgdm"), num_configs=4)
  answers = {}
  for objective in ("train", "valid", "both"):
    gin.clear_config()
    _setup(quadratic.QuadraticFamily(dim=4), num_tasks=2, num_steps=15, objective=objective)
    answers[objective] = baseline_search.tune_baselines(str(tmp_path / objective), **kwargs)
  lines = open(tmp_path / "both" / baseline_search.RESULTS_FILENAME).read().splitlines()
  assert len(lines) == 1 + 8  # One set of runs: the signature and eight configurations.
  for objective in ("train", "valid"):
    alone, shared = answers[objective], answers["both"][objective]
    assert shared["best"] == alone["best"]  # The same winner, objective and count.
    assert shared["signature"] == alone["signature"]  # So bin/eval --searched reads it alike.
    saved = json.load(open(tmp_path / "both" / f"L_{objective}" / baseline_search.BEST_FILENAME))
    assert saved == shared
  # The two objectives rank the configurations differently here, so a mix-up would show.
  records = [json.loads(line) for line in lines[1:]]
  assert [r["mean"] for r in records] != [r["train_mean"] for r in records]
  with pytest.raises(ValueError, match="both"):
    gin.clear_config()
    _setup(quadratic.QuadraticFamily(dim=4), objective="test")
    baseline_search.baseline_search()
