"""Evaluation: the same losses as the inner-training loop, the LR grid, comparisons, outputs."""

import json
import os

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import baselines, candidates, checkpoints, evaluation, inner_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import quadratic


def _isotropic_quadratics(curvature):
  """Quadratics with every curvature equal to h: SGD's best learning rate is exactly 1/h."""
  return quadratic.QuadraticFamily(dim=4, min_curvature=curvature, max_curvature=curvature)


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
  chosen, rates = evaluation.tune_learning_rate_per_task(
    _isotropic_quadratics(curvature), "sgd", num_tasks=2, num_inits=2, num_steps=20, num_points=4
  )
  np.testing.assert_allclose(rates, [best, best], rtol=1e-6)
  assert chosen["mean_loss"].shape == (2, 2)


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
  assert len(histograms) == 1 and os.path.getsize(paths[histograms[0]]) > 5000
  saved = json.load(open(paths["json"]))
  assert set(saved["results"]) == {"learned", "adam 1e-2", "adam (lr tuned per task)"}
  assert np.shape(saved["results"]["learned"]["test_loss"]) == (3, 2, len(saved["steps"]))
  rows = open(paths["csv"]).read().splitlines()
  assert len(rows) == 1 + 3 * 3 * 2 * len(saved["steps"])
  assert saved["comparisons"][0]["baseline"] == "adam (lr tuned per task)"


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
