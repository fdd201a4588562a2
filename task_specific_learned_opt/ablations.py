"""The ablation study (paper Sec. 4.5, Fig. 8, App. F): configurations x seeds at an equal budget.

`ablation_study` (bin/ablations) outer-trains every configuration (a gin file) with N theta seeds,
each run in its own `bin/train_local` process stopped at the same budget of inner steps
(`outer_training.max_inner_steps`), P processes at a time. Each run has its own train dir,
<output_dir>/runs/<configuration>/seed_<k>, with its log (train.log) and, once it reached the
budget, done.json. Running the study again skips finished runs and resumes cut ones from their
last checkpoint (train_local resumes on its own). It then writes:

  ablations.json        per configuration and seed: the outer loss averaged over the window of
                        cumulative inner steps (paper: 380k to 420k), outer steps, seconds, the
                        curves; per configuration the median and quartiles; the paper's claims
                        checked against these numbers;
  ablations.png         Fig. 8: per configuration, the distribution over seeds of that average;
  ablation_curves.png   App. F: outer loss against inner steps, median and 25/75 percentiles
                        over seeds, a thin line per seed.

The window's average weights each outer step's outer loss (the mean of L+ and L- over its batch)
by the inner steps its samples took, so it is the mean training loss of the inner steps taken in
the window, whatever the truncation length.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import gin
import numpy as np
from absl import logging

from task_specific_learned_opt import plots
from task_specific_learned_opt.distributed import evaluator as evaluator_lib
from task_specific_learned_opt.distributed import launch
from task_specific_learned_opt.distributed import train_dir as train_dir_lib

RESULTS_FILENAME = "ablations.json"
FIGURE_FILENAME = "ablations.png"
CURVES_FILENAME = "ablation_curves.png"
SEEDS_FILENAME = "seeds.json"
DONE_FILENAME = "done.json"
LOG_FILENAME = "train.log"
NUM_CURVE_POINTS = 40
BASELINE = "merged"


class AblationError(RuntimeError):
  """A run of the study failed; the message names its log."""


class Run(NamedTuple):
  """One outer-training run of the study: a configuration and a theta seed."""

  name: str  # The configuration's name (its gin file's stem).
  gin_file: str
  seed: int
  train_dir: str


def runs_of(output_dir: str, configurations: Mapping[str, str], num_seeds: int) -> list[Run]:
  """Every (configuration, seed) run, seeds 0 ... num_seeds - 1, with its train dir."""
  return [
    Run(name, gin_file, seed, os.path.join(output_dir, "runs", name, f"seed_{seed}"))
    for name, gin_file in configurations.items()
    for seed in range(num_seeds)
  ]


def command(run: Run, max_inner_steps: int | None, bindings: Sequence[str] = ()) -> list[str]:
  """The bin/train_local command of `run` (this Python), stopped at `max_inner_steps` if set."""
  flags = [f"--gin_file={run.gin_file}", f"--train_dir={run.train_dir}"]
  budget = (
    [] if max_inner_steps is None else [f"outer_training.max_inner_steps = {max_inner_steps}"]
  )
  flags += [
    f"--gin_bindings={b}"
    for b in (
      f"outer_training.seed = {run.seed}",
      *budget,
      "train_local.final_evaluation = None",
      *bindings,
    )
  ]
  return [sys.executable, launch.binary("train_local"), *flags]


def read_records(train_dir: str) -> list[dict]:
  """The run's progress records (progress.jsonl); [] if it has none yet."""
  path = os.path.join(train_dir, train_dir_lib.PROGRESS_FILENAME)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def finished(run: Run, max_inner_steps: int | None, bindings: Sequence[str] = ()) -> bool:
  """Whether `run` already ran to a budget of at least `max_inner_steps` (its done.json).

  With `max_inner_steps` None: whether it ran to its last outer step without a budget. A run
  finished with other study bindings (e.g. more outer steps) is not finished: it resumes.
  """
  path = os.path.join(run.train_dir, DONE_FILENAME)
  if not os.path.exists(path):
    return False
  with open(path) as f:
    record = json.load(f)
  if record.get("bindings", []) != list(bindings):
    return False
  done = record.get("max_inner_steps", -1)
  if max_inner_steps is None or done is None:
    return done == max_inner_steps
  return done >= max_inner_steps


