"""Truncated backpropagation at theta itself (Sec. 2.4, Fig. 3): "backprop".

Each truncation is one unroll at theta (no perturbation, no antithetic pair) from the state the
previous one ended in, and its sample is the gradient of that truncation's outer loss alone:

  rp = d L / d theta   (the start state's gradient stopped: the truncation bias of Sec. 2.4),
  es = 0               (no evolution-strategies estimate),
  L+ = L- = L.

The chief applies mean_i rp_i. This is the estimator Fig. 3 and App. G outer-train a hand-designed
rule's learning rate with (figures/hyperparameter_training.py). A learned optimizer can use it too
(`outer_training.estimator = "backprop"`): one unroll per truncation instead of the pair, the
gradient at theta rather than averaged over theta +- e. Its `es` is zeros, so the chief's eq.-1
diagnostics (the ES variance and weight) say nothing for it.
"""

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import estimates, truncated_unroll
from task_specific_learned_opt.outer.estimators import base


class TruncatedBackprop(base.Estimator):
  """One backpropagated unroll per truncation at theta; the mean of the gradients (module)."""

  def init_state(self, inner_state: opt_base.OptState, theta: nests.Theta) -> base.UnrollState:
    """The inner run's initial state, where its first truncation starts."""
    del theta  # Unused: nothing but the inner state is carried.
    return base.UnrollState(inner_state)

  def inner_step(self, state: base.UnrollState) -> int:
    """The inner step the next truncation starts from."""
    return int(state.inner_state.iteration)

  def sample(
    self,
    unroll: truncated_unroll.Unroll,
    theta: nests.Theta,
    state: base.UnrollState,
    num_steps: int | tf.Tensor,
    data_seed: random_seeds.SeedLike,
    perturbation_seed: random_seeds.SeedLike,
    sigma: float,
  ) -> tuple[base.Sample, base.UnrollState]:
    """(dL/dtheta, zeros, L, L) of one unroll at theta, and its end state."""
    del perturbation_seed, sigma  # Unused: nothing is perturbed.
    start = tf.nest.map_structure(tf.stop_gradient, state.inner_state)
    with tf.GradientTape() as tape:
      tape.watch(theta)
      (loss,), (end_state,) = truncated_unroll.outer_losses(
        unroll, (theta,), (start,), num_steps, truncated_unroll.data_seeds(data_seed)
      )
    gradient = tape.gradient(loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    sample = base.Sample(gradient, tf.nest.map_structure(tf.zeros_like, gradient), loss, loss)
    return sample, base.UnrollState(tf.nest.map_structure(tf.stop_gradient, end_state))

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """mean(rp) over axis 0; `es` (zeros) is not read."""
    del es  # Unused: there is no ES estimate.
    return estimates.mean(rp)
