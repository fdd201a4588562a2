"""batch_norm.ReestimateBatchNorm: a batch-normed model trained with a shipped theta evaluates well.

The learned step grows the weights faster than BatchNormalization's moving averages (momentum
0.99) follow, so without re-estimation `model.evaluate` normalises with stale statistics.
"""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn import datasets

from task_specific_learned_opt.keras import batch_norm
from task_specific_learned_opt.keras import optimizer as keras_optimizer

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
BATCH = 32


def digits():
  """scikit-learn's 8x8 digits in [-1, 1]: 1,400 training and 397 test images."""
  data = datasets.load_digits()
  x = (data.images / 8.0 - 1.0).astype(np.float32)[..., None]
  y = data.target.astype(np.int32)
  order = np.random.default_rng(0).permutation(len(x))
  x, y = x[order], y[order]
  return x[:1400], y[:1400], x[1400:], y[1400:]


def bn_cnn(seed=0):
  """The shipped thetas' family's network: 3 conv layers (strides 2, 2, 1), batch norm, ReLU."""
  keras.utils.set_random_seed(seed)
  layers = [keras.Input((8, 8, 1))]
  for stride in (2, 2, 1):
    layers += [
      keras.layers.Conv2D(16, 3, strides=stride, padding="same"),
      keras.layers.BatchNormalization(epsilon=1e-5),
      keras.layers.ReLU(),
    ]
  return keras.Sequential(layers + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])


def batch_statistics_loss(model, x, y):
  """The test loss with each test batch normalised by its own statistics (full batches only).

  Momentum 1 keeps the moving statistics as they are while the layers run in training mode.
  """
  layers = batch_norm.batch_norm_layers(model)
  momenta = [layer.momentum for layer in layers]
  for layer in layers:
    layer.momentum = 1.0
  try:
    n = len(x) // BATCH * BATCH
    losses = [
      float(LOSS(y[i : i + BATCH], model(x[i : i + BATCH], training=True)))
      for i in range(0, n, BATCH)
    ]
  finally:
    for layer, momentum in zip(layers, momenta, strict=True):
      layer.momentum = momentum
  return float(np.mean(losses))


def fit_with_shipped_theta(callbacks, steps=500):
  x_train, y_train, x_test, y_test = digits()
  model = bn_cnn()
  model.compile(
    optimizer=keras_optimizer.LearnedOptimizer.from_pretrained("bn_cnn_valid"), loss=LOSS
  )
  data = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=0).repeat()
  model.fit(
    data.batch(BATCH),
    steps_per_epoch=steps // 5,
    epochs=5,
    verbose=0,
    callbacks=callbacks,
    shuffle=False,
  )
  evaluated = model.evaluate(x_test, y_test, batch_size=BATCH, verbose=0, return_dict=True)
  return evaluated["loss"], batch_statistics_loss(model, x_test, y_test)


def test_reestimated_statistics_evaluate_as_well_as_batch_statistics_and_stale_ones_do_not(caplog):
  x_train = digits()[0]
  callback = batch_norm.ReestimateBatchNorm(x_train, batch_size=BATCH, num_batches=20)
  with caplog.at_level(logging.WARNING):
    evaluated, batch_stats = fit_with_shipped_theta([callback])
  assert callback.last["layers"] == 3 and callback.last["batches"] == 20
  # Not worse than 10% above the batch-statistics loss (population statistics may do better).
  assert evaluated <= 1.1 * batch_stats, (evaluated, batch_stats)
  assert batch_stats < 0.5  # It trained.
  assert not [r for r in caplog.records if "BatchNormalization" in r.getMessage()]

  caplog.clear()
  with caplog.at_level(logging.WARNING):
    stale, stale_batch_stats = fit_with_shipped_theta([])
  assert stale > 3 * stale_batch_stats, (stale, stale_batch_stats)  # The EMA lags behind.
  warnings = [r.getMessage() for r in caplog.records if "BatchNormalization" in r.getMessage()]
  assert len(warnings) == 1 and "ReestimateBatchNorm" in warnings[0], warnings


def test_reestimate_sets_the_exact_mean_of_the_batch_statistics():
  rng = np.random.default_rng(0)
  x = rng.normal(2.0, 3.0, size=(100, 5)).astype(np.float32)  # 3 full batches and 4 left out.
  model = keras.Sequential([keras.Input((5,)), keras.layers.BatchNormalization()])
  done = batch_norm.reestimate(model, x, batch_size=32, num_batches=None)
  assert done["layers"] == 1 and done["batches"] == 3
  layer = model.layers[0]
  batches = x[:96].reshape(3, 32, 5)
  np.testing.assert_allclose(layer.moving_mean.numpy(), batches.mean(1).mean(0), rtol=1e-5)
  np.testing.assert_allclose(layer.moving_variance.numpy(), batches.var(1).mean(0), rtol=1e-5)
  assert layer.momentum == 0.99  # Restored.


@pytest.mark.parametrize("every_epoch", [False, True])
def test_the_callback_reestimates_at_the_end_and_optionally_before_each_validation(every_epoch):
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(64, 4)).astype(np.float32), rng.integers(0, 2, 64)
  model = keras.Sequential(
    [keras.Input((4,)), keras.layers.BatchNormalization(), keras.layers.Dense(2)]
  )
  model.compile(optimizer="sgd", loss=LOSS)
  calls = []
  callback = batch_norm.ReestimateBatchNorm(x, batch_size=16, every_epoch=every_epoch)
  callback._reestimate = lambda: calls.append(len(calls))
  model.fit(x, y, batch_size=16, epochs=3, validation_data=(x, y), verbose=0, callbacks=[callback])
  assert len(calls) == (3 if every_epoch else 1)
  assert getattr(model.optimizer, batch_norm.REESTIMATED_ATTRIBUTE)


def test_no_warning_for_a_model_without_batch_norm(caplog):
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
  optimizer = keras_optimizer.LearnedOptimizer.from_pretrained("bn_cnn_valid")
  model.compile(optimizer=optimizer, loss=LOSS)
  with caplog.at_level(logging.WARNING):
    model.fit(np.zeros((8, 4), np.float32), np.zeros(8, np.int32), batch_size=4, verbose=0)
  assert not [r for r in caplog.records if "BatchNormalization" in r.getMessage()]
