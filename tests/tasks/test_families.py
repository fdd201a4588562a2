"""Class splits, task families and image tasks: disjoint, deterministic, shaped as documented."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import testing_utils

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import (
  class_source,
  families,
  networks,
  quadratic,
  tfds_source,
)


def test_class_split_is_a_fixed_disjoint_partition():
  train, test = class_source.split_classes(1000, 700)
  assert len(train) == 700 and len(test) == 300
  assert not set(train) & set(test)
  np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(1000))
  again_train, again_test = class_source.split_classes(1000, 700)
  np.testing.assert_array_equal(train, again_train)
  np.testing.assert_array_equal(test, again_test)
  # The documented rule: numpy RandomState(0).permutation(1000)[:700], sorted. Pinned so that any
  # change to the rule (which would mix outer-train and outer-test classes of old runs) fails.
  np.testing.assert_array_equal(np.sort(np.random.RandomState(0).permutation(1000)[700:]), test)
  assert test[:5].tolist() == [9, 11, 19, 23, 24]


def test_cifar100_split_is_70_30():
  train, test = class_source.split_classes(100, 70)
  assert len(train) == 70 and len(test) == 30 and not set(train) & set(test)


def test_classes_of_rejects_unknown_split():
  with pytest.raises(ValueError, match="outer_train"):
    class_source.classes_of(10, 7, "outer_validation")


def test_family_samples_only_its_split_and_is_deterministic():
  outer_train = testing_utils.small_generated_family(class_split="outer_train")
  outer_test = testing_utils.small_generated_family(
    class_split="outer_test", num_classes_per_task=6
  )
  train_ids, test_ids = class_source.split_classes(20, 14)
  for seed in range(5):
    assert set(outer_train.sample_classes(seed)) <= set(train_ids)
    assert set(outer_test.sample_classes(seed)) <= set(test_ids)
    np.testing.assert_array_equal(
      outer_train.sample_classes(seed), outer_train.sample_classes(seed)
    )
  assert sorted(outer_test.sample_classes(0)) == sorted(test_ids)  # All 6 outer-test classes.
  with pytest.raises(ValueError, match="Cannot draw 7 classes"):
    testing_utils.small_generated_family(class_split="outer_test", num_classes_per_task=7)


def test_task_has_disjoint_inner_train_and_valid_examples_of_every_class():
  family = testing_utils.small_generated_family(num_classes_per_task=4, valid_fraction=0.25)
  classes = family.sample_classes(1)
  task = family.task_for_classes(classes)
  train, valid, test = (task.splits[s] for s in ("train", "valid", "test"))
  # 40 train images per class: 30 inner-train, 10 inner-valid; all 10 test images.
  assert task.num_examples("train") == 4 * 30 and task.num_examples("valid") == 4 * 10
  assert task.num_examples("test") == 4 * 10
  np.testing.assert_array_equal(np.bincount(train.labels.numpy()), [30] * 4)
  train_rows = {x.tobytes() for x in train.images.numpy()}
  assert not train_rows & {x.tobytes() for x in valid.images.numpy()}
  for label, class_id in enumerate(classes):
    expected = family.source.images("train", int(class_id))
    got = train.images.numpy()[train.labels.numpy() == label]
    np.testing.assert_array_equal(got, expected[:30])
    np.testing.assert_array_equal(
      valid.images.numpy()[valid.labels.numpy() == label], expected[30:]
    )
    np.testing.assert_array_equal(
      test.images.numpy()[test.labels.numpy() == label], family.source.images("test", int(class_id))
    )


def test_batches_are_stateless_and_scaled():
  task = testing_utils.small_generated_family().sample(0)
  a, b = task.batch("train", [1, 2]), task.batch("train", [1, 2])
  np.testing.assert_array_equal(a["image"], b["image"])
  assert not np.array_equal(a["image"], task.batch("train", [1, 3])["image"])
  assert a["image"].shape == (16, 32, 32, 3) and a["image"].dtype == tf.float32
  assert -1.0 <= float(tf.reduce_min(a["image"])) and float(tf.reduce_max(a["image"])) <= 1.0
  assert a["label"].dtype == tf.int32 and 0 <= int(tf.reduce_min(a["label"]))
  with pytest.raises(ValueError, match="split"):
    task.batch("validation", 0)


def test_dataset_is_one_shuffled_pass_over_the_split():
  task = testing_utils.small_generated_family().sample(0)
  batches = list(task.dataset("test", shuffle_seed=1, batch_size=7))
  labels = np.concatenate([b["label"].numpy() for b in batches])
  np.testing.assert_array_equal(np.sort(labels), np.sort(task.splits["test"].labels.numpy()))
  assert not np.array_equal(labels, task.splits["test"].labels.numpy())  # shuffled
  assert batches[0]["image"].shape == (7, 32, 32, 3)


def test_default_model_is_the_paper_cnn():
  family = testing_utils.small_generated_family(model=None)
  assert family.model.channels == (32, 32, 32) and family.model.strides == (2, 2, 1)


@pytest.mark.integration
def test_tfds_family_with_mock_data(tmp_path):
  with tfds.testing.mock_data(num_examples=3000):
    source = tfds_source.TfdsClassSource("cifar100", data_dir=str(tmp_path))
    family = families.ClassSubsetFamily(
      source=source, model=networks.ConvNet((4,), (2,)), valid_fraction=0.2, batch_size=8
    )
    task = family.sample(0)
  outer_train, _ = class_source.split_classes(100, 70)
  assert set(family.sample_classes(0)) <= set(outer_train)
  batch = task.batch("valid", 0)
  assert batch["image"].shape == (8, 32, 32, 3)
  assert np.isfinite(float(task.loss(task.init_params(0), batch)))


def test_mnist_family_uses_all_ten_classes_at_14x14(tmp_path):
  with tfds.testing.mock_data(num_examples=200):
    source = tfds_source.TfdsClassSource("mnist", data_dir=str(tmp_path), image_size=14)
    family = families.ClassSubsetFamily(
      source=source, model=networks.mnist_mlp_2x32(), class_split="all"
    )
    task = family.sample(0)
  assert sorted(family.sample_classes(0)) == list(range(10))
  assert task.image_shape == (14, 14, 1)
  assert task.init_params(0)["layer0"]["w"].shape == (196, 32)


def test_missing_dataset_fails_before_downloading_or_reading(tmp_path, no_tfds_download_or_read):
  with pytest.raises(tfds_source.DatasetNotPreparedError) as error:
    tfds_source.TfdsClassSource("imagenet_resized/32x32", data_dir=str(tmp_path))
  assert no_tfds_download_or_read.forbidden_calls == []
  assert no_tfds_download_or_read.as_dataset_outcomes == ["raised: data not found"]
  assert os.listdir(tmp_path) == []  # Nothing downloaded or written.
  assert "imagenet_resized/32x32" in str(error.value) and str(tmp_path) in str(error.value)


def _mixture(weights=None):
  return families.MixtureFamily(
    [quadratic.QuadraticFamily(dim=3), quadratic.QuadraticFamily(dim=6, noise_std=0.5)], weights
  )


def test_a_mixtures_task_is_its_members_task_of_the_same_seed():
  mixture = _mixture()
  members = set()
  for index in range(12):
    seed = random_seeds.fold_in([4, 2], index)
    task, member = mixture.sample(seed), mixture.member(seed)
    alone = mixture.families[member].sample(seed)
    members.add(member)
    assert task.member == member and task.trace_key == (member, None)
    assert task.dim == alone.dim == (3, 6)[member]  # Attributes read through to the member.
    for x, y in zip(tf.nest.flatten(task.data), tf.nest.flatten(alone.data), strict=True):
      np.testing.assert_array_equal(x, y)
    params = task.init_params([1, 1])
    np.testing.assert_array_equal(params["w"], alone.init_params([1, 1])["w"])
    batch = task.batch("train", [2, 2])
    assert float(task.loss(params, batch)) == float(alone.loss(params, batch))
    again = task.with_data(alone.data)
    assert isinstance(again, families.MemberTask) and again.trace_key == task.trace_key
    assert mixture.member(seed) == member  # The seed alone decides.
  assert members == {0, 1}


def test_a_mixture_draws_its_members_with_their_weights():
  mixture = _mixture(weights=(1.0, 3.0))
  draws = [mixture.member(random_seeds.fold_in([9, 9], i)) for i in range(400)]
  np.testing.assert_allclose(np.mean(draws), 0.75, atol=0.07)  # 4 sigma of 400 draws: 0.087.
  assert mixture.name == "mixture(quadratic3, quadratic6)"


@pytest.mark.parametrize("weights", [(1.0,), (1.0, 0.0), (1.0, -2.0)])
def test_a_mixture_refuses_weights_that_do_not_fit_its_families(weights):
  with pytest.raises(ValueError, match="MixtureFamily.weights must be 2 positive numbers"):
    _mixture(weights)


def test_a_mixture_needs_a_family():
  with pytest.raises(ValueError, match="MixtureFamily.families is empty"):
    families.MixtureFamily([])
