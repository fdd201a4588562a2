"""bin/eval and the final comparison: results, panels, comparisons, searched winners, files."""

import json
import os

import gin
import numpy as np
import pytest

from task_specific_learned_opt import checkpoints, plots
from task_specific_learned_opt.evaluation import (
  baseline_search,
  candidates,
  held_out,
  protocol,
  run_cache,
  running,
  statistics,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import quadratic


def _isotropic_quadratics(curvature):
  """Quadratics with every curvature equal to h: SGD's best learning rate is exactly 1/h."""
  return quadratic.QuadraticFamily(dim=4, min_curvature=curvature, max_curvature=curvature)


def test_evaluate_writes_results_and_plots(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0))
  result = held_out.evaluate(
    str(tmp_path / "eval"),
    {"learned": str(tmp_path / "theta")},
    family=quadratic.QuadraticFamily(dim=4),
    lopt=lopt,
    optimizers={"adam 1e-2": adam.Adam(1e-2)},
    tuned_baselines=("adam",),
    learning_rates=(1e-3, 1e-1),
    num_tasks=3,
    num_inits=2,
    num_steps=30,
    num_points=5,
    num_eval_batches=1,
  )
  paths = result["paths"]
  for key in ("curves", "curves_wallclock"):
    assert os.path.getsize(paths[key]) > 5000
  histograms = [k for k in paths if k.startswith("histogram")]
  assert len(histograms) == 3 and all(os.path.getsize(paths[h]) > 5000 for h in histograms)
  saved = json.load(open(paths["json"]))
  on_train, on_valid = (
    "adam (lr tuned per task on train loss)",
    "adam (lr tuned per task on valid loss)",
  )
  assert set(saved["results"]) == {"learned", "adam 1e-2", on_train, on_valid}
  assert set(saved["tuned_learning_rates"]) == {on_train, on_valid}
  assert saved["panels"] == {
    "train": ["learned", "adam 1e-2", on_train],
    "test": ["learned", "adam 1e-2", on_valid],
  }
  for key in ("train_loss", "valid_loss", "test_loss"):
    assert np.shape(saved["results"]["learned"][key]) == (3, 2, len(saved["steps"]))
  for key in ("mean_loss", "mean_valid_loss", "mean_test_loss", "final_test_loss"):
    assert np.shape(saved["results"][on_valid][key]) == (3, 2)
  for name, r in saved["results"].items():
    assert np.array_equal(r["final_test_loss"], np.asarray(r["test_loss"])[:, :, -1]), name
  summary = json.load(open(paths["summary"]))  # The same numbers, without the per-run arrays.
  assert os.path.getsize(paths["summary"]) < os.path.getsize(paths["json"])
  assert summary["comparisons"] == saved["comparisons"]
  assert summary["panels"] == saved["panels"]
  for name, r in saved["results"].items():
    c = summary["candidates"][name]
    np.testing.assert_allclose(c["per_task"]["final_test_loss"], np.mean(r["final_test_loss"], 1))
    np.testing.assert_allclose(
      c["curves"]["test_loss"][1], np.median(np.reshape(r["test_loss"], [6, -1]), axis=0)
    )
  rows = open(paths["csv"]).read().splitlines()
  assert len(rows) == 1 + 4 * 3 * 2 * len(saved["steps"])
  assert "valid_loss" in rows[0].split(",")
  assert [(c["baseline"], c["metric"]) for c in saved["comparisons"]] == [
    (on_train, "mean_loss"),
    (on_valid, "mean_test_loss"),
    (on_valid, "final_test_loss"),
  ]


def test_the_winners_of_a_random_search_are_evaluated(tmp_path):
  gin.clear_config()
  gin.bind_parameter("baseline_search.family", quadratic.QuadraticFamily(dim=4))
  gin.bind_parameter("baseline_search.num_tasks", 2)
  gin.bind_parameter("baseline_search.num_steps", 10)
  try:
    best = baseline_search.tune_baselines(
      str(tmp_path / "search"), mode="random_search", kinds=("adam", "sgdm"), num_configs=2
    )
  finally:
    gin.clear_config()
  winners = candidates.searched(str(tmp_path / "search" / baseline_search.BEST_FILENAME))
  assert [c.name for c in winners] == ["adam+reg+decay (L_train)", "sgdm+reg+decay (L_train)"]
  family = quadratic.QuadraticFamily(dim=4)
  task = family.sample(protocol.task_seed(0, 0))
  # The winner's objective is reproduced by evaluating it on the search's first run.
  run = running.evaluate_run(
    family, task, winners[0], 10, protocol.run_seed(0, 0, 0), np.array([0, 10]), 1
  )
  winner = best["best"]["adam"]["id"]
  record = [
    json.loads(line)
    for line in open(tmp_path / "search" / baseline_search.RESULTS_FILENAME).read().splitlines()[1:]
    if json.loads(line)["id"] == winner
  ][0]
  assert np.mean(run["losses"]) == pytest.approx(record["objective"][0][0], rel=1e-5)


