"""How close the inner CNN's convolutions run to what this CPU's matrix products reach.

For each conv layer of the paper's CNN (3x3 kernels, SAME padding, the given strides and
channels; the quickstart's size by default), the three kernels a truncation sample runs (the
forward convolution, the gradient with respect to its input and with respect to its filter) are
timed on one thread, each in a `tf.while_loop` of --iterations calls inside one compiled
function (so the time is the kernel's, not a Python call's), and compared with
  - `gemm`: one matrix product of the shape the convolution reduces to, [N Ho Wo, 9 C] @ [9 C, F]
    (the patches already formed), the same multiply-adds;
  - `square`: a [512, 512] @ [512, 512] matrix product, what one core of this machine reaches
    on a large, regular product.
All four do 2 N Ho Wo 9 C F floating-point operations per call (the square one its own).
Reports, per layer and kernel, the median microseconds per call over --rounds rounds (the
kernels interleaved in each round) and GFLOP/s, and each kernel's rate as a fraction of the
layer's `gemm` and of `square`.

  python benchmarks/convolution_rate.py --output benchmarks/results/convolution_rate_quickstart.json
  python benchmarks/convolution_rate.py --batch_size 128 --channels 32 \
    --output benchmarks/results/convolution_rate_paper.json
"""

import os
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 32, "Images per batch (the quickstart's).")
flags.DEFINE_integer("image_size", 32, "Image height and width.")
flags.DEFINE_integer("in_channels", 3, "Channels of the images.")
flags.DEFINE_integer("channels", 16, "Channels of every conv layer (the quickstart's).")
flags.DEFINE_list("strides", ["2", "2", "1"], "The conv layers' strides (Sec. 4.2).")
flags.DEFINE_integer("iterations", 100, "Calls per timed loop.")
flags.DEFINE_integer("rounds", 5, "Timed rounds (the median is kept).")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")

KERNELS = ("forward", "input_gradient", "filter_gradient", "gemm")
SQUARE = 512


def _loop(step, carry: tf.Tensor, iterations: int):
  """A compiled function that runs `step` `iterations` times, each call reading the last one's
  carry (a tiny tensor nudged by one element of the result), so no call can be skipped or
  hoisted out of the loop."""

  @tf.function
  def run() -> tf.Tensor:
    def body(i: tf.Tensor, c: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
      out = step(c)
      return i + 1, c + 1e-30 * tf.reshape(out, [-1])[0]

    return tf.while_loop(lambda i, _: i < iterations, body, (tf.constant(0), carry))[1]

  return run


def layer_shapes() -> list[dict]:
  """The conv layers' input size, input channels, output size and stride."""
  shapes, size, channels = [], FLAGS.image_size, FLAGS.in_channels
  for stride in (int(s) for s in FLAGS.strides):
    out = (size + stride - 1) // stride
    shapes.append({"size": size, "in_channels": channels, "out_size": out, "stride": stride})
    size, channels = out, FLAGS.channels
  return shapes


def layer_loops(shape: dict, iterations: int) -> dict:
  """The four timed loops of one layer (KERNELS), each a compiled function."""
  rng = np.random.default_rng(0)
  n, c, f, s = FLAGS.batch_size, shape["in_channels"], FLAGS.channels, shape["stride"]
  x = tf.constant(rng.normal(size=[n, shape["size"], shape["size"], c]), tf.float32)
  w = tf.constant(rng.normal(size=[3, 3, c, f]), tf.float32)
  dy = tf.constant(rng.normal(size=[n, shape["out_size"], shape["out_size"], f]), tf.float32)
  patches = tf.constant(rng.normal(size=[n * shape["out_size"] ** 2, 9 * c]), tf.float32)
  return {
    "forward": _loop(lambda w: tf.nn.conv2d(x, w, s, "SAME"), w, iterations),
    "input_gradient": _loop(
      lambda w: tf.nn.conv2d_transpose(dy, w, x.shape, s, "SAME"), w, iterations
    ),
    "filter_gradient": _loop(
      lambda d: tf.compat.v1.nn.conv2d_backprop_filter(x, w.shape, d, [1, s, s, 1], "SAME"),
      dy,
      iterations,
    ),
    "gemm": _loop(lambda w: tf.matmul(patches, tf.reshape(w, [9 * c, f])), w, iterations),
  }


def main(argv: list[str]) -> None:
  del argv
  tf.get_logger().setLevel("ERROR")  # Each loop is its own function: traced once, by design.
  tf.config.threading.set_inter_op_parallelism_threads(1)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  rng = np.random.default_rng(1)
  square = tf.constant(rng.normal(size=[SQUARE, SQUARE]) / SQUARE, tf.float32)
  shapes = layer_shapes()
  loops = {
    "square": _loop(lambda a: tf.matmul(a, square), square, FLAGS.iterations),
    **{
      f"layer{i + 1}/{kernel}": fn
      for i, shape in enumerate(shapes)
      for kernel, fn in layer_loops(shape, FLAGS.iterations).items()
    },
  }
  for fn in loops.values():  # Traces and warms each loop.
    fn().numpy()
  seconds = {name: [] for name in loops}
  for _ in range(FLAGS.rounds):
    for name, fn in loops.items():
      start = time.perf_counter()
      fn().numpy()
      seconds[name].append((time.perf_counter() - start) / FLAGS.iterations)
  median = {name: float(np.median(s)) for name, s in seconds.items()}
  square_rate = 2 * SQUARE**3 / median["square"] / 1e9
  layers = []
  for i, shape in enumerate(shapes):
    flops = (
      2 * FLAGS.batch_size * shape["out_size"] ** 2 * 9 * shape["in_channels"] * FLAGS.channels
    )
    per_call = {k: median[f"layer{i + 1}/{k}"] for k in KERNELS}
    rates = {k: flops / per_call[k] / 1e9 for k in KERNELS}
    layers.append(
      {
        **shape,
        "flops_per_call": flops,
        "microseconds": {k: 1e6 * per_call[k] for k in KERNELS},
        "gflops_per_second": {k: float(r) for k, r in rates.items()},
        "fraction_of_gemm": {k: float(rates[k] / rates["gemm"]) for k in KERNELS},
        "fraction_of_square": {k: float(rates[k] / square_rate) for k in KERNELS},
      }
    )
  print(f"square [{SQUARE}]^3 matmul: {square_rate:.1f} GFLOP/s (one thread)")
  print(f"{'layer':<6} {'kernel':<16} {'us':>8} {'GFLOP/s':>8} {'/gemm':>6} {'/square':>7}")
  for i, layer in enumerate(layers):
    for k in KERNELS:
      print(
        f"{i + 1:<6} {k:<16} {layer['microseconds'][k]:8.1f} "
        f"{layer['gflops_per_second'][k]:8.1f} {layer['fraction_of_gemm'][k]:6.2f} "
        f"{layer['fraction_of_square'][k]:7.2f}"
      )
  if FLAGS.output:
    files.write_json(
      FLAGS.output,
      {
        "batch_size": FLAGS.batch_size,
        "image_size": FLAGS.image_size,
        "channels": FLAGS.channels,
        "iterations": FLAGS.iterations,
        "rounds": FLAGS.rounds,
        "square_gflops_per_second": float(square_rate),
        "square_seconds": seconds["square"],
        "layers": layers,
        "seconds": seconds,
        "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "load_average": list(os.getloadavg()),
        "tensorflow": tf.__version__,
      },
    )


if __name__ == "__main__":
  app.run(main)