def _mark_done(
  run: Run, max_inner_steps: int | None, seconds: float, bindings: Sequence[str] = ()
) -> dict:
  """Writes the run's done.json once it has finished (its budget, or its last outer step).

  Raises:
    AblationError: it stopped before (e.g. a SIGTERM), or before the budget.
  """
  records = read_records(run.train_dir)
  inner_steps = records[-1]["inner_steps"] if records else 0
  if not os.path.exists(os.path.join(run.train_dir, train_dir_lib.FINISHED_FILENAME)):
    raise AblationError(
      f"{run.name} seed {run.seed} stopped before its end; run the study again to resume it "
      f"(see {run.train_dir}/{LOG_FILENAME})."
    )
  if max_inner_steps is not None and inner_steps < max_inner_steps:
    raise AblationError(
      f"{run.name} seed {run.seed} stopped at {inner_steps} of {max_inner_steps} inner steps "
      f"(outer_training.num_outer_steps too small?); see {run.train_dir}/{LOG_FILENAME}."
    )
  done = {
    "max_inner_steps": max_inner_steps,
    "bindings": list(bindings),
    "inner_steps": inner_steps,
    "outer_steps": records[-1]["outer_step"],
    "seconds": seconds,
  }
  with open(os.path.join(run.train_dir, DONE_FILENAME), "w") as f:
    json.dump(done, f)
  return done


def _share_reference(run: Run, runs: Sequence[Run]) -> None:
  """Gives `run` a finished sibling's evaluator reference (the same tasks: it is reused only if
  its settings match, evaluator.Evaluator.reference), so it is computed once per configuration."""
  mine = os.path.join(run.train_dir, evaluator_lib.REFERENCE_FILENAME)
  for other in runs:
    theirs = os.path.join(other.train_dir, evaluator_lib.REFERENCE_FILENAME)
    if other.name == run.name and os.path.exists(theirs) and not os.path.exists(mine):
      shutil.copyfile(theirs, mine)


def run_all(
  runs: Sequence[Run],
  max_inner_steps: int | None,
  num_parallel: int,
  bindings: Sequence[str] = (),
  poll_secs: float = 1.0,
) -> None:
  """Runs every unfinished run, `num_parallel` processes at a time; logs progress and ETA.

  A KeyboardInterrupt (Ctrl-C, or SIGTERM made one by stopping.interrupt_on_sigterm) stops the
  running processes with SIGTERM (each saves a checkpoint) and is re-raised; the next call
  resumes them.

  Raises:
    AblationError: some runs failed (the others still ran); the message names their logs.
  """
  todo = [r for r in runs if not finished(r, max_inner_steps, bindings)]
  for r in runs:
    if r not in todo:
      logging.info("%s seed %d: finished earlier; kept.", r.name, r.seed)
  running: dict[Run, tuple[subprocess.Popen, float]] = {}
  failures, done_seconds, start = [], [], time.time()
  try:
    while todo or running:
      while todo and len(running) < num_parallel:
        run = todo.pop(0)
        os.makedirs(run.train_dir, exist_ok=True)
        _share_reference(run, runs)
        with open(os.path.join(run.train_dir, LOG_FILENAME), "a") as log:
          process = subprocess.Popen(
            command(run, max_inner_steps, bindings),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the study only; it stops runs in order.
          )
        running[run] = (process, time.time())
        logging.info("%s seed %d: started (PID %d).", run.name, run.seed, process.pid)
      time.sleep(poll_secs)
      for run, (process, started) in list(running.items()):
        if process.poll() is None:
          continue
        del running[run]
        seconds = time.time() - started
        try:
          if process.returncode != 0:
            raise AblationError(
              f"{run.name} seed {run.seed} exited with status {process.returncode}; see "
              f"{run.train_dir}/{LOG_FILENAME}."
            )
          done = _mark_done(run, max_inner_steps, seconds, bindings)
        except AblationError as e:
          logging.error("%s", e)
          failures.append(str(e))
          continue
        done_seconds.append(seconds)
        left = len(todo) + len(running)
        eta = np.mean(done_seconds) * left / num_parallel
        logging.info(
          "%s seed %d: finished, %d outer steps, %d inner steps in %s; %d runs left, ETA %s.",
          run.name,
          run.seed,
          done["outer_steps"],
          done["inner_steps"],
          train_dir_lib.format_seconds(seconds),
          left,
          train_dir_lib.format_seconds(eta),
        )
  except KeyboardInterrupt:
    logging.info(
      "Stopping %d runs; each saves a checkpoint, and the next call resumes it.", len(running)
    )
    for process, _ in running.values():
      process.send_signal(signal.SIGTERM)
    for process, _ in running.values():
      try:
        process.wait(timeout=120)
      except subprocess.TimeoutExpired:
        process.kill()
    raise
  logging.info("All runs done in %s.", train_dir_lib.format_seconds(time.time() - start))
  if failures:
    raise AblationError(f"{len(failures)} runs failed: {' '.join(failures)}")


