"""Per-task convolutions as batched matrix products on CPU: B tasks' CNNs, forward and backward.

The inner CNN of B tasks, each with its own weights, computed either
  - `separate`: B sets of tf.nn.conv2d ops (each task's own, side by side in one graph), or
  - `batched`: one op per layer for all B tasks, the convolution as a batched matrix product of
    the B tasks' image patches (9 strided slices of the padded input) with their [9 C, F]
    weights,
each as the gradient of a loss with respect to the B tasks' weights (the paper's CNN without
batch norm: 3x3 kernels, strides 2, 2, 1, SAME padding, ReLU), and
  - `grouped`: a grouped convolution per layer (the B tasks' images side by side on the channel
    axis, one group per task, as networks.ConvNet.apply_grouped computes them),
where TensorFlow gives a grouped convolution's gradient on CPU: with oneDNN's kernels (its
default on x86), not with Eigen's (TF_ENABLE_ONEDNN_OPTS=0), which answer that grouped gradients
are not supported on CPU (`grouped_filter_gradient`: the error, or "ok"; `onednn`: the setting).
Reports the median seconds of each over the timed calls, their ratios to `separate`, and the
largest difference of each gradient from `separate`'s.

  python benchmarks/batched_convolution.py --tasks 8 --output \
    benchmarks/results/batched_convolution_cpu.json
"""

import json
import os
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files

FLAGS = flags.FLAGS
flags.DEFINE_integer("tasks", 8, "B, the tasks.")
flags.DEFINE_integer("batch_size", 32, "Images per task's batch.")
flags.DEFINE_integer("image_size", 32, "Image height and width.")
flags.DEFINE_integer("channels", 16, "Channels of every conv layer.")
flags.DEFINE_integer("repeats", 20, "Timed calls (the median is kept).")
flags.DEFINE_integer("intra_op_threads", 1, "TensorFlow intra-op threads.")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")

STRIDES = (2, 2, 1)


def _separate_loss(x: tf.Tensor, weights: list[tf.Tensor]) -> tf.Tensor:
  for w, s in zip(weights, STRIDES, strict=True):
    x = tf.nn.relu(tf.nn.conv2d(x, w, s, "SAME"))
  return tf.reduce_mean(tf.square(x))


