"""A user's data held in memory by split, for the tasks of keras_task.py.

Data comes as users hold it: a dict {"train": ..., "valid": ..., "test": ...} whose values are
(x, y) pairs of numpy arrays (x may be a dict or tuple of arrays, for a model of several inputs)
or `tf.data.Dataset`s of (x, y) examples, batched or not (a batched one is recognised by the
unknown leading dimension of its targets' spec; a dataset is read once, to arrays); or a TFDS
dataset by name and split (`tfds_data`, which never downloads). "valid" may be left out: the last
`valid_fraction` of the train examples are then inner-valid. `in_memory` checks, before any
training, that

  - the data holds at most `max_bytes` (2 GiB by default; a dataset is read only until it passes
    the limit), since every task holds its examples as tensors;
  - no split holds NaN or infinite values;
  - the arrays of a split agree on their number of examples.

What a family takes from the data: `num_classes` (the classes of a classification loss, labels
checked), `outer_split` (the examples of the outer-train or outer-test tasks, by the fixed
permutation of class_source.split_classes) and `with_classes` (a class subset, relabelled).
Batches are drawn as image_task.py draws them: `sample_indices` picks batch_size indices with
replacement from a stateless seed, so batch(split, seed) is a pure function of the seed.
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import gin
import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from task_specific_learned_opt import errors, nests, random_seeds
from task_specific_learned_opt.tasks import base, class_source, tfds_preparation, tfds_source

MAX_DATA_BYTES = 2 * 2**30
DEFAULT_VALID_FRACTION = 0.1
_READ_BATCH = 1024


class BadDataError(errors.UserError, ValueError):
  """Data that cannot train a task: a missing split, NaN values, too few examples."""


class DataTooLargeError(errors.UserError, ValueError):
  """Data above the size limit of what tasks hold in memory."""


class Split(NamedTuple):
  """The examples of one split: inputs x (an array or a nest of arrays) and targets y."""

  x: nests.Nest
  y: nests.Nest


def num_examples(split: Split) -> int:
  """The number of examples of `split` (the leading dimension of its arrays)."""
  return int(tf.nest.flatten(split.y)[0].shape[0])


def size_bytes(data: Any) -> int:
  """The bytes of every array of a nest."""
  return sum(int(np.asarray(leaf).nbytes) for leaf in tf.nest.flatten(data))


def _readable(num_bytes: int) -> str:
  for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
    if num_bytes >= scale:
      return f"{num_bytes / scale:.1f} {unit}"
  return f"{num_bytes} bytes"


def _too_large(num_bytes: int, max_bytes: int, reading: str | None = None) -> DataTooLargeError:
  held = f"at least {_readable(num_bytes)} (reading of the {reading} dataset stopped there)"
  return DataTooLargeError(
    f"The data holds {held if reading else _readable(num_bytes)}, above the limit of "
    f"{_readable(max_bytes)} (KerasModelFamily.max_data_bytes); use a subset of it or raise the "
    "limit."
  )


def _read_dataset(name: str, ds: tf.data.Dataset, held: int, max_bytes: int) -> Split:
  """The examples of a dataset of (x, y) as numpy arrays, read once, and only until the data
  (`held` bytes before it) passes `max_bytes`."""
  if ds.cardinality() == tf.data.INFINITE_CARDINALITY:
    raise BadDataError(f"The {name} dataset is infinite (repeat()?); give a finite one.")
  spec = ds.element_spec
  if not (isinstance(spec, tuple) and len(spec) == 2):
    raise BadDataError(f"The {name} dataset must give (x, y) pairs; its elements are {spec}.")
  targets = tf.nest.flatten(spec[1])[0].shape
  batched = targets.rank is not None and targets.rank > 0 and targets[0] is None
  chunks, total = [], held
  for chunk in (ds if batched else ds.batch(_READ_BATCH)).as_numpy_iterator():
    total += size_bytes(chunk)
    if total > max_bytes:
      raise _too_large(total, max_bytes, reading=name)
    chunks.append(chunk)
  if not chunks:
    raise BadDataError(f"The {name} dataset is empty.")
  return Split(*tf.nest.map_structure(lambda *parts: np.concatenate(parts), *chunks))


def _as_split(name: str, value: Any, held: int, max_bytes: int) -> Split:
  """One split given as (x, y) arrays or a dataset, as a Split of numpy arrays."""
  if isinstance(value, tf.data.Dataset):
    return _read_dataset(name, value, held, max_bytes)
  if not (isinstance(value, (tuple, list)) and len(value) == 2):
    raise BadDataError(
      f"The {name} split must be an (x, y) pair of arrays or a tf.data.Dataset, got "
      f"{type(value).__name__}."
    )
  return Split(*tf.nest.map_structure(np.asarray, tuple(value)))


def _check_split(name: str, split: Split) -> None:
  """Raises BadDataError for arrays of different lengths or non-finite values."""
  lengths = {int(np.shape(leaf)[0]) if np.ndim(leaf) else 0 for leaf in tf.nest.flatten(split)}
  if len(lengths) != 1 or 0 in lengths:
    raise BadDataError(
      f"The arrays of the {name} split give {sorted(lengths)} examples; x and y need the same "
      "number of examples (and at least one) along their first axis."
    )
  for part, value in zip(("x", "y"), split, strict=True):
    for leaf in tf.nest.flatten(value):
      if np.issubdtype(leaf.dtype, np.floating) and not np.all(np.isfinite(leaf)):
        bad = np.flatnonzero(~np.isfinite(leaf).reshape(len(leaf), -1).all(axis=1))
        raise BadDataError(
          f"The {name} split's {part} holds NaN or infinite values in {len(bad)} "
          f"example{'s' if len(bad) > 1 else ''} (the first at index {bad[0]}); remove or "
          "replace them."
        )


def split_off_valid(train: Split, valid_fraction: float) -> tuple[Split, Split]:
  """The first and last `valid_fraction` of `train`'s examples: (inner-train, inner-valid)."""
  n = num_examples(train)
  num_valid = int(round(n * valid_fraction))
  if not 0 < num_valid < n:
    raise BadDataError(
      f"{n} train examples cannot give a valid_fraction of {valid_fraction} (at least one "
      "inner-train and one inner-valid example); give a valid split or change the fraction."
    )
  return take(train, np.arange(n - num_valid)), take(train, np.arange(n - num_valid, n))


