"""A user's data as arrays, tf.data or TFDS, held in memory and checked; nothing is downloaded."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from task_specific_learned_opt.tasks import keras_data, keras_task, tfds_source


def _arrays(n=20, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, 4, n)


def _data(**overrides):
  data = {"train": _arrays(20), "valid": _arrays(10, 1), "test": _arrays(10, 2)}
  return {**data, **overrides}


def _message(error):
  message = str(error.value)
  assert "\n" not in message
  return message


@pytest.mark.parametrize("batched", [False, True])
def test_a_dataset_is_read_once_to_the_arrays_it_holds(batched):
  x, y = _arrays(20)
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  splits = keras_data.in_memory(_data(train=ds.batch(6) if batched else ds))
  np.testing.assert_array_equal(splits["train"].x, x)
  np.testing.assert_array_equal(splits["train"].y, y)
  assert isinstance(splits["test"].x, np.ndarray)


def test_valid_is_the_end_of_train_when_not_given():
  x, y = _arrays(20)
  splits = keras_data.in_memory({"train": (x, y), "test": _arrays(5)}, valid_fraction=0.25)
  np.testing.assert_array_equal(splits["train"].x, x[:15])
  np.testing.assert_array_equal(splits["valid"].y, y[15:])


def test_a_model_of_two_inputs_reads_a_dict_of_arrays():
  def build(num_classes=4):
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    merged = keras.layers.Concatenate()([a, b])
    return keras.Model({"a": a, "b": b}, keras.layers.Dense(num_classes)(merged))

  rng = np.random.default_rng(0)
  data = {
    s: ({"a": x, "b": rng.normal(size=(len(x), 2)).astype(np.float32)}, y)
    for s, (x, y) in _data().items()
  }
  family = keras_task.KerasModelFamily(model_fn=build, data=data, batch_size=4, split="all")
  task = family.sample(0)
  batch = task.batch("train", 1)
  assert batch["x"]["b"].shape == (4, 2)
  assert task.loss(task.init_params(0), batch).shape == ()
  # Each row of the batch is one example: its "a", its "b" and its label, drawn together.
  train = task.splits["train"]
  rows = (batch["x"]["a"].numpy(), batch["x"]["b"].numpy(), batch["y"].numpy())
  for a, b, y in zip(*rows, strict=True):
    (index,) = np.flatnonzero(np.all(np.asarray(train.x["a"]) == a, axis=1))
    np.testing.assert_array_equal(np.asarray(train.x["b"])[index], b)
    assert np.asarray(train.y)[index] == y


def test_a_tfds_dataset_by_name_from_mocked_data():
  def build(num_classes=10):
    return keras.Sequential(
      [
        keras.Input((28, 28, 1)),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Flatten(),
        keras.layers.Dense(num_classes),
      ]
    )

  with tfds.testing.mock_data(num_examples=60):
    data = keras_data.tfds_data("mnist", valid_split="train[:10]")
    family = keras_task.KerasModelFamily(
      model_fn=build, data=data, batch_size=4, classes_per_task=3
    )
  task = family.sample(0)
  assert task.splits["train"].x.dtype == tf.uint8 and task.splits["train"].x.shape[1:] == (
    28,
    28,
    1,
  )
  assert task.loss(task.init_params(0), task.batch("train", 0)).shape == ()


def test_an_unprepared_tfds_dataset_is_named_with_the_command(tmp_path, no_tfds_download_or_read):
  with pytest.raises(tfds_source.DatasetNotPreparedError, match="download_and_prepare"):
    keras_data.tfds_data("mnist", data_dir=str(tmp_path / "none"))
  assert no_tfds_download_or_read.forbidden_calls == []


def test_data_with_nan_values():
  x, y = _arrays(20)
  x[7, 1] = np.nan
  with pytest.raises(keras_data.BadDataError) as error:
    keras_data.in_memory(_data(train=(x, y)))
  assert _message(error) == (
    "The train split's x holds NaN or infinite values in 1 example (the first at index 7); "
    "remove or replace them."
  )


def test_data_above_the_size_limit():
  with pytest.raises(keras_data.DataTooLargeError) as error:
    keras_data.in_memory(_data(), max_bytes=500)
  assert _message(error) == (
    "The data holds 600 bytes, above the limit of 500 bytes (KerasModelFamily.max_data_bytes); "
    "use a subset of it or raise the limit."
  )


def test_a_large_dataset_is_read_only_up_to_the_limit():
  ds = tf.data.Dataset.range(10**9).map(lambda i: (tf.zeros([256]), i))
  with pytest.raises(keras_data.DataTooLargeError, match="reading of the train dataset stopped"):
    keras_data.in_memory(_data(train=ds), max_bytes=2**20)


def test_an_infinite_dataset_or_a_missing_split():
  ds = tf.data.Dataset.from_tensor_slices(_arrays(4)).repeat()
  with pytest.raises(keras_data.BadDataError, match="infinite"):
    keras_data.in_memory(_data(train=ds))
  with pytest.raises(keras_data.BadDataError, match="'train' and 'test'"):
    keras_data.in_memory({"train": _arrays()})
  with pytest.raises(keras_data.BadDataError, match="need the same number of examples"):
    keras_data.in_memory(_data(test=(np.zeros((5, 3)), np.zeros(4))))


def test_labels_outside_the_classes():
  x, y = _arrays(20)
  with pytest.raises(keras_data.BadDataError, match=r"span \[-1, 3\]"):
    keras_data.num_classes(keras_data.in_memory(_data(train=(x, y - 1))), "sparse")
