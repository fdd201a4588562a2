"""Persistent ES: the accumulator by hand, one PES truncation, and unbiasedness where truncated
ES is biased."""

import itertools
import os
import re

import numpy as np
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.outer import antithetic, estimates, pes, truncated_unroll
from task_specific_learned_opt.tasks import quadratic


def _numpy(nest):
  return tf.nest.map_structure(lambda x: np.asarray(x), nest)


def test_the_accumulator_over_three_truncations_and_a_reset():
  theta = {"a": tf.constant([3.0, -1.0]), "b": tf.constant(7.0)}
  perturbations = [
    {"a": tf.constant([0.1, -0.2]), "b": tf.constant(0.5)},
    {"a": tf.constant([0.3, 0.0]), "b": tf.constant(-1.0)},
    {"a": tf.constant([-0.4, 0.2]), "b": tf.constant(0.25)},
  ]
  state = pes.initial_state(theta)
  assert state.num_truncations == 0
  np.testing.assert_array_equal(state.perturbation_sum["a"], [0.0, 0.0])
  expected_sums = [([0.1, -0.2], 0.5), ([0.4, -0.2], -0.5), ([0.0, 0.0], -0.25)]
  # sigma = 0.5: (L+ - L-) / (2 sigma^2) = (L+ - L-) * 2.
  losses = [(3.0, 1.0), (1.0, 1.5), (2.0, 2.0)]
  expected_scales = [4.0, -1.0, 0.0]
  for k in range(3):
    state = pes.accumulate(state, perturbations[k])
    assert state.num_truncations == k + 1
    total_a, total_b = expected_sums[k]
    np.testing.assert_allclose(state.perturbation_sum["a"], total_a, atol=1e-7)
    np.testing.assert_allclose(state.perturbation_sum["b"], total_b, atol=1e-7)
    g = pes.gradient(*losses[k], state.perturbation_sum, 0.5)
    np.testing.assert_allclose(g["a"], expected_scales[k] * np.array(total_a), atol=1e-6)
    np.testing.assert_allclose(g["b"], expected_scales[k] * total_b, atol=1e-6)
  # Truncation 2: g = -1 * (e_1 + e_2), not -1 * e_2 as truncated ES would give.
  # The inner run ends: xi restarts from 0, and the next truncation's xi is its own e alone.
  state = pes.accumulate(pes.initial_state(theta), perturbations[2])
  assert state.num_truncations == 1
  np.testing.assert_allclose(state.perturbation_sum["a"], [-0.4, 0.2], atol=1e-7)
  np.testing.assert_allclose(state.perturbation_sum["b"], 0.25, atol=1e-7)


# A batch of N independent inner problems: N copies of one quadratic bowl, trained by SGD with a
# learned log learning rate, one per problem (theta [N, 1]). Each problem reads only its own
# theta and params, and its loss is its own entry of the [N] loss, so one run of the project's
# truncated unroll gives N independent samples of every estimator.


class _Quadratics(quadratic.QuadraticTask):
  """N copies of a QuadraticTask (noise_std 0): params {"w": [N, dim]}, loss [N]."""

  def __init__(self, num, **kwargs):
    super().__init__(**kwargs)
    self.num = num

  def init_params(self, seed):
    return {"w": tf.tile(super().init_params(seed)["w"][None], [self.num, 1])}

  def loss(self, params, batch):
    diff = params["w"] - self.center - batch["noise"]
    return 0.5 * tf.reduce_sum(self.curvatures * tf.square(diff), axis=-1)


NUM_SAMPLES = 4096  # Independent problems, one PES (and one truncated-ES) run each.
NUM_TRUNCATIONS, LENGTH = 4, 10  # A 40-step inner run in truncations of K = 10 steps.
SIGMA = 0.1  # As the workers' (log learning rate units).
LEARNING_RATE = 0.1


