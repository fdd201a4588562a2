"""Wall-clock speed of inner training with SGD, Adam and the learned optimizer (paper App. I).

App. I trains the inner problem in graph mode inside one tf.while_loop on random input data, with
Adam, SGD and the learned optimizer written in plain TensorFlow ops, and reports batches per second:
CPU 80 (learned) vs 92 (Adam) vs 93 (SGD); GPU (Titan X) 177 vs 278 vs 358.

`run` does the same for any task and optimizers (gin): each optimizer gets one compiled function
that trains `num_steps` steps in one while loop (inner_training.make_train_fn: the step count a
tensor, theta an argument, so nothing retraces). After `warmup` untimed calls of each,
`repetitions` rounds call them interleaved (A B C A B C ...), so that drift in the machine's load
touches every optimizer alike. Each optimizer's batches/s are summarised by their median and
spread, and learned/hand-designed speed ratios by the median of the per-round ratios, which is
robust to load that changes between rounds.
"""

import os
import platform
import time
from collections.abc import Callable, Sequence

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import (
  checkpoints,
  errors,
  files,
  inner_training,
  nests,
  random_seeds,
)
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import random_data  # noqa: F401 - gin registration.

RESULTS_FILENAME = "benchmark.json"
# App. I, batches per second.
PAPER_CPU = {"mlp_lopt": 80.0, "adam": 92.0, "sgd": 93.0}
PAPER_GPU = {"mlp_lopt": 177.0, "adam": 278.0, "sgd": 358.0}


class DeviceNotFoundError(errors.UserError, ValueError):
  """A --device that TensorFlow does not have on this machine."""


def check_device(device: str) -> str:
  """Returns `device` as TensorFlow names it ("/device:CPU:0"), if this machine has it.

  Raises:
    DeviceNotFoundError: no such device; the message lists the devices there are.
  """
  try:
    wanted = tf.DeviceSpec.from_string(device)
  except ValueError as e:
    raise DeviceNotFoundError(f"Cannot parse device {device!r}: {e}") from e
  available = tf.config.list_logical_devices()
  for candidate in available:
    spec = tf.DeviceSpec.from_string(candidate.name)
    if (wanted.device_type or "").upper() == spec.device_type and (wanted.device_index or 0) == (
      spec.device_index or 0
    ):
      return candidate.name
  names = ", ".join(d.name.replace("/device:", "/") for d in available)
  raise DeviceNotFoundError(
    f"Device {device!r} does not exist on this machine; it has {names}. Pass one of them "
    "with --device."
  )


def summarize(values: Sequence[float]) -> dict:
  """Median and spread (min, max, quartiles) of a list of measurements."""
  x = np.asarray(values, np.float64)
  q25, median, q75 = np.percentile(x, [25, 50, 75])
  return {
    "median": float(median),
    "min": float(x.min()),
    "max": float(x.max()),
    "q25": float(q25),
    "q75": float(q75),
    "values": [float(v) for v in x],
  }


def round_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> dict:
  """Summary of numerator[r] / denominator[r] over rounds r (both measured in round r)."""
  return summarize(np.asarray(numerator) / np.asarray(denominator))


class _JitUpdate(opt_base.Optimizer):
  """An optimizer whose update alone is compiled with XLA (jit_compile=True)."""

  def __init__(self, opt: opt_base.Optimizer):
    self.opt = opt
    self.name = opt.name
    self._update = tf.function(lambda state, grads: opt.update(state, grads), jit_compile=True)

  def init(self, params: nests.Params) -> opt_base.OptState:
    return self.opt.init(params)

  def update(
    self, state: opt_base.OptState, grads: nests.Params, loss: tf.Tensor | None = None
  ) -> opt_base.OptState:
    del loss  # The rules timed here do not use it.
    return self._update(state, grads)


