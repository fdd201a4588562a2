"""Memory and time of local mode's W workers for an experiment (one inner run per sample).

Local mode keeps one persistent inner run per worker, W = the chief's batch size by default, so
that no batch holds two truncations of one run. This measures, for a gin experiment:
  - resting RSS (TensorFlow, the family, the learned optimizer) and RSS once all W workers hold
    their task's data and inner state;
  - the time of `--samples` samples at theta = lopt.init(seed), each from its own worker's fresh
    inner run at the curriculum's first K (the first sample also traces and is timed apart);
  - the time of one outer step: W samples, measured when --samples = W, else W x the measured
    time per sample (the file says which);
  - peak RSS.

  python benchmarks/local_workers.py --gin_file gin/quickstart.gin --output ...
  python benchmarks/local_workers.py --gin_file gin/paper/train_objective.gin --samples 8

Writes JSON with --output.
"""

import json
import os
import resource
import time

import gin
import numpy as np
from absl import app, flags

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import local, outer_training, worker_step

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", ["gin/quickstart.gin"], "The experiment.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_integer("samples", None, "Samples to time (default: W, one whole outer step).")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


def _peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mib() -> float:
  with open("/proc/self/statm") as f:
    return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def main(argv):
  del argv
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  setup = outer_training.outer_training()
  num_workers = gin.get_bindings(local.train_local).get("num_workers")
  num_workers = int(num_workers or setup.batch_size)  # As train_local does.
  theta = setup.lopt.init(setup.seed)
  resting = _current_rss_mib()
  workers = [
    worker_step.Worker(family=setup.family, lopt=setup.lopt, worker_id=i, seed=setup.seed)
    for i in range(num_workers)
  ]
  start = time.time()
  states = [w._start_task(theta, w.initial_state()) for w in workers]
  setup_seconds = time.time() - start
  with_states = _current_rss_mib()
  num_samples = num_workers if FLAGS.samples is None else min(FLAGS.samples, num_workers)
  start = time.time()
  first, _ = workers[0].step(theta, 0, states[0])  # Traces the sample function.
  first_seconds = time.time() - start
  seconds, steps = [], []
  for i in range(1, num_samples + 1):
    w = i % num_workers  # Worker 0 again last, from its second truncation, if samples = W.
    start = time.time()
    sample, states[w] = workers[w].step(theta, 0, states[w])
    seconds.append(time.time() - start)
    steps.append(sample.num_steps)
  per_sample = float(np.mean(seconds))
  result = {
    "gin_file": FLAGS.gin_file,
    "gin_bindings": FLAGS.gin_bindings,
    "family": setup.family.name,
    "num_workers": num_workers,
    "resting_rss_mib": resting,
    "rss_with_worker_states_mib": with_states,
    "worker_states_mib": with_states - resting,
    "worker_states_mib_each": (with_states - resting) / num_workers,
    "seconds_to_start_worker_runs": setup_seconds,
    "first_sample_seconds_with_tracing": first_seconds,
    "first_sample_num_steps": first.num_steps,
    "timed_samples": num_samples,
    "timed_num_steps": steps,
    "seconds_per_sample": per_sample,
    "seconds_per_inner_step_of_a_sample": float(np.sum(seconds) / np.sum(steps)),
    "outer_step_seconds": float(np.sum(seconds))
    if num_samples == num_workers
    else per_sample * num_workers,
    "outer_step_seconds_measured": num_samples == num_workers,
    "peak_rss_mib": _peak_rss_mib(),
    "load_average": os.getloadavg(),
  }
  print(json.dumps(result, indent=1))
  if FLAGS.output:
    files.write_json(FLAGS.output, result, indent=1)


if __name__ == "__main__":
  app.run(main)
