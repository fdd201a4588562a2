"""Fig. 2e-f: the slices against direct recomputations with inner_training.unroll; bin/figure."""

import os

import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import checkpoints, inner_training, random_seeds
from task_specific_learned_opt.figures import (
  flat_outer_loss,
  inner_problems,
  outer_loss_slices,
  roughness,
  runner,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import networks

INIT_SEED, DATA_SEED = 1, 2
STEPS = (2, 3)
LINE_RANGE = 0.01


@pytest.fixture(scope="module")
def task():
  family = testing_utils.small_generated_family(model=networks.MLP(hidden_sizes=(8, 8)))
  return family.sample(0)


def _experiment(task, **kwargs):
  kwargs = {
    "num_steps": STEPS,
    "line_range": LINE_RANGE,
    "num_line_points": 5,
    "grid_range": 0.5,
    "grid_size": 3,
    "init_seed": INIT_SEED,
    "data_seed": DATA_SEED,
    **kwargs,
  }
  return outer_loss_slices.OuterLossSlices(task=task, lopt=mlp_lopt.MLPLOpt(), **kwargs)


@pytest.fixture(scope="module")
def result(task):
  return _experiment(task).compute(runner.Panels("test"))


def _start(task, theta):
  opt = mlp_lopt.MLPLOpt().opt_fn(theta)
  return opt, opt.init(task.init_params(INIT_SEED))


def direct_valid_loss(task, theta, num_steps):
  """mean_t clip(loss of w_{t+1} on valid batch t), one unroll step at a time."""
  opt, state = _start(task, theta)
  train_seed, valid_seed = random_seeds.fold_in(DATA_SEED, 0), random_seeds.fold_in(DATA_SEED, 1)
  total = 0.0
  for t in range(num_steps):
    state, _ = inner_training.unroll(task, opt, state, 1, train_seed, first_step=t)
    batch = task.batch("valid", random_seeds.fold_in(valid_seed, t))
    total += inner_training.clip_loss(task.loss(opt.get_params(state), batch))
  return total / num_steps


def direct_train_loss(task, theta, num_steps):
  """mean over t = 1..T of the pre-update training loss of step t: one unroll of T + 1 steps."""
  opt, state = _start(task, theta)
  _, losses = inner_training.unroll(
    task, opt, state, num_steps + 1, random_seeds.fold_in(DATA_SEED, 0)
  )
  return tf.reduce_mean(losses[1:])


def test_shapes(result):
  assert result["num_steps"] == list(STEPS)
  assert np.asarray(result["line_losses"]).shape == (2, 5)
  assert np.asarray(result["grid_losses"]).shape == (2, 3, 3)
  assert np.asarray(result["grid_directions"]).shape == (2, 2, 610)
  assert result["theta_source"].startswith("freshly initialised theta (seed 0)")
  np.testing.assert_allclose(result["line_offsets"], np.linspace(-LINE_RANGE, LINE_RANGE, 5))


def test_line_at_zero_is_the_outer_loss_of_a_direct_unroll(task, result):
  theta = mlp_lopt.MLPLOpt().init(random_seeds.as_seed(0))
  for i, steps in enumerate(STEPS):
    expected = float(direct_valid_loss(task, theta, steps))
    assert result["line_losses"][i][2] == pytest.approx(expected, rel=1e-5)


def test_line_decreases_against_the_gradient(result):
  # Along +d, d the unit outer-gradient, the loss rises near 0: the slope at 0 is |g| > 0.
  spacing = LINE_RANGE / 2
  for i in range(len(STEPS)):
    losses = np.asarray(result["line_losses"][i])
    assert np.all(np.diff(losses) > 0), losses
    slope = (losses[3] - losses[1]) / (2 * spacing)
    assert slope == pytest.approx(result["line_gradient_norm"][i], rel=0.05)
    direction = np.asarray(result["line_directions"][i])
    assert np.linalg.norm(direction) == pytest.approx(1.0)


def test_grid_points_and_directions_match_direct_computations(task, result):
  theta = mlp_lopt.MLPLOpt().init(random_seeds.as_seed(0))
  vectors = flat_outer_loss.ThetaVector(theta)
  flat = vectors.flat(theta)
  offsets = np.asarray(result["grid_offsets"])
  for i, steps in enumerate(STEPS):
    d1, d2 = np.asarray(result["grid_directions"][i])
    assert np.dot(d1, d2) == pytest.approx(0.0, abs=1e-9)
    # d1 is the unit gradient of L_train, here by a tape through a plain unroll.
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss = direct_train_loss(task, theta, steps)
    gradient = vectors.flat(tape.gradient(loss, theta))
    assert np.dot(d1, gradient / np.linalg.norm(gradient)) == pytest.approx(1.0, abs=1e-4)
    assert result["grid_gradient_norm"][i] == pytest.approx(np.linalg.norm(gradient), rel=1e-3)
    for row, column in ((0, 2), (1, 1), (2, 0)):
      point = vectors.nest(flat + offsets[row] * d1 + offsets[column] * d2)
      expected = float(direct_train_loss(task, point, steps))
      assert result["grid_losses"][i][row][column] == pytest.approx(expected, rel=1e-5)
    assert result["grid_mean_abs_laplacian"][i] == pytest.approx(
      roughness.mean_abs_laplacian(result["grid_losses"][i])
    )


def test_theta_from_a_directory(task, tmp_path):
  theta = mlp_lopt.MLPLOpt().init(5)
  checkpoints.save_theta(str(tmp_path), theta)
  experiment = _experiment(task, theta_dir=str(tmp_path))
  loaded, source = experiment.theta()
  assert source == f"theta from {tmp_path}"
  for a, b in zip(tf.nest.flatten(theta), tf.nest.flatten(loaded), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  # The slices go through the loaded theta: L there is the direct unroll's.
  loss, _ = experiment.outer_loss(loaded).pair(loaded, loaded, 2, "valid")
  assert loss == pytest.approx(float(direct_valid_loss(task, theta, 2)), rel=1e-5)


def test_bad_settings(task):
  with pytest.raises(ValueError, match="objective"):
    _experiment(task, line_objective="test")
  with pytest.raises(ValueError, match="odd"):
    _experiment(task, grid_size=4)


@pytest.mark.integration
def test_bin_figure_writes_the_plotted_numbers(tmp_path):
  bindings = [
    "GeneratedClassSource.num_classes = 20",
    "GeneratedClassSource.train_images_per_class = 40",
    "GeneratedClassSource.test_images_per_class = 10",
    "mlp_task.hidden_sizes = (8, 8)",
    "mlp_task.image_size = 8",
    "mlp_task.batch_size = 16",
    "OuterLossSlices.num_steps = (2, 3)",
    "OuterLossSlices.num_line_points = 7",
    "OuterLossSlices.grid_size = 5",
  ]
  result = testing_utils.run_figure(tmp_path, "fig2ef_outer_loss_slices", bindings)
  assert os.path.getsize(tmp_path / "fig2ef_outer_loss_slices.png") > 1000
  assert result["figure"] == "fig2ef_outer_loss_slices"
  assert result["data"] == inner_problems.DATA_DESCRIPTIONS["generated"]
  assert result["loss_clip"] == 10.0
  assert result["line_objective"] == "valid" and result["grid_objective"] == "train"
  assert np.asarray(result["line_offsets"]).shape == (7,)
  assert result["line_offsets"][0] == -10.0 and result["line_offsets"][-1] == 10.0
  assert np.asarray(result["line_losses"]).shape == (2, 7)
  assert np.asarray(result["grid_losses"]).shape == (2, 5, 5)
  losses = np.asarray(result["line_losses"])
  assert np.all(np.isfinite(losses)) and np.all(losses <= 10.0)
  for i in range(2):
    assert result["line_total_variation"][i] == pytest.approx(roughness.total_variation(losses[i]))
    assert result["line_mean_abs_second_difference"][i] == pytest.approx(
      roughness.mean_abs_second_difference(losses[i])
    )
