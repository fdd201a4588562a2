"""Where an outer step of local mode spends its time, and outer steps per minute A/B.

Three modes.

`--mode profile` (one process): runs train_local on an experiment (the quickstart by default)
for --steps outer steps and times, from outer step --warm_steps on (past the first traces):
  - the workers' samples: the compiled truncation (both unrolls forward, the backward pass, ES)
    and, around it, starting tasks and the Python of Worker.step;
  - the chief: the merge and Adam (Chief.apply), publishing theta, the record, snapshots and
    checkpoints;
  - the rest of the wall-clock time (the loop's Python, the transport);
and counts the traces of the compiled truncation. Then it splits the compiled truncation at the
run's mean K on one worker's inner run: one unroll forward, the + and - unrolls forward, the
whole sample (forward and backward), the ES estimate alone; each the median of --repeats calls.

`--mode ops` (one process): one truncation sample at K = --num_steps (both unrolls, the backward
pass, ES) on one worker's inner run, traced by TensorFlow's profiler over --repeats calls: the
seconds and calls per op type per sample, the executor's time around them, and the sample's wall
clock.

`--mode ab` (one process per run): outer steps per minute of train_local for each --variant,
the variants run in turn (A B A B ...) for --rounds rounds, each from a fresh train dir; the
rate is taken over outer steps --warm_steps to --steps from progress.jsonl. A variant is
`name=DIR` (the package in checkout DIR, e.g. a `git worktree` of an older commit) with
optional gin bindings after `|`, separated by `;` (one written `env:NAME=VALUE` sets an
environment variable of the run instead):

  python benchmarks/outer_step.py --mode profile --output benchmarks/results/outer_step_profile.json
  python benchmarks/outer_step.py --mode ab --rounds 3 \
    --variant 'before=/tmp/before' --variant 'after=.' --output ...

Writes JSON with --output; prints a table.
"""

import collections
import json
import os
import subprocess
import sys
import tempfile
import time

import gin
import numpy as np
import tensorflow as tf
from absl import app, flags

from task_specific_learned_opt import files, gin_config, random_seeds
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import (
  chief_files,
  chief_update,
  in_process,
  local,
  outer_training,
  worker_step,
)
from task_specific_learned_opt.outer import antithetic, estimates, truncated_unroll

