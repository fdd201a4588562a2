"""Evaluation: the same losses as the inner-training loop, the LR grid, comparisons, outputs."""

import copy
import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import baselines, candidates, checkpoints, evaluation, inner_training
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import quadratic


def _isotropic_quadratics(curvature):
  """Quadratics with every curvature equal to h: SGD's best learning rate is exactly 1/h."""
  return quadratic.QuadraticFamily(dim=4, min_curvature=curvature, max_curvature=curvature)


class _HeldOutTargetTask(task_base.Task):
  """One weight w, from 0; the loss on a split is (w - target)^2 / 2.

  The training target is 1 and the validation and test target is the task's own, so training
  loss and validation loss disagree on the best learning rate: SGD with lr 1 reaches the training
  target in one step, and a held-out target well below 1 prefers a w that moves slowly.
  """

  name = "held_out_target"

  def __init__(self, held_out_target):
    self.held_out_target = tf.constant([held_out_target], tf.float32)

  @property
  def data(self):
    return {"held_out_target": self.held_out_target}

  def with_data(self, data):
    task = copy.copy(self)
    task.held_out_target = data["held_out_target"]
    return task

  def init_params(self, seed):
    return {"w": tf.zeros([1])}

  def loss(self, params, batch):
    return 0.5 * tf.reduce_sum(tf.square(params["w"] - batch["target"]))

  def batch(self, split, seed):
    task_base.check_split(split)
    return {"target": tf.ones([1]) if split == "train" else self.held_out_target}


class _HeldOutTargetFamily(task_base.TaskFamily):
  """_HeldOutTargetTasks whose held-out target is drawn from the task seed in [-0.5, 1.5]."""

  name = "held_out_target"

  def sample(self, seed):
    rng = np.random.default_rng(seeds_lib.to_numpy_seed(seed))
    return _HeldOutTargetTask(rng.uniform(-0.5, 1.5))


def test_curve_steps_are_log_spaced_distinct_and_end_at_num_steps():
  steps = evaluation.curve_steps(10000, 30)
  assert steps[0] == 0 and steps[1] == 1 and steps[-1] == 10000
  assert np.all(np.diff(steps) > 0) and 20 < len(steps) <= 31


def test_eval_of_adam_gives_the_losses_of_the_inner_training_loop():
  family = testing_utils.small_generated_family()
  task = family.sample(3)
  opt = adam.Adam(learning_rate=3e-3)
  seed = evaluation.run_seed(0, 0, 1)
  points = evaluation.curve_steps(40, 6)  # Chunks of uneven lengths.
  run = evaluation.evaluate_run(
    family, task, candidates.fixed("adam", opt), 40, seed, points, num_eval_batches=2
  )
  direct = inner_training.train(task, opt, 40, seed)
  np.testing.assert_allclose(run["losses"], direct.losses.numpy(), rtol=1e-5, atol=1e-6)
  # The final test loss is the model's loss on the test batches at the final parameters.
  # The final metrics are the model's loss and accuracy on the evaluation batches of each split
  # at the final parameters; those at point 0 are the same at the initial parameters.
  final_params = opt.get_params(direct.state)
  init_params = task.init_params(evaluation.seeds_lib.fold_in(seed, 0))
  eval_seed = evaluation.seeds_lib.fold_in(seed, 2)
  for index, split in enumerate(("train", "test")):  # The eval seed of "train" is 0, "test" 1.
    split_seed = evaluation.seeds_lib.fold_in(eval_seed, index)
    batches = [task.batch(split, evaluation.seeds_lib.fold_in(split_seed, i)) for i in range(2)]
    for point, params in ((0, init_params), (-1, final_params)):
      loss = np.mean([float(task.loss(params, b)) for b in batches])
      accuracy = np.mean([float(task.accuracy(params, b)) for b in batches])
      assert run[f"{split}_loss"][point] == pytest.approx(loss, rel=1e-4), (split, point)
      assert run[f"{split}_accuracy"][point] == pytest.approx(accuracy, abs=1e-6), (split, point)
  assert run["train_loss"][0] > run["train_loss"][-1]  # Adam trained it.
  # Accuracies are means over 2 batches of 16: multiples of 1/32, not a constant.
  accuracies = np.concatenate([run["train_accuracy"], run["test_accuracy"]])
  np.testing.assert_allclose(accuracies * 32, np.round(accuracies * 32), atol=1e-4)
  assert len(set(accuracies.tolist())) > 1


