"""A quadratic inner problem for tests and toy experiments.

loss(w; batch) = 1/2 * sum_i a_i * (w_i - c_i - n_i)^2, with curvatures a_i log-spaced in
[min_curvature, max_curvature], a centre c drawn from the task's seed, and per-batch noise n
(noise_std * N(0, 1), zero by default) that makes the gradient stochastic.
"""

import copy

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import base


@gin.configurable
class QuadraticTask(base.Task):
  """A diagonal quadratic bowl; params are {"w": [dim]}."""

  def __init__(
    self,
    dim: int = 10,
    seed: int = 0,
    min_curvature: float = 0.1,
    max_curvature: float = 1.0,
    noise_std: float = 0.0,
    init_std: float = 1.0,
  ):
    """Makes the task.

    Args:
      dim: number of parameters.
      seed: seed of the centre c.
      min_curvature: the smallest curvature a_i.
      max_curvature: the largest curvature a_i.
      noise_std: standard deviation of the per-batch noise n (0: exact gradients).
      init_std: standard deviation of the initial parameters (drawn around 0).
    """
    self.dim = int(dim)
    self.curvatures = tf.constant(
      np.logspace(np.log10(min_curvature), np.log10(max_curvature), self.dim), tf.float32
    )
    self.center = tf.random.stateless_normal([self.dim], random_seeds.as_seed([17, seed]))
    self.noise_std = float(noise_std)
    self.init_std = float(init_std)
    self.name = f"quadratic{self.dim}"

  @property
  def data(self) -> dict:
    """{"curvatures": a [dim], "center": c [dim]}."""
    return {"curvatures": self.curvatures, "center": self.center}

  def with_data(self, data: dict) -> "QuadraticTask":
    """A shallow copy of this task with the curvatures and centre of `data`."""
    task = copy.copy(self)
    task.curvatures, task.center = data["curvatures"], data["center"]
    return task

  def init_params(self, seed: random_seeds.SeedLike) -> dict:
    """{"w": init_std * N(0, I) [dim]}, drawn statelessly from `seed`."""
    return {"w": self.init_std * tf.random.stateless_normal([self.dim], random_seeds.as_seed(seed))}

  def loss(self, params: dict, batch: dict) -> tf.Tensor:
    """1/2 * sum_i a_i * (w_i - c_i - n_i)^2 with n = batch["noise"]."""
    diff = params["w"] - self.center - batch["noise"]
    return 0.5 * tf.reduce_sum(self.curvatures * tf.square(diff))

  def batch(self, split: str, seed: random_seeds.SeedLike) -> dict:
    """{"noise": noise_std * N(0, I) [dim]} from `seed` (every split draws alike).

    Raises:
      ValueError: an unknown split.
    """
    base.check_split(split)
    noise = tf.random.stateless_normal([self.dim], random_seeds.as_seed(seed))
    return {"noise": self.noise_std * noise}


@gin.configurable
class QuadraticFamily(base.TaskFamily):
  """Quadratics whose centres are drawn from the family's seed.

  With min_curvature == max_curvature == h every task is isotropic, and SGD's best learning rate
  is exactly 1/h (one step to the minimum): a known answer for learning-rate searches.
  """

  def __init__(
    self,
    dim: int = 10,
    noise_std: float = 0.0,
    min_curvature: float = 0.1,
    max_curvature: float = 1.0,
  ):
    """Makes the family; every task shares these settings and has its own centre.

    Args:
      dim: number of parameters.
      noise_std: standard deviation of the per-batch noise.
      min_curvature: the smallest curvature.
      max_curvature: the largest curvature.
    """
    self.dim = dim
    self.noise_std = noise_std
    self.min_curvature = min_curvature
    self.max_curvature = max_curvature
    self.name = f"quadratic{dim}"

  def sample(self, seed: random_seeds.SeedLike) -> QuadraticTask:
    """The quadratic whose centre is drawn from a task seed that `seed` picks."""
    task_seed = int(np.random.default_rng(random_seeds.to_numpy_seed(seed)).integers(2**31))
    return QuadraticTask(
      dim=self.dim,
      seed=task_seed,
      min_curvature=self.min_curvature,
      max_curvature=self.max_curvature,
      noise_std=self.noise_std,
    )
