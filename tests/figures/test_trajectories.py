"""Fig. 2d: the projection, the spreads, the trajectories against direct runs, and bin/figure."""

import os

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.figures import runner, trajectories
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import networks, tfds_source

NUM_STEPS = 4


@pytest.fixture(scope="module")
def task():
  family = testing_utils.small_generated_family(model=networks.MLP(hidden_sizes=(8, 8)))
  return family.sample(0)


def test_projection_is_fixed_and_linear():
  projection = trajectories.random_projection(5, seed=3)
  assert projection.shape == (5, 2)
  np.testing.assert_array_equal(projection, trajectories.random_projection(5, seed=3))
  assert not np.array_equal(projection, trajectories.random_projection(5, seed=4))
  # A basis vector picks out its row; a known matrix gives the hand-computed point.
  np.testing.assert_allclose(trajectories.project(np.eye(5)[2], projection), projection[2])
  known = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  np.testing.assert_allclose(trajectories.project(np.array([1.0, 2.0, 3.0]), known), [4.0, 5.0])
  x, y = np.arange(5.0), np.ones(5)
  np.testing.assert_allclose(
    trajectories.project(2 * x - 3 * y, projection),
    2 * trajectories.project(x, projection) - 3 * trajectories.project(y, projection),
  )
  # Entries N(0, 1 / n): the column norms are ~1 for a long vector.
  norms = np.linalg.norm(trajectories.random_projection(20000, seed=0), axis=0)
  np.testing.assert_allclose(norms, 1.0, atol=0.03)


def test_spreads_by_hand():
  points = np.array([[0.0, 0.0], [2.0, 0.0]])
  assert trajectories.spread_2d(points) == pytest.approx(1.0)
  assert trajectories.max_pairwise_distance(points) == pytest.approx(2.0)
  square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  assert trajectories.spread_2d(square) == pytest.approx(np.sqrt(0.5))
  assert trajectories.max_pairwise_distance(square) == pytest.approx(np.sqrt(2.0))
  # [runs, steps, 2]: one spread per step; doubling the points doubles the spread.
  by_step = trajectories.spread_2d(np.stack([square, 2 * square], axis=1))
  np.testing.assert_allclose(by_step, [np.sqrt(0.5), np.sqrt(2.0)])


def test_spread_accumulator_matches_numpy():
  rng = np.random.default_rng(0)
  runs = 100.0 + rng.normal(size=(7, 3, 50))  # Large offsets: no loss of precision.
  accumulator = trajectories.SpreadAccumulator()
  for run in runs:
    accumulator.add(run)
  expected = np.sqrt(np.sum(np.var(runs, axis=0), axis=-1))
  np.testing.assert_allclose(accumulator.spread(), expected, rtol=1e-9)
  np.testing.assert_allclose(accumulator.mean(), runs.mean(axis=0), rtol=1e-12)


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
  flat0 = trajectories.flatten(params).numpy()
  projection = trajectories.random_projection(flat0.size, 0)
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
    final = trajectories.flatten(opt.get_params(state)).numpy()
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


def test_mlp_task_data_and_errors(tmp_path):
  with pytest.raises(ValueError, match="Unknown dataset"):
    trajectories.mlp_task(dataset="cifar")
  with pytest.raises(tfds_source.DatasetNotPreparedError):
    trajectories.mlp_task(dataset="mnist", data_dir=str(tmp_path))
  # "auto" falls back to the generated images when MNIST is not prepared.
  gin.bind_parameter("GeneratedClassSource.num_classes", 20)
  gin.bind_parameter("GeneratedClassSource.train_images_per_class", 20)
  gin.bind_parameter("GeneratedClassSource.test_images_per_class", 5)
  task = trajectories.mlp_task(
    dataset="auto", hidden_sizes=(4, 4), image_size=6, batch_size=3, data_dir=str(tmp_path)
  )
  assert task.name.startswith("generated_outer_train_mlp4x4[")
  assert trajectories.data_description(task) == "embedded generated textures (no download)"
  assert task.batch("train", 0)["image"].shape == (3, 6, 6, 3)
  assert trajectories.flatten(task.init_params(0)).shape == (6 * 6 * 3 * 4 + 4 + 4 * 4 + 4 + 50,)
  assert trajectories.data_description(type("T", (), {"name": "mnist_14x14_all"})()) == (
    "MNIST (TFDS)"
  )


def test_loss_clip_reads_the_binding():
  assert trajectories.loss_clip() == inner_training.MAX_LOSS
  gin.bind_parameter("clip_loss.max_loss", None)
  assert trajectories.loss_clip() is None
  gin.bind_parameter("clip_loss.max_loss", 3.5)
  assert trajectories.loss_clip() == 3.5


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
    result["spread_2d"], trajectories.spread_2d(np.asarray(result["points"])), rtol=1e-9
  )
  assert (8 * 8 * 3 * 8 + 8 + 8 * 8 + 8 + 8 * 10 + 10) == result["num_params"]
