"""Tuning the hand-designed baselines (Sec. 4.4, App. F): bin/tune_baselines.

Two searches over configurations of Adam, RMSProp and SGD+momentum, each configuration run on
the same inner runs (tasks of the family x inner initialisations, seeds as in protocol.py):

  lr_grid        11 learning rates log-spaced from 1e-4 to 10 per optimizer; the best per task.
  random_search  "+Reg+Decay": uniform random search over all hyper-parameters (Adam's 8:
                 learning rate, beta1, beta2, epsilon, linear and exponential decay, l1, l2;
                 RMSProp's and SGDM's analogues; search_space.py), scale parameters uniform in
                 log space; the best configuration across the task distribution.

The objective is L_train (the mean minibatch training loss over the run) or L_valid (the mean
validation loss at evenly spaced steps of the run), or "both": each run records both, so one set
of runs serves the two searches, whose answers go to L_train/best.json and L_valid/best.json
(each as a search of its own objective writes it). Configurations are evaluated in parallel by
local processes; each finished one is appended to results.jsonl, so an interrupted search resumes
where it stopped (a line cut short by a kill is dropped). best.json holds the answer.
"""

import multiprocessing
import os
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import gin
import numpy as np
from absl import logging

from task_specific_learned_opt import errors, files, gin_config
from task_specific_learned_opt.evaluation import candidates, running, search_space, tuning
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.tasks import base as task_base

RESULTS_FILENAME = "results.jsonl"
BEST_FILENAME = "best.json"
MODES = ("lr_grid", "random_search")
OBJECTIVES = ("train", "valid")  # A search's answers; its setup may also say "both".
BOTH = "both"


class SearchError(errors.UserError, ValueError):
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
    objective: "train" (L_train), "valid" (L_valid) or "both" (each run records both; two
      answers).
    num_tasks: tasks; with num_inits, the runs a configuration is averaged over (paper: 80).
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: evenly spaced steps where the validation loss is measured (for L_valid).
    num_eval_batches: batches per validation measurement.
    seed: seeds the tasks, the inits, the data and the random search.
  """
  if objective not in (*OBJECTIVES, BOTH):
    raise ValueError(f"Unknown objective {objective!r}; expected one of {(*OBJECTIVES, BOTH)}.")
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


def configurations(
  mode: str,
  kinds: Sequence[str],
  num_configs: int,
  seed: int,
  learning_rates: Sequence[float],
  num_steps: int,
) -> list[dict]:
  """Every configuration of the search: {"id", "kind", "hparams"}; decays act over `num_steps`."""
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
          {
            "id": f"{kind}/{i}",
            "kind": kind,
            "hparams": search_space.sample_hparams(kind, seed, i, num_steps),
          }
        )
  return configs


def evaluate_config(setup: SearchSetup, config: dict) -> dict:
  """The configuration's objective on every run: [num_tasks, num_inits] (non-finite -> inf).

  With setup.objective "both", "objective" and "mean" are L_valid's and "train_objective" and
  "train_mean" L_train's, from the same runs.
  """
  c = candidates.from_config(config)
  objective = np.zeros([setup.num_tasks, setup.num_inits])
  train_objective = np.zeros([setup.num_tasks, setup.num_inits])
  points = np.unique(np.linspace(0, setup.num_steps, setup.num_points + 1).astype(int))
  splits = () if setup.objective == "train" else ("valid",)
  start = time.time()
  for t in range(setup.num_tasks):
    task = setup.family.sample(protocol_lib.task_seed(setup.seed, t))
    for r in range(setup.num_inits):
      run = running.evaluate_run(
        setup.family,
        task,
        c,
        setup.num_steps,
        protocol_lib.run_seed(setup.seed, t, r),
        points if splits else np.array([0, setup.num_steps]),
        setup.num_eval_batches,
        splits,
      )
      train_value = np.mean(run["losses"])
      value = np.mean(run["valid_loss"][1:]) if splits else train_value
      objective[t, r] = value if np.isfinite(value) else np.inf
      train_objective[t, r] = train_value if np.isfinite(train_value) else np.inf
  both = (
    {"train_objective": train_objective.tolist(), "train_mean": float(np.mean(train_objective))}
    if setup.objective == BOTH
    else {}
  )
  return {
    **config,
    "objective": objective.tolist(),
    "mean": float(np.mean(objective)),
    **both,
    "seconds": time.time() - start,
  }


def on_objective(record: dict, objective: str) -> dict:
  """A "both" search's record as a search of `objective` ("train" or "valid") would write it."""
  rest = {k: v for k, v in record.items() if not k.startswith("train_")}
  if objective == "valid":
    return rest
  return {**rest, "objective": record["train_objective"], "mean": record["train_mean"]}


def read_results(path: str, signature: dict) -> dict:
  """The finished configurations in a results file, by id; drops a line cut short by a kill.

  Raises:
    SearchError: the file was written by a search with other settings.
  """
  records = files.read_jsonl(path)
  results = {}
  for record in records:
    if "signature" not in record:
      results[record["id"]] = record
    elif record["signature"] != signature:
      raise SearchError(
        f"{path} holds a search with other settings ({record['signature']}); this one is "
        f"{signature}. Use another --output_dir or the settings it was written with."
      )
  _drop_cut_line(path, len(records))
  return results


def _drop_cut_line(path: str, num_records: int) -> None:
  """Removes a last line cut short by a kill (beyond `num_records`), so appends start clean."""
  if not os.path.exists(path):
    return
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  if len(lines) > num_records:
    logging.warning("Dropping an incomplete line of %s.", path)
    files.write_text(path, "".join(line.rstrip("\n") + "\n" for line in lines[:num_records]))