def _setup():
  task = _Quadratics(NUM_SAMPLES, dim=2, seed=3, min_curvature=0.1, max_curvature=1.0)
  lopt = hyperparameters.LearnedHyperparameters(
    sgd.SGD, learned={"learning_rate": "log"}, initial={"learning_rate": LEARNING_RATE}
  )
  theta = {"learning_rate": tf.fill([NUM_SAMPLES, 1], float(np.log(LEARNING_RATE)))}
  return task, lopt, theta


def _full_run_estimates(task, lopt, theta, persistent):
  """Per problem, the sum over the run's truncations of g_pes (or of truncated ES's g_es)."""

  @tf.function(autograph=False)
  def run(theta):
    state = lopt.opt_fn(theta).init(task.init_params(0))
    plus, minus, accumulator = state, state, pes.initial_state(theta)
    total = tf.zeros([NUM_SAMPLES, 1])
    largest_loss = tf.constant(0.0)
    for k in range(NUM_TRUNCATIONS):
      args = (LENGTH, [5, 6], [7, k], SIGMA)
      if persistent:
        s = antithetic.pes_truncation_sample(
          truncated_unroll.Unroll(task, lopt, recompute=False, loss_shape=[NUM_SAMPLES]),
          theta,
          plus,
          minus,
          accumulator,
          *args,
        )
        plus, minus, accumulator = s.state_plus, s.state_minus, s.accumulator
        total += s.g_pes["learning_rate"]
      else:  # Both unrolls from the + unroll's end state, as the truncated-ES worker does.
        s = antithetic.truncation_sample(
          truncated_unroll.Unroll(task, lopt, recompute=False, loss_shape=[NUM_SAMPLES]),
          theta,
          plus,
          *args,
        )
        plus = s.state
        total += s.g_es["learning_rate"]
      largest_loss = tf.maximum(largest_loss, tf.reduce_max([s.loss_plus, s.loss_minus]))
    return total[:, 0], largest_loss

  total, largest_loss = run(theta)
  assert float(largest_loss) < 10  # No loss is clipped.
  return total.numpy().astype(np.float64)


def _exact_expectations(task, num_nodes=10):
  """In float64 and independently of the project's unroll, the two estimators' targets:

    full:   d/dtheta E_e[sum_k L_k(theta + e_1, ..., theta + e_k)], the smoothed full run's
            gradient (PES's target);
    greedy: E_e[sum_k dL_k/dtheta_k] with each truncation's start state held fixed, on the
            trajectory of theta + e_1, theta + e_2, ... (truncated ES's expectation).

  SGD on the bowl in closed form, d_{t+1} = (1 - lr_k a) d_t with d = w - c; L_k the mean loss
  of the K post-update iterates of truncation k; the expectation over the independent
  e_1..e_T ~ N(0, sigma^2) by tensor-product Gauss-Hermite quadrature (num_nodes^T points);
  derivatives by central differences of the (smooth) integrand.
  """
  curvatures = task.curvatures.numpy().astype(np.float64)
  start = (task.init_params(0)["w"][0] - task.center).numpy().astype(np.float64)
  nodes, weights = np.polynomial.hermite_e.hermegauss(num_nodes)
  weights = weights / weights.sum()
  e = SIGMA * np.array(list(itertools.product(nodes, repeat=NUM_TRUNCATIONS)))  # [P, T]
  w = np.prod(np.array(list(itertools.product(weights, repeat=NUM_TRUNCATIONS))), axis=1)
  theta, h = np.log(LEARNING_RATE), 1e-5

  def truncation(d, log_lr):
    """(L_k, end d) of K steps from d at the learning rate exp(log_lr) [P]."""
    lr, loss = np.exp(log_lr)[:, None], 0.0
    for _ in range(LENGTH):
      d = (1.0 - lr * curvatures) * d
      loss = loss + 0.5 * np.sum(curvatures * d**2, axis=1) / LENGTH
    return loss, d

  def full_run_loss(shift):
    d, total = np.tile(start, (len(e), 1)), 0.0
    for k in range(NUM_TRUNCATIONS):
      loss, d = truncation(d, theta + shift + e[:, k])
      total = total + loss
    return total

  full = np.sum(w * (full_run_loss(h) - full_run_loss(-h)) / (2 * h))
  d, greedy = np.tile(start, (len(e), 1)), 0.0
  for k in range(NUM_TRUNCATIONS):
    up, _ = truncation(d, theta + h + e[:, k])
    down, _ = truncation(d, theta - h + e[:, k])
    greedy = greedy + (up - down) / (2 * h)
    _, d = truncation(d, theta + e[:, k])
  return {"full": float(full), "greedy": float(np.sum(w * greedy))}


