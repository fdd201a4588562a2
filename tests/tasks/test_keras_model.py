"""A model that does not fit its data, its loss or the inner loop: one line, before training."""

import keras
import numpy as np
import pytest

from task_specific_learned_opt import errors
from task_specific_learned_opt.tasks import keras_data, keras_model, keras_task


def _data(n=12, num_classes=3):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, 5)).astype(np.float32)
  return {s: (x, rng.integers(0, num_classes, n)) for s in ("train", "valid", "test")}


def _family(build, **kwargs):
  return keras_task.KerasModelFamily(
    model_fn=build, data=_data(), batch_size=4, split="all", **kwargs
  )


def _one_line(error):
  """The message without what gin appends (the binaries print it without, cli/common.py)."""
  message = str(error.value).split("\n  In call to configurable")[0]
  assert "\n" not in message
  return message


def test_outputs_of_another_width_than_the_classes():
  def build():
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(10)])

  with pytest.raises(keras_model.BadModelError) as error:
    _family(build)
  assert "outputs [2, 10] but the task's 3 classes need outputs [batch, 3]" in _one_line(error)
  assert "num_classes argument" in str(error.value)


def test_outputs_shaped_unlike_the_targets():
  def build():
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4)])

  with pytest.raises(keras_model.BadModelError) as error:
    _family(build, loss="mse")
  assert "outputs [2, 4] but the targets are [2]" in _one_line(error)


def test_a_loss_that_is_not_a_scalar_or_one_value_per_example():
  def build(num_classes=3):
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(num_classes)])

  def squared_error_per_output(y_true, y_pred):
    return (y_pred - keras.ops.expand_dims(keras.ops.cast(y_true, "float32"), -1)) ** 2

  with pytest.raises(keras_model.BadModelError) as error:
    _family(build, loss=squared_error_per_output)
  assert "shape [2, 3] for a batch of 2" in _one_line(error)
  assert "scalar or one value per example" in str(error.value)


class _IntegerScale(keras.layers.Layer):
  def build(self, input_shape):
    self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", dtype="int32")

  def call(self, x):
    return x * keras.ops.cast(self.scale, x.dtype)


def test_integer_trainable_weights():
  def build(num_classes=3):
    return keras.Sequential([keras.Input((5,)), _IntegerScale(), keras.layers.Dense(num_classes)])

  with pytest.raises(keras_model.BadModelError) as error:
    _family(build)
  assert "of dtype int32; trainable weights must be float32" in _one_line(error)


def test_a_model_without_trainable_weights():
  def build(num_classes=3):
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(num_classes)])
    model.trainable = False
    return model

  with pytest.raises(keras_model.BadModelError, match="has no trainable weights") as error:
    _family(build)
  _one_line(error)


def test_a_model_function_that_returns_no_model():
  with pytest.raises(keras_model.BadModelError, match="must return a keras.Model"):
    _family(lambda: keras.layers.Dense(3))


def test_variations_must_be_arguments_of_the_model_function():
  def build(width=4, num_classes=3):
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(num_classes)])

  with pytest.raises(keras_task.KerasFamilyError) as error:
    _family(build, variations={"widht": [4, 8]})
  assert "names 'widht', which build does not take (it takes num_classes, width)" in _one_line(
    error
  )


def test_a_split_smaller_than_the_batch_size():
  def build(num_classes=3):
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(num_classes)])

  with pytest.raises(keras_data.BadDataError) as error:  # When the family is made.
    keras_task.KerasModelFamily(model_fn=build, data=_data(), batch_size=8, classes_per_task=1)
  assert _one_line(error).startswith("A task of keras_build_outer_train can get as few as ")
  assert "examples, fewer than the batch size 8" in str(error.value)
  splits = {s: keras_data.Split(*xy) for s, xy in _data().items()}
  with pytest.raises(keras_data.BadDataError) as error:  # A task made directly.
    keras_task.make_task(keras_model.KerasModel(build, {}), splits, batch_size=64)
  assert _one_line(error) == (
    "The train split of keras_task has 12 examples, fewer than the batch size 64; use a "
    "smaller batch_size or more data."
  )


def test_the_errors_are_user_errors():
  for error in (keras_model.BadModelError, keras_data.BadDataError, keras_task.KerasFamilyError):
    assert issubclass(error, errors.UserError) and issubclass(error, ValueError)