FLAGS = flags.FLAGS
flags.DEFINE_enum(
  "mode", "profile", ["profile", "ab", "ops"], "What to measure (module docstring)."
)
flags.DEFINE_multi_string("gin_file", ["gin/quickstart.gin"], "The experiment.")
flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings (every variant's too).")
flags.DEFINE_integer("steps", 20, "Outer steps per run.")
flags.DEFINE_integer("warm_steps", 4, "Outer steps not timed at the start (first traces).")
flags.DEFINE_integer("repeats", 5, "profile and ops: calls per part of the split truncation.")
flags.DEFINE_integer("num_steps", 16, "ops: K of the profiled truncation.")
flags.DEFINE_multi_string("variant", [], "ab: name=DIR[|binding;binding...] (module docstring).")
flags.DEFINE_integer("rounds", 3, "ab: runs of each variant.")
flags.DEFINE_string("output", None, "Optional JSON file for the results.")


class _Timers:
  """Seconds and calls per part, counted only while `on`."""

  def __init__(self):
    self.seconds = collections.defaultdict(float)
    self.calls = collections.defaultdict(int)
    self.on = False

  def wrap(self, owner: object, name: str, part: str) -> None:
    original = getattr(owner, name)
    timers = self

    def timed(*args, **kwargs):
      start = time.perf_counter()
      try:
        return original(*args, **kwargs)
      finally:
        if timers.on:
          timers.seconds[part] += time.perf_counter() - start
          timers.calls[part] += 1

    setattr(owner, name, timed)


def _median_seconds(fn, repeats: int) -> float:
  fn()  # Traces.
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    tf.nest.map_structure(lambda x: x.numpy() if hasattr(x, "numpy") else x, fn())
    seconds.append(time.perf_counter() - start)
  return float(np.median(seconds))


def _truncation_fns(setup, theta, num_steps: int) -> dict:
  """Compiled parts of one truncation of `num_steps` steps on one worker's first inner run."""
  worker = worker_step.Worker(family=setup.family, lopt=setup.lopt, worker_id=0, seed=setup.seed)
  state = worker._start_task(theta, worker.initial_state())
  task = worker.task(0)
  unroll = truncated_unroll.Unroll(task, setup.lopt, worker.objective, worker.recompute)
  k = tf.constant(num_steps)
  data_seed = random_seeds.fold_in(worker.task_seed(0), 1)
  e = antithetic.perturbation(theta, random_seeds.as_seed(7), worker.sigma)
  plus = tf.nest.map_structure(tf.add, theta, e)
  minus = tf.nest.map_structure(tf.subtract, theta, e)
  streams = truncated_unroll.data_seeds(data_seed)
  inner = state.estimator_state.inner_state
  return {
    "one_unroll_forward": tf.function(
      lambda: truncated_unroll.outer_losses(unroll, (plus,), (inner,), k, streams)[0],
      autograph=False,
    ),
    "pair_forward": tf.function(
      lambda: truncated_unroll.outer_losses(unroll, (plus, minus), (inner, inner), k, streams)[0],
      autograph=False,
    ),
    "whole_sample": tf.function(
      lambda: antithetic.truncation_sample(
        unroll, theta, inner, k, data_seed, random_seeds.as_seed(7), worker.sigma
      )[:4],
      autograph=False,
    ),
    "es_estimate": tf.function(
      lambda: estimates.es_gradient(tf.constant(1.0), tf.constant(0.5), e, worker.sigma),
      autograph=False,
    ),
  }


def _split_truncation(setup, theta, num_steps: int, repeats: int) -> dict:
  """Seconds of the parts of one compiled truncation of `num_steps` steps (module docstring)."""
  fns = _truncation_fns(setup, theta, num_steps)
  return {"num_steps": num_steps, **{n: _median_seconds(f, repeats) for n, f in fns.items()}}


def profile() -> dict:
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  timers = _Timers()
  timers.wrap(local._WorkersState, "next_workers", "samples_wall")
  timers.wrap(worker_step.Worker, "step", "worker_step")
  timers.wrap(worker_step.Worker, "_start_task", "start_task")
  timers.wrap(chief_update.Chief, "apply", "chief_apply")
  timers.wrap(in_process.InProcessTransport, "publish_theta", "publish_theta")
  for name in ("record", "snapshot", "save_if_due", "save"):
    timers.wrap(chief_files.ChiefFiles, name, f"files_{name}")
  compiled = worker_step.Worker._compiled

  def timed_compiled(self, task):
    fn = compiled(self, task)

    def call(*args):
      start = time.perf_counter()
      result = fn(*args)
      result = tf.nest.map_structure(lambda x: x.numpy(), result)
      if timers.on:
        timers.seconds["compiled_truncation"] += time.perf_counter() - start
        timers.calls["compiled_truncation"] += 1
      return tf.nest.map_structure(tf.constant, result)

    call.function = fn
    return call

  worker_step.Worker._compiled = timed_compiled
  num_steps = []
  apply = chief_update.Chief.apply
  marks = {}

  def apply_and_mark(self, batch):
    # The window: from the update of outer step warm_steps + 1 to that of step `steps`, so it
    # holds whole outer steps (samples, update, record, checkpoint), none of the exit's save.
    if self.step == FLAGS.steps - 1 and timers.on:
      timers.on, marks["end"] = False, time.perf_counter()
    if timers.on:
      num_steps.extend(np.asarray(batch.num_steps).tolist())
    if self.step == FLAGS.warm_steps and "start" not in marks:
      timers.on, marks["start"] = True, time.perf_counter()
    return apply(self, batch)

  chief_update.Chief.apply = apply_and_mark
  with tempfile.TemporaryDirectory() as train_dir:
    gin.bind_parameter("outer_training.num_outer_steps", FLAGS.steps)
    gin.bind_parameter("train_local.final_evaluation", None)
    local.train_local(train_dir)
    timers.on = False
    total = marks["end"] - marks["start"]
    traces = sum(fn.experimental_get_tracing_count() for fn, *_ in worker_step._SAMPLE_FNS.values())
    setup = outer_training.outer_training()
    theta = tf.nest.map_structure(tf.convert_to_tensor, setup.lopt.init(setup.seed))
    split = _split_truncation(setup, theta, int(round(np.mean(num_steps))), FLAGS.repeats)
  steps = FLAGS.steps - 1 - FLAGS.warm_steps
  per_step = {part: seconds / steps for part, seconds in timers.seconds.items()}
  ratio_forward = split["pair_forward"] / split["whole_sample"]
  # Samples computed at once overlap: their parts are scaled to the wall-clock time they took.
  overlap = per_step["samples_wall"] / per_step["worker_step"]
  truncation = per_step.get("compiled_truncation", 0.0) * overlap
  start_task = per_step.get("start_task", 0.0) * overlap
  parts = {
    "+ and - unrolls forward": truncation * ratio_forward,
    "backward pass and ES": truncation * (1 - ratio_forward),
    "starting tasks (sampling, initial state)": start_task,
    "worker Python (theta in, sample out)": per_step["samples_wall"] - truncation - start_task,
    "chief: merge and Adam": per_step["chief_apply"],
    "chief: publish theta": per_step.get("publish_theta", 0.0),
    "chief: record (progress.jsonl, summaries)": per_step.get("files_record", 0.0),
    "chief: snapshots and checkpoints": sum(
      per_step.get(f"files_{n}", 0.0) for n in ("snapshot", "save_if_due", "save")
    ),
  }
  parts["loop Python and the rest"] = total / steps - sum(parts.values())
  return {
    "seconds_per_outer_step": total / steps,
    "outer_steps_per_minute": 60 * steps / total,
    "mean_num_steps": float(np.mean(num_steps)),
    "samples_per_outer_step": timers.calls["compiled_truncation"] / steps,
    "truncation_traces": traces,
    "samples_at_once": 1 / overlap,
    "parts_seconds_per_outer_step": parts,
    "calls": dict(timers.calls),
    "split_truncation_seconds": split,
  }


def _op_seconds(logdir: str) -> tuple[dict, dict, float]:
  """(seconds per op type, calls per op type, seconds in the executor) of a profiler trace.

  The host plane's compute lines hold one event per op run, named "name:Type", inside the
  executor's "ExecutorState::Process" events; the other "Class::method" events (thread pool
  regions, records) are bookkeeping.
  """
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415 - profile mode only.

  (path,) = tf.io.gfile.glob(f"{logdir}/plugins/profile/*/*.xplane.pb")
  space = xplane_pb2.XSpace.FromString(tf.io.gfile.GFile(path, "rb").read())
  seconds, calls, executor = collections.Counter(), collections.Counter(), 0.0
  for plane in space.planes:
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        name = plane.event_metadata[event.metadata_id].name
        if name == "ExecutorState::Process":
          executor += event.duration_ps * 1e-12
        elif ":" in name and "::" not in name:
          op_type = name.rsplit(":", 1)[1]
          seconds[op_type] += event.duration_ps * 1e-12
          calls[op_type] += 1
  return dict(seconds), dict(calls), executor


def op_profile() -> dict:
  """One truncation sample at K = --num_steps traced by TensorFlow's profiler, per op type."""
  gin_config.parse(FLAGS.gin_file, FLAGS.gin_bindings)
  gin_config.configure_threads()
  setup = outer_training.outer_training()
  theta = tf.nest.map_structure(tf.convert_to_tensor, setup.lopt.init(setup.seed))
  sample = _truncation_fns(setup, theta, FLAGS.num_steps)["whole_sample"]
  wall = _median_seconds(sample, FLAGS.repeats)
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    for _ in range(FLAGS.repeats):
      tf.nest.map_structure(lambda x: x.numpy(), sample())
    tf.profiler.experimental.stop()
    seconds, calls, executor = _op_seconds(logdir)
  per_sample = {k: v / FLAGS.repeats for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}
  return {
    "num_steps": FLAGS.num_steps,
    "wall_seconds_per_sample": wall,
    "op_seconds_per_sample": per_sample,
    "op_calls_per_sample": {k: calls[k] // FLAGS.repeats for k in per_sample},
    "executor_seconds_per_sample": executor / FLAGS.repeats,
    "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
  }


def _variant(spec: str) -> tuple[str, str, list[str]]:
  name, _, rest = spec.partition("=")
  directory, _, bindings = rest.partition("|")
  return name, os.path.abspath(directory), [b for b in bindings.split(";") if b.strip()]


def _rate(directory: str, bindings: list[str]) -> float:
  """Outer steps per minute of one train_local run of the package in `directory`."""
  with tempfile.TemporaryDirectory() as train_dir:
    command = [
      sys.executable,
      os.path.join(directory, "bin", "train_local"),
      f"--train_dir={train_dir}",
      f"--num_outer_steps={FLAGS.steps}",
      "--gin_bindings=train_local.final_evaluation = None",
    ]
    command += [f"--gin_file={os.path.join(directory, f)}" for f in FLAGS.gin_file]
    given = FLAGS.gin_bindings + bindings
    command += [f"--gin_bindings={b}" for b in given if not b.startswith("env:")]
    environment = dict(os.environ, PYTHONPATH=directory)
    environment.update(b[len("env:") :].split("=", 1) for b in given if b.startswith("env:"))
    subprocess.run(command, check=True, cwd=directory, env=environment, capture_output=True)
    records = {r["outer_step"]: r for r in files.read_jsonl(f"{train_dir}/progress.jsonl")}
  seconds = records[FLAGS.steps]["elapsed_seconds"] - records[FLAGS.warm_steps]["elapsed_seconds"]
  return 60 * (FLAGS.steps - FLAGS.warm_steps) / seconds


def ab() -> dict:
  variants = [_variant(v) for v in FLAGS.variant]
  rates = {name: [] for name, *_ in variants}
  for r in range(FLAGS.rounds):
    for name, directory, bindings in variants:
      rates[name].append(_rate(directory, bindings))
      print(f"round {r + 1}: {name} {rates[name][-1]:.2f} outer steps/minute", flush=True)
  base = variants[0][0]
  return {
    "variants": {name: {"directory": d, "bindings": b} for name, d, b in variants},
    "outer_steps_per_minute": rates,
    "median": {name: float(np.median(r)) for name, r in rates.items()},
    f"ratio_to_{base}": {
      name: {
        "median_of_rounds": float(np.median(np.divide(r, rates[base]))),
        "per_round": np.divide(r, rates[base]).tolist(),
      }
      for name, r in rates.items()
    },
  }


def main(argv):
  del argv
  result = {"profile": profile, "ab": ab, "ops": op_profile}[FLAGS.mode]()
  result.update(
    mode=FLAGS.mode,
    gin_file=FLAGS.gin_file,
    gin_bindings=FLAGS.gin_bindings,
    steps=FLAGS.steps,
    warm_steps=FLAGS.warm_steps,
    load_average=os.getloadavg(),
    tensorflow=tf.__version__,
  )
  print(json.dumps(result, indent=1))
  if FLAGS.output:
    files.write_text(FLAGS.output, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
  app.run(main)