def window_mean(records: Sequence[dict], window: tuple[float, float]) -> float:
  """The outer loss over the records whose cumulative inner steps fall in (low, high].

  Each record is weighted by the inner steps its samples took; nan if none falls in the window.
  """
  low, high = window
  total = weight = 0.0
  previous = 0
  for r in records:
    taken, previous = r["inner_steps"] - previous, r["inner_steps"]
    if low < r["inner_steps"] <= high and np.isfinite(r["outer_loss"]):
      total += taken * r["outer_loss"]
      weight += taken
  return total / weight if weight else float("nan")


def curve(records: Sequence[dict], grid: np.ndarray) -> np.ndarray:
  """The outer loss on a grid of inner steps: each grid interval's inner-step-weighted mean.

  Interval i is (grid[i], grid[i + 1]]; intervals without a record take the last value before
  them (nan before the first record).
  """
  values = np.full(len(grid) - 1, np.nan)
  for i in range(len(grid) - 1):
    values[i] = window_mean(records, (grid[i], grid[i + 1]))
    if np.isnan(values[i]) and i > 0:
      values[i] = values[i - 1]
  return values


def _claims(results: Mapping[str, dict]) -> list[dict]:
  """The paper's Sec. 4.5 claims, checked on the medians over seeds (lower loss is better).

  A claim that compares two medians also gives their difference (`margin`, the configuration's
  minus merged's) and whether it is `resolved`: larger than both configurations' interquartile
  ranges over seeds. With few seeds, a claim that holds by a margin within the spreads is not
  shown by the study.
  """
  if BASELINE not in results:
    return []
  median = {name: r["median"] for name, r in results.items()}
  base = median[BASELINE]
  spread = results[BASELINE]["q75"] - results[BASELINE]["q25"]
  claims = []

  def iqr(name: str) -> float:
    return results[name]["q75"] - results[name]["q25"]

  def claim(text: str, names: Sequence[str], holds: bool, rule: str, compared: bool = True) -> None:
    if all(n in median for n in names):
      numbers = {n: median[n] for n in (BASELINE, *names)}
      entry = {"claim": text, "holds": bool(holds), "rule": rule, "medians": numbers}
      if compared:  # A difference of medians the seeds tell apart: beyond both spreads.
        margin = median[names[0]] - base
        entry["margin"] = margin
        entry["resolved"] = bool(abs(margin) > max(spread, iqr(names[0])))
      claims.append(entry)

  for name, label in (("estimator_rp", "g_rp only"), ("estimator_es", "ES only")):
    if name in median:
      claim(f"merged beats {label}", [name], base < median[name], "median below")
  fixed = sorted((n for n in median if n.startswith("fixed_")), key=lambda n: int(n[6:]))
  for name in fixed[:-1]:  # The shorter fixed truncations.
    claim(
      f"a fixed truncation of {name[6:]} converges poorly",
      [name],
      median[name] > base,
      "median above merged's",
    )
  if len(fixed) > 1:
    longest = fixed[-1]
    claim(
      f"a fixed truncation of {longest[6:]} has high variance over seeds",
      [longest],
      iqr(longest) > spread,
      "interquartile range above merged's",
      compared=False,
    )
  if "no_momentum" in median:
    claim(
      "no momentum features fails",
      ["no_momentum"],
      median["no_momentum"] > base,
      "median above merged's",
    )
  if "no_time" in median:
    tolerance = max(spread, 0.02 * abs(base))
    claim(
      "no time features is nearly as good",
      ["no_time"],
      median["no_time"] - base <= tolerance,
      f"median at most max(merged's interquartile range, 2% of its median) = "
      f"{tolerance:.4f} above merged's",
      compared=False,
    )
  return claims