def _write_best(path, objective, learning_rate):
  """A random search's best.json (as bin/tune_baselines writes it) with one Adam winner."""
  hparams = {
    "learning_rate": learning_rate,
    "beta1": 0.9,
    "beta2": 0.999,
    "epsilon": 1e-8,
    "linear_decay": 1e-5,
    "exponential_decay": 1e-4,
    "l1": 1e-6,
    "l2": 1e-4,
  }
  signature = {
    "mode": "random_search",
    "family": "quadratic4",
    "objective": objective,
    "num_tasks": 2,
    "num_inits": 1,
    "num_steps": 10,
    "seed": 0,
  }
  best = {"adam": {"id": "adam/3", "hparams": hparams, "objective": 1.0, "num_configurations": 4}}
  path.write_text(json.dumps({"signature": signature, "best": best}))
  return str(path)


def test_two_searches_of_one_objective_need_labels_and_are_evaluated_side_by_side(tmp_path):
  searched = [
    _write_best(tmp_path / "small.json", "train", 0.03),
    _write_best(tmp_path / "large.json", "train", 0.3),
  ]
  # Unlabelled, both winners would be "adam+reg+decay (L_train)": refused before any run.
  with pytest.raises(ValueError, match=r"named adam\+reg\+decay \(L_train\).*label them"):
    _evaluate_quadratics(str(tmp_path / "refused"), None, (), searched=searched)
  assert not (tmp_path / "refused" / run_cache.FILENAME).exists()
  labelled = ["at 100=" + searched[0], "at 1000=" + searched[1]]
  result = _evaluate_quadratics(str(tmp_path / "eval"), None, (), searched=labelled)
  names = ["adam+reg+decay at 100 (L_train)", "adam+reg+decay at 1000 (L_train)"]
  assert result["panel_baselines"]["train"] == names
  losses = [np.mean(result["results"][n]["mean_loss"]) for n in names]
  assert losses[0] != losses[1]  # Each its own configuration (learning rate 0.03 and 0.3).