_CHILD_SETUP = None


def _child_init(config_str: str, modules: Sequence[str]) -> None:
  """Sets up a spawned search process: the parent's gin config, its thread settings."""
  global _CHILD_SETUP
  gin_config.init_spawned_process(config_str, modules)
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
  learning_rates: Sequence[float] = tuning.LEARNING_RATES,
  num_processes: int = 1,
) -> dict:
  """Runs (or resumes) a search; writes results.jsonl and best.json in `output_dir`.

  Args:
    output_dir: where results.jsonl and best.json go (L_train/best.json and L_valid/best.json
      for an objective of "both").
    mode: "lr_grid" or "random_search".
    kinds: which baselines ("adam", "rmsprop", "sgdm").
    num_configs: random-search configurations per kind (paper: > 2000 for Adam, 1000 others).
    learning_rates: the grid of lr_grid.
    num_processes: local processes evaluating configurations in parallel (1: in this one).

  Returns:
    best.json's content; for an objective of "both", {"train": L_train/best.json's content,
    "valid": L_valid/best.json's}.
  """
  if mode not in MODES:
    raise ValueError(f"Unknown mode {mode!r}; expected one of {MODES}.")
  unknown = sorted(set(kinds) - set(search_space.KINDS))
  if unknown:
    raise ValueError(f"Unknown baseline(s) {unknown}; expected some of {search_space.KINDS}.")
  setup = baseline_search()
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, RESULTS_FILENAME)
  signature = _signature(mode, setup)
  done = _open_results(path, signature)
  configs = configurations(mode, kinds, num_configs, setup.seed, learning_rates, setup.num_steps)
  todo = [c for c in configs if c["id"] not in done]
  logging.info(
    "%d configurations, %d already done, %d to run on %d process(es).",
    len(configs),
    len(configs) - len(todo),
    len(todo),
    num_processes,
  )
  _evaluate_all(setup, todo, num_processes, _Recorder(path, done, len(todo)))
  results = [done[c["id"]] for c in configs]
  if setup.objective != BOTH:
    best = {"signature": signature, "best": summarize(mode, results, setup.num_tasks)}
    files.write_json(os.path.join(output_dir, BEST_FILENAME), best, indent=1)
    _print_best(best, mode, setup.objective)
    return best
  answers = {}
  for objective in OBJECTIVES:
    mine = [on_objective(r, objective) for r in results]
    answers[objective] = {
      "signature": _signature(mode, setup._replace(objective=objective)),
      "results": f"../{RESULTS_FILENAME}",  # The runs it was chosen from, shared by both.
      "best": summarize(mode, mine, setup.num_tasks),
    }
    both_dir = os.path.join(output_dir, f"L_{objective}")
    os.makedirs(both_dir, exist_ok=True)
    files.write_json(os.path.join(both_dir, BEST_FILENAME), answers[objective], indent=1)
    _print_best(answers[objective], mode, objective)
  return answers


def _signature(mode: str, setup: SearchSetup) -> dict:
  """What a results file's configurations depend on; a resumed search must match it."""
  return {
    "mode": mode,
    "family": setup.family.name,
    "objective": setup.objective,
    "num_tasks": setup.num_tasks,
    "num_inits": setup.num_inits,
    "num_steps": setup.num_steps,
    "seed": setup.seed,
    "decays": search_space.DECAY_PARAMETERISATION,
  }


def _open_results(path: str, signature: dict) -> dict:
  """The finished configurations of results.jsonl by id; starts the file with its signature."""
  done = read_results(path, signature)
  if not os.path.exists(path) or os.path.getsize(path) == 0:
    files.append_jsonl(path, [{"signature": signature}])
  return done


class _Recorder:
  """Appends each finished configuration to results.jsonl and logs it with the time left."""

  def __init__(self, path: str, done: dict, total: int):
    self.path, self.done, self.total, self.start = path, done, total, time.time()

  def __call__(self, i: int, record: dict) -> None:
    self.done[record["id"]] = record
    files.append_jsonl(self.path, [record])
    rate = (i + 1) / (time.time() - self.start)
    logging.info(
      "%d/%d %s: objective %.4f (%.1fs); ETA %.0fs",
      i + 1,
      self.total,
      record["id"],
      record["mean"],
      record["seconds"],
      (self.total - i - 1) / rate,
    )


def _evaluate_all(
  setup: SearchSetup, todo: Sequence[dict], num_processes: int, finished: Callable
) -> None:
  """Evaluates `todo` in this process or in `num_processes` spawned ones; finished(i, record)."""
  if num_processes <= 1 or len(todo) <= 1:
    for i, config in enumerate(todo):
      finished(i, evaluate_config(setup, config))
  elif todo:
    context = multiprocessing.get_context("spawn")
    with context.Pool(
      num_processes,
      initializer=_child_init,
      initargs=(gin.config_str(), gin_config.registering_modules()),
    ) as pool:
      for i, record in enumerate(pool.imap_unordered(_child_evaluate, todo)):
        finished(i, record)


def _print_best(best: dict, mode: str, objective: str) -> None:
  for kind, b in best["best"].items():
    if mode == "lr_grid":
      print(f"{kind}: best learning rate per task {b['learning_rate_per_task']}", flush=True)
    else:
      print(
        f"{kind}: best of {b['num_configurations']} configurations, L_{objective} "
        f"{b['objective']:.4f}: {b['hparams']}",
        flush=True,
      )