def analyse(
  runs: Sequence[Run],
  max_inner_steps: int,
  window: tuple[float, float],
  bindings: Sequence[str] = (),
) -> dict:
  """The study's numbers from the finished runs' records (see the module docstring)."""
  grid = np.linspace(0, max_inner_steps, NUM_CURVE_POINTS + 1)
  results: dict[str, dict] = {}
  for run in runs:
    if not finished(run, max_inner_steps, bindings):
      continue
    records = read_records(run.train_dir)
    with open(os.path.join(run.train_dir, DONE_FILENAME)) as f:
      done = json.load(f)
    r = results.setdefault(
      run.name,
      {
        "gin_file": run.gin_file,
        "seeds": [],
        "window_loss": [],
        "outer_steps": [],
        "seconds": [],
        "curves": [],
      },
    )
    r["seeds"].append(run.seed)
    r["window_loss"].append(window_mean(records, window))
    r["outer_steps"].append(done["outer_steps"])
    r["seconds"].append(done["seconds"])
    r["curves"].append(curve(records, grid).tolist())
  for r in results.values():
    losses = np.asarray(r["window_loss"], float)
    finite = losses[np.isfinite(losses)]
    q25, median, q75 = np.percentile(finite, [25, 50, 75]) if finite.size else [np.nan] * 3
    r.update(median=float(median), q25=float(q25), q75=float(q75))
  return {
    "max_inner_steps": max_inner_steps,
    "window": list(window),
    "curve_inner_steps": ((grid[:-1] + grid[1:]) / 2).tolist(),
    "results": results,
    "claims": _claims(results),
  }


def _jsonable(x: Any) -> Any:
  """`x` with non-finite floats as strings, so the JSON stays standard."""
  if isinstance(x, dict):
    return {k: _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, float) and not np.isfinite(x):
    return str(x)
  return x


def write(study: dict, output_dir: str, title: str) -> dict:
  """ablations.json, ablations.png and ablation_curves.png in `output_dir`; returns the paths."""
  paths = {
    "json": os.path.join(output_dir, RESULTS_FILENAME),
    "figure": os.path.join(output_dir, FIGURE_FILENAME),
    "curves": os.path.join(output_dir, CURVES_FILENAME),
  }
  with open(paths["json"], "w") as f:
    json.dump(_jsonable(study), f, indent=1)
  plots.plot_ablations(study, paths["figure"], title)
  plots.plot_ablation_curves(study, paths["curves"], title)
  return paths


@gin.configurable(denylist=["output_dir", "num_seeds"])
def ablation_study(
  output_dir: str,
  configurations: Mapping[str, str] = gin.REQUIRED,
  num_seeds: int = 3,
  max_inner_steps: int = gin.REQUIRED,
  window: tuple[float, float] = gin.REQUIRED,
  num_parallel: int = 2,
  bindings: Sequence[str] = (),
) -> dict:
  """Runs the study (skipping finished runs, resuming cut ones) and writes its files.

  Args:
    output_dir: the runs' train dirs and the study's files.
    configurations: {name: gin file}; name "merged" is the baseline the claims compare to.
    num_seeds: theta seeds per configuration (outer_training.seed = 0 ... num_seeds - 1).
    max_inner_steps: every run's budget of inner steps (the sum of its samples' K).
    window: (low, high] cumulative inner steps whose outer loss is averaged (paper: 380k, 420k).
    num_parallel: runs at a time, each its own process.
    bindings: gin bindings added to every run.

  Returns:
    The study, as written to ablations.json, with "paths".

  Raises:
    AblationError: some runs failed; the others' results are still written.
  """
  runs = runs_of(output_dir, configurations, num_seeds)
  logging.info(
    "Ablation study: %d configurations x %d seeds, %d inner steps each, %d at a time, in %s.",
    len(configurations),
    num_seeds,
    max_inner_steps,
    num_parallel,
    output_dir,
  )
  failure = None
  try:
    run_all(runs, max_inner_steps, num_parallel, bindings)
  except AblationError as e:
    failure = e
  study = analyse(runs, max_inner_steps, tuple(window), bindings)
  study["num_seeds"] = num_seeds
  title = (
    f"{len(configurations)} configurations x {num_seeds} seeds, {max_inner_steps} inner steps "
    f"each; window ({window[0]:g}, {window[1]:g}]"
  )
  study["paths"] = write(study, output_dir, title)
  for name, r in study["results"].items():
    print(
      f"{name:>14}: outer loss in the window, median {r['median']:.4f} "
      f"[{r['q25']:.4f}, {r['q75']:.4f}] over {len(r['seeds'])} seeds",
      flush=True,
    )
  for c in study["claims"]:
    resolved = ""
    if "resolved" in c:
      resolved = (
        f"; medians differ by {c['margin']:+.4f}, "
        f"{'beyond' if c['resolved'] else 'within'} the seeds' interquartile ranges"
      )
    print(
      f"{'holds' if c['holds'] else 'does not hold'}: {c['claim']} ({c['rule']}{resolved})",
      flush=True,
    )
  print(f"Ablation study: {study['paths']['json']}, {study['paths']['figure']}", flush=True)
  if failure is not None:
    raise failure
  return study


