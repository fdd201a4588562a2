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
