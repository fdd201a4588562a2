"""TFDS image datasets served by class: ImageNet 32x32, CIFAR-100 and MNIST (paper Sec. 4.2, 4.4).

The task family of Sec. 4.2 draws 10 of ImageNet 32x32's classes and uses all their images; the
out-of-distribution problems of Sec. 4.4 / App. E train on MNIST (28x28, or 14x14 by area resize).
TfdsClassSource serves those images by class from a prepared TFDS dataset:

  source = TfdsClassSource("imagenet_resized/32x32", cache_dir="/data/class_index")
  images = source.images("train", 17)          # uint8 [n, 32, 32, 3], TFDS read order

On first use of a source split the split is indexed once (`class_index`): a labels-only pass
(images not decoded) counts the examples of each class, and a second pass writes each decoded image
into its class's slot of one uint8 array sorted by class. With a cache_dir the index is .npy files
written through a memory map and read back memory-mapped, so ImageNet's 3.9 GB train split is never
held in memory.

Nothing here downloads: an unprepared dataset raises DatasetNotPreparedError at construction, with
the command that prepares it. A prepared dataset whose files are damaged (truncated, corrupted or
missing) raises DatasetDamagedError when it is read, naming the file and how to prepare it again
(the messages are `tfds_preparation`'s).
"""

import dataclasses
import operator
import os
import time

import gin
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging

