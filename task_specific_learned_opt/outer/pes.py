"""Persistent evolution strategies (PES): ES that stays unbiased under truncation.

Beyond the paper: Vicol, Metz and Sohl-Dickstein (ICML 2021), "Unbiased gradient estimation in
unrolled computation graphs with persistent evolution strategies".

Truncated antithetic ES (Sec. 3) restarts both perturbed unrolls from one shared state at every
truncation, so it estimates the gradient of the current truncation's loss with the past held
fixed: the effect of theta on the state the truncation starts from is dropped, which is the
truncation bias of Sec. 2.4. PES keeps the + and - inner states apart (each unroll continues its
own trajectory, driven by its own sequence of perturbations e_1, e_2, ...) and credits a
truncation's loss difference to every perturbation drawn since the inner run started:

  xi_k  = e_1 + ... + e_k                       (reset to 0 with the inner run)
  g_pes = (L+_k - L-_k) / (2 sigma^2) * xi_k

The objective. Let L_k(theta_1, ..., theta_k) be the outer loss of truncation k of an inner run
whose j-th truncation applied theta_j. PES estimates the gradient of the full inner run's loss
smoothed with an independent perturbation per truncation (the PES paper's smoothed objective):

  F(theta) = E_{e_1, ..., e_T ~ N(0, sigma^2 I)} [ sum_k L_k(theta + e_1, ..., theta + e_k) ],
  grad F   = E [ sum_k g_pes_k ],

so every g_pes_k is an unbiased estimate of grad_theta E[L_k] (through the state the truncation
starts from) and their sum over a run of the gradient of the whole run's loss. The price is more
variance, which grows with the number of truncations since the reset (xi_k's variance is k
sigma^2).

  state = initial_state(theta)
  for each truncation:
    e = perturbation(theta, seed, sigma)
    state = accumulate(state, e)          # xi_k, this truncation's e included
    ... unroll + from the + state at theta + e, - from the - state at theta - e ...
    g_pes = gradient(loss_plus, loss_minus, state.perturbation_sum, sigma)
  on an inner-run reset: state = initial_state(theta)

antithetic.pes_truncation_sample does one such truncation; the "pes" and "pes_merged"
estimators (outer/estimators/persistent_es.py) run it on the workers (docs/pes.md).
"""

from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests
from task_specific_learned_opt.outer import estimates


class Accumulator(NamedTuple):
  """The sum xi of the perturbations drawn since the inner run started, and how many."""

  perturbation_sum: nests.Nest  # Like theta.
  num_truncations: int | tf.Tensor


def initial_state(theta: nests.Nest) -> Accumulator:
  """xi = 0 (in theta's structure and shapes) at the start of an inner run.

  Args:
    theta: the meta-parameters; only the structure and shapes of its leaves are read.

  Returns:
    An Accumulator with zero sum and count.
  """
  return Accumulator(tf.nest.map_structure(tf.zeros_like, theta), 0)


def accumulate(accumulator: Accumulator, perturbation: nests.Nest) -> Accumulator:
  """xi_k = xi_{k-1} + e_k: adds this truncation's perturbation to the running sum.

  Args:
    accumulator: the state after the previous truncation of this inner run.
    perturbation: e_k, a nest like theta.

  Returns:
    The accumulator with e_k added and the count increased by one.
  """
  total = tf.nest.map_structure(tf.add, accumulator.perturbation_sum, perturbation)
  return Accumulator(total, accumulator.num_truncations + 1)


def gradient(
  loss_plus: tf.Tensor,
  loss_minus: tf.Tensor,
  perturbation_sum: nests.Nest,
  sigma: float | tf.Tensor,
) -> nests.Nest:
  """g_pes = (L+ - L-) / (2 sigma^2) * xi, the antithetic ES formula applied to the sum xi.

  Args:
    loss_plus: L+ of this truncation of the + trajectory (a scalar, or [N] for N samples).
    loss_minus: L- of this truncation of the - trajectory.
    perturbation_sum: xi, the sum of the perturbations since the inner run started, this
      truncation's included.
    sigma: the standard deviation of each perturbation.

  Returns:
    g_pes, a float32 nest like `perturbation_sum`.
  """
  return estimates.es_gradient(loss_plus, loss_minus, perturbation_sum, sigma)
