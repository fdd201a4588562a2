"""The toy 1-D loss with two minima of Sec. 2.3 and App. B (Fig. 2a-c, Fig. 5).

  l(w) = (w - 4)(w - 3) w^2 = w^4 - 7 w^3 + 12 w^2,   l'(w) = 4 w^3 - 21 w^2 + 24 w,

trained from w0 = -1.2 (l(w0) = 31.4). l' = w (4 w^2 - 21 w + 24) vanishes at w = 0 (a local
minimum, l = 0), at w = (21 - sqrt(57)) / 8 = 1.681 (the maximum between the two) and at
w = (21 + sqrt(57)) / 8 = 3.569 (the global minimum, l = -3.12; the paper's "w ~ 3.5").

The task holds `num_copies` independent copies of w, and its loss is the sum of l over them, so
one unroll trains all copies at once; with a vector of hyper-parameters (one per copy) it runs
one training per hyper-parameter, and the gradient of the summed final loss with respect to that
vector holds each copy's own derivative. The loss is deterministic: batches are empty.
"""

import math

import gin
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import base

W0 = -1.2  # Sec. 2.3: w^(0) = -1.2.
LOCAL_MINIMUM = 0.0
MAXIMUM = (21.0 - math.sqrt(57.0)) / 8.0
GLOBAL_MINIMUM = (21.0 + math.sqrt(57.0)) / 8.0


def toy_loss(w: tf.Tensor) -> tf.Tensor:
  """l(w) = (w - 4)(w - 3) w^2, elementwise.

  Args:
    w: a float tensor of any shape.
  """
  return (w - 4.0) * (w - 3.0) * tf.square(w)


@gin.configurable
class TwoMinimumTask(base.Task):
  """sum_i l(w_i) over `num_copies` copies of w; params are {"w": [num_copies]}."""

  def __init__(self, num_copies: int = 1, w0: float = W0):
    """Makes the task.

    Args:
      num_copies: the number of independent copies of w (one per run trained together).
      w0: every copy's initial value.
    """
    self.num_copies = int(num_copies)
    self.w0 = float(w0)
    self.name = "two_minimum"

  def init_params(self, seed: random_seeds.SeedLike) -> dict:
    """{"w": [num_copies]} all equal to w0; the seed is not used (the start is fixed)."""
    del seed
    return {"w": tf.fill([self.num_copies], tf.constant(self.w0, tf.float32))}

  def loss(self, params: dict, batch: dict) -> tf.Tensor:
    """sum_i l(w_i), a float32 scalar; the batch is empty."""
    del batch
    return tf.reduce_sum(toy_loss(params["w"]))

  def batch(self, split: str, seed: random_seeds.SeedLike) -> dict:
    """An empty batch: the loss is deterministic.

    Raises:
      ValueError: an unknown split.
    """
    del seed
    base.check_split(split)
    return {}