def optimizer_fn(
  optimizer: opt_base.Optimizer | lopt_base.LearnedOptimizer, xla_update: bool = False
) -> Callable[[nests.Theta | None], opt_base.Optimizer]:
  """theta -> the Optimizer that inner_training.make_train_fn runs.

  Args:
    optimizer: an Optimizer (theta is ignored), or a LearnedOptimizer (its opt_fn(theta)).
    xla_update: compile the update alone with XLA (the rest of the step stays in the graph).
  """
  learned = isinstance(optimizer, lopt_base.LearnedOptimizer)

  def build(theta: nests.Theta | None) -> opt_base.Optimizer:
    opt = optimizer.opt_fn(theta) if learned else optimizer
    return _JitUpdate(opt) if xla_update else opt

  return build


def environment(device: str, xla_update: Sequence[str]) -> dict:
  """What the numbers depend on: device, TensorFlow, threads, XLA."""
  cpu = platform.processor() or platform.machine()
  if os.path.exists("/proc/cpuinfo"):
    with open("/proc/cpuinfo") as f:
      models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    cpu = models[0] if models else cpu
  return {
    "device": device,
    "cpu": cpu,
    "cpu_count": os.cpu_count(),
    "tensorflow": tf.__version__,
    "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
    "xla_update": sorted(xla_update),
    "xla_auto_jit": bool(tf.config.optimizer.get_jit()),
    "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 CPUs)"),
    "python": platform.python_version(),
    # Other work on the machine slows every optimizer, not equally: record how busy it was.
    "load_average_1_5_15_min": [round(x, 2) for x in os.getloadavg()],
  }


def time_interleaved(train_fns: dict, num_steps: int, repetitions: int, warmup: int) -> tuple:
  """Calls every train function `warmup` times untimed, then `repetitions` timed rounds.

  Args:
    train_fns: {name: function () -> a tensor}, each running `num_steps` steps.
    num_steps: steps per call.
    repetitions: timed rounds; every round calls every function once, in the dict's order.
    warmup: untimed rounds first (the first one traces and compiles).

  Returns:
    ({name: [batches/s of each round]}, [names in the order they were timed]).
  """
  for w in range(warmup):
    for name, fn in train_fns.items():
      fn().numpy()
      logging.info("warm-up %d/%d: %s", w + 1, warmup, name)
  rates, order = {name: [] for name in train_fns}, []
  for r in range(repetitions):
    for name, fn in train_fns.items():
      start = time.perf_counter()
      fn().numpy()
      rates[name].append(num_steps / (time.perf_counter() - start))
      order.append(name)
    logging.info(
      "round %d/%d: %s",
      r + 1,
      repetitions,
      "  ".join(f"{name} {rates[name][-1]:.1f}/s" for name in train_fns),
    )
  return rates, order


def format_table(result: dict) -> str:
  """The summary table: batches/s per optimizer and the speed ratios, beside the paper's."""
  lines = [
    f"{'optimizer':>12}  {'batches/s median':>16}  {'[min, max]':>17}  {'paper CPU/GPU':>13}"
  ]
  for name, s in result["batches_per_second"].items():
    paper = f"{PAPER_CPU[name]:.0f} / {PAPER_GPU[name]:.0f}" if name in PAPER_CPU else "-"
    spread = f"[{s['min']:.1f}, {s['max']:.1f}]"
    lines.append(f"{name:>12}  {s['median']:16.1f}  {spread:>17}  {paper:>13}")
  for key, s in result["ratios"].items():
    num, den = key.split("/")
    paper = ""
    if num in PAPER_CPU and den in PAPER_CPU:
      cpu, gpu = PAPER_CPU[num] / PAPER_CPU[den], PAPER_GPU[num] / PAPER_GPU[den]
      paper = f"  (paper CPU {cpu:.2f}, GPU {gpu:.2f})"
    lines.append(
      f"{key:>20}: median {s['median']:.3f} [min {s['min']:.3f}, max {s['max']:.3f}]{paper}"
    )
  env = result["environment"]
  threads = f"{env['inter_op_threads']}/{env['intra_op_threads']}"
  lines.append(
    f"{env['device']}, TensorFlow {env['tensorflow']}, inter/intra-op threads {threads}, "
    f"XLA update {env['xla_update'] or 'none'}, "
    f"load average {env['load_average_1_5_15_min'][0]} -> {env['load_average_after'][0]}"
  )
  return "\n".join(lines)


