"""What an evaluation writes and prints: JSON, CSV, the curves, the histograms (Fig. 6, App. I).

The train-loss panel of the curves, and the comparisons on mean_loss, use the baselines tuned on
training loss; the test-loss panel, and the comparisons on mean_test_loss, those tuned on
validation loss (tuning.py). Learned and fixed candidates are in both. The files:

  evaluation.json          everything, per candidate [task, init, point] arrays, the panels;
  summary.json             the same without the per-run arrays (small enough to ship): per
                           candidate its per-task run averages and its curves' percentiles;
  evaluation.csv           one row per (candidate, task, init, step);
  curves.png               median and 25/75 percentiles against steps (Fig. 6a/b) ...
  curves_wallclock.png     ... and against wall-clock, steps rescaled by measured steps/s (App. I);
  histogram_<metric>_<a>_vs_<b>.png
                           per task, (baseline - learned) run-averaged loss (Fig. 6c), the
                           mean's 95% bootstrap interval shaded.

Each comparison carries the mean difference, its bootstrap interval and the paired tests'
p-values (statistics.py), and is printed and drawn worded by its interval.
"""

import csv
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from task_specific_learned_opt import files, plots
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import statistics

RESULTS_FILENAME = "evaluation.json"
SUMMARY_FILENAME = "summary.json"
CSV_FILENAME = "evaluation.csv"
CURVES_FILENAME = "curves.png"
WALLCLOCK_FILENAME = "curves_wallclock.png"
# Fig. 6a/b: the loss each panel of the curves plots -> the objective its baselines are tuned on;
# and the metrics each panel's comparisons (Fig. 6c) are made on: the run-averaged training loss;
# the test loss averaged over the run and at its last step (Fig. 6b: "converges to a lower
# minimum").
PANEL_OBJECTIVES = {"train": "train", "test": "valid"}
PANEL_METRICS = {"train": ("mean_loss",), "test": ("mean_test_loss", "final_test_loss")}
METRIC_NAMES = {
  "mean_loss": "mean training loss",
  "mean_valid_loss": "mean validation loss",
  "mean_test_loss": "mean test loss",
  "final_test_loss": "final test loss",
}
_OBJECTIVE_NAMES = {"train": "training", "valid": "validation"}


def compare(
  evaluation: dict, learned_name: str, baseline_name: str, metric: str = "mean_loss"
) -> dict:
  """Per task, baseline minus learned `metric` (averaged over inits); who wins, and how surely.

  Args:
    evaluation: an evaluation with both candidates in its "results".
    learned_name: the learned optimizer.
    baseline_name: the baseline.
    metric: a run-averaged metric of METRIC_NAMES ("mean_loss": training loss).

  Returns:
    {"learned", "baseline", "metric", "metric_name", "difference": [num_tasks],
     "learned_mean_loss" and "baseline_mean_loss": the metric's mean over tasks,
     "fraction_learned_wins": the fraction of tasks with a positive difference, and
     statistics.paired's statistics of the difference: "mean_difference", its bootstrap
     interval "ci95" over tasks, the sign test's "p_value" on the tasks won, "wilcoxon_p_value",
     the counts and the interval's "outcome"}.
  """
  results = evaluation["results"]
  learned_loss = np.asarray(results[learned_name][metric]).mean(axis=1)
  baseline_loss = np.asarray(results[baseline_name][metric]).mean(axis=1)
  difference = baseline_loss - learned_loss
  return {
    "learned": learned_name,
    "baseline": baseline_name,
    "metric": metric,
    "metric_name": METRIC_NAMES[metric],
    "difference": difference,
    "learned_mean_loss": float(np.mean(learned_loss)),
    "baseline_mean_loss": float(np.mean(baseline_loss)),
    "fraction_learned_wins": float(np.mean(difference > 0)),
    **statistics.paired(difference),
  }


def assign_panels(evaluation: dict, both: Sequence[str], objectives: Mapping[str, str]) -> None:
  """Sets evaluation["panel_baselines"] and evaluation["panels"] ({"train": names, "test": ...}).

  Args:
    evaluation: the evaluation to complete.
    both: the candidates drawn in both panels (learned and fixed ones).
    objectives: {baseline name: the objective it is tuned on}, in the order they are drawn.
  """
  evaluation["panel_baselines"] = {
    panel: [name for name, o in objectives.items() if o == objective]
    for panel, objective in PANEL_OBJECTIVES.items()
  }
  evaluation["panels"] = {
    panel: list(both) + names for panel, names in evaluation["panel_baselines"].items()
  }


