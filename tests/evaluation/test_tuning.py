"""The learning-rate grid: the known optimum, a learning rate per task and per objective."""

import copy

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.evaluation import candidates, protocol, running, tuning
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
    rng = np.random.default_rng(random_seeds.to_numpy_seed(seed))
    return _HeldOutTargetTask(rng.uniform(-0.5, 1.5))


@pytest.mark.parametrize("curvature,best", [(1.0, 1.0), (0.1, 10.0)])
def test_the_learning_rate_grid_finds_the_known_optimum(curvature, best):
  runs = protocol.HeldOutProtocol(
    _isotropic_quadratics(curvature), num_tasks=2, num_inits=2, num_steps=20, num_points=4
  )
  tuned = tuning.tune_learning_rate_per_task(runs, "sgd")
  # Without noise every split is the same quadratic: both objectives find the one-step rate.
  assert set(tuned) == {"train", "valid"}
  for objective in ("train", "valid"):
    np.testing.assert_allclose(tuned[objective].learning_rates, [best, best], rtol=1e-6)
    assert tuned[objective].results["mean_loss"].shape == (2, 2)


def test_each_objective_picks_its_own_learning_rate_per_task():
  family, rates = _HeldOutTargetFamily(), (0.03, 0.3, 1.0)
  runs = protocol.HeldOutProtocol(
    family, num_tasks=4, num_inits=1, num_steps=20, num_points=4, num_average_points=4
  )
  tuned = tuning.tune_learning_rate_per_task(runs, "sgd", learning_rates=rates)
  # The grid's numbers, run candidate by candidate.
  grid = [candidates.baseline(f"sgd {lr}", "sgd", learning_rate=lr) for lr in rates]
  results = running.evaluate_candidates(runs, grid)["results"]
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


def _quadratic_runs():
  return protocol.HeldOutProtocol(
    _isotropic_quadratics(0.3), num_tasks=2, num_inits=1, num_steps=10, num_points=3
  )


def test_the_refined_baseline_searches_the_decade_around_the_grids_best_and_never_loses_to_it():
  runs = _quadratic_runs()
  grid = tuning.tune_learning_rate_per_task(runs, "adam")
  refined = tuning.tune_refined_per_task(runs, "adam_refined")
  for objective, metric in tuning.TUNING_METRICS.items():
    chosen, best = refined[objective], grid[objective]
    ratio = chosen.learning_rates / best.learning_rates  # Two passes of half a decade each way.
    assert np.all(ratio >= 10**-1 * (1 - 1e-6)) and np.all(ratio <= 10**1 * (1 + 1e-6))
    assert np.all(chosen.results[metric].mean(axis=1) <= best.results[metric].mean(axis=1))
    assert chosen.results["mean_loss"].shape == (2, 1)
    assert set(chosen.hparams["beta1"]) <= set(tuning.BETA1S)
    assert set(chosen.hparams["epsilon"]) <= set(tuning.EPSILONS)
  # Adam from a grid 3.2x apart is not at its best on a quadratic: the refinement finds better.
  assert np.any(
    refined["train"].results["mean_loss"].mean(axis=1)
    < grid["train"].results["mean_loss"].mean(axis=1)
  )


def test_the_refined_learning_rates_span_one_decade_at_4x_the_grids_density():
  rates = tuning.refined_learning_rates(1e-2)
  np.testing.assert_allclose(rates[[0, 4, 8]], [10**-2.5, 1e-2, 10**-1.5])
  grid_step, refined_step = np.diff(np.log10(tuning.LEARNING_RATES))[0], np.diff(np.log10(rates))[0]
  assert grid_step / refined_step == pytest.approx(4)


def test_the_refined_baseline_chooses_on_its_tuning_split_only(monkeypatch):
  family = _HeldOutTargetFamily()
  runs = protocol.HeldOutProtocol(
    family, num_tasks=2, num_inits=1, num_steps=10, num_points=3, num_average_points=3
  )
  honest = tuning.tune_refined_per_task(runs, "adam_refined")
  evaluate = running.evaluate_candidates
  rng = np.random.default_rng(0)

  def scrambled_test_split(*args, **kwargs):  # The test split's numbers made noise.
    evaluated = evaluate(*args, **kwargs)
    for arrays in evaluated["results"].values():
      for key in arrays:
        if "test" in key:
          arrays[key] = rng.uniform(0, 10, np.shape(arrays[key]))
    return evaluated

  monkeypatch.setattr(running, "evaluate_candidates", scrambled_test_split)
  scrambled = tuning.tune_refined_per_task(runs, "adam_refined")
  for objective in tuning.TUNING_METRICS:
    np.testing.assert_array_equal(
      honest[objective].learning_rates, scrambled[objective].learning_rates
    )
    for name in ("beta1", "epsilon"):
      np.testing.assert_array_equal(
        honest[objective].hparams[name], scrambled[objective].hparams[name]
      )
  # Training and validation loss disagree here: the two objectives choose apart.
  assert any(
    not np.array_equal(honest["train"].hparams[n], honest["valid"].hparams[n])
    for n in ("beta1", "epsilon")
  ) or not np.array_equal(honest["train"].learning_rates, honest["valid"].learning_rates)


def test_the_refined_baseline_is_named_and_tuned_beside_the_others():
  names = [tuning.tuned_name("adam_refined", o) for o in tuning.TUNING_METRICS]
  assert names[0] == "adam (refined lr, beta1, eps, tuned per task on train loss)"
  runs = _quadratic_runs()
  results, rates, objectives, hparams = tuning.tune_each_kind(runs, ["adam", "adam_refined"])
  assert set(hparams) == set(names)
  assert {objectives[n] for n in names} == {"train", "valid"}
  assert tuning.tuned_name("adam", "train") in results and all(n in rates for n in names)
