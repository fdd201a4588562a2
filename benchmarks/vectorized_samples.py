"""Many tasks' samples in one computation with tf.vectorized_map: what it costs on this machine.

The worker computes one task's antithetic sample per call (distributed/worker_step.py). The
tool TensorFlow offers for computing B of them at once is tf.vectorized_map (pfor), which turns
the sample's graph into one whose every op carries a leading task axis. This measures it on the
experiment's family and learned optimizer (the quickstart by default), in one process:
  - `separate`: B calls of the worker's single-task sample, one after the other;
  - `vectorized`: one call of tf.vectorized_map of the same sample over the B tasks' data, seeds
    and start states (pfor falls back to a loop over B for ops it cannot vectorise; the log names
    them).
For each B it reports the trace and first-call seconds, the median seconds of the timed calls,
samples per second, and the largest difference of any vectorised estimate from the separate one
(relative to that leaf's largest value).

  python benchmarks/vectorized_samples.py --gin_file gin/quickstart.gin --num_steps 10 \
    --tasks 1,2,4 --output benchmarks/results/vectorized_samples_quickstart.json
"""

import json
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files, gin_config, random_seeds
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import outer_training, worker_step
from task_specific_learned_opt.outer import truncated_unroll

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", ["gin/quickstart.gin"], "The experiment measured.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_integer("num_steps", 10, "K, the truncation length of every sample.")
flags.DEFINE_list("tasks", ["1", "2", "4"], "Values of B, the tasks per computation.")
flags.DEFINE_integer("repeats", 3, "Timed calls per measurement (the median is kept).")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


def _median_seconds(fn, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.time()
    tf.nest.map_structure(lambda x: x.numpy(), fn())
    times.append(time.time() - start)
  return float(np.median(times))


def measure(setup: outer_training.OuterTraining, num_tasks: int) -> dict:
  """Separate and vectorised samples of `num_tasks` workers' first truncations."""
  estimator = outer_training.make_estimator(setup)
  workers = [
    worker_step.Worker(
      family=setup.family, lopt=setup.lopt, worker_id=i, seed=setup.seed, estimator=estimator
    )
    for i in range(num_tasks)
  ]
  theta = tf.nest.map_structure(tf.convert_to_tensor, setup.lopt.init(setup.seed))
  inputs = []
  for w in workers:
    state = w._start_task(theta, w.initial_state())
    task_index = state.task_index - 1
    perturbation_seed = random_seeds.fold_in(
      random_seeds.stream(w.seed, "worker_perturbations"), state.truncation_index
    )
    data_seed = random_seeds.stream(w.task_seed(task_index), "run_data")
    inputs.append((state.estimator_state, w.task(task_index).data, data_seed, perturbation_seed))
  template = workers[0].task(0)
  k = FLAGS.num_steps
  objective = workers[0].objective
  sigma = workers[0].sigma

  def one(args):
    estimator_state, data, data_seed, perturbation_seed = args
    unroll = truncated_unroll.Unroll(template.with_data(data), setup.lopt, objective, False)
    return estimator.sample(unroll, theta, estimator_state, k, data_seed, perturbation_seed, sigma)[
      0
    ]

  single = tf.function(one, autograph=False)
  stacked = tf.nest.map_structure(lambda *x: tf.stack(x), *inputs)
  vectorized = tf.function(lambda s: tf.vectorized_map(one, s), autograph=False)

  result = {"tasks": num_tasks}
  for name, fn in (
    ("separate", lambda: [single(a) for a in inputs]),
    ("vectorized", lambda: vectorized(stacked)),
  ):
    start = time.time()
    tf.nest.map_structure(lambda x: x.numpy(), fn())
    first = time.time() - start
    seconds = _median_seconds(fn, FLAGS.repeats)
    result[name] = {
      "first_call_seconds": first,
      "seconds": seconds,
      "samples_per_second": num_tasks / seconds,
    }
  separate = [single(a) for a in inputs]
  together = vectorized(stacked)
  worst = 0.0
  for i, alone in enumerate(separate):
    for x, y in zip(tf.nest.flatten(together), tf.nest.flatten(alone), strict=True):
      y = y.numpy()
      scale = max(float(np.max(np.abs(y))), 1e-12)
      worst = max(worst, float(np.max(np.abs(x.numpy()[i] - y))) / scale)
  result["max_relative_difference"] = worst
  result["vectorized_over_separate_time"] = (
    result["vectorized"]["seconds"] / result["separate"]["seconds"]
  )
  print(json.dumps(result), flush=True)
  return result


def main(argv):
  del argv
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  setup = outer_training.outer_training()
  results = {
    "gin_file": FLAGS.gin_file,
    "gin_bindings": FLAGS.gin_bindings,
    "num_steps": FLAGS.num_steps,
    "repeats": FLAGS.repeats,
    "estimator": setup.estimator,
    "measurements": [measure(setup, int(b)) for b in FLAGS.tasks],
  }
  if FLAGS.output:
    files.write_json(FLAGS.output, results, indent=2)


if __name__ == "__main__":
  app.run(main)
