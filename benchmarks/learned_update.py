"""Time of the optimizer update alone, per step, on the paper CNN's 8 parameter tensors.

`bin/benchmark` times whole training steps, where the update is a few percent of the step and the
machine's load moves the ratios by several percent. This isolates the update: each optimizer's
`update` runs `--num_updates` times inside one graph-mode tf.while_loop on fixed gradients (no
forward or backward pass), rounds interleaved, and the median microseconds per update are
reported. Variants of the learned update show what each part of `MLPLOpt.opt_fn` (the kernel in
learned_optimizers/fast_update.py) is worth; each patches that module while its graph is traced:

  adam               the hand-designed baseline;
  learned            MLPLOpt.opt_fn, as used everywhere;
  learned_ungrouped  the same with every tensor in its own pipeline
                     (fast_update.GROUP_MAX_ELEMENTS = 0);
  learned_relu_op    the same with the ReLU as an op of its own after the hidden layer's matmul
                     (what `learned` does when TensorFlow runs ops on one intra-op thread);
  learned_relu_fused the same with the ReLU fused into the matmul kernel (what `learned` does
                     otherwise);
  reference          MLPLOpt.reference_opt_fn, the update written out per tensor.

  python benchmarks/learned_update.py --inter_op_threads 1 --intra_op_threads 1  # CPU time
  python benchmarks/learned_update.py                   # the thread settings of bin/benchmark

Writes JSON with --output.
"""

import contextlib
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files
from task_specific_learned_opt.learned_optimizers import fast_update, mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import networks, random_data

FLAGS = flags.FLAGS
flags.DEFINE_integer("inter_op_threads", 2, "TensorFlow inter-op threads.")
flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow intra-op threads (0: all cores).")
flags.DEFINE_integer("num_updates", 2000, "Updates per timed call.")
flags.DEFINE_integer("rounds", 9, "Timed rounds, the variants interleaved.")
flags.DEFINE_list(
  "variants",
  ["adam", "learned", "learned_ungrouped", "learned_relu_op", "learned_relu_fused", "reference"],
  "Which updates to time.",
)
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


@contextlib.contextmanager
def _patched(name, value):
  """fast_update.<name> set to `value` inside the block."""
  saved = getattr(fast_update, name)
  setattr(fast_update, name, value)
  try:
    yield
  finally:
    setattr(fast_update, name, saved)


def _variants(lopt, theta) -> dict:
  """{name: (optimizer, context its graph is traced in)} of every timed update."""
  return {
    "adam": (adam.Adam(), contextlib.nullcontext),
    "learned": (lopt.opt_fn(theta), contextlib.nullcontext),
    "learned_ungrouped": (lopt.opt_fn(theta), lambda: _patched("GROUP_MAX_ELEMENTS", 0)),
    "learned_relu_op": (
      lopt.opt_fn(theta),
      lambda: _patched("_relu_matmul", fast_update._relu_matmul_unfused),
    ),
    "learned_relu_fused": (
      lopt.opt_fn(theta),
      lambda: _patched("_relu_matmul", fast_update._relu_matmul_fused),
    ),
    "reference": (lopt.reference_opt_fn(theta), contextlib.nullcontext),
  }


def main(argv):
  del argv
  # Before any op runs: TensorFlow fixes its thread pools when its runtime starts.
  tf.config.threading.set_inter_op_parallelism_threads(FLAGS.inter_op_threads)
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
  task = random_data.RandomDataTask(networks.paper_cnn())  # 32 channels, 32x32x3 images.
  params = tf.nest.flatten(task.init_params(0))
  rng = np.random.default_rng(0)
  grads = [tf.constant(0.01 * rng.normal(size=p.shape), tf.float32) for p in params]
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)

  variants = _variants(lopt, theta)
  calls = {}
  for name in FLAGS.variants:
    opt, context = variants[name]

    @tf.function(autograph=False)
    def run(state, n, opt=opt):
      def body(i, state):
        return i + 1, opt.update(state, grads)

      return tf.while_loop(lambda i, _: i < n, body, (0, state), parallel_iterations=2)[1]

    state = opt.init(params)
    with context():  # Variants differ only while their graph is traced.
      run(state, tf.constant(10))
    calls[name] = lambda run=run, state=state: tf.nest.map_structure(
      lambda x: x.numpy(), run(state, tf.constant(FLAGS.num_updates))
    )
  times = {name: [] for name in calls}
  for r in range(FLAGS.rounds):
    for name, call in calls.items():
      start = time.perf_counter()
      call()
      times[name].append((time.perf_counter() - start) / FLAGS.num_updates * 1e6)
    print(f"round {r + 1}/{FLAGS.rounds}", flush=True)
  result = {
    "threads": {"inter_op": FLAGS.inter_op_threads, "intra_op": FLAGS.intra_op_threads},
    "num_params": int(sum(int(tf.size(p)) for p in params)),
    "microseconds_per_update": {
      name: {"median": float(np.median(t)), "min": float(np.min(t)), "values": t}
      for name, t in times.items()
    },
  }
  adam_median = result["microseconds_per_update"].get("adam", {}).get("median")
  for name, t in result["microseconds_per_update"].items():
    extra = f"  ({t['median'] - adam_median:+.0f} us vs adam)" if adam_median else ""
    print(f"{name:>18}: {t['median']:7.1f} us/update median, {t['min']:7.1f} min{extra}")
  if FLAGS.output:
    files.write_json(FLAGS.output, result, indent=2)


if __name__ == "__main__":
  app.run(main)
