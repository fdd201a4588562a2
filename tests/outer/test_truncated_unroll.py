"""The unrolls of a truncation: their losses by definition, recomputation, no retracing."""

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import inner_training, random_seeds
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import antithetic, recomputation, truncated_unroll
from task_specific_learned_opt.tasks import networks, quadratic


def _tiny_cnn_task(seed):
  # One conv layer is enough to exercise every path; a deeper net only slows the traces.
  family = testing_utils.small_generated_family(
    model=networks.ConvNet(channels=(4,), strides=(2,)), batch_size=8
  )
  return family.sample(seed)


def _scaled_theta(lopt, scale=10.0):
  # The initial theta takes steps too small to matter in a few steps; scaled up, they do.
  return tf.nest.map_structure(lambda x: scale * x, lopt.init(0))


def _sample_fn(task, lopt, objective="train", recompute=True, sigma=0.1):
  @tf.function(autograph=False)
  def run(theta, state, num_steps, data_seed, perturbation_seed):
    unroll = truncated_unroll.Unroll(task, lopt, objective, recompute)
    return antithetic.truncation_sample(
      unroll, theta, state, num_steps, data_seed, perturbation_seed, sigma
    )

  return run


@pytest.mark.integration
@pytest.mark.parametrize("objective", ["train", "valid"])
def test_losses_and_end_state_follow_the_definition(objective):
  task = _tiny_cnn_task(0)
  lopt = mlp_lopt.MLPLOpt()
  theta = _scaled_theta(lopt)
  start = lopt.opt_fn(theta).init(task.init_params(0))
  start, _ = inner_training.unroll(task, lopt.opt_fn(theta), start, 3, seed=[9, 9])  # t0 = 3.
  sigma, k = 0.1, 4
  sample = _sample_fn(task, lopt, objective, sigma=sigma)(theta, start, k, [1, 2], [3, 4])
  e = antithetic.perturbation(theta, [3, 4], sigma)
  train_seed, valid_seed = truncated_unroll.data_seeds([1, 2])
  for sign, loss in ((1.0, sample.loss_plus), (-1.0, sample.loss_minus)):
    opt = lopt.opt_fn(tf.nest.map_structure(lambda th, ee, s=sign: th + s * ee, theta, e))
    if objective == "train":
      # Steps t0..t0+K on the training stream: the losses of steps t0+1..t0+K are the losses of
      # the K post-update states on the next training batch.
      end, losses = inner_training.unroll(task, opt, start, k + 1, train_seed, first_step=3)
      expected = np.mean(losses.numpy()[1:])
    else:
      state, terms = start, []
      for t in range(3, 3 + k):
        state, _ = inner_training.unroll(task, opt, state, 1, train_seed, first_step=t)
        batch = task.batch("valid", random_seeds.fold_in(valid_seed, t))
        terms.append(float(task.loss(opt.get_params(state), batch)))
      expected = np.mean(terms)
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
  plus = lopt.opt_fn(tf.nest.map_structure(tf.add, theta, e))
  end, _ = inner_training.unroll(task, plus, start, k, train_seed, first_step=3)
  for a, b in zip(tf.nest.flatten(end), tf.nest.flatten(sample.state), strict=True):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-7)
  assert int(sample.state.iteration) == 3 + k
  # g_es = (L+ - L-) / 2 * e / sigma^2.
  scale = (float(sample.loss_plus) - float(sample.loss_minus)) / (2 * sigma**2)
  np.testing.assert_allclose(sample.g_es["hidden"]["w"], scale * e["hidden"]["w"], rtol=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("objective", ["train", "valid"])
def test_recomputed_and_plain_backprop_give_the_same_g_rp(objective):
  task = _tiny_cnn_task(1)
  lopt = mlp_lopt.MLPLOpt()
  theta = _scaled_theta(lopt)
  state = lopt.opt_fn(theta).init(task.init_params(0))
  args = (theta, state, tf.constant(9), [5, 6], [7, 8])
  plain = _sample_fn(task, lopt, objective, recompute=False)(*args)
  # K = 9: two levels by default (chunks of 3 steps rerun as chunks of 1), and one level.
  assert recomputation.segment_lengths_for(9).numpy().tolist() == [3, 1]
  two_levels = _sample_fn(task, lopt, objective, recompute=True)(*args)
  gin.bind_parameter("segment_lengths_for.levels", 1)
  gin.bind_parameter("segment_lengths_for.scale", 0.7)  # Chunks of ceil(0.7 * 3) = 3 steps.
  one_level = _sample_fn(task, lopt, objective, recompute=True)(*args)
  assert float(tf.linalg.global_norm(tf.nest.flatten(plain.g_rp))) > 0
  # Float32 sums in another order differ by ~1e-4 of a leaf's scale; a wrong gradient differs by
  # its whole size.
  for recomputed in (two_levels, one_level):
    for a, b in zip(tf.nest.flatten(plain), tf.nest.flatten(recomputed), strict=True):
      scale = float(np.max(np.abs(a.numpy()))) + 1e-12
      np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=0, atol=2e-3 * scale)


def test_the_sample_does_not_retrace():
  task = quadratic.QuadraticTask(dim=4)
  lopt = mlp_lopt.MLPLOpt()
  run = _sample_fn(task, lopt)
  theta = lopt.init(0)
  state = lopt.opt_fn(theta).init(task.init_params(0))
  for k in (1, 5, 30):
    state = run(theta, state, tf.constant(k), tf.constant([0, 1]), tf.constant([0, k])).state
  assert int(state.iteration) == 36
  assert run.experimental_get_tracing_count() == 1


def test_unknown_objective():
  task = quadratic.QuadraticTask(dim=2)
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)
  with pytest.raises(ValueError, match="objective"):
    truncated_unroll.antithetic_losses(
      truncated_unroll.Unroll(task, lopt, "test"),
      theta,
      theta,
      lopt.opt_fn(theta).init(task.init_params(0)),
      2,
      [0, 0],
    )


def test_step_losses_are_the_mean_pre_update_loss_and_follow_the_carried_state():
  # STEP_LOSSES (Sec. 2.4): the mean of the losses steps t0..t0+K-1 compute before their updates,
  # on the training stream; one unroll alone, from a state carried from earlier steps.
  task = quadratic.QuadraticTask(dim=4)
  lopt = mlp_lopt.MLPLOpt()
  theta = _scaled_theta(lopt)
  opt = lopt.opt_fn(theta)
  start, _ = inner_training.unroll(task, opt, opt.init(task.init_params(0)), 3, seed=[5, 5])
  unroll = truncated_unroll.Unroll(task, lopt, truncated_unroll.STEP_LOSSES, recompute=False)
  (loss,), (end,) = truncated_unroll.outer_losses(unroll, (theta,), (start,), 4, ([5, 5], [0, 0]))
  expected_end, losses = inner_training.unroll(task, opt, start, 4, [5, 5], first_step=3)
  np.testing.assert_allclose(float(loss), np.mean(losses.numpy()), rtol=1e-6)
  for a, b in zip(tf.nest.flatten(end), tf.nest.flatten(expected_end), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