@gin.configurable(module="benchmark")  # The gin name is benchmark.run.
def run(
  output_dir: str,
  task: task_base.Task = gin.REQUIRED,
  optimizers: dict = gin.REQUIRED,
  num_steps: int = 200,
  repetitions: int = 10,
  warmup: int = 2,
  device: str = "/CPU:0",
  theta_dir: str | None = None,
  theta_seed: int = 0,
  seed: int = 0,
  xla_update: Sequence[str] = (),
) -> dict:
  """Times inner training of `task` with each optimizer and writes benchmark.json.

  Args:
    output_dir: where benchmark.json goes.
    task: the inner problem (App. I: the paper's CNN on random data, `RandomDataTask`).
    optimizers: {name: Optimizer or LearnedOptimizer}, timed in this order every round.
    num_steps: inner steps (batches) per timed call.
    repetitions: timed rounds.
    warmup: untimed rounds before them.
    device: where the loop runs, e.g. "/CPU:0" or "/GPU:0".
    theta_dir: a theta export (checkpoints.save_theta) for the learned optimizers; None uses
      their init(theta_seed).
    theta_seed: seed of the random theta when there is no export.
    seed: seed of the initial parameters and the data.
    xla_update: names of the optimizers whose update alone is compiled with XLA (none by
      default: on CPU it was measured slower; docs/performance.md).

  Returns:
    The results written to benchmark.json.

  Raises:
    DeviceNotFoundError: `device` does not exist on this machine.
    ValueError: `xla_update` names an optimizer that is not in `optimizers`.
  """
  device = check_device(device)
  unknown = set(xla_update) - set(optimizers)
  if unknown:
    raise ValueError(f"xla_update names {sorted(unknown)}, not optimizers: {sorted(optimizers)}.")
  env = environment(device, xla_update)
  logging.info("Benchmark of %s on %s: %s", task.name, device, env)
  with tf.device(device):
    params = task.init_params(random_seeds.stream(seed, "run_params"))
    thetas = {
      name: checkpoints.load_theta(theta_dir, opt) if theta_dir else opt.init(theta_seed)
      for name, opt in optimizers.items()
      if isinstance(opt, lopt_base.LearnedOptimizer)
    }
    train_fns = {
      name: _timed_call(task, opt, thetas.get(name), name in xla_update, params, num_steps, seed)
      for name, opt in optimizers.items()
    }
    rates, order = time_interleaved(train_fns, num_steps, repetitions, warmup)
  env["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
  result = {
    "task": task.name,
    "num_params": int(sum(int(tf.size(p)) for p in tf.nest.flatten(params))),
    "num_steps": num_steps,
    "repetitions": repetitions,
    "warmup": warmup,
    "theta": theta_dir or f"random (init seed {theta_seed})",
    "environment": env,
    "order": order,
    "batches_per_second": {name: summarize(r) for name, r in rates.items()},
    "ratios": {
      f"{num}/{den}": round_ratios(rates[num], rates[den])
      for num in thetas
      for den in optimizers
      if den not in thetas
    },
    "paper_batches_per_second": {"cpu": PAPER_CPU, "gpu": PAPER_GPU},
  }
  _write(result, output_dir)
  return result


def _timed_call(
  task: task_base.Task,
  optimizer: opt_base.Optimizer | lopt_base.LearnedOptimizer,
  theta: nests.Theta | None,
  xla_update: bool,
  params: nests.Params,
  num_steps: int,
  seed: random_seeds.SeedLike,
) -> Callable:
  """What one timed call runs: `num_steps` steps from the same initial state; its last loss."""
  opt_fn = optimizer_fn(optimizer, xla_update)
  train = inner_training.make_train_fn(task, opt_fn, theta)
  state, data_seed = opt_fn(theta).init(params), random_seeds.stream(seed, "run_data")
  return lambda: train(state, num_steps, data_seed)[1][-1]


def _write(result: dict, output_dir: str) -> None:
  path = files.write_json(os.path.join(output_dir, RESULTS_FILENAME), result, indent=2)
  print(format_table(result), flush=True)
  print(f"Results: {path}", flush=True)