@pytest.mark.parametrize("curvature,best", [(1.0, 1.0), (0.1, 10.0)])
def test_the_learning_rate_grid_finds_the_known_optimum(curvature, best):
  tuned = evaluation.tune_learning_rate_per_task(
    _isotropic_quadratics(curvature), "sgd", num_tasks=2, num_inits=2, num_steps=20, num_points=4
  )
  # Without noise every split is the same quadratic: both objectives find the one-step rate.
  assert set(tuned) == {"train", "valid"}
  for objective in ("train", "valid"):
    np.testing.assert_allclose(tuned[objective].learning_rates, [best, best], rtol=1e-6)
    assert tuned[objective].results["mean_loss"].shape == (2, 2)


def test_each_objective_picks_its_own_learning_rate_per_task():
  family, rates = _HeldOutTargetFamily(), (0.03, 0.3, 1.0)
  sizes = dict(num_tasks=4, num_inits=1, num_steps=20, num_points=4, num_average_points=4)
  tuned = evaluation.tune_learning_rate_per_task(family, "sgd", learning_rates=rates, **sizes)
  # The grid's numbers, run candidate by candidate.
  grid = [candidates.baseline(f"sgd {lr}", "sgd", learning_rate=lr) for lr in rates]
  results = evaluation.evaluate_candidates(family, grid, **sizes)["results"]
  for objective, metric in (("train", "mean_loss"), ("valid", "mean_valid_loss")):
    per_task = np.stack([results[c.name][metric].mean(axis=1) for c in grid])  # [rates, tasks]
    np.testing.assert_array_equal(
      tuned[objective].learning_rates, np.asarray(rates)[np.argmin(per_task, axis=0)]
    )
    # The chosen runs are those of the chosen rates.
    np.testing.assert_allclose(
      tuned[objective].results[metric].mean(axis=1), per_task.min(axis=0), rtol=1e-6
    )
  # Training loss always wants lr 1 (one step to the training target); validation loss does not.
  np.testing.assert_array_equal(tuned["train"].learning_rates, [1.0] * 4)
  assert np.any(tuned["valid"].learning_rates != tuned["train"].learning_rates)
  assert len(set(tuned["valid"].learning_rates.tolist())) > 1  # Chosen per task.


def test_run_averaged_losses_are_the_means_at_evenly_spaced_steps_as_l_valid():
  family = quadratic.QuadraticFamily(dim=4, noise_std=0.5)
  config = {"id": "adam/0", "kind": "adam", "hparams": {"learning_rate": 0.1}}
  result = evaluation.evaluate_candidates(
    family,
    [candidates.from_config(config)],
    num_tasks=2,
    num_inits=2,
    num_steps=30,
    num_points=4,
    num_eval_batches=2,
    num_average_points=6,
  )
  steps = result["steps"]
  np.testing.assert_array_equal(result["average_steps"], [5, 10, 15, 20, 25, 30])
  # One sorted set of points: the curve's log-spaced steps and the evenly spaced ones.
  assert np.all(np.diff(steps) > 0)
  assert set(evaluation.curve_steps(30, 4)) | set(result["average_steps"]) == set(steps)
  arrays = result["results"]["adam/0"]
  where = np.searchsorted(steps, result["average_steps"])
  for split in ("valid", "test"):
    assert arrays[f"{split}_loss"].shape == (2, 2, len(steps))
    np.testing.assert_allclose(
      arrays[f"mean_{split}_loss"], arrays[f"{split}_loss"][..., where].mean(axis=-1), rtol=1e-6
    )
  assert not np.allclose(arrays["mean_valid_loss"], arrays["mean_test_loss"])
  # A search's L_valid of the same runs is the evaluation's mean_valid_loss.
  setup = baselines.SearchSetup(family, "valid", 2, 2, 30, 6, 2, 0)
  objective = baselines.evaluate_config(setup, config)["objective"]
  np.testing.assert_allclose(objective, arrays["mean_valid_loss"], rtol=1e-5)


def test_compare_counts_the_tasks_the_learned_optimizer_wins():
  results = {
    "learned": {"mean_loss": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 1.0]])},
    "adam": {"mean_loss": np.array([[2.0, 2.0], [1.0, 1.0], [2.5, 2.5]])},
  }
  c = evaluation.compare({"results": results}, "learned", "adam")
  np.testing.assert_allclose(c["difference"], [1.0, -1.0, 0.5])
  assert c["fraction_learned_wins"] == pytest.approx(2 / 3)


