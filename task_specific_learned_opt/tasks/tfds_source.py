"""TFDS image datasets served by class: ImageNet 32x32, CIFAR-100 and MNIST (paper Sec. 4.2, 4.4).

The task family of Sec. 4.2 draws 10 of ImageNet 32x32's classes and uses all their images; the
out-of-distribution problems of Sec. 4.4 / App. E train on MNIST (28x28, or 14x14 by area resize).
TfdsClassSource serves those images by class from a prepared TFDS dataset:

  source = TfdsClassSource("imagenet_resized/32x32", cache_dir="/data/class_index")
  images = source.images("train", 17)          # uint8 [n, 32, 32, 3], TFDS read order

On first use of a source split the split is indexed once: a labels-only pass (images not decoded)
counts the examples of each class, and a second pass writes each decoded image into its class's slot
of one uint8 array sorted by class, with int64 offsets [num_classes + 1] (class c is
images[offsets[c]:offsets[c + 1]]). With a cache_dir the two arrays are .npy files written through a
memory map and read back memory-mapped, so ImageNet's 3.9 GB train split is never held in memory.

Nothing here downloads: an unprepared dataset raises DatasetNotPreparedError at construction, with
the command that prepares it. A prepared dataset whose files are damaged (truncated, corrupted or
missing) raises DatasetDamagedError when it is read, naming the file and how to prepare it again.
"""

import dataclasses
import operator
import os
import tempfile
import time
from typing import NamedTuple

import gin
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging

from task_specific_learned_opt.tasks import class_source


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

_IMAGES_FILE = "images.npy"
_OFFSETS_FILE = "offsets.npy"
_BATCH_SIZE = 1024
_LOG_EVERY_SECONDS = 30.0


class DatasetNotPreparedError(FileNotFoundError):
  """The TFDS dataset has not been downloaded and prepared in the data dir."""


class DatasetDamagedError(OSError):
  """A file of a prepared TFDS dataset is truncated, corrupted or missing."""


# What TensorFlow raises when it reads a damaged or missing TFRecord file.
_DAMAGE_ERRORS = (tf.errors.DataLossError, tf.errors.NotFoundError, tf.errors.InvalidArgumentError)


class _ClassIndex(NamedTuple):
  """uint8 images [n, H, W, C] sorted by class, and int64 offsets [num_classes + 1]."""

  images: np.ndarray
  offsets: np.ndarray


def prepare_command(dataset: str, data_dir: str) -> str:
  """The shell command that downloads and prepares `dataset` into `data_dir`.

  `tfds build` and `tensorflow_datasets.scripts.download_and_prepare` both import apache_beam at
  start-up, which these datasets do not otherwise need, so the command calls the builder directly.

  Args:
    dataset: a TFDS name, e.g. "cifar100" or "imagenet_resized/32x32".
    data_dir: the TFDS data dir to prepare it in.

  Returns:
    A one-line `python -c ...` command.
  """
  return (
    f'python -c "import tensorflow_datasets as tfds; '
    f'tfds.builder({dataset!r}, data_dir={data_dir!r}).download_and_prepare()"'
  )


def _not_prepared_message(dataset: str, builder: tfds.core.DatasetBuilder) -> str:
  data_dir = os.fspath(builder.data_dir_root)
  lines = [
    f"TFDS dataset {dataset!r} is not prepared: no data in {builder.data_dir} "
    f"(searched data dir {data_dir}). This code never downloads. Prepare it once with:",
    f"  {prepare_command(dataset, data_dir)}",
  ]
  manual_files = DATASETS[dataset].manual_files
  if manual_files:
    manual_dir = os.path.join(data_dir, "downloads", "manual")
    lines.append(
      f"{dataset} needs the ImageNet files {', '.join(manual_files)}: TFDS fetches them from "
      "image-net.org, which requires an ImageNet account, and its builder has no manual download "
      "instructions. Download them by hand (image-net.org, downsampled ImageNet 32x32) and put "
      f"them in {manual_dir}/ before running the command; TFDS uses files found there instead "
      "of downloading."
    )
  return "\n".join(lines)


def _damage(path: str) -> str | None:
  """What is wrong with one TFRecord file of a dataset (None: it reads to the end)."""
  if not tf.io.gfile.exists(path):
    return "missing"
  try:
    for _ in tf.data.TFRecordDataset(path):
      pass
  except tf.errors.DataLossError as e:
    message = " ".join(str(e).split())
    if "truncated" in message:
      return "truncated (a record ends past the end of the file)"
    if "corrupted" in message or "checksum" in message.lower():
      return "corrupted (a record's checksum does not match its bytes)"
    return f"unreadable ({message[:200]})"
  return None