def in_memory(
  data: Mapping[str, Any] | Callable[[], Mapping[str, Any]],
  valid_fraction: float = DEFAULT_VALID_FRACTION,
  max_bytes: int = MAX_DATA_BYTES,
) -> dict[str, Split]:
  """The train, valid and test examples of `data` as numpy arrays, checked.

  Args:
    data: {"train": ..., "test": ..., "valid" (optional): ...}, each an (x, y) pair of arrays or
      a tf.data.Dataset of (x, y); or a function of no arguments that returns such a dict.
    valid_fraction: the fraction of the train examples that become inner-valid when `data` has
      no "valid".
    max_bytes: the most bytes the arrays may hold.

  Returns:
    {"train": Split, "valid": Split, "test": Split} of numpy arrays.

  Raises:
    BadDataError: a missing or unknown split, arrays of different lengths, NaN or infinite values.
    DataTooLargeError: the data holds more than `max_bytes`.
  """
  if callable(data):
    data = data()
  if not isinstance(data, Mapping) or not {"train", "test"} <= set(data) <= set(base.SPLITS):
    keys = sorted(data) if isinstance(data, Mapping) else type(data).__name__
    raise BadDataError(
      f"The data must be a dict with the splits 'train' and 'test' (and optionally 'valid'), "
      f"got {keys}."
    )
  splits, total = {}, 0
  for name in sorted(data):
    splits[name] = _as_split(name, data[name], total, max_bytes)
    total += size_bytes(splits[name])
    if total > max_bytes:
      raise _too_large(total, max_bytes)
    _check_split(name, splits[name])
  if "valid" not in splits:
    splits["train"], splits["valid"] = split_off_valid(splits["train"], valid_fraction)
  return splits


