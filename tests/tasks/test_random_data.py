"""RandomDataTask: batches that are a pure function of the seed, and a trainable loss."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.tasks import networks, random_data


def _task(**kwargs):
  kwargs.setdefault("image_shape", (8, 8, 3))
  kwargs.setdefault("batch_size", 16)
  return random_data.RandomDataTask(networks.ConvNet(channels=(4,), strides=(2,)), **kwargs)


def test_batches_are_deterministic_in_the_seed():
  task = _task()
  a, b = task.batch("train", [3, 4]), task.batch("train", [3, 4])
  for key in ("image", "label"):
    np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
  other_seed, other_split = task.batch("train", [3, 5]), task.batch("valid", [3, 4])
  for other in (other_seed, other_split):
    assert not np.array_equal(a["image"].numpy(), other["image"].numpy())
    assert not np.array_equal(a["label"].numpy(), other["label"].numpy())


def test_batch_shapes_dtypes_and_ranges():
  task = _task(num_classes=5, batch_size=256)
  batch = task.batch("test", 0)
  assert batch["image"].shape == (256, 8, 8, 3) and batch["image"].dtype == tf.float32
  assert batch["label"].shape == (256,) and batch["label"].dtype == tf.int32
  image, label = batch["image"].numpy(), batch["label"].numpy()
  assert image.min() >= -1.0 and image.max() < 1.0 and abs(image.mean()) < 0.05
  assert set(np.unique(label)) == set(range(5))
  with pytest.raises(ValueError):
    task.batch("nope", 0)


def test_loss_starts_near_chance_and_has_gradients():
  task = _task()
  params = task.init_params(0)
  with tf.GradientTape() as tape:
    tape.watch(params)
    loss = task.loss(params, task.batch("train", 1))
  assert abs(float(loss) - np.log(10.0)) < 0.5
  grads = tape.gradient(loss, params)
  assert all(np.any(g.numpy() != 0.0) for g in tf.nest.flatten(grads))
  assert "conv1x4" in task.name
