"""PNG plots of results people would rather look at than read: every figure the project writes.

Figures are made with matplotlib's object API (`matplotlib.figure.Figure`), not pyplot: no global
state or GUI backend, so plotting works headless, in threads and next to a user's own pyplot.
"""

import textwrap
import warnings

import numpy as np
from matplotlib import figure

from task_specific_learned_opt.evaluation import statistics


def _figure(figsize: tuple[float, float]) -> figure.Figure:
  return figure.Figure(figsize=figsize)


def plot_outer_training(records: list[dict], path: str, title: str = "") -> None:
  """Outer-training curves from the per-step records of distributed/local.py.

  Panels: outer loss (mean of L+ and L-) with a running mean; truncation length K; the mean
  per-coordinate variances of g_rp and g_es (log scale, paper Fig. 4); the mean ES weight.
  """
  steps = np.array([r["outer_step"] for r in records])
  fig = _figure((10, 7))
  axes = fig.subplots(2, 2)
  loss = np.array([r["outer_loss"] for r in records])
  axes[0, 0].plot(steps, loss, alpha=0.35, label="per step")
  window = max(1, min(20, len(loss) // 5))
  if len(loss) >= window:
    smooth = np.convolve(loss, np.ones(window) / window, mode="valid")
    axes[0, 0].plot(steps[window - 1 :], smooth, label=f"{window}-step mean")
  axes[0, 0].set_ylabel("outer loss (mean of L+, L-)")
  axes[0, 0].legend()
  axes[0, 1].plot(steps, [r["mean_num_steps"] for r in records])
  axes[0, 1].set_ylabel("truncation length K (batch mean)")
  axes[1, 0].semilogy(steps, [r["rp_variance"] for r in records], label="g_rp")
  axes[1, 0].semilogy(steps, [r["es_variance"] for r in records], label="g_es")
  axes[1, 0].set_ylabel("mean per-coordinate variance")
  axes[1, 0].legend()
  axes[1, 1].plot(steps, [r["es_weight"] for r in records])
  axes[1, 1].set_ylim(-0.02, 1.02)
  axes[1, 1].set_ylabel("mean ES weight in the merge")
  for ax in axes.flat:
    ax.set_xlabel("outer step")
  fig.suptitle("\n".join(textwrap.wrap(title, 120)), fontsize=9)  # A mixture's names are long.
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def _percentiles(x: np.ndarray) -> np.ndarray:
  flat = np.reshape(x, [-1, x.shape[-1]])
  return np.nanpercentile(flat, [25, 50, 75], axis=0)


def wallclock_rate(evaluation: dict, name: str) -> float:
  """A candidate's steps per second for the wall-clock curves: timed in interleaved rounds if the
  evaluation did (its "timed_steps_per_second"), else the median of its runs' speeds."""
  timed = evaluation.get("timed_steps_per_second", {})
  if name in timed:
    return float(timed[name])
  return float(np.nanmedian(evaluation["results"][name]["steps_per_second"]))


def plot_eval_curves(
  evaluation: dict,
  path: str,
  title: str,
  wallclock: bool = False,
  panel_titles: dict[str, str] | None = None,
) -> None:
  """Median and 25/75 percentiles (over tasks and inits) of train and test loss (Fig. 6a/b).

  Args:
    evaluation: an evaluation as evaluation/held_out.py makes it: "steps", "results" and, if
      given, "panels" ({"train": names, "test": names}: the candidates each panel draws;
      default: every one).
    path: the PNG to write.
    title: the figure's title.
    wallclock: against seconds instead of steps: steps / the candidate's steps per second, from
      evaluation["timed_steps_per_second"] (interleaved rounds in one process) where it has the
      candidate, else the median of its runs' measured speeds.
    panel_titles: {"train": ..., "test": ...}; default: the loss each panel plots.
  """
  steps = np.asarray(evaluation["steps"], np.float64)
  results = evaluation["results"]
  panels = evaluation.get("panels") or {split: list(results) for split in ("train", "test")}
  colors = {name: f"C{i % 10}" for i, name in enumerate(results)}  # The same in both panels.
  fig = _figure((11, 4.6))
  axes = fig.subplots(1, 2)
  for ax, split in zip(axes, ("train", "test"), strict=True):
    for name in panels[split]:
      result = results[name]
      x = steps
      if wallclock:
        rate = wallclock_rate(evaluation, name)
        if not np.isfinite(rate):
          continue
        x = steps / rate
      q25, median, q75 = _percentiles(np.asarray(result[f"{split}_loss"]))
      ax.plot(x[1:], median[1:], label=name, color=colors[name])
      ax.fill_between(x[1:], q25[1:], q75[1:], color=colors[name], alpha=0.2)
    ax.set_xscale("log")
    ax.set_xlabel("seconds (steps / steps per second)" if wallclock else "inner step")
    ax.set_ylabel(f"{split} loss (median, 25-75%)")
    panel_title = (panel_titles or {}).get(split, f"{split} loss")
    ax.set_title("\n".join(textwrap.wrap(panel_title, 60)), fontsize=8)
    ax.legend(fontsize=7)
  fig.suptitle("\n".join(textwrap.wrap(title, 120)), fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def plot_histogram(comparison: dict, path: str) -> None:
  """Fig. 6c: per task, baseline minus learned loss (averaged over the run), as a histogram.

  The mean difference is a solid line in a shaded band, its 95% bootstrap interval over tasks;
  the title gives the tasks won, the sign test's p-value and the interval, worded by it
  (evaluation.statistics.verdict: "not resolved at this size" when it holds zero).

  Args:
    comparison: evaluation.compare's result (its "metric_name" labels the x-axis).
    path: the PNG to write.
  """
  fig = _figure((6, 4))
  ax = fig.subplots()
  difference = np.asarray(comparison["difference"], dtype=float)
  finite = difference[np.isfinite(difference)]
  ax.hist(finite, bins=max(10, len(difference) // 5), color="tab:blue")
  ax.axvline(0, color="black", linestyle=":")
  stats = statistics.of_comparison(comparison)
  low, high = stats["ci95"]
  if np.isfinite([low, high, stats["mean_difference"]]).all():
    band = "95% bootstrap interval of the mean"
    ax.axvspan(low, high, color="tab:orange", alpha=0.3, zorder=0, label=band)
    ax.axvline(stats["mean_difference"], color="tab:orange", label="mean over tasks")
    ax.legend(fontsize=7)
  metric = comparison.get("metric_name", "mean training loss")
  label = f"{metric} over the run: {comparison['baseline']} - {comparison['learned']}"
  ax.set_xlabel("\n".join(textwrap.wrap(label, 70)), fontsize=8)
  ax.set_ylabel("tasks")
  title = f"{metric}, learned over {len(difference)} held-out tasks: {statistics.verdict(stats)}"
  ax.set_title("\n".join(textwrap.wrap(title, 80)), fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def plot_losses(results: dict, path: str, title: str) -> None:
  """Training-loss curves (a running mean over 20 steps) of every optimizer, as a PNG."""
  fig = _figure((6, 4))
  ax = fig.subplots()
  for name, result in results.items():
    losses = np.asarray(result["train_losses"])
    window = min(20, len(losses))
    smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
    ax.plot(np.arange(len(smooth)) + window, smooth, label=name)
  ax.axhline(np.log(10), color="gray", linestyle=":", label="chance (ln 10)")
  ax.set_xlabel("inner step")
  ax.set_ylabel("training loss (20-step mean)")
  ax.set_title("\n".join(textwrap.wrap(title, 70)), fontsize=8)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def plot_ablations(study: dict, path: str, title: str) -> None:
  """Fig. 8: per configuration, the seeds' outer loss averaged over the window, with quartiles."""
  results = study["results"]
  names = list(results)
  fig = _figure((1.3 * max(len(names), 3) + 2, 4.2))
  ax = fig.subplots()
  for i, name in enumerate(names):
    losses = np.asarray(results[name]["window_loss"], float)
    finite = losses[np.isfinite(losses)]
    if finite.size:
      ax.boxplot(finite, positions=[i], widths=0.5, showfliers=False)
    jitter = np.linspace(-0.12, 0.12, len(losses)) if len(losses) > 1 else np.zeros(1)
    ax.plot(i + jitter, losses, "o", alpha=0.7, color=f"C{i % 10}")
  ax.set_xticks(range(len(names)))
  ax.set_xticklabels(names, rotation=20)
  low, high = study["window"]
  ax.set_ylabel(f"outer loss, mean over inner steps ({low:g}, {high:g}]")
  ax.set_title("\n".join(textwrap.wrap(title, 90)), fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def plot_ablation_curves(study: dict, path: str, title: str) -> None:
  """App. F: per configuration, outer loss against inner steps; median, 25/75, one line per seed."""
  results = study["results"]
  x = np.asarray(study["curve_inner_steps"])
  columns = min(4, max(len(results), 1))
  rows = int(np.ceil(len(results) / columns)) or 1
  fig = _figure((3.4 * columns, 2.9 * rows))
  axes = np.atleast_1d(fig.subplots(rows, columns, sharex=True, sharey=True)).reshape(-1)
  baseline = results.get("merged")
  for ax, (name, r) in zip(axes, results.items(), strict=False):
    curves = np.asarray(r["curves"], float)
    for c in curves:
      ax.plot(x, c, lw=0.6, alpha=0.6)
    if curves.size:
      with warnings.catch_warnings():  # Intervals before a run's first step are nan.
        warnings.simplefilter("ignore", RuntimeWarning)
        q25, median, q75 = np.nanpercentile(curves, [25, 50, 75], axis=0)
      ax.fill_between(x, q25, q75, alpha=0.25, color="k")
      ax.plot(x, median, color="k", lw=2)
    if baseline is not None and name != "merged" and len(baseline["curves"]):
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        baseline_median = np.nanmedian(np.asarray(baseline["curves"], float), axis=0)
      ax.plot(
        x,
        baseline_median,
        "--",
        color="gray",
        lw=1,
        label="merged (median)",
      )
      ax.legend(fontsize=7)
    ax.axvspan(*study["window"], color="C1", alpha=0.08)
    ax.set_title(name, fontsize=9)
  for ax in axes[len(results) :]:
    ax.set_visible(False)
  for ax in axes[-columns:]:
    ax.set_xlabel("cumulative inner steps")
  for ax in axes[::columns]:
    ax.set_ylabel("outer loss")
  fig.suptitle("\n".join(textwrap.wrap(title, 120)), fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def plot_evaluation_progress(
  runs: dict[str, list[dict]], reference: dict | None, path: str, title: str
) -> None:
  """Fig. 5: the evaluator's numbers against outer step and cumulative inner steps.

  Args:
    runs: {label: evaluation_progress records}; one run ("" label) colours the two families,
      several (theta seeds) get a colour each, outer-test solid and outer-train dotted.
    reference: the tuned baseline (evaluation_reference.json), drawn dashed; None: not drawn.
    path: the PNG to write.
    title: the figure's title.
  """
  metrics = (
    ("mean_train_loss", "mean training loss over the run"),
    ("final_test_loss", "test loss after the run"),
  )
  families = (("outer_train", "outer-train tasks", ":"), ("outer_test", "outer-test tasks", "-"))
  fig = _figure((11, 7))
  axes = fig.subplots(2, 2, sharey="row")
  single = len(runs) == 1
  for row, (metric, label) in enumerate(metrics):
    for col, x_key in enumerate(("outer_step", "inner_steps")):
      ax = axes[row, col]
      for i, (name, records) in enumerate(runs.items()):
        x = [r[x_key] for r in records]
        for j, (family, family_label, style) in enumerate(families):
          color = f"C{j}" if single else f"C{i % 10}"
          text = family_label if single else f"{name}, {family_label}"
          ax.plot(
            x,
            [r[family][metric] for r in records],
            style if not single else "-",
            color=color,
            marker="." if len(x) < 30 else None,
            label=text,
          )
      if reference is not None:
        for j, (family, family_label, _) in enumerate(families):
          ax.axhline(
            reference[family][metric],
            ls="--",
            lw=1,
            color=f"C{j}" if single else ("k" if family == "outer_test" else "gray"),
            label=f"{reference['name']}, {family_label}",
          )
      ax.set_xlabel("outer step" if x_key == "outer_step" else "cumulative inner steps")
      if col == 0:
        ax.set_ylabel(label)
  axes[0, 0].legend(fontsize=7)
  fig.suptitle("\n".join(textwrap.wrap(title, 120)), fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
