"""Batch norm that works at inference: re-estimating the moving statistics after training.

Keras's `BatchNormalization` normalises with the statistics of each batch in training and with
moving averages (momentum 0.99 by default: about the last 100 batches) at inference. The learned
optimizer grows the weights faster than Adam does (its steps do not shrink with the gradient), so
the statistics a batch-normed layer sees keep moving, and the moving averages lag behind them: at
the end of training they describe the network of some hundred steps ago, and `model.evaluate`
normalises with the wrong statistics (benchmarks/keras_batch_norm.py measures it on 8x8 digits).

`ReestimateBatchNorm` re-estimates them from training data: for every BatchNormalization layer it
replaces the moving mean and variance by the exact averages (not an EMA) of the batch statistics
that training normalises with, over `num_batches` training batches run through the model in
training mode (one compiled forward pass each). Nothing else changes: the weights, the
optimizer's state and the other layers' variables are left as they are.

  model.fit(x, y, batch_size=32, epochs=6, callbacks=[ReestimateBatchNorm(x, batch_size=32)])

`has_batch_norm` and `batch_norm_layers` find the layers (nested models included); the
LearnedOptimizer warns once when it trains such a layer and no ReestimateBatchNorm is attached to
its model.fit (`optimizer.py`).
"""

import time
from collections.abc import Iterable
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging

# The attribute the callback sets on the optimizer it re-estimates for (LearnedOptimizer reads it).
REESTIMATED_ATTRIBUTE = "_batch_norm_reestimated"


def batch_norm_layers(model: Any) -> list:
  """The BatchNormalization layers of `model` (nested models and layers included) that train.

  Args:
    model: a Keras layer or model.

  Returns:
    The layers whose moving statistics training in training mode updates (not frozen ones:
    Keras runs a BatchNormalization with trainable=False in inference mode).
  """
  layers = model._flatten_layers(include_self=True, recursive=True)
  return [
    layer
    for layer in layers
    if isinstance(layer, keras.layers.BatchNormalization) and layer.trainable
  ]


def has_batch_norm(model: Any) -> bool:
  """Whether `model` has a BatchNormalization layer whose moving statistics training updates.

  Args:
    model: a Keras layer or model.
  """
  return bool(batch_norm_layers(model))


def _batches(data: Any, batch_size: int) -> Iterable:
  """The inputs of each batch of `data`: an array (or tensor), a tf.data.Dataset or an iterable.

  An array is cut into full batches (a last, smaller one is left out: its statistics are those
  of another batch size), or is one batch if it is smaller than one.
  """
  if isinstance(data, (np.ndarray, tf.Tensor)) or keras.ops.is_tensor(data):
    n = int(data.shape[0])
    starts = range(0, n - batch_size + 1, batch_size) if n >= batch_size else [0]
    return (data[i : i + batch_size] for i in starts)
  return iter(data)


def _inputs(batch: Any) -> Any:
  """The model's inputs of a batch: x of an (x, y) or (x, y, sample_weight) tuple, else itself."""
  if isinstance(batch, tuple) and len(batch) in (2, 3):
    return batch[0]
  return batch