def class_offsets(counts: np.ndarray) -> np.ndarray:
  """Start of each class in the class-sorted array: [0, c0, c0 + c1, ..., n], int64."""
  return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def class_slots(labels: np.ndarray, offsets: np.ndarray, filled: np.ndarray) -> np.ndarray:
  """Rows of the class-sorted array for a batch of examples in read order.

  The k-th example of class c in the batch goes to row offsets[c] + filled[c] + k, so the read
  order is kept within each class.

  Args:
    labels: int labels [b] of the batch, in read order.
    offsets: int64 [num_classes + 1], see class_offsets.
    filled: int64 [num_classes], examples of each class already written.

  Returns:
    int64 rows [b].
  """
  order = np.argsort(labels, kind="stable")
  sorted_labels = labels[order]
  rank = np.arange(len(labels)) - np.searchsorted(sorted_labels, sorted_labels, side="left")
  slots = np.empty(len(labels), np.int64)
  slots[order] = offsets[sorted_labels] + filled[sorted_labels] + rank
  return slots


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
    tfds_split = self._spec.splits[split]
    try:
      paths = [os.fspath(p) for p in builder.info.splits[tfds_split].filepaths]
    except Exception:  # noqa: BLE001 - the dataset info itself may be what is damaged.
      paths = []
    found = [(path, what) for path in paths if (what := _damage(path)) is not None][:1]
    if found:
      what = f"{found[0][0]} is {found[0][1]}"
    else:
      what = f"reading it failed: {' '.join(str(error).split())[:200]}"
    return DatasetDamagedError(
      f"TFDS dataset {self.dataset!r} ({tfds_split} split) is damaged: {what}. Delete the "
      f"prepared version ({builder.data_dir}) and prepare it again: "
      f"{prepare_command(self.dataset, os.fspath(builder.data_dir_root))}"
    )

  def _check_prepared(self, split: str) -> None:
    # is_prepared() is False under tfds.testing.mock_data although reads work there, so the
    # check is a read without download; TFDS raises AssertionError when the data is missing.
    try:
      self._read(split)
    except AssertionError as e:
      raise DatasetNotPreparedError(
        _not_prepared_message(self.dataset, self._builder_or_make())
      ) from e

  def _cache_path(self, split: str) -> str | None:
    if self._cache_dir is None:
      return None
    leaf = split if self._image_size is None else f"{split}_{self._image_size}"
    return os.path.join(self._cache_dir, self.dataset.replace("/", "_"), leaf)

  def _cached_index(self, split: str) -> _ClassIndex | None:
    path = self._cache_path(split)
    # offsets.npy is renamed into place last, so its presence means the build completed.
    if path is None or not os.path.exists(os.path.join(path, _OFFSETS_FILE)):
      return None
    images = np.load(os.path.join(path, _IMAGES_FILE), mmap_mode="r")
    offsets = np.load(os.path.join(path, _OFFSETS_FILE))
    if (
      images.shape[1:] != self.image_shape
      or offsets.shape != (self.num_classes + 1,)
      or offsets[-1] != images.shape[0]
    ):
      raise ValueError(
        f"The cache in {path} does not match {self.name} (images {images.shape}, offsets "
        f"{offsets.shape} ending at {offsets[-1]}); delete it to rebuild."
      )
    return _ClassIndex(images, offsets)

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
        out[class_slots(labels, offsets, filled)] = images
        filled += batch_counts
        progress.update(len(labels))
    except _DAMAGE_ERRORS as e:
      raise self._damaged(split, e) from e
    progress.update(0, final=True)
    if not np.array_equal(filled, np.diff(offsets)):
      raise ValueError(f"{self.dataset} {split} changed between the two indexing passes.")

  def _build_index(self, split: str) -> _ClassIndex:
    offsets = class_offsets(self._count_labels(split))
    shape = (int(offsets[-1]), *self.image_shape)
    path = self._cache_path(split)
    if path is None:
      images = np.empty(shape, np.uint8)
      self._fill(split, images, offsets)
      return _ClassIndex(images, offsets)
    os.makedirs(path, exist_ok=True)
    # Unique temporary names: concurrent builders of the same cache never share a file, and an
    # interrupted build leaves only *.tmp files behind.
    tmp_images = _temp_name(path, _IMAGES_FILE)
    tmp_offsets = _temp_name(path, _OFFSETS_FILE)
    try:
      images = np.lib.format.open_memmap(tmp_images, mode="w+", dtype=np.uint8, shape=shape)
      self._fill(split, images, offsets)
      images.flush()
      del images
      with open(tmp_offsets, "wb") as f:
        np.save(f, offsets)
      os.replace(tmp_images, os.path.join(path, _IMAGES_FILE))
      os.replace(tmp_offsets, os.path.join(path, _OFFSETS_FILE))
    finally:
      for tmp in (tmp_images, tmp_offsets):
        if os.path.exists(tmp):
          os.remove(tmp)
    logging.info("Wrote the class index of %s %s to %s.", self.dataset, split, path)
    return self._cached_index(split)


def _temp_name(directory: str, final_name: str) -> str:
  fd, name = tempfile.mkstemp(prefix=f"{final_name}.", suffix=".tmp", dir=directory)
  os.close(fd)
  return name
