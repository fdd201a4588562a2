"""Time of the comparison that ends the quickstart, with its runs made one or more at a time.

The comparison (`compare_with_tuned_baseline` of a gin experiment, the held-out tasks, the LR grid
of the tuned baseline and the thetas) is run on `--num_tasks` of its tasks for each value of
`--parallel_runs` in turn, `--rounds` times, each into its own temporary directory (so nothing
is cached between them), in one process: the same traces, the same load. Reported per value: the
seconds of each round, their median, and the median over rounds of the ratio to the first value;
and whether every run's numbers were the same for every value.

  python benchmarks/final_comparison.py --gin_file gin/quickstart.gin \
    --theta_dir runs/quickstart/theta --num_tasks 2 --rounds 2 \
    --output benchmarks/results/final_comparison_quickstart.json
"""

import json
import os
import tempfile
import time

import gin
import numpy as np
from absl import app, flags

from task_specific_learned_opt import checkpoints, files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import outer_training
from task_specific_learned_opt.evaluation import held_out

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", ["gin/quickstart.gin"], "The experiment.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
flags.DEFINE_string("theta_dir", None, "A theta export of the experiment (default: lopt.init).")
flags.DEFINE_integer("num_tasks", 2, "Held-out tasks of the comparison to run.")
flags.DEFINE_list("parallel_runs", ["1", "2"], "Values of evaluate_candidates.parallel_runs.")
flags.DEFINE_integer("rounds", 2, "Rounds over the values.")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


def _numbers(evaluation: dict) -> dict:
  return {
    name: {k: np.asarray(v) for k, v in arrays.items() if k != "steps_per_second"}
    for name, arrays in evaluation["results"].items()
  }


def main(argv):
  del argv
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  setup = outer_training.outer_training()
  theta = setup.lopt.init(setup.seed)
  if FLAGS.theta_dir:
    theta = checkpoints.load_theta(FLAGS.theta_dir, setup.lopt)
  values = [int(v) for v in FLAGS.parallel_runs]
  seconds = {v: [] for v in values}
  numbers, same = {}, True
  for _ in range(FLAGS.rounds):
    for value in values:
      with tempfile.TemporaryDirectory() as directory:
        with gin.unlock_config():
          gin.bind_parameter("evaluate_candidates.parallel_runs", value)
        start = time.perf_counter()
        evaluation = held_out.compare_with_tuned_baseline(
          os.path.join(directory, "eval"), setup.lopt, theta, num_tasks=FLAGS.num_tasks
        )
        seconds[value].append(time.perf_counter() - start)
      got = _numbers(evaluation)
      if numbers:
        same = same and all(
          np.array_equal(got[n][k], numbers[n][k]) for n in numbers for k in numbers[n]
        )
      numbers = numbers or got
      print(f"parallel_runs {value}: {seconds[value][-1]:.1f} s")
  first = values[0]
  result = {
    "gin_files": FLAGS.gin_file,
    "gin_bindings": FLAGS.gin_bindings,
    "theta_dir": FLAGS.theta_dir,
    "num_tasks": FLAGS.num_tasks,
    "load_average": os.getloadavg(),
    "cpus": os.cpu_count(),
    "seconds": {str(v): s for v, s in seconds.items()},
    "median_seconds": {str(v): float(np.median(s)) for v, s in seconds.items()},
    "speedup_vs_first": {
      str(v): float(np.median(np.asarray(seconds[first]) / np.asarray(s)))
      for v, s in seconds.items()
    },
    "same_numbers": bool(same),
  }
  print(json.dumps(result, indent=1))
  if FLAGS.output:
    files.write_json(FLAGS.output, result)


if __name__ == "__main__":
  app.run(main)