def reestimate(model: Any, data: Any, batch_size: int = 32, num_batches: int | None = 50) -> dict:
  """Sets every BatchNormalization's moving statistics to the average over training batches.

  Args:
    model: the Keras model.
    data: training inputs: an array (cut into batches of `batch_size`), a tf.data.Dataset or an
      iterable of batches (each the inputs, or an (x, y) or (x, y, sample_weight) tuple).
    batch_size: the batch size for an array; use the training batch size, since batch
      statistics depend on it.
    num_batches: how many batches to average over (None: all of `data`).

  Returns:
    {"layers": the number of layers re-estimated, "batches": batches used, "seconds": the time}.
  """
  layers = batch_norm_layers(model)
  if not layers:
    return {"layers": 0, "batches": 0, "seconds": 0.0}
  start = time.perf_counter()
  momenta = [layer.momentum for layer in layers]
  # Momentum 0: after each call a layer's moving statistics are that batch's statistics, which
  # are summed here; the forward pass is compiled once (the momentum is read when it is traced).
  forward = tf.function(lambda inputs: model(inputs, training=True), reduce_retracing=True)
  sums = [[0.0, 0.0] for _ in layers]
  count = 0
  try:
    for layer in layers:
      layer.momentum = 0.0
    for batch in _batches(data, batch_size):
      if num_batches is not None and count >= num_batches:
        break
      count += 1
      forward(_inputs(batch))
      for total, layer in zip(sums, layers, strict=True):
        total[0] += np.asarray(layer.moving_mean, np.float64)
        total[1] += np.asarray(layer.moving_variance, np.float64)
    if count:
      for (mean, variance), layer in zip(sums, layers, strict=True):
        layer.moving_mean.assign(mean / count)
        layer.moving_variance.assign(variance / count)
  finally:
    for layer, momentum in zip(layers, momenta, strict=True):
      layer.momentum = momentum
  seconds = time.perf_counter() - start
  logging.info(
    "Re-estimated the moving statistics of %d BatchNormalization layers from %d batches in %.2f s.",
    len(layers),
    count,
    seconds,
  )
  return {"layers": len(layers), "batches": count, "seconds": seconds}


class ReestimateBatchNorm(keras.callbacks.Callback):
  """Re-estimates batch norm's moving statistics from training data at the end of model.fit.

  With `every_epoch=True` also at the end of each epoch, before the epoch's validation, so that
  validation metrics use them too. See the module docstring for why and how.
  """

  def __init__(
    self,
    data: Any,
    batch_size: int = 32,
    num_batches: int | None = 50,
    every_epoch: bool = False,
  ):
    """Makes the callback.

    Args:
      data: training inputs: an array, a tf.data.Dataset or an iterable of batches (each the
        inputs or an (x, y[, sample_weight]) tuple).
      batch_size: the batch size for an array: the training batch size.
      num_batches: how many batches to average over (None: all of `data`).
      every_epoch: also re-estimate at the end of every epoch (before its validation).
    """
    super().__init__()
    self.data = data
    self.batch_size = batch_size
    self.num_batches = num_batches
    self.every_epoch = every_epoch
    self.last = None  # What the last re-estimation did (`reestimate`'s dict).
    self._in_fit = False
    self._done_this_epoch = False

  def _reestimate(self) -> None:
    self.last = reestimate(self.model, self.data, self.batch_size, self.num_batches)

  def on_train_begin(self, logs: dict | None = None) -> None:
    """Tells the model's optimizer that its batch norm statistics will be re-estimated.

    Args:
      logs: unused.
    """
    self._in_fit = True
    optimizer = getattr(self.model, "optimizer", None)
    while optimizer is not None:  # A LossScaleOptimizer wraps the one that trains.
      setattr(optimizer, REESTIMATED_ATTRIBUTE, True)
      optimizer = getattr(optimizer, "inner_optimizer", None)

  def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
    """Starts an epoch.

    Args:
      epoch: the epoch.
      logs: unused.
    """
    self._done_this_epoch = False

  def on_test_begin(self, logs: dict | None = None) -> None:
    """Re-estimates before model.fit's validation, if `every_epoch`.

    Args:
      logs: unused.
    """
    if self._in_fit and self.every_epoch and not self._done_this_epoch:
      self._reestimate()
      self._done_this_epoch = True

  def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
    """Re-estimates at the end of an epoch, if `every_epoch` (and validation did not already).

    Args:
      epoch: the epoch.
      logs: unused.
    """
    if self.every_epoch and not self._done_this_epoch:
      self._reestimate()
      self._done_this_epoch = True

  def on_train_end(self, logs: dict | None = None) -> None:
    """Re-estimates at the end of training (unless the last epoch's end just did).

    Args:
      logs: unused.
    """
    if not self._done_this_epoch:
      self._reestimate()
    self._in_fit = False
