"""Tuning the hand-designed baselines (Sec. 4.4, App. F): bin/tune_baselines.

Two searches over configurations of Adam, RMSProp and SGD+momentum, each configuration run on
the same inner runs (tasks of the family x inner initialisations, seeds as in evaluation.py):

  lr_grid        11 learning rates log-spaced from 1e-4 to 10 per optimizer; the best per task.
  random_search  "+Reg+Decay": uniform random search over all hyper-parameters (Adam's 8:
                 learning rate, beta1, beta2, epsilon, linear and exponential decay, l1, l2;
                 RMSProp's and SGDM's analogues), scale parameters uniform in log space; the best
                 configuration across the task distribution.

The objective is L_train (the mean minibatch training loss over the run) or L_valid (the mean
validation loss at evenly spaced steps of the run). Configurations are evaluated in parallel by
local processes; each finished one is appended to results.jsonl, so an interrupted search resumes
where it stopped (a line cut short by a kill is dropped). best.json holds the answer.
"""

import importlib
import json
import multiprocessing
import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import gin
import numpy as np
from absl import logging

from task_specific_learned_opt import candidates, evaluation, gin_config
from task_specific_learned_opt.tasks import base as task_base

CONFIGURABLES_MODULE = "task_specific_learned_opt.configurables"
RESULTS_FILENAME = "results.jsonl"
BEST_FILENAME = "best.json"
KINDS = ("adam", "rmsprop", "sgdm", "sgd")  # sgd: plain SGD, for the learning-rate grid.
MODES = ("lr_grid", "random_search")
OBJECTIVES = ("train", "valid")

# Random-search ranges (the paper gives none): log-uniform for scales; 1 - log-uniform for decays.
LOG_UNIFORM = {
  "learning_rate": (1e-5, 1.0),
  "epsilon": (1e-10, 1.0),
  "linear_decay": (1e-7, 1e-4),
  "exponential_decay": (1e-7, 1e-3),
  "l1": (1e-8, 1e-1),
  "l2": (1e-8, 1e-1),
}
ONE_MINUS_LOG_UNIFORM = {  # x = 1 - u, log10(u) uniform.
  "beta1": (1e-3, 1.0),
  "beta2": (1e-5, 1.0),
  "decay": (1e-3, 1.0),
  "momentum": (1e-3, 1.0),
}
HPARAMS = {
  "adam": (
    "learning_rate",
    "beta1",
    "beta2",
    "epsilon",
    "linear_decay",
    "exponential_decay",
    "l1",
    "l2",
  ),
  "rmsprop": ("learning_rate", "decay", "epsilon", "linear_decay", "exponential_decay", "l1", "l2"),
  "sgdm": (
    "learning_rate",
    "momentum",
    "nesterov",
    "linear_decay",
    "exponential_decay",
    "l1",
    "l2",
  ),
}


class SearchError(ValueError):
  """A results file that belongs to another search."""


class SearchSetup(NamedTuple):
  """The inner runs every configuration is judged on (see baseline_search for the fields)."""

  family: task_base.TaskFamily
  objective: str
  num_tasks: int
  num_inits: int
  num_steps: int
  num_points: int
  num_eval_batches: int
  seed: int


@gin.configurable
def baseline_search(
  family: task_base.TaskFamily = gin.REQUIRED,
  objective: str = "train",
  num_tasks: int = 80,
  num_inits: int = 1,
  num_steps: int = 10000,
  num_points: int = 20,
  num_eval_batches: int = 5,
  seed: int = 0,
) -> SearchSetup:
  """The inner runs every configuration is judged on.

  Args:
    family: the tasks (the outer-train distribution, like the learned optimizer's).
    objective: "train" (L_train) or "valid" (L_valid).
    num_tasks: tasks; with num_inits, the runs a configuration is averaged over (paper: 80).
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: evenly spaced steps where the validation loss is measured (for L_valid).
    num_eval_batches: batches per validation measurement.
    seed: seeds the tasks, the inits, the data and the random search.
  """
  if objective not in OBJECTIVES:
    raise ValueError(f"Unknown objective {objective!r}; expected one of {OBJECTIVES}.")
  return SearchSetup(
    family,
    objective,
    int(num_tasks),
    int(num_inits),
    int(num_steps),
    int(num_points),
    int(num_eval_batches),
    int(seed),
  )