def test_search_winners_go_to_the_panel_and_comparison_of_their_objective(tmp_path, capsys):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0))
  searched = [  # The L_valid search first: panels follow the objective, not the order.
    _write_best(tmp_path / "valid.json", "valid", 0.03),
    _write_best(tmp_path / "train.json", "train", 0.3),
  ]
  result = held_out.evaluate(
    str(tmp_path / "eval"),
    {"learned": str(tmp_path / "theta")},
    searched,
    family=quadratic.QuadraticFamily(dim=4, noise_std=0.3),
    lopt=lopt,
    optimizers={"adam 1e-2": adam.Adam(1e-2)},
    tuned_baselines=("adam",),
    learning_rates=(1e-2, 1e-1),
    num_tasks=3,
    num_inits=2,
    num_steps=20,
    num_points=4,
    num_eval_batches=1,
    num_average_points=5,
  )
  on_train, on_valid = (
    "adam (lr tuned per task on train loss)",
    "adam (lr tuned per task on valid loss)",
  )
  l_train, l_valid = "adam+reg+decay (L_train)", "adam+reg+decay (L_valid)"
  saved = json.load(open(result["paths"]["json"]))
  assert saved["panels"] == {
    "train": ["learned", "adam 1e-2", on_train, l_train],
    "test": ["learned", "adam 1e-2", on_valid, l_valid],
  }
  assert saved["panel_baselines"] == {"train": [on_train, l_train], "test": [on_valid, l_valid]}
  results = {name: {k: np.asarray(v) for k, v in r.items()} for name, r in saved["results"].items()}
  comparisons = {(c["baseline"], c["metric"]): c for c in saved["comparisons"]}
  assert [(c["baseline"], c["metric"]) for c in saved["comparisons"]] == [
    (on_train, "mean_loss"),
    (l_train, "mean_loss"),
    (on_valid, "mean_test_loss"),
    (on_valid, "final_test_loss"),
    (l_valid, "mean_test_loss"),
    (l_valid, "final_test_loss"),
  ]
  output = capsys.readouterr().out
  for baseline, metric, name, histogram in (
    (
      on_train,
      "mean_loss",
      "mean training loss",
      "mean_training_loss_adam_lr_tuned_per_task_on_train_loss",
    ),
    (l_train, "mean_loss", "mean training loss", "mean_training_loss_adam_reg_decay_L_train"),
    (
      on_valid,
      "mean_test_loss",
      "mean test loss",
      "mean_test_loss_adam_lr_tuned_per_task_on_valid_loss",
    ),
    (l_valid, "mean_test_loss", "mean test loss", "mean_test_loss_adam_reg_decay_L_valid"),
    (l_valid, "final_test_loss", "final test loss", "final_test_loss_adam_reg_decay_L_valid"),
  ):
    c = comparisons[baseline, metric]
    assert (c["learned"], c["metric"], c["metric_name"]) == ("learned", metric, name)
    learned, other = results["learned"][metric].mean(axis=1), results[baseline][metric].mean(axis=1)
    np.testing.assert_allclose(c["difference"], other - learned, rtol=1e-6)
    assert c["learned_mean_loss"] == pytest.approx(np.mean(learned))
    assert c["baseline_mean_loss"] == pytest.approx(np.mean(other))
    assert c["fraction_learned_wins"] == pytest.approx(np.mean(other - learned > 0))
    # A histogram named by the metric, and one printed line per pair.
    path = result["paths"][f"histogram_{histogram}_vs_learned"]
    assert path.endswith(f"histogram_{histogram}_vs_learned.png") and os.path.getsize(path) > 5000
    stats = statistics.paired(other - learned)
    for key in statistics.STATISTICS_KEYS:
      assert c[key] == pytest.approx(stats[key]) if key != "outcome" else c[key] == stats[key]
    line = (
      f"learned vs {baseline} on 3 held-out tasks, 20 steps: {name} {np.mean(learned):.4f} vs "
      f"{np.mean(other):.4f}; {statistics.verdict(stats, digits=4)}"
    )
    assert line in output
  assert len([k for k in result["paths"] if k.startswith("histogram")]) == 6
  assert f"baselines tuned on training loss: {on_train}, {l_train}" in output
  assert f"baselines tuned on validation loss: {on_valid}, {l_valid}" in output
  # The test comparisons are on mean test loss, not on the training loss the train ones use.
  assert not np.allclose(
    comparisons[l_valid, "mean_test_loss"]["difference"],
    results[l_valid]["mean_loss"].mean(axis=1) - results["learned"]["mean_loss"].mean(axis=1),
  )


def _compare_on_quadratics(output_dir, lopt, **settings):
  """A small final comparison of lopt.init(0) with tuned Adam on quadratics, into `output_dir`."""
  return held_out.compare_with_tuned_baseline(
    output_dir,
    lopt,
    lopt.init(0),
    family=_isotropic_quadratics(0.5),
    learning_rates=(0.1, 1.0),
    num_tasks=2,
    num_steps=10,
    num_points=3,
    num_average_points=2,
    **settings,
  )


def test_the_final_comparison_evaluates_other_thetas_beside_the_trained_one(tmp_path, capsys):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "shipped"), lopt.init(1))
  result = _compare_on_quadratics(
    str(tmp_path / "eval"), lopt, thetas={"shipped": str(tmp_path / "shipped")}
  )
  on_train = "adam (lr tuned per task on train loss)"
  pairs = [(c["learned"], c["baseline"]) for c in result["comparisons"]]
  assert pairs[:2] == [("learned", on_train), ("shipped", on_train)]
  assert len(pairs) == 6  # And both against the baseline tuned on validation loss, twice.
  # Two different thetas on the same runs.
  assert not np.allclose(
    result["results"]["learned"]["mean_loss"], result["results"]["shipped"]["mean_loss"]
  )
  output = capsys.readouterr().out
  assert output.index("learned vs " + on_train) < output.index("shipped vs " + on_train)


def _evaluate_quadratics(output_dir, theta_dir, tuned_baselines=("adam",), **settings):
  """A small bin/eval of one theta (none if None) and tuned baselines on quadratics."""
  return held_out.evaluate(
    output_dir,
    {"learned": theta_dir} if theta_dir else {},
    family=quadratic.QuadraticFamily(dim=4, noise_std=0.3),
    lopt=mlp_lopt.MLPLOpt(),
    tuned_baselines=tuned_baselines,
    learning_rates=(1e-2, 1e-1),
    **{
      "num_tasks": 2,
      "num_inits": 2,
      "num_steps": 12,
      "num_points": 3,
      "num_eval_batches": 1,
      "num_average_points": 3,
      **settings,
    },
  )