from task_specific_learned_opt import errors
from task_specific_learned_opt.tasks import class_index, class_source, tfds_preparation


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the source needs to know about one TFDS dataset.

  Attributes:
    num_classes: number of labels.
    splits: source split ("train", "test") -> TFDS split name.
    image_shape: (height, width, channels) of the stored images.
    label_key: the feature holding the class label.
    manual_files: files that must be downloaded by hand into `<data_dir>/downloads/manual/`
      before TFDS can prepare the dataset.
  """

  num_classes: int
  splits: dict
  image_shape: tuple
  label_key: str = "label"
  manual_files: tuple = ()


DATASETS = {
  # Paper Sec. 4.2: the task family's 1000 classes. TFDS has no test split; "validation" is
  # ImageNet's held-out 50k images.
  "imagenet_resized/32x32": DatasetSpec(
    num_classes=1000,
    splits={"train": "train", "test": "validation"},
    image_shape=(32, 32, 3),
    manual_files=("Imagenet32_train_npz.zip", "Imagenet32_val_npz.zip"),
  ),
  "cifar100": DatasetSpec(
    num_classes=100, splits={"train": "train", "test": "test"}, image_shape=(32, 32, 3)
  ),
  # Paper Sec. 4.4 / App. E: out-of-distribution problems.
  "mnist": DatasetSpec(
    num_classes=10, splits={"train": "train", "test": "test"}, image_shape=(28, 28, 1)
  ),
}

_BATCH_SIZE = 1024
_LOG_EVERY_SECONDS = 30.0


class DatasetNotPreparedError(errors.UserError, FileNotFoundError):
  """The TFDS dataset has not been downloaded and prepared in the data dir."""


class DatasetDamagedError(errors.UserError, OSError):
  """A file of a prepared TFDS dataset is truncated, corrupted or missing."""


# What TensorFlow raises when it reads a damaged or missing TFRecord file.
_DAMAGE_ERRORS = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.InvalidArgumentError)


def _resize(images: tf.Tensor, image_size: int) -> tf.Tensor:
  resized = tf.image.resize(images, [image_size, image_size], method="area")
  return tf.cast(tf.round(resized), tf.uint8)


class _Progress:
  """Logs examples/s of a long pass at most every _LOG_EVERY_SECONDS."""

  def __init__(self, what: str, total: int | None = None):
    self._what, self._total = what, total
    self._start = self._last = time.perf_counter()
    self.count = 0

  def update(self, num: int, final: bool = False) -> None:
    self.count += num
    now = time.perf_counter()
    if final or now - self._last >= _LOG_EVERY_SECONDS:
      self._last = now
      of_total = f"/{self._total}" if self._total is not None else ""
      rate = self.count / max(now - self._start, 1e-9)
      logging.info("%s: %d%s examples, %.0f examples/s.", self._what, self.count, of_total, rate)


@gin.configurable
class TfdsClassSource(class_source.ClassSource):
  """Images of a prepared TFDS dataset, by class (see the module docstring)."""

  def __init__(
    self,
    dataset: str,
    data_dir: str | None = None,
    cache_dir: str | None = None,
    image_size: int | None = None,
  ):
    """Makes the source and checks that the data is there; reads no examples.

    Args:
      dataset: a key of DATASETS.
      data_dir: the TFDS data dir; None for TFDS's default (TFDS_DATA_DIR or
        ~/tensorflow_datasets).
      cache_dir: where the class-sorted arrays are stored as .npy files; None keeps them in memory.
      image_size: if set, images are area-resized to image_size x image_size (14 for the 14x14
        MNIST problems of App. E).

    Raises:
      ValueError: unknown dataset, a non-positive image_size, or a cache in cache_dir that does not
        match this source.
      DatasetNotPreparedError: the dataset is not prepared in the data dir (and not cached).
    """
    if dataset not in DATASETS:
      raise ValueError(f"Unknown dataset {dataset!r}; expected one of {sorted(DATASETS)}.")
    if image_size is not None and image_size <= 0:
      raise ValueError(f"image_size must be positive, got {image_size}.")
    self.dataset = dataset
    self._spec = DATASETS[dataset]
    self._data_dir = data_dir
    self._cache_dir = cache_dir
    self._image_size = image_size
    height, width, channels = self._spec.image_shape
    if image_size is not None:
      height = width = image_size
    self.image_shape = (height, width, channels)
    self.num_classes = self._spec.num_classes
    size_suffix = f"_{image_size}x{image_size}" if image_size is not None else ""
    self.name = dataset.replace("/", "_") + size_suffix
    self._builder = None
    self._index = {}
    # Fail fast: a split already in the cache needs no TFDS data.
    for split in class_source.SOURCE_SPLITS:
      if self._cached_index(split) is None:
        self._check_prepared(split)

  def images(self, split: str, class_id: int) -> np.ndarray:
    """All uint8 images [n, H, W, C] of `class_id` in source split `split`, in TFDS read order.

    Args:
      split: "train" or "test".
      class_id: an integer in [0, num_classes).

    Returns:
      A copy of the class's images.

    Raises:
      ValueError: unknown split or class_id out of range; or, while indexing, labels out of range
        or a dataset that changed between the two passes.
    """
    if split not in class_source.SOURCE_SPLITS:
      raise ValueError(f"Unknown split {split!r}; expected one of {class_source.SOURCE_SPLITS}.")
    try:
      class_id = operator.index(class_id)
    except TypeError as e:
      raise ValueError(f"class_id must be an integer, got {class_id!r}.") from e
    if not 0 <= class_id < self.num_classes:
      raise ValueError(f"class_id {class_id} is not in [0, {self.num_classes}) for {self.name}.")
    index = self._index.get(split)
    if index is None:
      index = self._cached_index(split) or self._build_index(split)
      self._index[split] = index
    return np.array(index.images[index.offsets[class_id] : index.offsets[class_id + 1]])

  def _builder_or_make(self) -> tfds.core.DatasetBuilder:
    if self._builder is None:
      self._builder = tfds.builder(self.dataset, data_dir=self._data_dir)
    return self._builder

  def _read(self, split: str, decoders: dict | None = None) -> tf.data.Dataset:
    # Autocache would keep a small split in memory per pipeline; each pass reads the split once.
    return self._builder_or_make().as_dataset(
      split=self._spec.splits[split],
      shuffle_files=False,
      decoders=decoders,
      read_config=tfds.ReadConfig(try_autocache=False),
    )

  def _damaged(self, split: str, error: Exception) -> DatasetDamagedError:
    """The one-line error for a read of `split` that failed with `error`."""
    builder = self._builder_or_make()
    message = tfds_preparation.damaged_message(
      self.dataset, builder, self._spec.splits[split], error
    )
    return DatasetDamagedError(message)

  def _check_prepared(self, split: str) -> None:
    # is_prepared() is False under tfds.testing.mock_data although reads work there, so the
    # check is a read without download; TFDS raises AssertionError when the data is missing.
    try:
      self._read(split)
    except AssertionError as e:
      message = tfds_preparation.not_prepared_message(
        self.dataset, self._builder_or_make(), self._spec.manual_files
      )
      raise DatasetNotPreparedError(message) from e

  def _cache_path(self, split: str) -> str | None:
    if self._cache_dir is None:
      return None
    leaf = split if self._image_size is None else f"{split}_{self._image_size}"
    return os.path.join(self._cache_dir, self.dataset.replace("/", "_"), leaf)

  def _cached_index(self, split: str) -> class_index.ClassIndex | None:
    path = self._cache_path(split)
    if path is None:
      return None
    return class_index.read_cache(path, self.image_shape, self.num_classes, self.name)

  def _count_labels(self, split: str) -> np.ndarray:
    label_key = self._spec.label_key
    ds = self._read(split, decoders={"image": tfds.decode.SkipDecoding()})
    ds = ds.map(lambda ex: ex[label_key], num_parallel_calls=tf.data.AUTOTUNE)
    counts = np.zeros(self.num_classes, np.int64)
    progress = _Progress(f"Counting labels of {self.dataset} {split}")
    try:
      for labels in tfds.as_numpy(ds.batch(_BATCH_SIZE).prefetch(tf.data.AUTOTUNE)):
        self._check_labels(labels)
        counts += np.bincount(labels, minlength=self.num_classes)
        progress.update(len(labels))
    except _DAMAGE_ERRORS as e:
      raise self._damaged(split, e) from e
    progress.update(0, final=True)
    return counts

  def _check_labels(self, labels: np.ndarray) -> None:
    if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
      raise ValueError(f"{self.dataset} has labels outside [0, {self.num_classes}).")

  def _fill(self, split: str, out: np.ndarray, offsets: np.ndarray) -> None:
    label_key, image_size = self._spec.label_key, self._image_size
    ds = self._read(split).map(lambda ex: (ex["image"], ex[label_key]))
    ds = ds.batch(_BATCH_SIZE)
    if image_size is not None:
      ds = ds.map(lambda x, y: (_resize(x, image_size), y), num_parallel_calls=tf.data.AUTOTUNE)
    filled = np.zeros(self.num_classes, np.int64)
    progress = _Progress(f"Indexing {self.dataset} {split} by class", total=int(offsets[-1]))
    try:
      for images, labels in tfds.as_numpy(ds.prefetch(tf.data.AUTOTUNE)):
        self._check_labels(labels)
        batch_counts = np.bincount(labels, minlength=self.num_classes)
        if np.any(filled + batch_counts > np.diff(offsets)):
          raise ValueError(f"{self.dataset} {split} changed between the two indexing passes.")
        out[class_index.class_slots(labels, offsets, filled)] = images
        filled += batch_counts
        progress.update(len(labels))
    except _DAMAGE_ERRORS as e:
      raise self._damaged(split, e) from e
    progress.update(0, final=True)
    if not np.array_equal(filled, np.diff(offsets)):
      raise ValueError(f"{self.dataset} {split} changed between the two indexing passes.")

  def _build_index(self, split: str) -> class_index.ClassIndex:
    offsets = class_index.class_offsets(self._count_labels(split))
    path = self._cache_path(split)
    if path is None:
      images = np.empty((int(offsets[-1]), *self.image_shape), np.uint8)
      self._fill(split, images, offsets)
      return class_index.ClassIndex(images, offsets)
    class_index.write_cache(
      path, offsets, self.image_shape, lambda images: self._fill(split, images, offsets)
    )
    logging.info("Wrote the class index of %s %s to %s.", self.dataset, split, path)
    return self._cached_index(split)
