"""The outer-gradient estimator: what a worker computes per truncation, and what the chief applies.

An estimator has two sides. A worker keeps the estimator's state between the truncations of one
inner-training run (at least the inner optimizer state the next unroll starts from; PES also the
- unroll's state and the sum of its perturbations), and turns each truncation into a Sample. The
chief stacks a batch of N samples on axis 0 of every leaf and combines them into the one gradient
it gives Adam. Local mode's and the cluster's workers call the worker side, the chief `combine`;
the figures' hyper-parameter training (figures/hyperparameter_training.py) calls both. None of
them asks which estimator it has:

  estimator = registry.get("merged")
  # worker, at the start of an inner run (a new task, or a reset past the horizon):
  state = estimator.init_state(inner_state, theta)
  # worker, each truncation (inside its compiled function):
  t0 = estimator.inner_step(state)
  sample, state = estimator.sample(unroll, theta, state, num_steps, data_seed, perturbation_seed,
                                   sigma)
  # chief, per batch (inside its compiled update; rp, es leaves [N, ...]):
  gradient = estimator.combine(rp, es)

A sample carries two theta-shaped estimates, `rp` (the gradient through this truncation's
unrolls, g_rp) and `es` (an evolution-strategies estimate: truncated ES's g_es, PES's g_pes), and
the pair's losses: the transport moves these two vectors for every estimator, and the chief's
diagnostics (their variances, the weight eq. 1 would give) read both. An estimator that needs
only one of them ignores the other in `combine`.

A new estimator is one module with one subclass of Estimator (or of TruncatedAntithetic, which
supplies the worker side of the truncated antithetic pair) and one line in registry.py
(docs/own_tasks.md).
"""

import abc
from typing import Any, NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import antithetic, truncated_unroll


class Sample(NamedTuple):
  """What a worker's truncation gives the chief (leaves [N, ...] once a batch is stacked).

  Attributes:
    rp: the reparameterisation gradient g_rp = d/dtheta (L+ + L-) / 2, a nest like theta.
    es: the estimator's evolution-strategies estimate (g_es, or PES's g_pes), a nest like theta.
    loss_plus: L+, the outer loss of the + unroll.
    loss_minus: L-.
  """

  rp: nests.Theta
  es: nests.Theta
  loss_plus: tf.Tensor
  loss_minus: tf.Tensor


class UnrollState(NamedTuple):
  """The worker state of an estimator that restarts both unrolls from one shared state."""

  inner_state: opt_base.OptState  # Where the next truncation's + and - unrolls start.


class Estimator(abc.ABC):
  """An outer-gradient estimator (module docstring for the call sequence).

  Attributes:
    state_type: the type of the worker state `init_state` returns. A worker handed a state of
      another type (none yet, or one written by another estimator) starts a new inner run.
  """

  state_type: type = UnrollState

  @abc.abstractmethod
  def init_state(self, inner_state: opt_base.OptState, theta: nests.Theta) -> Any:
    """The worker state at the start of an inner run.

    Args:
      inner_state: the inner run's initial optimizer state (t = 0).
      theta: the meta-parameters; only the structure and shapes of their leaves may be read.

    Returns:
      An instance of `state_type`: a nest of tensors (checkpointed with the worker).
    """

  @abc.abstractmethod
  def inner_step(self, state: Any) -> int:
    """The inner step t0 the next truncation starts from (its schedule caps K with it)."""

  @abc.abstractmethod
  def sample(
    self,
    unroll: truncated_unroll.Unroll,
    theta: nests.Theta,
    state: Any,
    num_steps: int | tf.Tensor,
    data_seed: random_seeds.SeedLike,
    perturbation_seed: random_seeds.SeedLike,
    sigma: float,
  ) -> tuple[Sample, Any]:
    """One truncation: its sample and the worker state the next truncation starts from.

    Pure TF: the worker compiles it once per task variant (distributed/worker_step.py).

    Args:
      unroll: the task, learned optimizer, objective and recomputation of the unrolls.
      theta: the meta-parameters.
      state: the worker state after the previous truncation (or `init_state`'s).
      num_steps: K >= 1, int or int32 tensor.
      data_seed: the inner run's data seed (truncated_unroll.data_seeds).
      perturbation_seed: this truncation's perturbation seed (antithetic.perturbation).
      sigma: the standard deviation of the perturbation.

    Returns:
      (the sample, the next worker state with its gradient stopped).
    """

  @abc.abstractmethod
  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """The outer gradient the chief applies, from a batch of N samples.

    Pure TF over nests with leaves [N, ...], N dynamic: it runs inside the chief's compiled
    update, after the non-finite samples are dropped (N >= 1 there).

    Args:
      rp: the samples' `rp`, stacked on axis 0.
      es: the samples' `es`, stacked on axis 0.

    Returns:
      A float32 nest shaped like one sample.
    """


class TruncatedAntithetic(Estimator):
  """The worker side of truncated antithetic sampling (Sec. 3, App. C); `combine` is left open.

  Each truncation runs the + and - unrolls at theta + e and theta - e from one shared state
  (antithetic.truncation_sample) and continues from the + unroll's end state, giving
  rp = g_rp and es = g_es = (L+ - L-) / 2 * e / sigma^2.
  """

  def init_state(self, inner_state: opt_base.OptState, theta: nests.Theta) -> UnrollState:
    """The inner run's initial state, where its first truncation starts."""
    del theta  # Unused: nothing but the inner state is carried.
    return UnrollState(inner_state)

  def inner_step(self, state: UnrollState) -> int:
    """The inner step of the shared start state."""
    return int(state.inner_state.iteration)

  def sample(
    self,
    unroll: truncated_unroll.Unroll,
    theta: nests.Theta,
    state: UnrollState,
    num_steps: int | tf.Tensor,
    data_seed: random_seeds.SeedLike,
    perturbation_seed: random_seeds.SeedLike,
    sigma: float,
  ) -> tuple[Sample, UnrollState]:
    """(g_rp, g_es, L+, L-) of one antithetic truncation, and the + unroll's end state."""
    result = antithetic.truncation_sample(
      unroll, theta, state.inner_state, num_steps, data_seed, perturbation_seed, sigma
    )
    sample = Sample(result.g_rp, result.g_es, result.loss_plus, result.loss_minus)
    return sample, UnrollState(result.state)