def test_a_stopped_evaluation_resumes_from_its_finished_runs(tmp_path, monkeypatch):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  whole = _evaluate_quadratics(str(tmp_path / "whole"), theta_dir)
  runs = (tmp_path / "whole" / run_cache.FILENAME).read_text().splitlines()
  assert len(runs) == 1 + 2 * 2 * 3  # The protocol, then (learned + 2 grid values) x 4 runs.
  # Stopped after 5 runs, the last line cut short by the crash.
  (tmp_path / "stopped").mkdir()
  (tmp_path / "stopped" / run_cache.FILENAME).write_text(
    "\n".join(runs[:6]) + "\n" + runs[6][: len(runs[6]) // 2]
  )
  calls = []
  evaluate_run = running.evaluate_run
  monkeypatch.setattr(
    running, "evaluate_run", lambda *a, **k: calls.append(a[2].name) or evaluate_run(*a, **k)
  )
  resumed = _evaluate_quadratics(str(tmp_path / "stopped"), theta_dir)
  assert len(calls) == 12 - 5  # Only the runs not finished.
  for name, r in whole["results"].items():
    for key, value in r.items():
      if key != "steps_per_second":
        np.testing.assert_array_equal(resumed["results"][name][key], value, err_msg=name + key)
  assert len((tmp_path / "stopped" / run_cache.FILENAME).read_text().splitlines()) == 13
  # Run again whole: nothing is run; a changed theta runs its own runs again, not Adam's.
  calls.clear()
  _evaluate_quadratics(str(tmp_path / "stopped"), theta_dir)
  assert calls == []
  checkpoints.save_theta(theta_dir, lopt.init(1))
  changed = _evaluate_quadratics(str(tmp_path / "stopped"), theta_dir)
  assert calls == ["learned"] * 4
  assert not np.allclose(
    changed["results"]["learned"]["mean_loss"], whole["results"]["learned"]["mean_loss"]
  )


def test_resuming_into_the_directory_of_another_evaluation_is_refused(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  _evaluate_quadratics(str(tmp_path / "eval"), theta_dir)
  before = (tmp_path / "eval" / run_cache.FILENAME).read_text()
  with pytest.raises(run_cache.OtherEvaluationError, match="new --output_dir"):
    _evaluate_quadratics(str(tmp_path / "eval"), theta_dir, seed=1)
  assert (tmp_path / "eval" / run_cache.FILENAME).read_text() == before  # Nothing lost.


def test_histograms_are_drawn_for_the_pairs_named_and_a_wrong_name_stops_before_any_run(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  on_valid = "adam (lr tuned per task on valid loss)"
  result = _evaluate_quadratics(
    str(tmp_path / "eval"), theta_dir, histograms=[("learned", on_valid)]
  )
  drawn = sorted(k for k in result["paths"] if k.startswith("histogram"))
  assert drawn == [
    "histogram_final_test_loss_adam_lr_tuned_per_task_on_valid_loss_vs_learned",
    "histogram_mean_test_loss_adam_lr_tuned_per_task_on_valid_loss_vs_learned",
  ]
  assert len(result["comparisons"]) == 3  # All compared; only the pair named drawn.
  with pytest.raises(held_out.HistogramNameError, match="the --theta names"):
    _evaluate_quadratics(str(tmp_path / "other"), theta_dir, histograms=[("L_valid", on_valid)])
  assert not (tmp_path / "other").exists()


def test_wall_clock_speeds_are_timed_alike_for_every_candidate_and_tuned_kind(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  result = _evaluate_quadratics(
    str(tmp_path / "eval"), theta_dir, tuned_baselines=("adam", "sgdm"), timing_rounds=2
  )
  timed = result["timed_steps_per_second"]
  assert set(timed) == set(result["results"])
  assert all(np.isfinite(v) and v > 0 for v in timed.values())
  for kind in ("adam", "sgdm"):  # One timing per kind, for both of its baselines.
    assert (
      timed[f"{kind} (lr tuned per task on train loss)"]
      == timed[f"{kind} (lr tuned per task on valid loss)"]
    )
  saved = json.load(open(result["paths"]["json"]))
  assert saved["timed_steps_per_second"] == pytest.approx(timed)
  for name in timed:  # The wall-clock curves use them, not the runs' own speeds.
    assert plots.wallclock_rate(saved, name) == pytest.approx(timed[name])
  untimed = _evaluate_quadratics(str(tmp_path / "untimed"), theta_dir)
  assert "timed_steps_per_second" not in untimed
  assert plots.wallclock_rate(untimed, "learned") == np.nanmedian(
    untimed["results"]["learned"]["steps_per_second"]
  )


def test_an_evaluation_split_over_processes_is_joined_with_the_runs_of_its_parts(
  tmp_path, monkeypatch
):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  whole = _evaluate_quadratics(str(tmp_path / "whole"), theta_dir, tuned_baselines=("adam", "sgdm"))
  # Two parts, each with some of the optimizers, in their own directories.
  _evaluate_quadratics(str(tmp_path / "part1"), theta_dir, tuned_baselines=("adam",))
  _evaluate_quadratics(str(tmp_path / "part2"), None, tuned_baselines=("sgdm",))
  calls = []
  monkeypatch.setattr(running, "evaluate_run", lambda *a, **k: calls.append(a) or 1 / 0)
  joined = _evaluate_quadratics(
    str(tmp_path / "joined"),
    theta_dir,
    tuned_baselines=("adam", "sgdm"),
    runs_from=[str(tmp_path / "part1"), str(tmp_path / "part2")],
  )
  assert calls == []  # Nothing run again.
  for name, r in whole["results"].items():
    np.testing.assert_array_equal(
      joined["results"][name]["mean_loss"], r["mean_loss"], err_msg=name
    )
  with pytest.raises(run_cache.OtherEvaluationError, match="can be joined"):
    _evaluate_quadratics(
      str(tmp_path / "other"), theta_dir, seed=3, runs_from=[str(tmp_path / "part1")]
    )
  with pytest.raises(run_cache.SourceNotFoundError, match="runs_from"):
    _evaluate_quadratics(str(tmp_path / "other"), theta_dir, runs_from=[str(tmp_path / "nowhere")])


def test_an_evaluation_grows_to_more_tasks_and_inits_by_running_only_the_new_runs(
  tmp_path, monkeypatch
):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  small = _evaluate_quadratics(str(tmp_path / "small"), theta_dir, num_tasks=2, num_inits=1)
  calls = []
  evaluate_run = running.evaluate_run
  monkeypatch.setattr(
    running, "evaluate_run", lambda *a, **k: calls.append(a[2].name) or evaluate_run(*a, **k)
  )
  big = _evaluate_quadratics(
    str(tmp_path / "big"), theta_dir, num_tasks=3, num_inits=2, runs_from=[str(tmp_path / "small")]
  )
  assert len(calls) == 3 * (3 * 2 - 2)  # (learned + 2 grid values) x the 4 new runs.
  alone = _evaluate_quadratics(str(tmp_path / "alone"), theta_dir, num_tasks=3, num_inits=2)
  for name, r in alone["results"].items():  # The same numbers as the grown one made alone.
    np.testing.assert_array_equal(big["results"][name]["mean_loss"], r["mean_loss"], err_msg=name)
    np.testing.assert_array_equal(
      big["results"][name]["mean_loss"][:2, :1], small["results"][name]["mean_loss"], err_msg=name
    )
  # A smaller evaluation takes its runs from a larger one, and only those it makes.
  calls.clear()
  _evaluate_quadratics(
    str(tmp_path / "one"), theta_dir, num_tasks=1, num_inits=1, runs_from=[str(tmp_path / "big")]
  )
  assert calls == []
  assert len((tmp_path / "one" / run_cache.FILENAME).read_text().splitlines()) == 1 + 3
  # Its own directory still holds only its own protocol's runs.
  with pytest.raises(run_cache.OtherEvaluationError, match="new --output_dir"):
    _evaluate_quadratics(str(tmp_path / "small"), theta_dir, num_tasks=3, num_inits=2)


def test_the_final_comparison_of_a_run_starts_over_when_its_protocol_changed(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  _compare_on_quadratics(str(tmp_path / "eval"), lopt)
  before = (tmp_path / "eval" / run_cache.FILENAME).read_text()
  again = _compare_on_quadratics(
    str(tmp_path / "eval"), lopt, seed=5
  )  # Another protocol in the same directory: not refused.
  assert (tmp_path / "eval" / f"{run_cache.FILENAME}.other").read_text() == before  # Kept.
  header = json.loads((tmp_path / "eval" / run_cache.FILENAME).read_text().splitlines()[0])
  assert header["protocol"]["seed"] == 5
  assert np.all(np.isfinite(again["results"]["learned"]["mean_loss"]))


def test_a_missing_searched_file_is_named_with_the_fix_before_any_run(tmp_path):
  missing = str(tmp_path / "search" / "best.json")
  with pytest.raises(candidates.SearchedNotFoundError, match="bin/tune_baselines writes"):
    _evaluate_quadratics(str(tmp_path / "eval"), None, searched=[missing])
  assert not (tmp_path / "eval" / run_cache.FILENAME).exists()
