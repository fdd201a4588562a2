"""The antithetic truncation: its losses by definition, recomputation, and unbiased estimates."""

from typing import NamedTuple

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import inner_training
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import truncated_unroll
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
    return truncated_unroll.truncation_sample(
      task, lopt, theta, state, num_steps, data_seed, perturbation_seed, sigma, objective, recompute
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
  e = truncated_unroll.perturbation(theta, [3, 4], sigma)
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
        batch = task.batch("valid", seeds_lib.fold_in(valid_seed, t))
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
  assert truncated_unroll.segment_lengths_for(9).numpy().tolist() == [3, 1]
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


def test_segment_length_and_retracing():
  lengths = truncated_unroll.segment_lengths_for
  # One level: ceil(0.2 sqrt(K)).
  assert lengths(10000, levels=1).numpy().tolist() == [20]
  assert lengths(9, levels=1).numpy().tolist() == [1]
  assert lengths(9, scale=1.0, levels=1).numpy().tolist() == [3]
  # Two levels: innermost ceil(0.2 * 10000^(1/3)) = ceil(4.31) = 5; then 5 * sqrt(10000 / 5)
  # = 223.6 -> 224: 45 chunks of 224 steps, each rerun as 45 chunks of 5.
  assert lengths(10000).numpy().tolist() == [224, 5]
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
      task, lopt, theta, theta, lopt.opt_fn(theta).init(task.init_params(0)), 2, [0, 0], "test"
    )


# The statistical test: a learned optimizer simple enough that the smoothed outer objective
# E_e[L(theta + e)] can be computed exactly (float64 quadrature), so the expectation of g_rp and
# g_es can be compared with its true gradient.


class _State(NamedTuple):
  params: dict
  iteration: tf.Tensor


class _LearnedRateAndDecay(lopt_base.LearnedOptimizer):
  """w <- w - exp(theta_0) * g - theta_1 * w: a learned log learning rate and weight decay."""

  def init(self, seed):
    return {"log_lr": tf.constant(np.log(0.3), tf.float32), "decay": tf.constant(0.05)}

  def opt_fn(self, theta):
    class _Opt(opt_base.Optimizer):
      def init(self, params):
        return _State(params, tf.constant(0, tf.int32))

      def update(self, state, grads, loss=None):
        params = tf.nest.map_structure(
          lambda w, g: w - tf.exp(theta["log_lr"]) * g - theta["decay"] * w, state.params, grads
        )
        return _State(params, state.iteration + 1)

    return _Opt()


def _outer_loss_numpy(theta, w0, curvatures, center, k):
  """L_train of the truncation in float64: the mean loss of the K post-update iterates."""
  lr, decay = np.exp(theta[0]), theta[1]
  w, losses = w0.copy(), []
  for _ in range(k):
    w = w - lr * curvatures * (w - center) - decay * w
    losses.append(0.5 * np.sum(curvatures * (w - center) ** 2))
  return np.mean(losses)


def _smoothed_gradient_numpy(theta, sigma, *args):
  """d/dtheta E_{e ~ N(0, sigma^2 I)} L(theta + e): 2-D Gauss-Hermite quadrature, central
  differences of the (smooth) smoothed objective."""
  nodes, weights = np.polynomial.hermite_e.hermegauss(40)
  weights = weights / weights.sum()

  def smoothed(th):
    return sum(
      wi * wj * _outer_loss_numpy(th + sigma * np.array([ni, nj]), *args)
      for ni, wi in zip(nodes, weights, strict=True)
      for nj, wj in zip(nodes, weights, strict=True)
    )

  h = 1e-5
  return np.array(
    [(smoothed(theta + h * d) - smoothed(theta - h * d)) / (2 * h) for d in np.eye(2)]
  )


@pytest.mark.integration
def test_g_rp_and_g_es_are_unbiased_for_the_smoothed_objective():
  task = quadratic.QuadraticTask(dim=3, min_curvature=0.5, max_curvature=2.0, init_std=0.5)
  lopt = _LearnedRateAndDecay()
  theta = lopt.init(0)
  sigma, k, num_samples = 0.1, 4, 400
  state = lopt.opt_fn(theta).init(task.init_params(0))
  run = _sample_fn(task, lopt, sigma=sigma)
  g_rp, g_es = [], []
  for i in range(num_samples):
    s = run(theta, state, tf.constant(k), tf.constant([0, 0]), tf.constant([1, i]))
    assert float(s.loss_plus) < 10 and float(s.loss_minus) < 10  # No clipping involved.
    g_rp.append([float(s.g_rp["log_lr"]), float(s.g_rp["decay"])])
    g_es.append([float(s.g_es["log_lr"]), float(s.g_es["decay"])])
  g_rp, g_es = np.array(g_rp), np.array(g_es)
  exact = _smoothed_gradient_numpy(
    np.array([float(theta["log_lr"]), float(theta["decay"])]),
    sigma,
    state.params["w"].numpy().astype(np.float64),
    task.curvatures.numpy().astype(np.float64),
    task.center.numpy().astype(np.float64),
    k,
  )
  # Tolerance: 4 standard errors of the mean of each estimator (plus float32 slack): a correct
  # estimator fails this with probability < 1e-4 per coordinate; a wrong sign or a missing
  # factor of 2 or sigma^2 fails it by many standard errors.
  for name, estimates in (("g_rp", g_rp), ("g_es", g_es)):
    standard_error = estimates.std(axis=0, ddof=1) / np.sqrt(num_samples)
    error = np.abs(estimates.mean(axis=0) - exact)
    assert np.all(error < 4 * standard_error + 1e-4 * np.abs(exact)), (name, error, exact)
  assert np.all(np.abs(exact) > 10 * g_rp.std(axis=0, ddof=1) / np.sqrt(num_samples))