def _batched_conv(x: tf.Tensor, w: tf.Tensor, stride: int) -> tf.Tensor:
  """SAME 3x3 convolution of x [B, N, H, W, C] with w [B, 3, 3, C, F], as a batched matmul."""
  b, _, h, _, c = x.shape
  out = (h + stride - 1) // stride
  pad = max((out - 1) * stride + 3 - h, 0)
  x = tf.pad(x, [[0, 0], [0, 0], [pad // 2, pad - pad // 2], [pad // 2, pad - pad // 2], [0, 0]])
  end = stride * (out - 1) + 1
  patches = tf.concat(
    [x[:, :, i : i + end : stride, j : j + end : stride, :] for i in range(3) for j in range(3)],
    axis=-1,
  )
  return tf.einsum("bnhwk,bkf->bnhwf", patches, tf.reshape(w, [b, 9 * c, -1]))


def _grouped_filter_gradient(images: list[tf.Tensor], weights: list[list[tf.Tensor]]) -> str:
  """ "ok", or the error of the gradient of a grouped convolution (one group per task)."""
  x = tf.concat(images, axis=-1)  # [N, H, W, B * 3]: task b's images in group b.
  w = tf.concat([task_weights[0] for task_weights in weights], axis=-1)  # [3, 3, 3, B * F].
  try:
    with tf.GradientTape() as tape:
      tape.watch(w)
      loss = tf.reduce_sum(tf.nn.conv2d(x, w, STRIDES[0], "SAME"))
    tape.gradient(loss, w).numpy()
  except tf.errors.OpError as e:
    return f"{type(e).__name__}: {e.message.splitlines()[0]}"
  return "ok"


def _median_seconds(call) -> float:
  """The median seconds of FLAGS.repeats calls of `call`, after one untimed call (the trace)."""
  call()
  times = []
  for _ in range(FLAGS.repeats):
    start = time.time()
    tf.nest.map_structure(lambda t: t.numpy(), call())
    times.append(time.time() - start)
  return float(np.median(times))


def _grouped_loss(x: tf.Tensor, weights: list[tf.Tensor], num_tasks: int) -> tf.Tensor:
  """The B tasks' summed losses, x [N, H, W, B * 3] and weights [3, 3, C, B * F] grouped."""
  for w, s in zip(weights, STRIDES, strict=True):
    x = tf.nn.relu(tf.nn.conv2d(x, w, s, "SAME"))
  x = tf.reshape(x, [*x.shape[:3], num_tasks, -1])
  return tf.reduce_sum(tf.reduce_mean(tf.square(x), axis=[0, 1, 2, 4]))


def main(argv):
  del argv
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
  tf.config.threading.set_inter_op_parallelism_threads(2)
  b, n, size, f = FLAGS.tasks, FLAGS.batch_size, FLAGS.image_size, FLAGS.channels
  rng = np.random.default_rng(0)
  images = [tf.constant(rng.normal(size=[n, size, size, 3]), tf.float32) for _ in range(b)]
  weights = [
    [tf.constant(0.1 * rng.normal(size=[3, 3, cin, f]), tf.float32) for cin in (3, f, f)]
    for _ in range(b)
  ]

  @tf.function
  def separate(images, weights):
    grads = []
    for x, w in zip(images, weights, strict=True):
      with tf.GradientTape() as tape:
        tape.watch(w)
        loss = _separate_loss(x, w)
      grads.append(tape.gradient(loss, w))
    return grads

  @tf.function
  def batched(images, weights):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      x = images
      for w, s in zip(weights, STRIDES, strict=True):
        x = tf.nn.relu(_batched_conv(x, w, s))
      loss = tf.reduce_sum(tf.reduce_mean(tf.square(x), axis=[1, 2, 3, 4]))
    return tape.gradient(loss, weights)

  @tf.function
  def grouped(images, weights):
    with tf.GradientTape() as tape:
      tape.watch(weights)
      loss = _grouped_loss(images, weights, b)
    return tape.gradient(loss, weights)

  stacked_images = tf.stack(images)
  stacked_weights = [tf.stack([w[layer] for w in weights]) for layer in range(3)]
  results = {
    "tasks": b,
    "batch_size": n,
    "image_size": size,
    "channels": f,
    "intra_op_threads": FLAGS.intra_op_threads,
    "repeats": FLAGS.repeats,
    "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
  }
  calls = {
    "separate": lambda: separate(images, weights),
    "batched": lambda: batched(stacked_images, stacked_weights),
  }
  for name, call in calls.items():
    results[f"{name}_seconds"] = _median_seconds(call)
  results["batched_over_separate_time"] = results["batched_seconds"] / results["separate_seconds"]
  one, together = calls["separate"](), calls["batched"]()
  results["max_gradient_difference"] = max(
    float(tf.reduce_max(tf.abs(one[t][layer] - together[layer][t])))
    for t in range(b)
    for layer in range(3)
  )
  results["grouped_filter_gradient"] = _grouped_filter_gradient(images, weights)
  if results["grouped_filter_gradient"] == "ok":
    grouped_images = tf.concat(images, axis=-1)
    grouped_weights = [tf.concat([w[layer] for w in weights], axis=-1) for layer in range(3)]
    results["grouped_seconds"] = _median_seconds(lambda: grouped(grouped_images, grouped_weights))
    results["grouped_over_separate_time"] = results["grouped_seconds"] / results["separate_seconds"]
    f, grads = FLAGS.channels, grouped(grouped_images, grouped_weights)
    results["grouped_max_gradient_difference"] = max(
      float(tf.reduce_max(tf.abs(one[t][layer] - grads[layer][..., t * f : (t + 1) * f])))
      for t in range(b)
      for layer in range(3)
    )
  print(json.dumps(results))
  if FLAGS.output:
    files.write_json(FLAGS.output, results, indent=2)


if __name__ == "__main__":
  app.run(main)
