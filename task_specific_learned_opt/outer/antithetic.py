"""One antithetic truncation and its gradient estimates: what a worker sends (Sec. 3, App. C).

The + and - unrolls of one truncation run at theta + e and theta - e, e ~ N(0, sigma^2 I), on
identical batches (truncated_unroll.outer_losses), and give

  g_rp = d/dtheta (L+ + L-) / 2      (backpropagation through both unrolls)
  g_es = (L+ - L-) / 2 * e / sigma^2 (antithetic ES, estimates.es_gradient)

with the + unroll's end state the state the next truncation starts from (truncation_sample).

Persistent ES (pes_truncation_sample; outer/pes.py, beyond the paper) runs the same pair of
unrolls but from two start states, each unroll continuing its own trajectory, and returns both
end states and g_pes = (L+ - L-) / (2 sigma^2) * (e_1 + ... + e_k) in place of g_es.

With a task of N independent problems (Unroll.loss_shape [N]) g_es and g_pes are per problem, and
g_rp is the gradient of the sum of the N losses, which is per problem when each problem reads
only its own slice of theta.
"""

from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import estimates, pes, truncated_unroll


class TruncationSample(NamedTuple):
  """What one truncation gives: both estimates, both outer losses and the + end state."""

  g_rp: nests.Theta
  g_es: nests.Theta
  loss_plus: tf.Tensor
  loss_minus: tf.Tensor
  state: opt_base.OptState  # The + unroll's end state.


class PESTruncationSample(NamedTuple):
  """What one PES truncation gives: both estimates, both losses, both end states, xi."""

  g_rp: nests.Theta  # d/dtheta (L+ + L-) / 2 of this truncation, from both start states.
  g_pes: nests.Theta  # (L+ - L-) / (2 sigma^2) * xi_k.
  loss_plus: tf.Tensor
  loss_minus: tf.Tensor
  state_plus: opt_base.OptState  # The + unroll's end state (gradient stopped).
  state_minus: opt_base.OptState  # The - unroll's end state (gradient stopped).
  accumulator: pes.Accumulator  # xi_k = e_1 + ... + e_k and k, this truncation's e included.


def perturbation(theta: nests.Theta, seed: random_seeds.SeedLike, sigma: float) -> nests.Theta:
  """e ~ N(0, sigma^2 I) in the shape of theta, drawn statelessly from `seed`.

  Args:
    theta: the meta-parameters; only the structure and shapes of its leaves are read.
    seed: the perturbation's stateless seed (each leaf gets its own split of it); or B seeds
      [B, 2] for a theta whose leaves hold B copies on axis 0 (a task batch,
      outer/task_batch.py): copy b gets the e that seed b gives one copy.
    sigma: the standard deviation of every coordinate of e.

  Returns:
    e, a float32 nest of the structure and shapes of `theta`.
  """
  seed = random_seeds.as_seed(seed)
  if seed.shape.rank == 2:
    copies = [
      perturbation(tf.nest.map_structure(lambda x, b=b: x[b], theta), row, sigma)
      for b, row in enumerate(tf.unstack(seed))
    ]
    return tf.nest.map_structure(lambda *x: tf.stack(x), *copies)
  leaves = tf.nest.flatten(theta)
  leaf_seeds = random_seeds.split(seed, len(leaves))
  return tf.nest.pack_sequence_as(
    theta,
    [sigma * tf.random.stateless_normal(tf.shape(x), leaf_seeds[i]) for i, x in enumerate(leaves)],
  )


