"""Classifier loss and accuracy on worked numbers: a linear model with known logits.

The model is MLP(hidden_sizes=()) on 1x1x2 images: logits = x @ W + b with W = [[1, 0, 0],
[0, 1, 0]] and b = [0, 0, 0.5], i.e. logits (x0, x1, 0.5). The batch's pixels are uint8 values
whose scaled floats (p / 127.5 - 1) are exact enough to be read off: 0 -> -1, 51 -> -0.6,
102 -> -0.2, 153 -> 0.2, 204 -> 0.6, 255 -> 1.

The prediction is tf.argmax of the logits, which returns the smallest index on ties (documented
by tf.math.argmax), so an example whose classes 0 and 1 tie counts as predicting class 0.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.tasks import image_task, networks, random_data

PARAMS = {
  "layer0": {
    "w": tf.constant([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
    "b": tf.constant([0.0, 0.0, 0.5]),
  }
}
# (pixels, label): logits -> prediction, correct?
EXAMPLES = [
  ((255, 0), 0),  # (1, -1, .5) -> 0, correct.
  ((0, 204), 2),  # (-1, .6, .5) -> 1, wrong.
  ((153, 102), 2),  # (.2, -.2, .5) -> 2, correct.
  ((204, 204), 0),  # (.6, .6, .5): 0 and 1 tie -> 0 (smallest index), correct.
  ((0, 0), 0),  # (-1, -1, .5) -> 2, wrong.
  ((51, 255), 1),  # (-.6, 1, .5) -> 1, correct.
  ((102, 51), 1),  # (-.2, -.6, .5) -> 2, wrong.
]
ACCURACY = 4 / 7  # Were ties broken towards the larger index, it would be 3 / 7.


def _uint8_images():
  return np.array([pixels for pixels, _ in EXAMPLES], np.uint8).reshape(-1, 1, 1, 2)


def _labels():
  return np.array([label for _, label in EXAMPLES], np.int32)


def _batch():
  return {"image": image_task.to_float(_uint8_images()), "label": tf.constant(_labels())}


def _model():
  return networks.MLP(hidden_sizes=(), num_classes=3)


def _image_task():
  splits = {s: (_uint8_images(), _labels()) for s in ("train", "valid", "test")}
  return image_task.ImageTask(_model(), splits, batch_size=len(EXAMPLES))


def _random_data_task():
  return random_data.RandomDataTask(_model(), image_shape=(1, 1, 2), num_classes=3)


def test_the_model_gives_the_logits_worked_out_by_hand():
  logits = _model().apply(PARAMS, _batch()["image"]).numpy()
  x = _uint8_images().reshape(-1, 2) / 127.5 - 1.0
  np.testing.assert_allclose(logits, np.c_[x, np.full(len(x), 0.5)], atol=1e-6)
  np.testing.assert_allclose(logits[:3, :2], [[1, -1], [-1, 0.6], [0.2, -0.2]], atol=1e-6)
  assert logits[3, 0] == logits[3, 1] > logits[3, 2]  # An exact tie, above class 2.


@pytest.mark.parametrize("make_task", [_image_task, _random_data_task])
def test_accuracy_is_the_fraction_of_correct_argmax_predictions(make_task):
  task = make_task()
  accuracy = task.accuracy(PARAMS, _batch())
  assert accuracy.dtype == tf.float32 and accuracy.shape == ()
  assert float(accuracy) == pytest.approx(ACCURACY, rel=1e-6)
  # Every label the prediction of its example: all correct. Every label one class off: none.
  predictions = np.array([0, 1, 2, 0, 2, 1, 2], np.int32)
  assert float(task.accuracy(PARAMS, dict(_batch(), label=predictions))) == 1.0
  assert float(task.accuracy(PARAMS, dict(_batch(), label=(predictions + 1) % 3))) == 0.0


@pytest.mark.parametrize("make_task", [_image_task, _random_data_task])
def test_loss_is_the_mean_softmax_cross_entropy(make_task):
  logits = _model().apply(PARAMS, _batch()["image"]).numpy().astype(np.float64)
  log_softmax = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
  expected = -np.mean(log_softmax[np.arange(len(EXAMPLES)), _labels()])
  assert float(make_task().loss(PARAMS, _batch())) == pytest.approx(expected, rel=1e-6)


def test_accuracy_on_the_tasks_own_batch_of_the_stored_images():
  task = _image_task()
  batch = next(iter(task.dataset("test")))  # Unshuffled: the stored order, one batch of 7.
  np.testing.assert_array_equal(batch["label"], _labels())
  assert float(task.accuracy(PARAMS, batch)) == pytest.approx(ACCURACY, rel=1e-6)