def sample_hparams(kind: str, seed: int, index: int) -> dict:
  """Configuration `index` of the random search for `kind` (deterministic)."""
  rng = np.random.default_rng([seed, KINDS.index(kind), index])
  hparams = {}
  for name in HPARAMS[kind]:
    if name == "nesterov":
      hparams[name] = bool(rng.integers(2))
    elif name in LOG_UNIFORM:
      low, high = np.log10(LOG_UNIFORM[name])
      hparams[name] = float(10 ** rng.uniform(low, high))
    else:
      low, high = np.log10(ONE_MINUS_LOG_UNIFORM[name])
      hparams[name] = float(1 - 10 ** rng.uniform(low, high))
  return hparams


def configurations(
  mode: str, kinds: Sequence[str], num_configs: int, seed: int, learning_rates: Sequence[float]
) -> list[dict]:
  """Every configuration of the search: {"id", "kind", "hparams"}."""
  configs = []
  for kind in kinds:
    if mode == "lr_grid":
      for lr in learning_rates:
        configs.append(
          {"id": f"{kind}/lr={lr:.6g}", "kind": kind, "hparams": {"learning_rate": float(lr)}}
        )
    else:
      for i in range(num_configs):
        configs.append(
          {"id": f"{kind}/{i}", "kind": kind, "hparams": sample_hparams(kind, seed, i)}
        )
  return configs


def evaluate_config(setup: SearchSetup, config: dict) -> dict:
  """The configuration's objective on every run: [num_tasks, num_inits] (non-finite -> inf)."""
  c = candidates.from_config(config)
  objective = np.zeros([setup.num_tasks, setup.num_inits])
  points = np.unique(np.linspace(0, setup.num_steps, setup.num_points + 1).astype(int))
  splits = ("valid",) if setup.objective == "valid" else ()
  start = time.time()
  for t in range(setup.num_tasks):
    task = setup.family.sample(evaluation.task_seed(setup.seed, t))
    for r in range(setup.num_inits):
      run = evaluation.evaluate_run(
        setup.family,
        task,
        c,
        setup.num_steps,
        evaluation.run_seed(setup.seed, t, r),
        points if splits else np.array([0, setup.num_steps]),
        setup.num_eval_batches,
        splits,
      )
      value = np.mean(run["valid_loss"][1:]) if splits else np.mean(run["losses"])
      objective[t, r] = value if np.isfinite(value) else np.inf
  return {
    **config,
    "objective": objective.tolist(),
    "mean": float(np.mean(objective)),
    "seconds": time.time() - start,
  }


def read_results(path: str, signature: dict) -> dict:
  """The finished configurations in a results file, by id; drops a line cut short by a kill.

  Raises:
    SearchError: the file was written by a search with other settings.
  """
  results = {}
  if not os.path.exists(path):
    return results
  with open(path) as f:
    lines = f.read().splitlines()
  good = []
  for line in lines:
    try:
      record = json.loads(line)
    except json.JSONDecodeError:
      logging.warning("Dropping an incomplete line of %s.", path)
      continue
    if "signature" in record:
      if record["signature"] != signature:
        raise SearchError(
          f"{path} holds a search with other settings ({record['signature']}); this one is "
          f"{signature}. Use another --output_dir or the settings it was written with."
        )
    else:
      results[record["id"]] = record
    good.append(line + "\n")
  with open(path + ".tmp", "w") as f:
    f.writelines(good)
  os.replace(path + ".tmp", path)
  return results


_CHILD_SETUP = None


def _child_init(config_str: str) -> None:
  """Sets up a spawned search process: the parent's gin config, its thread settings."""
  global _CHILD_SETUP
  # A spawned process starts with nothing imported. The module that registers every gin
  # configurable imports this one, so it cannot be imported at the top of this module.
  importlib.import_module(CONFIGURABLES_MODULE)
  gin.clear_config()
  gin.parse_config(config_str)
  gin_config.configure_threads()
  _CHILD_SETUP = baseline_search()


def _child_evaluate(config: dict) -> dict:
  return evaluate_config(_CHILD_SETUP, config)