def test_pes_is_unbiased_for_the_full_run_where_truncated_es_is_not():
  task, lopt, theta = _setup()
  exact = _exact_expectations(task)
  # The quadrature has converged: more nodes change it by far less than the tolerances below.
  finer = _exact_expectations(task, 12)
  for key in exact:
    assert abs(finer[key] - exact[key]) < 1e-6 * abs(exact[key])
  runs = {persistent: _full_run_estimates(task, lopt, theta, persistent) for persistent in (1, 0)}
  z = {}
  for name, persistent, target in (
    ("pes", True, "full"),
    ("truncated_es", False, "full"),
    ("truncated_es vs greedy", False, "greedy"),
  ):
    estimates = runs[persistent]
    standard_error = estimates.std(ddof=1) / np.sqrt(NUM_SAMPLES)
    z[name] = (estimates.mean() - exact[target]) / standard_error
    print(
      f"{name}: mean {estimates.mean():.5f}, std {estimates.std(ddof=1):.5f}, "
      f"se {standard_error:.5f}, {target} {exact[target]:.5f}, z {z[name]:.2f}"
    )
  # With 4096 independent samples a correct estimator is within 4 standard errors except with
  # probability 6e-5 (and the seeds are fixed). PES is unbiased for the full run. Truncated ES
  # drops the effect of the learning rate on the state each truncation starts from: its mean is
  # the greedy sum of the truncations' own gradients, about 2/3 of the full run's gradient here
  # and dozens of standard errors away from it.
  assert abs(z["pes"]) < 4, z
  assert abs(z["truncated_es vs greedy"]) < 4, z
  assert z["truncated_es"] > 20, z
  # docs/pes.md and the README print these numbers (to float32's reproducibility across machines).
  with open(os.path.join(testing_utils.REPO, "docs", "pes.md")) as f:
    doc = re.sub(r"\s+", " ", f.read())
  printed = re.search(
    r"PES mean (\S+), standard error (\S+), z = (\S+) against the full gradient; truncated ES "
    r"mean (\S+), standard error (\S+), z = (\S+) against the full gradient and z = (\S+) ",
    doc,
  )
  pes_runs, es_runs = runs[True], runs[False]
  computed = [
    pes_runs.mean(),
    pes_runs.std(ddof=1) / np.sqrt(NUM_SAMPLES),
    z["pes"],
    es_runs.mean(),
    es_runs.std(ddof=1) / np.sqrt(NUM_SAMPLES),
    z["truncated_es"],
    z["truncated_es vs greedy"],
  ]
  tolerances = [2e-5, 2e-5, 0.05, 2e-5, 2e-5, 0.5, 0.05]
  for text, value, tolerance in zip(printed.groups(), computed, tolerances, strict=True):
    assert abs(float(text) - value) <= tolerance, (text, value)
  assert f"(-{abs(exact['full']):.5f})" in doc and f"(-{abs(exact['greedy']):.5f})" in doc
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    (row,) = [line for line in f if line.startswith("| beyond: PES |")]
  pes_z, es_z = re.search(r"\(z = (\S+)\), truncated ES not \(z = (\S+)\)", row).groups()
  assert abs(float(pes_z) - z["pes"]) <= 0.05 and abs(float(es_z) - z["truncated_es"]) <= 0.5