def comparisons(evaluation: dict, learned_names: Sequence[str]) -> list[dict]:
  """Each learned candidate against each baseline of each panel, on each of the panel's metrics."""
  return [
    compare(evaluation, learned, baseline, metric)
    for panel, baseline_names in evaluation["panel_baselines"].items()
    for learned in learned_names
    for baseline in baseline_names
    for metric in PANEL_METRICS[panel]
  ]


def panel_titles(evaluation: dict) -> dict[str, str]:
  """The titles of the curves' panels: the loss each plots and the baselines it uses.

  Args:
    evaluation: an evaluation with "panel_baselines" ({panel: baseline names}).
  """
  titles = {}
  for panel, objective in PANEL_OBJECTIVES.items():
    names = evaluation.get("panel_baselines", {}).get(panel, [])
    titles[panel] = (
      f"{panel} loss; baselines tuned on {_OBJECTIVE_NAMES[objective]} loss: "
      f"{', '.join(names) or 'none'}"
    )
  return titles


def write(
  evaluation: dict,
  output_dir: str,
  title: str,
  comparisons: Sequence[dict] = (),
  histograms: Sequence[Sequence[str]] | None = None,
) -> dict:
  """JSON, CSV and PNG plots in `output_dir`; returns {what: path}.

  Args:
    evaluation: as held_out.run_evaluation makes it (steps, results, panels, ...).
    output_dir: where the files go.
    title: the curves' title.
    comparisons: `compare` results, all in the JSON.
    histograms: (learned, baseline) pairs whose comparisons are drawn as histograms; None: all.
  """
  paths = {
    "json": os.path.join(output_dir, RESULTS_FILENAME),
    "summary": os.path.join(output_dir, SUMMARY_FILENAME),
    "csv": os.path.join(output_dir, CSV_FILENAME),
    "curves": os.path.join(output_dir, CURVES_FILENAME),
    "curves_wallclock": os.path.join(output_dir, WALLCLOCK_FILENAME),
  }
  files.write_json(paths["json"], {**evaluation, "comparisons": list(comparisons)}, indent=None)
  files.write_json(paths["summary"], summarize(evaluation, title, comparisons), indent=1)
  write_csv(evaluation, paths["csv"])
  titles = panel_titles(evaluation)
  plots.plot_eval_curves(evaluation, paths["curves"], title, panel_titles=titles)
  plots.plot_eval_curves(
    evaluation,
    paths["curves_wallclock"],
    title + " (wall-clock)",
    wallclock=True,
    panel_titles=titles,
  )
  drawn = None if histograms is None else {tuple(pair) for pair in histograms}
  for c in comparisons:
    if drawn is not None and (c["learned"], c["baseline"]) not in drawn:
      continue
    key = histogram_key(c)
    paths[key] = os.path.join(output_dir, f"{key}.png")
    plots.plot_histogram(c, paths[key])
  return paths


def histogram_key(comparison: dict) -> str:
  """The name of a comparison's histogram, without ".png": histogram_<metric>_<b>_vs_<a>."""
  metric = METRIC_NAMES[comparison.get("metric", "mean_loss")]
  name = f"histogram_{metric}_{comparison['baseline']}_vs_{comparison['learned']}"
  return re.sub(r"[^A-Za-z0-9.=-]+", "_", name)


# The run-averaged metrics a summary keeps per task (averaged over inits).
SUMMARY_METRICS = ("mean_loss", "mean_valid_loss", "mean_test_loss", "final_test_loss")
# A run diverged when a measured loss is not finite or a split's loss rose above this many times
# its first measured value (the loss of the initial weights).
DIVERGENCE_FACTOR = 2.0


def training_check(result: Mapping[str, Any]) -> dict:
  """Whether each run of one candidate at least trained (App. E: "still reduces the loss").

  A run *diverged* when any measured training, validation or test loss is not finite, or rose
  above DIVERGENCE_FACTOR times that split's first measured value (the initial weights' loss);
  it *trained* when it did not diverge and its training loss at the last measured step is below
  the one at the first.

  Args:
    result: one candidate's results, with "<split>_loss" arrays [task, init, step].

  Returns:
    {"runs": the number of runs, "trained": runs that trained, "diverged": runs that diverged}.
  """
  train = np.asarray(result["train_loss"], np.float64)
  diverged = np.zeros(train.shape[:-1], bool)
  for split in protocol_lib.SPLITS:
    loss = np.asarray(result[f"{split}_loss"], np.float64)
    finite = np.isfinite(loss)
    peak = np.max(np.where(finite, loss, np.inf), axis=-1)
    diverged |= ~finite.all(axis=-1) | (peak > DIVERGENCE_FACTOR * loss[..., 0])
  trained = ~diverged & (train[..., -1] < train[..., 0])
  return {
    "runs": int(train[..., 0].size),
    "trained": int(trained.sum()),
    "diverged": int(diverged.sum()),
  }