def _differentiated_pair(
  unroll: truncated_unroll.Unroll,
  theta: nests.Theta,
  e: nests.Theta,
  states: tuple[opt_base.OptState, opt_base.OptState],
  num_steps: int | tf.Tensor,
  data_seed: random_seeds.SeedLike,
) -> tuple[nests.Theta, tf.Tensor, tf.Tensor, tuple[opt_base.OptState, opt_base.OptState]]:
  """(g_rp, L+, L-, end states with their gradient stopped) of the pair at theta +- e."""
  with tf.GradientTape() as tape:
    tape.watch(theta)
    theta_plus = tf.nest.map_structure(tf.add, theta, e)
    theta_minus = tf.nest.map_structure(tf.subtract, theta, e)
    (loss_plus, loss_minus), end_states = truncated_unroll.outer_losses(
      unroll, (theta_plus, theta_minus), states, num_steps, truncated_unroll.data_seeds(data_seed)
    )
    mean_loss = (loss_plus + loss_minus) / 2.0
  g_rp = tape.gradient(mean_loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
  return g_rp, loss_plus, loss_minus, tf.nest.map_structure(tf.stop_gradient, end_states)


def truncation_sample(
  unroll: truncated_unroll.Unroll,
  theta: nests.Theta,
  state: opt_base.OptState,
  num_steps: int | tf.Tensor,
  data_seed: random_seeds.SeedLike,
  perturbation_seed: random_seeds.SeedLike,
  sigma: float,
) -> TruncationSample:
  """g_rp, g_es, L+, L- and the + end state of one antithetic truncation (module docstring).

  Args:
    unroll: the task, learned optimizer, objective and recomputation of the unrolls.
    theta: the meta-parameters; the + and - unrolls run at theta + e and theta - e.
    state: the inner optimizer state at the start (its `iteration` is the inner step t0).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see truncated_unroll.data_seeds).
    perturbation_seed: the seed of e (see perturbation).
    sigma: the standard deviation of e.

  Returns:
    The sample: g_rp and g_es nests like theta, L+ and L-, and the + unroll's end state with its
    gradient stopped, where the next truncation starts.

  Raises:
    ValueError: an unknown objective.
  """
  e = perturbation(theta, perturbation_seed, sigma)
  g_rp, loss_plus, loss_minus, (end_state, _) = _differentiated_pair(
    unroll, theta, e, (state, state), num_steps, data_seed
  )
  g_es = estimates.es_gradient(loss_plus, loss_minus, e, sigma)
  return TruncationSample(g_rp, g_es, loss_plus, loss_minus, end_state)


def pes_truncation_sample(
  unroll: truncated_unroll.Unroll,
  theta: nests.Theta,
  state_plus: opt_base.OptState,
  state_minus: opt_base.OptState,
  accumulator: pes.Accumulator,
  num_steps: int | tf.Tensor,
  data_seed: random_seeds.SeedLike,
  perturbation_seed: random_seeds.SeedLike,
  sigma: float,
) -> PESTruncationSample:
  """One truncation of persistent ES (outer/pes.py): each unroll continues its own trajectory.

  Draws e_k, runs the + unroll at theta + e_k from `state_plus` and the - unroll at theta - e_k
  from `state_minus` for K steps on shared batches, adds e_k to the accumulator and returns

    g_pes = (L+ - L-) / (2 sigma^2) * xi_k,   xi_k = e_1 + ... + e_k,
    g_rp  = d/dtheta (L+ + L-) / 2            (this truncation only, start states held fixed),

  with both end states, where the next truncation of the inner run starts.

  Args:
    unroll: the task, learned optimizer, objective and recomputation of the unrolls.
    theta: the meta-parameters.
    state_plus: the + unroll's state (the + trajectory since the inner run started).
    state_minus: the - unroll's state, at the same inner step.
    accumulator: xi_{k-1} and k - 1 (pes.initial_state(theta) at the start of an inner run).
    num_steps: K >= 1, int or int32 tensor.
    data_seed: the inner run's data seed (see truncated_unroll.data_seeds).
    perturbation_seed: the seed of e_k (see perturbation).
    sigma: the standard deviation of e_k.

  Returns:
    A PESTruncationSample.

  Raises:
    ValueError: an unknown objective.
  """
  e = perturbation(theta, perturbation_seed, sigma)
  accumulator = pes.accumulate(accumulator, e)
  g_rp, loss_plus, loss_minus, (end_plus, end_minus) = _differentiated_pair(
    unroll, theta, e, (state_plus, state_minus), num_steps, data_seed
  )
  g_pes = pes.gradient(loss_plus, loss_minus, accumulator.perturbation_sum, sigma)
  return PESTruncationSample(g_rp, g_pes, loss_plus, loss_minus, end_plus, end_minus, accumulator)
