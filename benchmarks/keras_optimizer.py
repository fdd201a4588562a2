"""model.fit speed of the Keras LearnedOptimizer against Keras's Adam and SGD on the paper CNN.

The paper's CNN (3 conv layers of 32 channels, strides 2, 2, 1, SAME, ReLU, global average pool,
linear to 10 classes) as a keras.Sequential, trained by `model.fit` at batch 128 on random
32x32x3 images and 10 random labels held in memory (numpy arrays, `shuffle=False`). Each variant
is a freshly compiled model; after `--warmup` untimed rounds, `--rounds` rounds run the variants
interleaved (adam, sgd, learned, ..., then the reverse order in the next round), each round one
`fit` of `--steps` steps. A round's rate is steps/s between the end of its first step and the end
of its last (a callback reads the clock at each batch end), so fit's per-call setup is not
counted; the whole fit call's rate is kept too. The summary is the median of the per-round ratios
learned/adam (and /sgd) with their quartiles, min and max. The same is computed from the process's
CPU time (steps per CPU-second, all threads): on a shared machine other jobs take wall-clock time
from a round unevenly but CPU time much less so.

Variants (--variants):
  adam, sgd                 keras.optimizers.Adam(1e-3), keras.optimizers.SGD(0.01);
  learned                   LearnedOptimizer at a random theta (MLPLOpt().init(0)): all variables
                            in one call of MLPLOpt.opt_fn(theta)'s update (the fast kernel);
  learned_per_variable      the same update through Keras's per-variable path (update_step on
                            one variable at a time, as under a tf.distribute strategy);
  learned_reference         MLPLOpt(implementation="reference"), the per-tensor specification;
  *_xla                     the same with model.compile(jit_compile=True) (default: off; Keras
                            turns XLA off on CPU-only machines).

Then, to say where time goes, the parts of a step are timed alone in graph mode, `--part_calls`
calls each, interleaved over `--rounds` rounds: the forward and backward pass (the loss and the
gradients of the batch, no update), and each optimizer's `apply` on fixed gradients.

  python benchmarks/keras_optimizer.py --output benchmarks/results/keras_optimizer.json
"""

import os
import platform
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files
from task_specific_learned_opt.keras import optimizer as keras_optimizer
from task_specific_learned_opt.learned_optimizers import mlp_lopt

FLAGS = flags.FLAGS
flags.DEFINE_integer("inter_op_threads", 2, "TensorFlow inter-op threads (bin/benchmark's).")
flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow intra-op threads (0: all cores).")
flags.DEFINE_integer("batch_size", 128, "Examples per step.")
flags.DEFINE_integer("steps", 30, "Steps per timed round (one fit call).")
flags.DEFINE_integer("warmup", 2, "Untimed rounds first.")
flags.DEFINE_integer("rounds", 9, "Timed rounds, the variants interleaved.")
flags.DEFINE_integer("steps_per_execution", 1, "model.compile's steps_per_execution.")
flags.DEFINE_integer("part_calls", 50, "Calls per round when timing the parts of a step alone.")
flags.DEFINE_list(
  "variants",
  [
    "adam",
    "sgd",
    "learned",
    "learned_per_variable",
    "learned_reference",
    "adam_xla",
    "sgd_xla",
    "learned_xla",
  ],
  "Which optimizers to time (see the module docstring).",
)
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


class PerVariableLearnedOptimizer(keras_optimizer.LearnedOptimizer):
  """LearnedOptimizer forced onto Keras's per-variable path (update_step per variable)."""

  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    keras.optimizers.Optimizer._backend_update_step(self, grads, trainable_variables, learning_rate)


def paper_cnn() -> keras.Model:
  """tasks/networks.py's paper_cnn() as Keras layers."""
  return keras.Sequential(
    [keras.Input((32, 32, 3))]
    + [keras.layers.Conv2D(32, 3, strides=s, padding="same", activation="relu") for s in (2, 2, 1)]
    + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
  )


