"""Samples per second of a batched worker (B tasks per call) against B samples of plain workers.

On the experiment's family and learned optimizer (the quickstart by default), with every
truncation K steps long (LinearCurriculum replaced by FixedLength(K), a horizon no measurement
reaches): for each B, after one untimed call of each (tracing), interleaved rounds of
  - `separate`: B plain workers (worker_step.Worker, ids 0 ... B - 1), one sample each, in turn
    (with --max_separate_tasks M < B, the first M of them: plain workers compute one sample
    after the other, so their samples per second do not depend on how many there are, and a
    large B on a GPU need not wait for B lone samples);
  - `batched`: one call of a BatchedWorker of the same B workers (distributed/batched_worker.py),
  - `grouped`: the same with group_models, the B tasks' CNNs one grouped network,
  - `vectorized`, `grouped_vectorized`: `batched` and `grouped` with vectorize_updates, the B
    tasks' learned updates one vectorised computation
    (--variants chooses which run),
and the median seconds of each over the rounds, samples per second and their ratio to
`separate`. --device places it (cpu, gpu or auto, as bin/train_local's); the result lists the
devices TensorFlow used.

  python benchmarks/batched_worker.py --gin_file gin/quickstart.gin --num_steps 20 \
    --tasks 1,2,4,8 --output benchmarks/results/batched_worker_quickstart.json
"""

import functools
import json
import time

import gin
import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import common, configurables  # noqa: F401
from task_specific_learned_opt.distributed import batched_worker, outer_training, worker_step
from task_specific_learned_opt.outer import schedules

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", ["gin/quickstart.gin"], "The experiment measured.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_integer("num_steps", 20, "K, the truncation length of every sample.")
flags.DEFINE_list("tasks", ["1", "2", "4", "8"], "Values of B, the tasks per call.")
flags.DEFINE_integer("rounds", 3, "Timed rounds per B (the median is kept).")
flags.DEFINE_list(
  "variants",
  ["separate", "batched"],
  "Of separate, batched, grouped, vectorized, grouped_vectorized.",
)
flags.DEFINE_integer(
  "max_separate_tasks", None, "Plain workers timed for `separate` at most (default: B)."
)
flags.DEFINE_string("output", None, "Optional JSON file for the results.")
common.define_device_flag()


def measure(setup: outer_training.OuterTraining, num_tasks: int) -> dict:
  """Median seconds of B separate samples and of one batched call of B."""
  estimator = outer_training.make_estimator(setup)

  def workers():
    return [
      worker_step.Worker(
        family=setup.family,
        lopt=setup.lopt,
        worker_id=i,
        seed=setup.seed,
        estimator=estimator,
        horizon=10**9,
        schedule=schedules.FixedLength(FLAGS.num_steps),
      )
      for i in range(num_tasks)
    ]

  theta = setup.lopt.init(setup.seed)
  separate = workers()[: FLAGS.max_separate_tasks or num_tasks]
  separate_states = [w.initial_state() for w in separate]
  options = {
    "batched": {},
    "grouped": {"group_models": True},
    "vectorized": {"vectorize_updates": True},
    "grouped_vectorized": {"group_models": True, "vectorize_updates": True},
  }
  batched = {
    name: batched_worker.BatchedWorker(workers(), **options[name])
    for name in FLAGS.variants
    if name != "separate"
  }
  batched_states = {name: w.initial_state() for name, w in batched.items()}

  def run_separate():
    for i, w in enumerate(separate):
      _, separate_states[i] = w.step(theta, 0, separate_states[i])

  def run_batched(name):
    _, batched_states[name] = batched[name].step(theta, 0, batched_states[name])

  calls = {
    name: run_separate if name == "separate" else functools.partial(run_batched, name)
    for name in FLAGS.variants
  }
  times = {name: [] for name in calls}
  for name, fn in calls.items():
    start = time.time()
    fn()  # Starts the tasks and traces.
    times[f"{name}_first_call_seconds"] = time.time() - start
  for _ in range(FLAGS.rounds):
    for name, fn in calls.items():
      start = time.time()
      fn()
      times[name].append(time.time() - start)
  result = {"tasks": num_tasks}
  for name in calls:
    seconds = float(np.median(times[name]))
    samples = len(separate) if name == "separate" else num_tasks
    result[name] = {
      "first_call_seconds": times[f"{name}_first_call_seconds"],
      "seconds": seconds,
      "all_seconds": times[name],
      "samples": samples,
      "samples_per_second": samples / seconds,
    }
  for name in set(calls) - {"separate"}:
    result[f"{name}_over_separate_samples_per_second"] = (
      result[name]["samples_per_second"] / result["separate"]["samples_per_second"]
    )
  print(json.dumps(result), flush=True)
  return result


def main(argv):
  del argv
  common.use_device(FLAGS.device)
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  setup = outer_training.outer_training()
  results = {
    "gin_file": FLAGS.gin_file,
    "gin_bindings": FLAGS.gin_bindings,
    "num_steps": FLAGS.num_steps,
    "rounds": FLAGS.rounds,
    "variants": FLAGS.variants,
    "estimator": setup.estimator,
    "threads": gin.query_parameter("configure_threads.intra_op_threads"),
    "device": FLAGS.device,
    "measurements": [measure(setup, int(b)) for b in FLAGS.tasks],
  }
  results["visible_devices"] = [d.name for d in tf.config.get_visible_devices()]
  results["threads"] = {
    "inter_op": gin.query_parameter("configure_threads.inter_op_threads"),
    "intra_op": results["threads"],
  }
  if FLAGS.output:
    files.write_json(FLAGS.output, results, indent=2)


if __name__ == "__main__":
  app.run(main)