def passed_at(records: Sequence[dict], reference: Mapping, family: str = "outer_test") -> dict:
  """The first evaluated snapshot whose mean training loss is below the reference's; {} if none.

  Returns:
    {"outer_step": ..., "inner_steps": ...} of that snapshot.
  """
  target = reference[family]["mean_train_loss"]
  for r in records:
    if r[family]["mean_train_loss"] < target:
      return {"outer_step": r["outer_step"], "inner_steps": r["inner_steps"]}
  return {}


def summarize_seeds(runs: Sequence[Run]) -> dict:
  """Per configuration: every seed's evaluations, when it passed the reference, the best seed.

  The best seed is the one with the lowest mean training loss on outer-train tasks at its last
  snapshot: chosen on outer-train tasks only, as Sec. 4.3 does, so the outer-test numbers stay
  held out.
  """
  summary: dict[str, dict] = {}
  for run in runs:
    records = evaluator_lib.current_records(run.train_dir)
    if not records:
      continue
    reference = evaluator_lib.read_json(
      os.path.join(run.train_dir, evaluator_lib.REFERENCE_FILENAME)
    )
    s = summary.setdefault(
      run.name, {"gin_file": run.gin_file, "reference": reference, "seeds": {}}
    )
    s["seeds"][str(run.seed)] = {
      "records": records,
      "last": {k: records[-1][k] for k in ("outer_step", "inner_steps", *evaluator_lib.FAMILIES)},
      "passed_reference_on_outer_test": passed_at(records, reference) if reference else {},
    }
  for s in summary.values():
    last = {seed: r["last"]["outer_train"]["mean_train_loss"] for seed, r in s["seeds"].items()}
    s["best_seed_by_outer_train"] = int(min(last, key=last.get))
  return summary


@gin.configurable(denylist=["output_dir", "num_seeds"])
def seed_study(
  output_dir: str,
  configurations: Mapping[str, str] = gin.REQUIRED,
  num_seeds: int = 3,
  num_parallel: int = 2,
  bindings: Sequence[str] = ("train_local.evaluate_snapshots = True",),
) -> dict:
  """Performance over outer-training across theta seeds (Fig. 5): runs, then overlays the seeds.

  Every configuration runs with seeds 0 ... num_seeds - 1 to its last outer step (resumable as
  the ablation study is), with the evaluator in each run; then writes seeds.json and, per
  configuration, <name>_seeds.png (the evaluator's numbers of every seed, the tuned baseline
  dashed).

  Args:
    output_dir: the runs' train dirs and the study's files.
    configurations: {name: gin file}, e.g. the L_train and L_valid experiments.
    num_seeds: theta seeds per configuration.
    num_parallel: runs at a time, each its own process.
    bindings: gin bindings added to every run (by default: evaluate snapshots in-process).

  Returns:
    {name: summary (summarize_seeds)}, with "paths".

  Raises:
    AblationError: some runs failed; the others' results are still written.
  """
  runs = runs_of(output_dir, configurations, num_seeds)
  failure = None
  try:
    run_all(runs, None, num_parallel, bindings)
  except AblationError as e:
    failure = e
  summary = summarize_seeds(runs)
  paths = {"json": os.path.join(output_dir, SEEDS_FILENAME)}
  with open(paths["json"], "w") as f:
    json.dump(_jsonable(summary), f, indent=1)
  for name, s in summary.items():
    paths[name] = os.path.join(output_dir, f"{name}_seeds.png")
    plots.plot_evaluation_progress(
      {f"seed {seed}": r["records"] for seed, r in s["seeds"].items()},
      s["reference"] or None,
      paths[name],
      f"{name}: {len(s['seeds'])} theta seeds; best by outer-train loss: seed "
      f"{s['best_seed_by_outer_train']}",
    )
    for seed, r in s["seeds"].items():
      passed = r["passed_reference_on_outer_test"]
      when = f"from outer step {passed['outer_step']}" if passed else "never"
      loss = r["last"]["outer_test"]["mean_train_loss"]
      print(
        f"{name} seed {seed}: outer-test mean training loss {loss:.4f} at outer step "
        f"{r['last']['outer_step']}; below the reference {when}",
        flush=True,
      )
  print(f"Seeds: {paths['json']}", flush=True)
  summary["paths"] = paths
  if failure is not None:
    raise failure
  return summary