def test_a_pes_truncation_continues_both_trajectories():
  task, lopt, _ = _setup()
  theta = {"learning_rate": tf.fill([NUM_SAMPLES, 1], float(np.log(LEARNING_RATE)))}
  state = lopt.opt_fn(theta).init(task.init_params(0))
  plain_unroll = truncated_unroll.Unroll(task, lopt, recompute=False, loss_shape=[NUM_SAMPLES])
  first = antithetic.pes_truncation_sample(
    plain_unroll, theta, state, state, pes.initial_state(theta), 3, [1, 1], [2, 2], SIGMA
  )
  # The first truncation of a run is truncated ES: both unrolls from one state, xi = e_1.
  plain = antithetic.truncation_sample(plain_unroll, theta, state, 3, [1, 1], [2, 2], SIGMA)
  for a, b in zip(
    tf.nest.flatten((first.g_pes, first.g_rp, first.loss_plus, first.state_plus)),
    tf.nest.flatten((plain.g_es, plain.g_rp, plain.loss_plus, plain.state)),
    strict=True,
  ):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
  assert int(first.accumulator.num_truncations) == 1
  assert not np.allclose(first.state_plus.params["w"], first.state_minus.params["w"])
  # The second continues each trajectory from its own end state, credits xi = e_1 + e_2...
  second = antithetic.pes_truncation_sample(
    plain_unroll,
    theta,
    first.state_plus,
    first.state_minus,
    first.accumulator,
    3,
    [1, 1],
    [2, 3],
    SIGMA,
  )
  e1 = antithetic.perturbation(theta, [2, 2], SIGMA)
  e2 = antithetic.perturbation(theta, [2, 3], SIGMA)
  xi = e1["learning_rate"] + e2["learning_rate"]
  np.testing.assert_allclose(second.accumulator.perturbation_sum["learning_rate"], xi, rtol=1e-6)
  expected = estimates.es_gradient(second.loss_plus, second.loss_minus, {"x": xi}, SIGMA)["x"]
  np.testing.assert_allclose(second.g_pes["learning_rate"], expected, rtol=1e-6)
  # ...and its - unroll really starts from the - end state: rerun it from there by hand.
  minus_lr = tf.exp(theta["learning_rate"] - e2["learning_rate"])
  d = first.state_minus.params["w"] - task.center
  losses = []
  for _ in range(3):
    d = (1.0 - minus_lr * task.curvatures) * d
    losses.append(0.5 * tf.reduce_sum(task.curvatures * d**2, axis=-1))
  np.testing.assert_allclose(second.loss_minus, tf.reduce_mean(losses, 0), rtol=1e-5)
  assert int(second.state_minus.iteration) == 6
  # Recomputed chunks in the backward pass give the same g_rp through both start states.
  recomputed = antithetic.pes_truncation_sample(
    plain_unroll._replace(recompute=True),
    theta,
    first.state_plus,
    first.state_minus,
    first.accumulator,
    3,
    [1, 1],
    [2, 3],
    SIGMA,
  )
  assert float(tf.reduce_max(tf.abs(second.g_rp["learning_rate"]))) > 0
  np.testing.assert_allclose(
    recomputed.g_rp["learning_rate"], second.g_rp["learning_rate"], rtol=1e-4, atol=1e-7
  )


def test_perturbations_of_a_vector_theta_are_independent_per_problem():
  # The vectorised test above needs e's coordinates independent: a draw of [N, 1] is N draws.
  theta = {"x": tf.zeros([NUM_SAMPLES, 1])}
  e = antithetic.perturbation(theta, random_seeds.as_seed([0, 1]), SIGMA)["x"].numpy()[:, 0]
  assert abs(e.std() / SIGMA - 1) < 0.05 and abs(np.corrcoef(e[:-1], e[1:])[0, 1]) < 0.05
