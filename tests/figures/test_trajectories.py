"""Fig. 2d: the trajectories against direct runs, their spreads, and bin/figure."""

import os

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import inner_training, nests
from task_specific_learned_opt.figures import divergence, runner, trajectories
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import networks

NUM_STEPS = 4


@pytest.fixture(scope="module")
def task():
  family = testing_utils.small_generated_family(model=networks.MLP(hidden_sizes=(8, 8)))
  return family.sample(0)


def _experiment(task, min_lr, max_lr, num_lrs=3):
  return trajectories.AdamTrajectories(
    task=task,
    min_learning_rate=min_lr,
    max_learning_rate=max_lr,
    num_learning_rates=num_lrs,
    num_steps=NUM_STEPS,
    init_seed=1,
    data_seed=2,
  )


def test_runs_match_a_direct_unroll_and_the_projection(task):
  result = _experiment(task, 0.01, 0.1).compute(runner.Panels("test"))
  params = task.init_params(1)
  flat0 = nests.flatten(params).numpy()
  projection = divergence.random_projection(flat0.size, 0)
  points = np.asarray(result["points"])
  assert points.shape == (3, NUM_STEPS + 1, 2)
  assert np.asarray(result["losses"]).shape == (3, NUM_STEPS)
  assert result["num_params"] == flat0.size
  np.testing.assert_allclose(points[:, 0], np.tile(flat0 @ projection, (3, 1)), rtol=1e-6)
  np.testing.assert_allclose(result["learning_rates"], [0.01, np.sqrt(0.001), 0.1], rtol=1e-12)
  for k, learning_rate in enumerate(result["learning_rates"]):
    # One unroll of all the steps sees the batches the step-by-step loop saw.
    opt = adam.Adam(learning_rate=learning_rate)
    state, losses = inner_training.unroll(task, opt, opt.init(params), NUM_STEPS, 2)
    final = nests.flatten(opt.get_params(state)).numpy()
    np.testing.assert_allclose(points[k, -1], final @ projection, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(result["losses"][k], losses.numpy(), rtol=1e-5)
  assert all(s > 0 for s in result["spread"][1:])
  assert result["spread"][0] == 0.0 and result["spread_2d"][0] == pytest.approx(0.0, abs=1e-12)


def test_first_step_is_a_rescaled_copy(task):
  # Adam's first step is -lr * g / (|g| + eps) ~ -lr * sign(g): w_k(1) - w(0) is proportional to
  # lr_k, so the relative spread after one step is the relative spread of the learning rates.
  result = _experiment(task, 0.01, 0.02, num_lrs=4).compute(runner.Panels("test"))
  scale = np.asarray(result["learning_rates"]) / np.mean(result["learning_rates"])
  assert result["relative_lr_spread"] == pytest.approx(np.std(scale))
  assert result["relative_spread"][1] == pytest.approx(np.std(scale), rel=1e-3)
  assert np.isnan(result["relative_spread"][0])


def test_spread_is_zero_for_equal_learning_rates(task):
  result = _experiment(task, 0.05, 0.05).compute(runner.Panels("test"))
  np.testing.assert_allclose(result["spread"], 0.0, atol=1e-6)
  np.testing.assert_allclose(result["spread_2d"], 0.0, atol=1e-9)
  np.testing.assert_allclose(result["max_pairwise_2d"], 0.0, atol=1e-9)
  np.testing.assert_allclose(result["max_distance_to_first"], 0.0, atol=1e-6)
  assert result["distance_moved"][-1] > 0


def _run_figure(tmp_path, gin_name, bindings):
  result = testing_utils.run_figure(tmp_path, gin_name, bindings)
  assert os.path.getsize(tmp_path / f"{os.path.splitext(gin_name)[0]}.png") > 1000
  return result


TINY_TASK = [
  "GeneratedClassSource.num_classes = 20",
  "GeneratedClassSource.train_images_per_class = 40",
  "GeneratedClassSource.test_images_per_class = 10",
  "mlp_task.hidden_sizes = (8, 8)",
  "mlp_task.image_size = 8",
  "mlp_task.batch_size = 16",
]


@pytest.mark.integration
def test_bin_figure_writes_the_plotted_numbers(tmp_path):
  result = _run_figure(
    tmp_path,
    "fig2d_trajectories.gin",
    TINY_TASK + ["AdamTrajectories.num_learning_rates = 5", "AdamTrajectories.num_steps = 6"],
  )
  assert result["figure"] == "fig2d_trajectories"
  assert result["data"] == "embedded generated textures (no download)"
  assert result["loss_clip"] is None  # The gin file turns the clip off (see its comment).
  assert np.asarray(result["points"]).shape == (5, 7, 2)
  assert np.asarray(result["losses"]).shape == (5, 6)
  assert len(result["learning_rates"]) == 5
  assert result["learning_rates"][0] == pytest.approx(0.1469)
  assert result["learning_rates"][-1] == pytest.approx(0.1484)
  for key in ("spread_2d", "max_pairwise_2d", "spread", "distance_moved", "relative_spread"):
    assert len(result[key]) == 7
  # The 2-D spread is recomputable from the plotted points.
  np.testing.assert_allclose(
    result["spread_2d"], divergence.spread_2d(np.asarray(result["points"])), rtol=1e-9
  )
  assert (8 * 8 * 3 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10) == result["num_params"]
