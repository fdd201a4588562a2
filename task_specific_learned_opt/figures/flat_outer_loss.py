"""The outer-loss L(theta) as a function of one flat theta vector, on a fixed inner run (Fig. 2e-f).

A slice of L through theta evaluates L at points theta + a d (+ b d2) of the flattened theta
(`nests.flatten` order): `ThetaVector` converts between a theta nest and that vector, and
`OuterLoss` is L for a fixed task, learned optimizer, initial inner state and data seed, as
`truncated_unroll.antithetic_losses` computes it (the outer-loss of outer-training), with its
gradient by backpropagation through the unroll. The + and - unrolls of `antithetic_losses` take
two thetas at once, so each call evaluates two points. `unit` and `orthogonal_random_direction`
make the slices' unit directions.
"""

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import truncated_unroll
from task_specific_learned_opt.tasks import base as task_base


class ThetaVector:
  """Converts between a theta nest and one flat float64 vector (tf.nest.flatten order)."""

  def __init__(self, template: nests.Theta) -> None:
    """Records the structure and shapes of `template`.

    Args:
      template: a theta nest.
    """
    self.template = template
    self.shapes = [tuple(x.shape) for x in tf.nest.flatten(template)]
    self.sizes = [int(np.prod(shape)) for shape in self.shapes]

  def flat(self, theta: nests.Theta) -> np.ndarray:
    """theta as one float64 vector [size].

    Args:
      theta: a nest like the template.
    """
    return nests.flatten(theta).numpy().astype(np.float64)

  def nest(self, vector: np.ndarray) -> nests.Theta:
    """The float32 theta nest whose flattening is `vector`.

    Args:
      vector: [size].
    """
    parts = np.split(np.asarray(vector, np.float32), np.cumsum(self.sizes)[:-1])
    leaves = [tf.constant(p.reshape(s)) for p, s in zip(parts, self.shapes, strict=True)]
    return tf.nest.pack_sequence_as(self.template, leaves)


class OuterLoss:
  """L(theta) for a fixed inner run (task, initial state, batches), and its gradient."""

  def __init__(
    self,
    task: task_base.Task,
    lopt: lopt_base.LearnedOptimizer,
    state: opt_base.OptState,
    data_seed: random_seeds.SeedLike,
  ) -> None:
    """Fixes everything but theta and T.

    Args:
      task: the inner problem.
      lopt: the learned optimizer.
      state: the inner state every unroll starts from (its iteration is the first step).
      data_seed: the inner run's data seed (see truncated_unroll.data_seeds).
    """
    self.task = task
    self.lopt = lopt
    self.state = state
    self.data_seed = random_seeds.as_seed(data_seed)
    self._pair = tf.function(self._pair_losses, autograph=False)
    self._value_and_gradient = tf.function(self._loss_and_gradient, autograph=False)

  def _losses(
    self, theta_a: nests.Theta, theta_b: nests.Theta, num_steps: tf.Tensor, objective: str
  ) -> tuple[tf.Tensor, tf.Tensor]:
    loss_a, loss_b, _ = truncated_unroll.antithetic_losses(
      truncated_unroll.Unroll(self.task, self.lopt, objective, recompute=False),
      theta_a,
      theta_b,
      self.state,
      num_steps,
      self.data_seed,
    )
    return loss_a, loss_b

  def _pair_losses(
    self, theta_a: nests.Theta, theta_b: nests.Theta, num_steps: tf.Tensor, objective: str
  ) -> tf.Tensor:
    return tf.stack(self._losses(theta_a, theta_b, num_steps, objective))

  def _loss_and_gradient(
    self, theta: nests.Theta, num_steps: tf.Tensor, objective: str
  ) -> tuple[tf.Tensor, nests.Theta]:
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss, _ = self._losses(theta, theta, num_steps, objective)
    return loss, tape.gradient(loss, theta)

  def pair(
    self, theta_a: nests.Theta, theta_b: nests.Theta, num_steps: int, objective: str
  ) -> tuple[float, float]:
    """(L(theta_a), L(theta_b)), both on the same inner run.

    Args:
      theta_a: one theta.
      theta_b: another theta (may be theta_a).
      num_steps: T.
      objective: "train" or "valid".
    """
    losses = self._pair(theta_a, theta_b, tf.constant(num_steps, tf.int32), objective).numpy()
    return float(losses[0]), float(losses[1])

  def value_and_gradient(
    self, theta: nests.Theta, num_steps: int, objective: str
  ) -> tuple[float, nests.Theta]:
    """L(theta) and dL/dtheta by backpropagation through the T-step unroll.

    Args:
      theta: where L is evaluated.
      num_steps: T.
      objective: "train" or "valid".
    """
    loss, gradient = self._value_and_gradient(theta, tf.constant(num_steps, tf.int32), objective)
    return float(loss), gradient

  def losses_at(
    self,
    vectors: np.ndarray,
    to_theta: Callable[[np.ndarray], nests.Theta],
    num_steps: int,
    objective: str,
  ) -> np.ndarray:
    """L at each of `vectors` ([n, size] flat thetas), two per call: float64 [n].

    Args:
      vectors: [n, size] flat thetas.
      to_theta: flat vector -> theta nest (ThetaVector.nest).
      num_steps: T.
      objective: "train" or "valid".
    """
    losses = np.zeros(len(vectors))
    for i in range(0, len(vectors), 2):
      j = min(i + 1, len(vectors) - 1)
      losses[i], losses[j] = self.pair(
        to_theta(vectors[i]), to_theta(vectors[j]), num_steps, objective
      )
    return losses


def unit(vector: np.ndarray) -> np.ndarray:
  """vector / |vector|.

  Args:
    vector: a non-zero vector.

  Raises:
    ValueError: the vector is zero or not finite.
  """
  norm = float(np.linalg.norm(vector))
  if not np.isfinite(norm) or norm == 0.0:
    raise ValueError(f"Cannot normalise a vector of norm {norm}.")
  return vector / norm


def orthogonal_random_direction(direction: np.ndarray, seed: int) -> np.ndarray:
  """A unit Gaussian direction with its component along the unit `direction` removed.

  Args:
    direction: a unit vector.
    seed: the numpy seed of the Gaussian draw.
  """
  draw = np.random.default_rng(seed).standard_normal(direction.shape)
  return unit(draw - np.dot(draw, direction) * direction)