def summarize(evaluation: dict, title: str, comparisons: Sequence[dict] = ()) -> dict:
  """An evaluation without its [task, init, step] arrays: what the tables and curves need.

  Args:
    evaluation: as held_out.run_evaluation makes it.
    title: the evaluation's title (the protocol's).
    comparisons: `compare` results.

  Returns:
    {"title", "steps", "average_steps", "panels", "panel_baselines", "tuned_learning_rates",
     "timed_steps_per_second" (if timed), "comparisons", "candidates": {name: {"per_task":
     {metric: [num_tasks] means over inits}, "curves": {"<split>_loss": [3, steps] the 25th, 50th
     and 75th percentiles over runs}, "final_test_accuracy": mean, "steps_per_second": median of
     the runs', "training_check": training_check's counts}}}.
  """
  candidates = {}
  for name, r in evaluation["results"].items():
    accuracy = np.asarray(r["test_accuracy"], np.float64)[..., -1]  # NaN for tasks without one.
    candidates[name] = {
      "per_task": {m: np.mean(r[m], axis=1) for m in SUMMARY_METRICS if m in r},
      "curves": {
        f"{split}_loss": np.nanpercentile(
          np.reshape(r[f"{split}_loss"], [-1, np.shape(r[f"{split}_loss"])[-1]]),
          [25, 50, 75],
          axis=0,
        )
        for split in protocol_lib.SPLITS
      },
      "final_test_accuracy": float(np.nanmean(accuracy)) if np.isfinite(accuracy).any() else np.nan,
      "steps_per_second": float(np.nanmedian(r["steps_per_second"])),
      "training_check": training_check(r),
    }
  keys = ("steps", "average_steps", "panels", "panel_baselines", "tuned_learning_rates")
  keys += ("tuned_hparams",)
  summary = {"title": title, **{k: evaluation[k] for k in keys if k in evaluation}}
  if "timed_steps_per_second" in evaluation:
    summary["timed_steps_per_second"] = evaluation["timed_steps_per_second"]
  summary["comparisons"] = list(comparisons)
  summary["candidates"] = candidates
  return summary


def write_csv(evaluation: dict, path: str) -> None:
  """evaluation.csv: one row per (candidate, task, init, step) with every split's metrics."""
  steps = evaluation["steps"]
  metrics = [f"{split}_{m}" for split in protocol_lib.SPLITS for m in ("loss", "accuracy")]
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["optimizer", "task", "init", "step", *metrics, "steps_per_second"])
    for name, r in evaluation["results"].items():
      num_tasks, num_inits = np.shape(r["mean_loss"])
      for t in range(num_tasks):
        for i in range(num_inits):
          for p, step in enumerate(steps):
            writer.writerow(
              [name, t, i, int(step)]
              + [float(r[k][t][i][p]) for k in metrics]
              + [float(r["steps_per_second"][t][i])]
            )


def print_summary(evaluation: dict, num_steps: int) -> None:
  """One line per comparison, one per panel (its baselines), and where the files are.

  A comparison's line gives the means, the tasks won with the sign test's p-value and the mean
  difference (baseline minus learned) with its 95% bootstrap interval over tasks, worded by the
  interval (statistics.verdict: "not resolved at this size" when it holds zero).
  """
  for c in evaluation["comparisons"]:
    print(
      f"{c['learned']} vs {c['baseline']} on {len(c['difference'])} held-out tasks, "
      f"{num_steps} steps: {c['metric_name']} {c['learned_mean_loss']:.4f} vs "
      f"{c['baseline_mean_loss']:.4f}; "
      f"{statistics.verdict(statistics.of_comparison(c), digits=4)}",
      flush=True,
    )
  for panel, objective in PANEL_OBJECTIVES.items():
    metrics = " and ".join(METRIC_NAMES[m] for m in PANEL_METRICS[panel])
    print(
      f"The {panel}-loss panel of {CURVES_FILENAME} and the {metrics} comparisons use the "
      f"baselines tuned on {_OBJECTIVE_NAMES[objective]} loss: "
      f"{', '.join(evaluation['panel_baselines'][panel]) or 'none'}",
      flush=True,
    )
  paths = evaluation["paths"]
  print(f"Evaluation: {paths['json']}; plots: {paths['curves']}", flush=True)
