"""The ablation study (paper Sec. 4.5, Fig. 8, App. F): configurations x seeds at an equal budget.

`ablation_study` (bin/ablations) outer-trains every configuration (a gin file) with N theta seeds,
each run in its own `bin/train_local` process stopped at the same budget of inner steps
(`outer_training.max_inner_steps`), P processes at a time (processes.py: finished runs are
skipped, cut ones resumed). It then writes:

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

import os
from collections.abc import Mapping, Sequence

import gin
import numpy as np
from absl import logging

from task_specific_learned_opt import files, plots
from task_specific_learned_opt.distributed import progress
from task_specific_learned_opt.studies import processes

RESULTS_FILENAME = "ablations.json"
FIGURE_FILENAME = "ablations.png"
CURVES_FILENAME = "ablation_curves.png"
NUM_CURVE_POINTS = 40
BASELINE = "merged"


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


def claims(results: Mapping[str, dict]) -> list[dict]:
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
  checked = []

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
      checked.append(entry)

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
  return checked


def analyse(
  runs: Sequence[processes.Run],
  max_inner_steps: int,
  window: tuple[float, float],
  bindings: Sequence[str] = (),
) -> dict:
  """The study's numbers from the finished runs' records (see the module docstring)."""
  grid = np.linspace(0, max_inner_steps, NUM_CURVE_POINTS + 1)
  results: dict[str, dict] = {}
  for run in runs:
    if not processes.finished(run, max_inner_steps, bindings):
      continue
    records = progress.read_records(run.train_dir)
    done = processes.read_done(run)
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
    "claims": claims(results),
  }


def write(study: dict, output_dir: str, title: str) -> dict:
  """ablations.json, ablations.png and ablation_curves.png in `output_dir`; returns the paths."""
  paths = {
    "json": os.path.join(output_dir, RESULTS_FILENAME),
    "figure": os.path.join(output_dir, FIGURE_FILENAME),
    "curves": os.path.join(output_dir, CURVES_FILENAME),
  }
  files.write_json(paths["json"], study, indent=1)
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
    processes.AblationError: some runs failed; the others' results are still written.
  """
  runs = processes.runs_of(output_dir, configurations, num_seeds)
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
    processes.run_all(runs, max_inner_steps, num_parallel, bindings)
  except processes.AblationError as e:
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
