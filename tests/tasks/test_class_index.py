"""The class index: rows of a batch in the class-sorted array, and its .npy cache."""

import os

import numpy as np
import pytest

from task_specific_learned_opt.tasks import class_index


def test_class_slots_keep_read_order_within_classes():
  # Counts [2, 1, 2] give offsets [0, 2, 3, 5]; one class-0 example is already written, so the
  # batch's class-0 example goes to row 0 + 1, class 2's two examples to rows 3 and 4.
  labels = np.array([2, 0, 2, 1])
  offsets = class_index.class_offsets(np.array([2, 1, 2]))
  np.testing.assert_array_equal(offsets, [0, 2, 3, 5])
  slots = class_index.class_slots(labels, offsets, filled=np.array([1, 0, 0]))
  np.testing.assert_array_equal(slots, [3, 1, 4, 2])


def test_cache_round_trip_and_mismatch(tmp_path):
  path = str(tmp_path / "split")
  assert class_index.read_cache(path, (2, 2, 1), 2, "toy") is None
  offsets = class_index.class_offsets(np.array([1, 2]))
  images = np.arange(12, dtype=np.uint8).reshape(3, 2, 2, 1)
  class_index.write_cache(
    path, offsets, (2, 2, 1), lambda out: out.__setitem__(slice(None), images)
  )
  assert sorted(os.listdir(path)) == ["images.npy", "offsets.npy"]  # No *.tmp left.
  index = class_index.read_cache(path, (2, 2, 1), 2, "toy")
  assert isinstance(index.images, np.memmap)
  np.testing.assert_array_equal(index.images, images)
  np.testing.assert_array_equal(index.offsets, offsets)
  with pytest.raises(ValueError, match="does not match toy"):
    class_index.read_cache(path, (2, 2, 1), 3, "toy")


def test_an_interrupted_write_leaves_no_file(tmp_path):
  path = str(tmp_path / "split")

  def fail(out):
    raise RuntimeError("interrupted")

  with pytest.raises(RuntimeError, match="interrupted"):
    class_index.write_cache(path, class_index.class_offsets(np.array([1])), (1, 1, 1), fail)
  assert os.listdir(path) == []
  assert class_index.read_cache(path, (1, 1, 1), 1, "toy") is None
