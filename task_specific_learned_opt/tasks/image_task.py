"""Image classification inner problems: a model trained on a fixed set of labelled images.

The images of a task (10 classes, a few thousand examples each split) are held in memory as uint8
tensors. Training batches are drawn by stateless sampling with replacement: batch(split, seed)
gathers `batch_size` examples at indices drawn from `seed`. This makes the data a pure function of
the seed, which the outer-training needs: the + and - unrolls of an antithetic pair see identical
batches, a sample is reproducible from its seeds, and a segment of an unroll can be recomputed
exactly during the backward pass. `dataset(split)` gives the same examples as a shuffled, batched,
prefetched tf.data pipeline, for passes over a whole split (evaluation).
"""

import copy
from typing import NamedTuple

import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import base, networks

DEFAULT_BATCH_SIZE = 128


class LabelledImages(NamedTuple):
  """uint8 images [n, H, W, C] and int32 labels [n] in [0, num_classes)."""

  images: tf.Tensor
  labels: tf.Tensor


def to_float(images: tf.Tensor) -> tf.Tensor:
  """uint8 pixels in [0, 255] -> float32 in [-1, 1]."""
  return tf.cast(images, tf.float32) / 127.5 - 1.0


class Classifier(base.Task):
  """Softmax cross-entropy and accuracy of `self.model` on batches {"image", "label"}.

  Subclasses set `model` and `image_shape` ([H, W, C]) and say where batches come from.
  """

  def init_params(self, seed: random_seeds.SeedLike) -> dict:
    """`self.model`'s initial parameters for inputs of `image_shape`."""
    return self.model.init(random_seeds.as_seed(seed), self.image_shape)

  def loss(self, params: dict, batch: dict) -> tf.Tensor:
    """Mean softmax cross-entropy of the logits of batch["image"] against batch["label"]."""
    logits = self.model.apply(params, batch["image"])
    return tf.reduce_mean(
      tf.nn.sparse_softmax_cross_entropy_with_logits(labels=batch["label"], logits=logits)
    )

  def accuracy(self, params: dict, batch: dict) -> tf.Tensor:
    """Fraction of batch["image"] whose highest logit is at batch["label"], float32 scalar."""
    logits = self.model.apply(params, batch["image"])
    predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predictions, batch["label"]), tf.float32))


class ImageTask(Classifier):
  """Softmax cross-entropy of `model` on labelled images, by split."""

  def __init__(
    self,
    model: networks.Model,
    splits: dict,
    batch_size: int = DEFAULT_BATCH_SIZE,
    name: str = "image_task",
  ):
    """Makes the task.

    Args:
      model: the network (networks.Model).
      splits: {"train": LabelledImages, "valid": LabelledImages, "test": LabelledImages}.
      batch_size: examples per batch (128 by default).
      name: a readable name (dataset, model, classes).
    """
    missing = set(base.SPLITS) - set(splits)
    if missing:
      raise ValueError(f"ImageTask needs the splits {base.SPLITS}; missing {sorted(missing)}.")
    self.model = model
    self.splits = {
      k: LabelledImages(tf.convert_to_tensor(v[0], tf.uint8), tf.convert_to_tensor(v[1], tf.int32))
      for k, v in splits.items()
    }
    self.batch_size = int(batch_size)
    self.image_shape = tuple(self.splits["train"].images.shape[1:])
    self.name = name

  @property
  def data(self) -> dict:
    """{split: LabelledImages}: every image and label the task reads."""
    return self.splits

  def with_data(self, data: dict) -> "ImageTask":
    """A shallow copy of this task reading `data` ({split: (images, labels)}) instead."""
    task = copy.copy(self)
    task.splits = {k: LabelledImages(*v) for k, v in data.items()}
    return task

  def batch(self, split: str, seed: random_seeds.SeedLike) -> dict:
    """`batch_size` examples of `split` drawn with replacement, the indices from `seed`.

    Returns:
      {"image": float32 [batch_size, H, W, C] in [-1, 1], "label": int32 [batch_size]}.

    Raises:
      ValueError: an unknown split.
    """
    base.check_split(split)
    data = self.splits[split]
    size = tf.shape(data.labels, out_type=tf.int32)[0]
    indices = tf.random.stateless_uniform(
      [self.batch_size], random_seeds.as_seed(seed), minval=0, maxval=size, dtype=tf.int32
    )
    return {
      "image": to_float(tf.gather(data.images, indices)),
      "label": tf.gather(data.labels, indices),
    }

  def num_examples(self, split: str) -> int:
    """The number of examples in `split`.

    Raises:
      ValueError: an unknown split.
    """
    base.check_split(split)
    return int(self.splits[split].labels.shape[0])

  def dataset(
    self, split: str, shuffle_seed: int | None = None, batch_size: int | None = None
  ) -> tf.data.Dataset:
    """One pass over `split`: shuffled (if `shuffle_seed` is given), batched and prefetched."""
    base.check_split(split)
    data = self.splits[split]
    ds = tf.data.Dataset.from_tensor_slices({"image": data.images, "label": data.labels})
    if shuffle_seed is not None:
      ds = ds.shuffle(self.num_examples(split), seed=shuffle_seed)
    ds = ds.batch(batch_size or self.batch_size)
    ds = ds.map(lambda b: {"image": to_float(b["image"]), "label": b["label"]})
    return ds.prefetch(tf.data.AUTOTUNE)