def make_optimizer(name: str, theta) -> keras.optimizers.Optimizer:
  base = name.removesuffix("_xla")
  if base == "adam":
    return keras.optimizers.Adam(1e-3)
  if base == "sgd":
    return keras.optimizers.SGD(0.01)
  if base == "learned":
    return keras_optimizer.LearnedOptimizer(theta)
  if base == "learned_per_variable":
    return PerVariableLearnedOptimizer(theta)
  if base == "learned_reference":
    return keras_optimizer.LearnedOptimizer(
      theta, lopt=mlp_lopt.MLPLOpt(implementation="reference")
    )
  raise ValueError(f"Unknown variant {name!r}.")


class BatchClock(keras.callbacks.Callback):
  """perf_counter() and the process's CPU time (all its threads) at the end of every batch."""

  def __init__(self):
    super().__init__()
    self.times, self.cpu_times = [], []

  def on_train_batch_end(self, batch, logs=None):
    self.times.append(time.perf_counter())
    self.cpu_times.append(time.process_time())


def summary(values) -> dict:
  v = np.asarray(values, np.float64)
  return {
    "median": float(np.median(v)),
    "q25": float(np.quantile(v, 0.25)),
    "q75": float(np.quantile(v, 0.75)),
    "min": float(np.min(v)),
    "max": float(np.max(v)),
    "values": [float(x) for x in v],
  }


def time_fit(models, x, y) -> dict:
  per_step, per_call = {n: [] for n in models}, {n: [] for n in models}
  per_cpu_second = {n: [] for n in models}
  order = []
  for r in range(FLAGS.warmup + FLAGS.rounds):
    # Every other round in reverse order, so that a drift in the machine's load cancels.
    names = list(models) if r % 2 == 0 else list(reversed(models))
    for name in names:
      model = models[name]
      clock = BatchClock()
      start = time.perf_counter()
      model.fit(
        x, y, batch_size=FLAGS.batch_size, epochs=1, shuffle=False, verbose=0, callbacks=[clock]
      )
      end = time.perf_counter()
      if r >= FLAGS.warmup:
        # With steps_per_execution k, a batch end is seen every k steps.
        ends = len(clock.times)
        steps_timed = (ends - 1) * FLAGS.steps_per_execution
        per_step[name].append(steps_timed / (clock.times[-1] - clock.times[0]))
        per_cpu_second[name].append(steps_timed / (clock.cpu_times[-1] - clock.cpu_times[0]))
        per_call[name].append(FLAGS.steps / (end - start))
        order.append(name)
    label = "warm-up" if r < FLAGS.warmup else "round"
    rates = {n: round(v[-1], 1) for n, v in per_step.items() if v and r >= FLAGS.warmup}
    print(f"{label} {r + 1}: {rates}", flush=True)
  return {
    "per_step": per_step,
    "per_call": per_call,
    "per_cpu_second": per_cpu_second,
    "order": order,
  }


def time_parts(theta, x, y) -> dict:
  """ms per call of the forward/backward pass alone and of each optimizer's apply alone."""
  model = paper_cnn()
  images = tf.constant(x[: FLAGS.batch_size])
  labels = tf.constant(y[: FLAGS.batch_size])
  loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  variables = model.trainable_variables

  @tf.function
  def forward_backward(n):
    total = tf.constant(0.0)
    for _ in tf.range(n):
      with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(images, training=True))
      grads = tape.gradient(loss, variables)
      total += loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0
    return total

  rng = np.random.default_rng(0)
  grads = [tf.constant(0.01 * rng.normal(size=v.shape), tf.float32) for v in variables]
  calls = {"forward_backward": lambda n: forward_backward(n)}
  parts = ("adam", "sgd", "learned", "learned_per_variable", "learned_reference")
  names = [n for n in parts if n in FLAGS.variants]
  for name in names:
    opt = make_optimizer(name, theta)
    opt.build(variables)

    @tf.function
    def apply(n, opt=opt):
      for _ in tf.range(n):
        opt.apply(grads, variables)
      return opt.iterations

    calls[f"apply_{name}"] = apply
  n = tf.constant(FLAGS.part_calls)
  for call in calls.values():
    call(tf.constant(2))
  times = {name: [] for name in calls}
  for _ in range(FLAGS.rounds):
    for name, call in calls.items():
      start = time.perf_counter()
      np.asarray(call(n))
      times[name].append((time.perf_counter() - start) / FLAGS.part_calls * 1e3)
  return {name: summary(t) for name, t in times.items()}


