"""Tests of tfds_source: TFDS datasets served by class, on tfds.testing.mock_data.

mock_data generates the same random examples on every read (its generator restarts from seed 0),
so a plain tfds.load pass under the same context is the reference the class index must match.
"""

import os
import socket
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from task_specific_learned_opt.tasks import tfds_preparation, tfds_source


def _reference_by_class(dataset: str, split: str, num_classes: int) -> list:
  """Images of each class from a plain tfds.load pass, in read order (call under mock_data)."""
  tfds_split = tfds_source.DATASETS[dataset].splits[split]
  ds = tfds.load(dataset, split=tfds_split, shuffle_files=False, download=False)
  examples = list(tfds.as_numpy(ds))
  images = np.stack([ex["image"] for ex in examples])
  labels = np.array([ex["label"] for ex in examples])
  return [images[labels == c] for c in range(num_classes)]


def _all_images(source: tfds_source.TfdsClassSource, split: str) -> list:
  return [source.images(split, c) for c in range(source.num_classes)]


@pytest.mark.parametrize(
  "dataset, num_examples",
  [("mnist", 500), ("cifar100", 500), ("imagenet_resized/32x32", 300)],
)
def test_images_are_the_examples_of_each_class(dataset, num_examples):
  spec = tfds_source.DATASETS[dataset]
  with tfds.testing.mock_data(num_examples=num_examples):
    source = tfds_source.TfdsClassSource(dataset)
    for split in ("train", "test"):
      expected = _reference_by_class(dataset, split, spec.num_classes)
      got = _all_images(source, split)
      for class_id in range(spec.num_classes):
        assert got[class_id].dtype == np.uint8
        assert got[class_id].shape[1:] == spec.image_shape == source.image_shape
        np.testing.assert_array_equal(got[class_id], expected[class_id])
      assert sum(len(x) for x in got) == num_examples
  assert source.num_classes == spec.num_classes


def test_images_are_copies():
  with tfds.testing.mock_data(num_examples=200):
    source = tfds_source.TfdsClassSource("mnist")
    first = source.images("train", 3)
    first[:] = 0
    assert source.images("train", 3).any()


def test_mnist_resized_to_14x14_is_the_area_resize_of_the_originals():
  with tfds.testing.mock_data(num_examples=300):
    source = tfds_source.TfdsClassSource("mnist", image_size=14)
    expected = _reference_by_class("mnist", "train", 10)
    assert source.image_shape == (14, 14, 1)
    assert source.name == "mnist_14x14"
    for class_id in range(10):
      got = source.images("train", class_id)
      assert got.dtype == np.uint8
      assert got.shape == (len(expected[class_id]), 14, 14, 1)
      resized = tf.image.resize(expected[class_id].astype(np.float32), [14, 14], method="area")
      np.testing.assert_array_equal(got, np.round(resized.numpy()).astype(np.uint8))


@pytest.mark.parametrize("image_size, leaf", [(None, "train"), (14, "train_14")])
def test_second_source_reads_the_cache_without_tfds(tmp_path, image_size, leaf):
  cache_dir = str(tmp_path / "cache")
  with tfds.testing.mock_data(num_examples=400):
    first = tfds_source.TfdsClassSource("mnist", cache_dir=cache_dir, image_size=image_size)
    first_images = {split: _all_images(first, split) for split in ("train", "test")}
  split_dir = tmp_path / "cache" / "mnist" / leaf
  assert sorted(os.listdir(split_dir)) == ["images.npy", "offsets.npy"]  # No *.tmp left.
  assert np.load(split_dir / "images.npy", mmap_mode="r").shape[0] == 400

  # Outside mock_data and with an empty data dir, any TFDS access would fail.
  empty_data_dir = str(tmp_path / "no_data")
  with mock.patch.object(tfds, "builder", side_effect=AssertionError("TFDS was used")) as builder:
    second = tfds_source.TfdsClassSource(
      "mnist", data_dir=empty_data_dir, cache_dir=cache_dir, image_size=image_size
    )
    for split in ("train", "test"):
      for got, expected in zip(_all_images(second, split), first_images[split], strict=True):
        np.testing.assert_array_equal(got, expected)
  builder.assert_not_called()


