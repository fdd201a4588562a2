"""Persistent ES (beyond the paper; outer/pes.py, docs/pes.md): "pes" and "pes_merged".

The worker keeps the + and - unrolls' states apart, each continuing its own trajectory, and xi,
the sum of the perturbations drawn since the inner run started (all three reset with the inner
run at the horizon). Each truncation (antithetic.pes_truncation_sample) gives

  es = g_pes = (L+ - L-) / (2 sigma^2) * xi_k,   xi_k = e_1 + ... + e_k,
  rp = g_rp  = d/dtheta (L+ + L-) / 2          (this truncation, from both start states),

and the chief applies
  "pes":        mean_i g_pes_i, an unbiased estimate of the smoothed full-run gradient;
  "pes_merged": eq. 1 over g_rp and g_pes (estimates.merge_inverse_variance); g_rp is still a
                truncated, hence biased, gradient, so the merge is biased wherever it weights it.

Memory: two inner states are carried between truncations instead of one (a truncation computes
with two in either mode), plus xi, one more copy of theta.
"""

from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import antithetic, estimates, pes, truncated_unroll
from task_specific_learned_opt.outer.estimators import base


class PESState(NamedTuple):
  """A PES worker's state between the truncations of one inner run."""

  state_plus: opt_base.OptState  # The + unroll's inner state.
  state_minus: opt_base.OptState  # The - unroll's inner state, at the same inner step.
  accumulator: pes.Accumulator  # xi and the truncations since the inner run started.


class PersistentES(base.Estimator):
  """ "pes": the mean of the samples' g_pes (module docstring)."""

  state_type = PESState

  def init_state(self, inner_state: opt_base.OptState, theta: nests.Theta) -> PESState:
    """Both unrolls at the inner run's initial state, xi = 0."""
    accumulator = pes.initial_state(theta)
    # The count as a tensor from the start, so that the compiled truncation traces once.
    accumulator = accumulator._replace(
      num_truncations=tf.convert_to_tensor(accumulator.num_truncations)
    )
    return PESState(inner_state, inner_state, accumulator)

  def inner_step(self, state: PESState) -> int:
    """The inner step of both unrolls."""
    return int(state.state_plus.iteration)

  def sample(
    self,
    unroll: truncated_unroll.Unroll,
    theta: nests.Theta,
    state: PESState,
    num_steps: int | tf.Tensor,
    data_seed: random_seeds.SeedLike,
    perturbation_seed: random_seeds.SeedLike,
    sigma: float,
  ) -> tuple[base.Sample, PESState]:
    """(g_rp, g_pes, L+, L-) of one PES truncation, both end states and xi_k."""
    result = antithetic.pes_truncation_sample(
      unroll,
      theta,
      state.state_plus,
      state.state_minus,
      state.accumulator,
      num_steps,
      data_seed,
      perturbation_seed,
      sigma,
    )
    sample = base.Sample(result.g_rp, result.g_pes, result.loss_plus, result.loss_minus)
    return sample, PESState(result.state_plus, result.state_minus, result.accumulator)

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """mean(g_pes) over axis 0; `rp` is not read."""
    del rp  # Unused: PES alone.
    return estimates.mean(es)


class PersistentESMerged(PersistentES):
  """ "pes_merged": PES's workers, eq. 1 over g_rp and g_pes at the chief (module docstring)."""

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """Eq. 1 over the batch's g_rp and g_pes."""
    return estimates.merge_inverse_variance(rp, es).gradient
