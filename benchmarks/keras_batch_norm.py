"""Batch norm under a learned optimizer in Keras: what stale moving statistics cost, what fixes it.

A 3-layer batch-normed CNN (16 channels, strides 2, 2, 1, the shipped thetas' family as Keras
layers) is trained by `model.fit` for `--steps` steps at batch 32 on scikit-learn's 8x8 digits
(1,400 training and 397 test images, in [-1, 1]), once per optimizer: each shipped batch-normed
theta (`LearnedOptimizer.from_pretrained`) and Keras's Adam at `--adam_learning_rate`. For each
trained model the test loss and accuracy are measured three ways:

  moving       `model.evaluate` with the moving statistics as training left them;
  batch        each test batch normalised with its own statistics (training-mode batch norm);
  reestimated  `model.evaluate` after `batch_norm.reestimate` over `--reestimate_batches`
               training batches (at most the 43 full batches of the 1,400 images), what
               `ReestimateBatchNorm` does at the end of `fit`.

Then the cost of re-estimating, as a ratio within one run (a shared machine's speed varies): the
time of `reestimate` over n batches (n in `--cost_batches`) against the time of n training steps
of `model.fit` with the learned optimizer on the same network and data, median of `--rounds`
interleaved rounds, on the digits network and on the same CNN on 32x32x3 images (the quickstart's
size, random data).

  python benchmarks/keras_batch_norm.py --output benchmarks/results/keras_batch_norm.json
"""

import os
import platform
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags
from sklearn import datasets

from task_specific_learned_opt import files
from task_specific_learned_opt.keras import batch_norm
from task_specific_learned_opt.keras import optimizer as keras_optimizer

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 500, "model.fit steps per trained model.")
flags.DEFINE_list("thetas", ["bn_cnn_valid", "bn_cnn_train"], "Shipped thetas, by name.")
flags.DEFINE_float("adam_learning_rate", 1e-2, "Keras Adam's learning rate.")
flags.DEFINE_integer("reestimate_batches", 50, "Batches ReestimateBatchNorm averages (default 50).")
flags.DEFINE_list("cost_batches", ["20", "50", "100"], "Batch counts whose cost is timed.")
flags.DEFINE_integer("rounds", 3, "Interleaved timing rounds.")
flags.DEFINE_string("output", None, "Where the JSON goes (default: printed only).")

BATCH = 32
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def digits():
  """scikit-learn's 8x8 digits in [-1, 1]: 1,400 training and 397 test images."""
  data = datasets.load_digits()
  x = (data.images / 8.0 - 1.0).astype(np.float32)[..., None]
  y = data.target.astype(np.int32)
  order = np.random.default_rng(0).permutation(len(x))
  x, y = x[order], y[order]
  return x[:1400], y[:1400], x[1400:], y[1400:]


def bn_cnn(input_shape, seed=0):
  """3 conv layers (strides 2, 2, 1) of 16 channels, batch norm, ReLU, pool, linear to 10."""
  keras.utils.set_random_seed(seed)
  layers = [keras.Input(input_shape)]
  for stride in (2, 2, 1):
    layers += [
      keras.layers.Conv2D(16, 3, strides=stride, padding="same"),
      keras.layers.BatchNormalization(epsilon=1e-5),
      keras.layers.ReLU(),
    ]
  return keras.Sequential(layers + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])


def make_optimizer(name):
  if name == "adam":
    return keras.optimizers.Adam(FLAGS.adam_learning_rate)
  return keras_optimizer.LearnedOptimizer.from_pretrained(name)


def batch_statistics(model, x, y):
  """Test loss and accuracy with each full test batch normalised by its own statistics."""
  layers = batch_norm.batch_norm_layers(model)
  momenta = [layer.momentum for layer in layers]
  for layer in layers:
    layer.momentum = 1.0  # Training-mode batch norm that leaves the moving statistics as they are.
  losses, correct = [], 0
  n = len(x) // BATCH * BATCH
  try:
    for i in range(0, n, BATCH):
      logits = model(x[i : i + BATCH], training=True)
      losses.append(float(LOSS(y[i : i + BATCH], logits)))
      correct += int(np.sum(np.argmax(logits, -1) == y[i : i + BATCH]))
  finally:
    for layer, momentum in zip(layers, momenta, strict=True):
      layer.momentum = momentum
  return {"loss": float(np.mean(losses)), "accuracy": correct / n}


