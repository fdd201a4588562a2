"""Images sorted by class, and their .npy cache: how TfdsClassSource serves a class (Sec. 4.2).

A class index is one uint8 array of images [n, H, W, C] sorted by class, read order kept within
each class, with int64 offsets [num_classes + 1]: class c is images[offsets[c]:offsets[c + 1]].
It is filled batch by batch, each example written to its row (`class_slots`). In a cache
directory the two arrays are .npy files, the images written through a memory map and read back
memory-mapped, so an index larger than memory (ImageNet 32x32's 3.9 GB train split) is never
held in memory.
"""

import os
import tempfile
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

_IMAGES_FILE = "images.npy"
_OFFSETS_FILE = "offsets.npy"


class ClassIndex(NamedTuple):
  """uint8 images [n, H, W, C] sorted by class, and int64 offsets [num_classes + 1]."""

  images: np.ndarray
  offsets: np.ndarray


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


def read_cache(path: str, image_shape: tuple, num_classes: int, name: str) -> ClassIndex | None:
  """The index cached in `path` (images memory-mapped), or None if no complete one is there.

  Args:
    path: the cache directory of one split.
    image_shape: (H, W, C) the images must have.
    num_classes: the number of classes the offsets must cover.
    name: the source's name, for the error message.

  Raises:
    ValueError: the cache does not match the image shape or the number of classes.
  """
  # offsets.npy is renamed into place last, so its presence means the build completed.
  if not os.path.exists(os.path.join(path, _OFFSETS_FILE)):
    return None
  images = np.load(os.path.join(path, _IMAGES_FILE), mmap_mode="r")
  offsets = np.load(os.path.join(path, _OFFSETS_FILE))
  if (
    images.shape[1:] != image_shape
    or offsets.shape != (num_classes + 1,)
    or offsets[-1] != images.shape[0]
  ):
    raise ValueError(
      f"The cache in {path} does not match {name} (images {images.shape}, offsets "
      f"{offsets.shape} ending at {offsets[-1]}); delete it to rebuild."
    )
  return ClassIndex(images, offsets)


def write_cache(
  path: str, offsets: np.ndarray, image_shape: tuple, fill: Callable[[np.ndarray], None]
) -> None:
  """Writes the index whose images `fill` writes into a memory-mapped array to `path`.

  Both files are written under unique temporary names and renamed into place, offsets last:
  concurrent builders of the same cache never share a file, and an interrupted build leaves
  only *.tmp files behind, which are removed.

  Args:
    path: the cache directory of one split (created if needed).
    offsets: int64 [num_classes + 1], see class_offsets.
    image_shape: (H, W, C).
    fill: writes every image into the uint8 array [offsets[-1], H, W, C] it is given.
  """
  os.makedirs(path, exist_ok=True)
  shape = (int(offsets[-1]), *image_shape)
  tmp_images = _temp_name(path, _IMAGES_FILE)
  tmp_offsets = _temp_name(path, _OFFSETS_FILE)
  try:
    images = np.lib.format.open_memmap(tmp_images, mode="w+", dtype=np.uint8, shape=shape)
    fill(images)
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


def _temp_name(directory: str, final_name: str) -> str:
  fd, name = tempfile.mkstemp(prefix=f"{final_name}.", suffix=".tmp", dir=directory)
  os.close(fd)
  return name
