"""Peak memory and time of one outer-gradient sample (antithetic truncation) on the paper's CNN.

Each measurement runs in a fresh process (peak RSS is per process), on a task of the generated
family with the paper's CNN and batch 128 (or, with --gin_file, a task of the experiment's
family and its learned optimizer):
  - `sample`: one truncation_sample of K steps (g_rp by backprop through both unrolls, g_es),
    with segment recomputation (--recompute, default) or plain backpropagation;
  - `plain`: K steps of plain (not differentiated) learned-optimizer training, the baseline of
    the time ratio.

  python benchmarks/truncation_sample.py --num_steps 1000              # sample vs plain, ratios
  python benchmarks/truncation_sample.py --num_steps 10000 --modes sample
  python benchmarks/truncation_sample.py --gin_file gin/quickstart.gin --num_steps 50 \
    --modes plain,sample_norecompute

Reports peak RSS (MiB) over the process's resting RSS after setup, seconds per inner step, and
the ratio (sample s/step) / (plain s/step); writes JSON with --output.
"""

import json
import resource
import subprocess
import sys
import time

import gin
import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import (
  files,
  gin_config,  # noqa: F401
  inner_training,  # noqa: F401
)
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import outer_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import antithetic, recomputation, truncated_unroll
from task_specific_learned_opt.tasks import families, generated

FLAGS = flags.FLAGS
flags.DEFINE_multi_integer("num_steps", [1000], "Truncation lengths K to measure.")
flags.DEFINE_list("modes", ["plain", "sample"], "Which of plain, sample, sample_norecompute.")
flags.DEFINE_integer("inter_op_threads", 2, "TensorFlow inter-op threads.")
flags.DEFINE_integer("intra_op_threads", 0, "TensorFlow intra-op threads (0: all cores).")
flags.DEFINE_float("segment_scale", 0.2, "segment_lengths_for.scale.")
flags.DEFINE_integer("levels", 2, "segment_lengths_for.levels: levels of recomputation.")
flags.DEFINE_multi_string("gin_file", [], "An experiment whose family and lopt are measured.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings for --gin_file.")
flags.DEFINE_integer("repeats", 1, "Timed calls per measurement (the median is kept).")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")
flags.DEFINE_string("child", None, "Internal: run one measurement MODE:K in this process.")


def _peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mib() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def measure(
  mode: str, num_steps: int, inter_op_threads: int, segment_scale: float, levels: int
) -> dict:
  """Runs one measurement in this process and returns its numbers."""
  tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)
  tf.config.threading.set_intra_op_parallelism_threads(FLAGS.intra_op_threads)
  if FLAGS.gin_file:
    gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin.bind_parameter("segment_lengths_for.scale", segment_scale)
  gin.bind_parameter("segment_lengths_for.levels", levels)

  if FLAGS.gin_file:
    setup = outer_training.outer_training()
    task, lopt = setup.family.sample(0), setup.lopt
  else:
    task = families.ClassSubsetFamily(source=generated.GeneratedClassSource()).sample(0)
    lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)
  state = lopt.opt_fn(theta).init(task.init_params(0))

  if mode == "plain":

    @tf.function(autograph=False)
    def run(theta, state, k):
      return inner_training.unroll(task, lopt.opt_fn(theta), state, k, [1, 2])[1]

  else:
    recompute = mode == "sample"

    @tf.function(autograph=False)
    def run(theta, state, k):
      unroll = truncated_unroll.Unroll(task, lopt, "train", recompute)
      sample = antithetic.truncation_sample(unroll, theta, state, k, [1, 2], [3, 4], 0.1)
      # Fetch g_rp, or the graph prunes the backward pass away.
      return sample.loss_plus + 0.0 * tf.linalg.global_norm(tf.nest.flatten(sample.g_rp))

  run(theta, state, tf.constant(2)).numpy()  # Trace and warm up.
  resting = _current_rss_mib()
  times = []
  for _ in range(FLAGS.repeats):
    start = time.time()
    run(theta, state, tf.constant(num_steps)).numpy()
    times.append(time.time() - start)
  seconds = float(np.median(times))
  return {
    "gin_file": FLAGS.gin_file,
    "gin_bindings": FLAGS.gin_bindings,
    "repeats": FLAGS.repeats,
    "threads": {"inter_op": inter_op_threads, "intra_op": FLAGS.intra_op_threads},
    "mode": mode,
    "num_steps": num_steps,
    "levels": levels if mode == "sample" else None,
    "segment_lengths": recomputation.segment_lengths_for(num_steps).numpy().tolist()
    if mode == "sample"
    else None,
    "seconds": seconds,
    "seconds_per_step": seconds / num_steps,
    "peak_rss_mib": _peak_rss_mib(),
    "resting_rss_mib": resting,
    "peak_over_resting_mib": _peak_rss_mib() - resting,
  }


def main(argv):
  del argv
  if FLAGS.child:
    mode, k = FLAGS.child.split(":")
    print(
      json.dumps(measure(mode, int(k), FLAGS.inter_op_threads, FLAGS.segment_scale, FLAGS.levels))
    )
    return
  results = []
  for k in FLAGS.num_steps:
    for mode in FLAGS.modes:
      out = subprocess.run(
        [
          sys.executable,
          __file__,
          f"--child={mode}:{k}",
          f"--inter_op_threads={FLAGS.inter_op_threads}",
          f"--intra_op_threads={FLAGS.intra_op_threads}",
          f"--segment_scale={FLAGS.segment_scale}",
          f"--levels={FLAGS.levels}",
          f"--repeats={FLAGS.repeats}",
          *[f"--gin_file={f}" for f in FLAGS.gin_file],
          *[f"--gin_bindings={b}" for b in FLAGS.gin_bindings],
        ],
        capture_output=True,
        text=True,
        check=True,
      )
      result = json.loads(out.stdout.strip().splitlines()[-1])
      results.append(result)
      print(
        f"K={k:6d} {mode:10s} {str(result['segment_lengths'] or ''):12s} "
        f"{result['seconds_per_step'] * 1e3:8.2f} ms/step  "
        f"peak RSS {result['peak_rss_mib']:7.0f} MiB (+{result['peak_over_resting_mib']:.0f} "
        "over resting)",
        flush=True,
      )
  by_key = {(r["mode"], r["num_steps"]): r for r in results}
  for k in FLAGS.num_steps:
    if ("plain", k) in by_key and ("sample", k) in by_key:
      ratio = by_key[("sample", k)]["seconds_per_step"] / by_key[("plain", k)]["seconds_per_step"]
      print(f"K={k}: sample / plain time per inner step = {ratio:.2f}")
  if FLAGS.output:
    files.write_json(FLAGS.output, results, indent=2)


if __name__ == "__main__":
  app.run(main)