def compiled_models(theta) -> dict:
  """The paper CNN compiled with each --variants optimizer, from the same initial weights."""
  models = {}
  for name in FLAGS.variants:
    keras.utils.set_random_seed(0)
    model = paper_cnn()
    model.compile(
      optimizer=make_optimizer(name, theta),
      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      jit_compile=name.endswith("_xla"),
      steps_per_execution=FLAGS.steps_per_execution,
    )
    models[name] = model
  return models


def speed_ratios(fit: dict) -> tuple[dict, dict]:
  """Learned/hand-designed ratios of steps per second (wall-clock, CPU time), per round."""
  ratios, cpu_ratios = {}, {}
  for num in FLAGS.variants:
    for den in ("adam", "sgd"):
      den = den + ("_xla" if num.endswith("_xla") else "")
      if num.startswith("learned") and den in fit["per_step"]:
        for out, rates in ((ratios, fit["per_step"]), (cpu_ratios, fit["per_cpu_second"])):
          pairs = zip(rates[num], rates[den], strict=True)
          out[f"{num}/{den}"] = summary([a / b for a, b in pairs])
  return ratios, cpu_ratios


def print_table(result: dict) -> None:
  """Steps per second per variant, the ratios and the parts' times."""
  print(f"{'variant':>22} {'steps/s':>8}")
  for name, s in result["steps_per_second"].items():
    print(f"{name:>22} {s['median']:8.1f}")
  for title, table in (("wall-clock", result["ratios"]), ("CPU time", result["cpu_time_ratios"])):
    print(f"ratios of steps/s ({title}), median of rounds [q25, q75]:")
    for name, s in table.items():
      print(f"{name:>30}: {s['median']:.3f} [{s['q25']:.3f}, {s['q75']:.3f}]")
  for name, s in result["parts_ms_per_call"].items():
    print(f"{name:>28}: {s['median']:.3f} ms")


def main(argv):
  del argv
  tf.get_logger().setLevel("ERROR")  # time_parts traces one function per optimizer, on purpose.
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
  load_start = os.getloadavg()
  rng = np.random.default_rng(0)
  n = FLAGS.batch_size * FLAGS.steps
  x = rng.uniform(-1.0, 1.0, size=(n, 32, 32, 3)).astype(np.float32)
  y = rng.integers(0, 10, size=n).astype(np.int32)
  theta = mlp_lopt.MLPLOpt().init(0)
  fit = time_fit(compiled_models(theta), x, y)
  parts = time_parts(theta, x, y)
  ratios, cpu_ratios = speed_ratios(fit)
  result = {
    "command": "python benchmarks/keras_optimizer.py",
    "model": "paper CNN (3x conv 32ch 3x3 strides 2,2,1 SAME ReLU, global avg pool, dense 10)",
    "data": f"random 32x32x3 images, 10 classes, {n} examples in memory, shuffle=False",
    "batch_size": FLAGS.batch_size,
    "steps_per_round": FLAGS.steps,
    "steps_per_execution": FLAGS.steps_per_execution,
    "warmup_rounds": FLAGS.warmup,
    "rounds": FLAGS.rounds,
    "theta": "MLPLOpt().init(0) (random)",
    "steps_per_second": {name: summary(v) for name, v in fit["per_step"].items()},
    "fit_call_steps_per_second": {name: summary(v) for name, v in fit["per_call"].items()},
    "steps_per_cpu_second": {name: summary(v) for name, v in fit["per_cpu_second"].items()},
    "ratios": ratios,
    "cpu_time_ratios": cpu_ratios,
    "parts_ms_per_call": parts,
    "order": fit["order"],
    "environment": {
      "tensorflow": tf.__version__,
      "keras": keras.__version__,
      "cpu": platform.processor() or platform.machine(),
      "cores": os.cpu_count(),
      "inter_op_threads": FLAGS.inter_op_threads,
      "intra_op_threads": FLAGS.intra_op_threads,
      "load_average_start": list(load_start),
      "load_average_end": list(os.getloadavg()),
    },
  }
  print_table(result)
  if FLAGS.output:
    files.write_json(FLAGS.output, result, indent=2)


if __name__ == "__main__":
  app.run(main)