@gin.configurable
def tfds_data(
  name: str = gin.REQUIRED,
  train_split: str = "train",
  test_split: str = "test",
  valid_split: str | None = None,
  x_key: str = "image",
  y_key: str = "label",
  data_dir: str | None = None,
) -> dict[str, tf.data.Dataset]:
  """A prepared TFDS dataset's splits as datasets of (x, y), for `in_memory` (never downloads).

  Args:
    name: the TFDS name, e.g. "mnist" or "cifar10".
    train_split: the TFDS split (slices allowed, e.g. "train[:90%]") of the train examples.
    test_split: the TFDS split of the test examples.
    valid_split: the TFDS split of the inner-valid examples, e.g. "train[90%:]"; None carves them
      off the train examples (`in_memory`'s valid_fraction).
    x_key: the feature that is the model's input.
    y_key: the feature that is the target.
    data_dir: the TFDS data dir; None for TFDS's default.

  Returns:
    {"train": ds, "test": ds, "valid": ds (if valid_split)}, each of (x, y) examples.

  Raises:
    tfds_source.DatasetNotPreparedError: the dataset is not prepared in the data dir.
  """
  builder = tfds.builder(name, data_dir=data_dir)
  splits = {"train": train_split, "test": test_split}
  if valid_split is not None:
    splits["valid"] = valid_split
  datasets = {}
  for split, tfds_split in splits.items():
    try:
      ds = builder.as_dataset(split=tfds_split, shuffle_files=False)
    except AssertionError as e:  # TFDS's way of saying the data is not there.
      message = tfds_preparation.not_prepared_message(name, builder, ())
      raise tfds_source.DatasetNotPreparedError(message) from e
    datasets[split] = ds.map(lambda ex: (ex[x_key], ex[y_key]))
  return datasets


def take(split: Split, indices: np.ndarray) -> Split:
  """The examples of `split` at `indices`, in that order."""
  return Split(*tf.nest.map_structure(lambda a: np.asarray(a)[indices], tuple(split)))


def to_tensors(split: Split) -> Split:
  """`split` as tensors; int64 ones (labels, token ids) become int32, as the accuracy compares."""

  def convert(array: Any) -> tf.Tensor:
    tensor = tf.convert_to_tensor(array)
    return tf.cast(tensor, tf.int32) if tensor.dtype == tf.int64 else tensor

  return Split(*tf.nest.map_structure(convert, tuple(split)))


def sample_indices(split: Split, batch_size: int, seed: random_seeds.SeedLike) -> tf.Tensor:
  """`batch_size` int32 indices into `split`, drawn with replacement from `seed`."""
  size = tf.shape(tf.nest.flatten(split.y)[0], out_type=tf.int32)[0]
  return tf.random.stateless_uniform(
    [batch_size], random_seeds.as_seed(seed), minval=0, maxval=size, dtype=tf.int32
  )


def gather(split: Split, indices: tf.Tensor) -> Split:
  """The examples of `split` (tensors) at `indices`."""
  return Split(*tf.nest.map_structure(lambda t: tf.gather(t, indices), tuple(split)))


def num_classes(splits: Mapping[str, Split], kind: str, given: int | None = None) -> int | None:
  """The classes of a classification loss: the one-hot width, or the largest label + 1."""
  if kind == "categorical":
    return int(np.shape(tf.nest.flatten(splits["train"].y)[0])[-1])
  if kind != "sparse":
    return None
  labels = [np.asarray(splits[s].y) for s in base.SPLITS]
  low, high = min(int(y.min()) for y in labels), max(int(y.max()) for y in labels)
  count = high + 1 if given is None else int(given)
  if low < 0 or high >= count:
    raise BadDataError(
      f"The labels span [{low}, {high}], outside [0, {count}) of the sparse loss's classes; "
      "labels must be class indices (KerasModelFamily.num_classes)."
    )
  return count


def outer_split(
  splits: Mapping[str, Split], split: str, outer_train_fraction: float
) -> dict[str, Split]:
  """Each split's examples of the outer split (the fixed permutation of class_source)."""
  if split == "all":
    return dict(splits)
  pools = {}
  for name, examples in splits.items():
    n = num_examples(examples)
    parts = class_source.split_classes(n, min(n, max(1, round(n * outer_train_fraction))))
    pools[name] = take(examples, parts[0 if split == "outer_train" else 1])
  return pools


def with_classes(examples: Split, classes: np.ndarray) -> Split:
  """The examples of `classes`, labelled by their position in `classes`."""
  labels = np.asarray(examples.y)
  keep = np.flatnonzero(np.isin(labels, classes))
  order = np.argsort(classes)
  positions = order[np.searchsorted(classes[order], labels[keep])]
  return Split(take(examples, keep).x, positions.astype(np.int32))
