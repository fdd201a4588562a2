"""The antithetic truncation's estimates: g_rp and g_es unbiased for the smoothed objective."""

from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import antithetic, truncated_unroll
from task_specific_learned_opt.tasks import quadratic


def _sample_fn(task, lopt, sigma):
  @tf.function(autograph=False)
  def run(theta, state, num_steps, data_seed, perturbation_seed):
    unroll = truncated_unroll.Unroll(task, lopt)
    return antithetic.truncation_sample(
      unroll, theta, state, num_steps, data_seed, perturbation_seed, sigma
    )

  return run


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
