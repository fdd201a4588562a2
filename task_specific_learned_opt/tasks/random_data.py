"""An image task on random data made inside the training loop: the inner problem of App. I.

App. I times inner training "with random input data instead of real data to avoid any data loading
confounding". `RandomDataTask` draws every batch from its seed with stateless random ops, so there
is no input pipeline and no dataset in memory, and a batch is a pure function of its seed:

  image ~ U(-1, 1)^(batch, H, W, C)   (the range of ImageTask's scaled pixels)
  label ~ U{0, ..., num_classes - 1}

Every split draws from the same distribution (the split only changes the seed), so its losses say
nothing about learning; the task exists to be timed.
"""

from collections.abc import Sequence

import gin
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import base, image_task, networks


@gin.configurable
class RandomDataTask(image_task.Classifier):
  """Softmax cross-entropy of `model` on uniformly random images and labels."""

  def __init__(
    self,
    model: networks.Model,
    image_shape: Sequence[int] = (32, 32, 3),
    num_classes: int = 10,
    batch_size: int = 128,
  ):
    """Makes the task.

    Args:
      model: the network; its output must have `num_classes` logits.
      image_shape: [H, W, C] of an image (ImageNet 32x32 by default, Sec. 4.2).
      num_classes: labels are drawn from 0..num_classes-1.
      batch_size: examples per batch.
    """
    self.model = model
    self.image_shape = tuple(int(d) for d in image_shape)
    self.num_classes = int(num_classes)
    self.batch_size = int(batch_size)
    self.name = f"random_data_{getattr(model, 'name', 'model')}"

  def batch(self, split: str, seed: random_seeds.SeedLike) -> dict:
    """A batch drawn from `seed` and the split: {"image": float32, "label": int32}."""
    base.check_split(split)
    image_seed, label_seed = tf.unstack(
      random_seeds.split(random_seeds.fold_in(seed, base.SPLITS.index(split)), 2)
    )
    shape = (self.batch_size,) + self.image_shape
    return {
      "image": tf.random.stateless_uniform(shape, image_seed, minval=-1.0, maxval=1.0),
      "label": tf.random.stateless_uniform(
        [self.batch_size], label_seed, minval=0, maxval=self.num_classes, dtype=tf.int32
      ),
    }