def evaluate(model, x, y):
  found = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
  return {"loss": float(found["loss"]), "accuracy": float(found["accuracy"])}


def train(name, x_train, y_train, steps):
  model = bn_cnn(x_train.shape[1:])
  model.compile(optimizer=make_optimizer(name), loss=LOSS, metrics=["accuracy"])
  data = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(1400, seed=0).repeat()
  model.fit(data.batch(BATCH), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
  return model


def accuracy_of_stale_statistics():
  x_train, y_train, x_test, y_test = digits()
  found = {}
  for name in FLAGS.thetas + ["adam"]:
    start = time.perf_counter()
    model = train(name, x_train, y_train, FLAGS.steps)
    row = {"moving": evaluate(model, x_test, y_test)}
    row["batch"] = batch_statistics(model, x_test, y_test)
    done = batch_norm.reestimate(model, x_train, BATCH, FLAGS.reestimate_batches)
    row["reestimated"] = evaluate(model, x_test, y_test)
    row["reestimate_batches"] = done["batches"]
    row["seconds"] = time.perf_counter() - start
    found[name] = row
    print(name, {k: v for k, v in row.items() if isinstance(v, dict)})
  return found


class _StepClock(keras.callbacks.Callback):
  """The time from the end of the first batch to the end of the last (fit's set-up left out)."""

  def on_train_batch_end(self, batch, logs=None):
    now = time.perf_counter()
    if batch == 0:
      self.start = now
    self.end, self.batches = now, batch


def cost_of_reestimation(name, shape):
  """{n: median over rounds of reestimate(n batches) / (n training steps)}, and the times."""
  rng = np.random.default_rng(0)
  if shape == "digits":
    x, y = digits()[:2]
  else:
    x = rng.uniform(-1, 1, size=(1400, 32, 32, 3)).astype(np.float32)
    y = rng.integers(0, 10, 1400).astype(np.int32)
  model = train(FLAGS.thetas[0], x, y, 5)  # Built, compiled and traced.
  counts = [int(n) for n in FLAGS.cost_batches]
  repeats = -(-(max(counts) + 1) * BATCH // len(x))  # Full batches for the largest count.
  x, y = np.concatenate([x] * repeats), np.concatenate([y] * repeats)
  rows = {n: {"reestimate_seconds": [], "step_seconds": []} for n in counts}
  for _ in range(FLAGS.rounds):
    for n in counts:
      clock = _StepClock()
      steps = n + 1  # The first step's end starts the clock.
      model.fit(
        x, y, batch_size=BATCH, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[clock]
      )
      rows[n]["step_seconds"].append((clock.end - clock.start) / clock.batches)
      done = batch_norm.reestimate(model, x, BATCH, n)
      assert done["batches"] == n, done
      rows[n]["reestimate_seconds"].append(done["seconds"])
  for n, row in rows.items():
    ratios = [
      r / (n * s) for r, s in zip(row["reestimate_seconds"], row["step_seconds"], strict=True)
    ]
    row["ratio_to_training_steps"] = float(np.median(ratios))
    row["median_reestimate_seconds"] = float(np.median(row["reestimate_seconds"]))
    print(
      name, n, "batches:", row["median_reestimate_seconds"], "s,", row["ratio_to_training_steps"]
    )
  return {str(n): row for n, row in rows.items()}


def main(argv):
  del argv
  found = {
    "settings": {
      "steps": FLAGS.steps,
      "batch_size": BATCH,
      "adam_learning_rate": FLAGS.adam_learning_rate,
      "reestimate_batches": FLAGS.reestimate_batches,
      "rounds": FLAGS.rounds,
      "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
      "tensorflow": tf.__version__,
      "keras": keras.__version__,
    },
    "digits": accuracy_of_stale_statistics(),
    "cost": {
      "digits_8x8": cost_of_reestimation("digits", "digits"),
      "images_32x32x3": cost_of_reestimation("images", (32, 32, 3)),
    },
  }
  if FLAGS.output:
    files.write_json(FLAGS.output, found)
    print("Wrote", FLAGS.output)


if __name__ == "__main__":
  app.run(main)