@pytest.mark.parametrize("dataset", sorted(tfds_source.DATASETS))
def test_missing_dataset_fails_fast_with_the_prepare_command(
  tmp_path, dataset, no_tfds_download_or_read
):
  data_dir = str(tmp_path / "empty_data_dir")
  with pytest.raises(tfds_source.DatasetNotPreparedError) as error:
    tfds_source.TfdsClassSource(dataset, data_dir=data_dir)
  # Fails fast: nothing downloaded (no download call, no connection, nothing written to the data
  # dir) and no data read: the one probe, builder.as_dataset of the first split, raised for the
  # missing data before reading, and the error came from it.
  assert no_tfds_download_or_read.forbidden_calls == []
  assert no_tfds_download_or_read.as_dataset_outcomes == ["raised: data not found"]
  assert not os.path.exists(data_dir)
  message = str(error.value)
  assert dataset in message
  assert data_dir in message
  assert tfds_preparation.prepare_command(dataset, data_dir) in message
  assert isinstance(error.value, FileNotFoundError)
  for manual_file in tfds_source.DATASETS[dataset].manual_files:
    assert manual_file in message
    assert os.path.join(data_dir, "downloads", "manual") in message


def test_unknown_dataset_raises():
  with pytest.raises(ValueError, match="Unknown dataset"):
    tfds_source.TfdsClassSource("imagenet2012")


@pytest.mark.parametrize(
  "split, class_id, match",
  [
    ("valid", 0, "Unknown split"),
    ("train", 10, "not in"),
    ("test", -1, "not in"),
    ("train", 1.5, "integer"),
  ],
)
def test_bad_split_or_class_id_raises(split, class_id, match):
  with tfds.testing.mock_data(num_examples=20):
    source = tfds_source.TfdsClassSource("mnist")
    with pytest.raises(ValueError, match=match):
      source.images(split, class_id)


def test_the_guard_fails_a_download_a_connection_and_a_read(tmp_path, no_tfds_download_or_read):
  # The guard of the missing-dataset tests is not vacuous: each of these fails the test.
  builder = tfds.builder("mnist", data_dir=str(tmp_path))
  attempts = [
    builder.download_and_prepare,
    lambda: tfds.load("mnist", data_dir=str(tmp_path), download=True),
    lambda: socket.create_connection(("localhost", 9)),
    lambda: tfds.as_numpy(tf.data.Dataset.range(1)),
  ]
  for attempt in attempts:
    with pytest.raises(pytest.fail.Exception):
      attempt()
  assert no_tfds_download_or_read.forbidden_calls == [
    "DatasetBuilder.download_and_prepare",
    "tensorflow_datasets.load",
    "socket.create_connection",
    "tensorflow_datasets.as_numpy",
  ]


class DamageTestClasses(tfds.core.GeneratorBasedBuilder):
  """A tiny prepared dataset for the damage tests: 3 classes of 4x4 grey images."""

  VERSION = tfds.core.Version("1.0.0")

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
      builder=self,
      features=tfds.features.FeaturesDict(
        {
          "image": tfds.features.Image(shape=(4, 4, 1)),
          "label": tfds.features.ClassLabel(num_classes=3),
        }
      ),
    )

  def _split_generators(self, dl_manager):
    del dl_manager
    return {"train": self._generate_examples(60), "test": self._generate_examples(12)}

  def _generate_examples(self, num):
    rng = np.random.default_rng(num)
    for i in range(num):
      image = rng.integers(0, 255, (4, 4, 1), dtype=np.uint8)
      yield i, {"image": image, "label": i % 3}


DAMAGE_TEST = "damage_test_classes"


def _damage(path, how):
  if how == "truncated":
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) * 2 // 3)
  elif how == "corrupted":
    with open(path, "r+b") as f:
      f.seek(os.path.getsize(path) // 2)
      byte = f.read(1)
      f.seek(-1, os.SEEK_CUR)
      f.write(bytes([byte[0] ^ 0xFF]))
  else:
    os.remove(path)


@pytest.mark.parametrize("how", ["truncated", "corrupted", "missing"])
def test_damaged_data_is_named_in_one_line_with_the_fix(tmp_path, monkeypatch, how):
  monkeypatch.setitem(
    tfds_source.DATASETS,
    DAMAGE_TEST,
    tfds_source.DatasetSpec(
      num_classes=3, splits={"train": "train", "test": "test"}, image_shape=(4, 4, 1)
    ),
  )
  builder = DamageTestClasses(data_dir=str(tmp_path))
  builder.download_and_prepare()
  assert tfds_source.TfdsClassSource(DAMAGE_TEST, data_dir=str(tmp_path)).images("train", 1).shape
  shard = [os.fspath(p) for p in builder.info.splits["train"].filepaths][0]
  _damage(shard, how)
  with pytest.raises(tfds_source.DatasetDamagedError) as error:
    source = tfds_source.TfdsClassSource(DAMAGE_TEST, data_dir=str(tmp_path))
    source.images("train", 1)
  message = str(error.value)
  assert f"'{DAMAGE_TEST}' (train split) is damaged: {shard} is {how}" in message
  assert f"Delete the prepared version ({builder.data_dir})" in message
  assert "download_and_prepare()" in message and "\n" not in message