def test_evaluate_writes_results_and_plots(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0))
  result = evaluation.evaluate(
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
  assert len(histograms) == 2 and all(os.path.getsize(paths[h]) > 5000 for h in histograms)
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
  for key in ("mean_loss", "mean_valid_loss", "mean_test_loss"):
    assert np.shape(saved["results"][on_valid][key]) == (3, 2)
  rows = open(paths["csv"]).read().splitlines()
  assert len(rows) == 1 + 4 * 3 * 2 * len(saved["steps"])
  assert "valid_loss" in rows[0].split(",")
  assert [(c["baseline"], c["metric"]) for c in saved["comparisons"]] == [
    (on_train, "mean_loss"),
    (on_valid, "mean_test_loss"),
  ]


def test_the_winners_of_a_random_search_are_evaluated(tmp_path):
  gin.clear_config()
  gin.bind_parameter("baseline_search.family", quadratic.QuadraticFamily(dim=4))
  gin.bind_parameter("baseline_search.num_tasks", 2)
  gin.bind_parameter("baseline_search.num_steps", 10)
  try:
    best = baselines.tune_baselines(
      str(tmp_path / "search"), mode="random_search", kinds=("adam", "sgdm"), num_configs=2
    )
  finally:
    gin.clear_config()
  winners = candidates.searched(str(tmp_path / "search" / baselines.BEST_FILENAME))
  assert [c.name for c in winners] == ["adam+reg+decay (L_train)", "sgdm+reg+decay (L_train)"]
  family = quadratic.QuadraticFamily(dim=4)
  task = family.sample(evaluation.task_seed(0, 0))
  # The winner's objective is reproduced by evaluating it on the search's first run.
  run = evaluation.evaluate_run(
    family, task, winners[0], 10, evaluation.run_seed(0, 0, 0), np.array([0, 10]), 1
  )
  winner = best["best"]["adam"]["id"]
  record = [
    json.loads(line)
    for line in open(tmp_path / "search" / baselines.RESULTS_FILENAME).read().splitlines()[1:]
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


def test_search_winners_go_to_the_panel_and_comparison_of_their_objective(tmp_path, capsys):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0))
  searched = [  # The L_valid search first: panels follow the objective, not the order.
    _write_best(tmp_path / "valid.json", "valid", 0.03),
    _write_best(tmp_path / "train.json", "train", 0.3),
  ]
  result = evaluation.evaluate(
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
  comparisons = {c["baseline"]: c for c in saved["comparisons"]}
  assert [c["baseline"] for c in saved["comparisons"]] == [on_train, l_train, on_valid, l_valid]
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
  ):
    c = comparisons[baseline]
    assert (c["learned"], c["metric"], c["metric_name"]) == ("learned", metric, name)
    learned, other = results["learned"][metric].mean(axis=1), results[baseline][metric].mean(axis=1)
    np.testing.assert_allclose(c["difference"], other - learned, rtol=1e-6)
    assert c["learned_mean_loss"] == pytest.approx(np.mean(learned))
    assert c["baseline_mean_loss"] == pytest.approx(np.mean(other))
    assert c["fraction_learned_wins"] == pytest.approx(np.mean(other - learned > 0))
    # A histogram named by the metric, and one printed line per pair.
    path = result["paths"][f"histogram_{histogram}_vs_learned"]
    assert path.endswith(f"histogram_{histogram}_vs_learned.png") and os.path.getsize(path) > 5000
    line = (
      f"learned vs {baseline} on 3 held-out tasks, 20 steps: {name} {np.mean(learned):.4f} vs "
      f"{np.mean(other):.4f}; the learned optimizer wins on "
      f"{100 * np.mean(other - learned > 0):.0f}% of them"
    )
    assert line in output
  assert f"baselines tuned on training loss: {on_train}, {l_train}" in output
  assert f"baselines tuned on validation loss: {on_valid}, {l_valid}" in output
  # The test comparisons are on mean test loss, not on the training loss the train ones use.
  assert not np.allclose(
    comparisons[l_valid]["difference"],
    results[l_valid]["mean_loss"].mean(axis=1) - results["learned"]["mean_loss"].mean(axis=1),
  )


def test_the_final_comparison_evaluates_other_thetas_beside_the_trained_one(tmp_path, capsys):
  lopt = mlp_lopt.MLPLOpt()
  checkpoints.save_theta(str(tmp_path / "shipped"), lopt.init(1))
  result = evaluation.compare_with_tuned_baseline(
    str(tmp_path / "eval"),
    lopt,
    lopt.init(0),
    family=_isotropic_quadratics(0.5),
    learning_rates=(0.1, 1.0),
    num_tasks=2,
    num_steps=10,
    num_points=3,
    num_average_points=2,
    thetas={"shipped": str(tmp_path / "shipped")},
  )
  on_train = "adam (lr tuned per task on train loss)"
  pairs = [(c["learned"], c["baseline"]) for c in result["comparisons"]]
  assert pairs[:2] == [("learned", on_train), ("shipped", on_train)]
  assert len(pairs) == 4  # And both against the baseline tuned on validation loss.
  # Two different thetas on the same runs.
  assert not np.allclose(
    result["results"]["learned"]["mean_loss"], result["results"]["shipped"]["mean_loss"]
  )
  output = capsys.readouterr().out
  assert output.index("learned vs " + on_train) < output.index("shipped vs " + on_train)