def summarize(mode: str, results: list[dict], num_tasks: int) -> dict:
  """lr_grid: the best learning rate per task and kind; random_search: the best configuration."""
  best = {}
  for kind in sorted({r["kind"] for r in results}):
    mine = [r for r in results if r["kind"] == kind]
    if mode == "lr_grid":
      per_task = np.stack([np.mean(r["objective"], axis=1) for r in mine])  # [configs, tasks]
      choice = np.argmin(per_task, axis=0)
      best[kind] = {
        "learning_rate_per_task": [mine[i]["hparams"]["learning_rate"] for i in choice],
        "objective_per_task": per_task[choice, np.arange(num_tasks)].tolist(),
      }
    else:
      winner = min(mine, key=lambda r: r["mean"])
      best[kind] = {
        "id": winner["id"],
        "hparams": winner["hparams"],
        "objective": winner["mean"],
        "num_configurations": len(mine),
      }
  return best


@gin.configurable(denylist=["output_dir"])
def tune_baselines(
  output_dir: str,
  mode: str = "random_search",
  kinds: Sequence[str] = ("adam",),
  num_configs: int = 2000,
  learning_rates: Sequence[float] = evaluation.LEARNING_RATES,
  num_processes: int = 1,
) -> dict:
  """Runs (or resumes) a search; writes results.jsonl and best.json in `output_dir`.

  Args:
    output_dir: where results.jsonl and best.json go.
    mode: "lr_grid" or "random_search".
    kinds: which baselines ("adam", "rmsprop", "sgdm").
    num_configs: random-search configurations per kind (paper: > 2000 for Adam, 1000 others).
    learning_rates: the grid of lr_grid.
    num_processes: local processes evaluating configurations in parallel (1: in this one).

  Returns:
    best.json's content.
  """
  if mode not in MODES:
    raise ValueError(f"Unknown mode {mode!r}; expected one of {MODES}.")
  unknown = sorted(set(kinds) - set(KINDS))
  if unknown:
    raise ValueError(f"Unknown baseline(s) {unknown}; expected some of {KINDS}.")
  setup = baseline_search()
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, RESULTS_FILENAME)
  signature = {
    "mode": mode,
    "family": setup.family.name,
    "objective": setup.objective,
    "num_tasks": setup.num_tasks,
    "num_inits": setup.num_inits,
    "num_steps": setup.num_steps,
    "seed": setup.seed,
  }
  done = read_results(path, signature)
  if not os.path.exists(path) or os.path.getsize(path) == 0:
    with open(path, "w") as f:
      f.write(json.dumps({"signature": signature}) + "\n")
  configs = configurations(mode, kinds, num_configs, setup.seed, learning_rates)
  todo = [c for c in configs if c["id"] not in done]
  logging.info(
    "%d configurations, %d already done, %d to run on %d process(es).",
    len(configs),
    len(configs) - len(todo),
    len(todo),
    num_processes,
  )
  start = time.time()

  def finished(i: int, record: dict[str, Any]) -> None:
    done[record["id"]] = record
    with open(path, "a") as f:
      f.write(json.dumps(record) + "\n")
    rate = (i + 1) / (time.time() - start)
    logging.info(
      "%d/%d %s: objective %.4f (%.1fs); ETA %.0fs",
      i + 1,
      len(todo),
      record["id"],
      record["mean"],
      record["seconds"],
      (len(todo) - i - 1) / rate,
    )

  if num_processes <= 1 or len(todo) <= 1:
    for i, config in enumerate(todo):
      finished(i, evaluate_config(setup, config))
  elif todo:
    context = multiprocessing.get_context("spawn")
    with context.Pool(num_processes, initializer=_child_init, initargs=(gin.config_str(),)) as pool:
      for i, record in enumerate(pool.imap_unordered(_child_evaluate, todo)):
        finished(i, record)
  results = [done[c["id"]] for c in configs]
  best = {"signature": signature, "best": summarize(mode, results, setup.num_tasks)}
  with open(os.path.join(output_dir, BEST_FILENAME), "w") as f:
    json.dump(best, f, indent=1)
  for kind, b in best["best"].items():
    if mode == "lr_grid":
      print(f"{kind}: best learning rate per task {b['learning_rate_per_task']}", flush=True)
    else:
      print(
        f"{kind}: best of {b['num_configurations']} configurations, L_{setup.objective} "
        f"{b['objective']:.4f}: {b['hparams']}",
        flush=True,
      )
  return best
