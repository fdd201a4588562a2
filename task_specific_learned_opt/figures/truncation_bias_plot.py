"""The plots of the truncation-bias figure (Fig. 3 / App. G): the curves and panel (c)'s gradients.

(a) an exponential rolling average of the outer loss against outer-training progress in inner
steps, with each inner run's mean as dots; (b) the learning rate exp(theta), with the best fixed
learning rate of the untruncated evaluation runs; with panel (c)'s data, (c) the outer-gradient of
every truncation of one inner run at fixed theta and (d) its running sum over the run.
"""

from typing import Any

import numpy as np
from matplotlib import colormaps, figure


def truncation_key(length: int) -> str:
  """The key of the truncated-backpropagation curve of `length` steps per truncation."""
  return str(int(length))


def pes_key(length: int) -> str:
  """The key of the PES curve of `length` steps per truncation."""
  return f"pes_{int(length)}"


def plot(result: dict) -> figure.Figure:
  """Panels (a) and (b); with panel (c)'s gradients also (c) and (d), their running sum.

  Args:
    result: what `compute` returned (or its JSON, read back).
  """
  settings, curves = result["settings"], result["curves"]
  gradients = result.get("gradients_over_run") or {}
  reference = (result.get("evaluation") or {}).get("reference")
  if gradients:
    fig = figure.Figure(figsize=(12.4, 9.2))
    axes = fig.subplots(2, 2).ravel()
  else:
    fig = figure.Figure(figsize=(13.0, 5.0))
    axes = fig.subplots(1, 2)
  lengths = settings["truncation_lengths"]
  colours = {
    truncation_key(n): c for n, c in zip(lengths, _colour_cycle(len(lengths)), strict=True)
  }
  for key, curve in curves.items():
    _plot_curve(axes[0], axes[1], key, curve, settings, colours.get(key, "black"))
  axes[0].set_title("(a) outer loss: rolling average (lines), run means (dots)", fontsize=9)
  axes[0].set_xlabel("outer-training progress (inner steps)")
  axes[0].set_ylabel("mean inner training loss of a truncation")
  axes[0].legend(fontsize=7, title="steps per truncation (last run's mean)", title_fontsize=7)
  _decorate_learning_rate_axis(axes[1], settings, reference)
  for ax in axes[:2]:
    for run in range(1, settings["num_runs"]):
      ax.axvline(run * settings["horizon"], color="grey", lw=0.5, alpha=0.5)
  if gradients:
    _plot_gradients(axes[2], axes[3], gradients, settings, colours)
  pes_text = ""
  if settings.get("pes_truncation"):
    pes_text = (
      f"; PES: {settings['pes_pairs']} antithetic pairs, sigma {settings['pes_sigma']:g}, "
      f"outer-optimizer {settings['pes_outer_optimizer']}"
    )
  fig.suptitle(
    f"Truncation bias (Sec. 2.4): theta = log lr of Adam, from lr = "
    f"{settings['initial_learning_rate']:g}, on {settings['data']}; the same task, a new "
    f"initialisation every {settings['horizon']:,} inner steps, {settings['num_runs']} runs\n"
    f"outer-optimizer {settings['outer_optimizer']}; outer loss = mean inner training loss "
    f"over the truncation's steps{pes_text}",
    fontsize=8.5,
  )
  fig.tight_layout()
  return fig


def _decorate_learning_rate_axis(ax: Any, settings: dict, reference: dict | None) -> None:
  ax.axhline(
    settings["initial_learning_rate"], color="grey", linestyle="--", lw=1.2, label="initial"
  )
  if reference:
    ax.axhline(
      reference["best_learning_rate"],
      color="tab:red",
      linestyle=":",
      lw=1.2,
      label=f"best fixed lr, untruncated ({reference['best_run_loss']:.2f})",
    )
  ax.set_yscale("log")
  ax.set_title("(b) learning rate exp(theta)", fontsize=9)
  ax.set_xlabel("outer-training progress (inner steps)")
  ax.set_ylabel("Adam's learning rate (log scale)")
  low, high = ax.get_ylim()
  ax.set_ylim(low / 4, high)  # Room for the legend below the curves.
  ax.legend(fontsize=7, title="final learning rate", title_fontsize=7, loc="lower left", ncol=2)


def _plot_curve(
  loss_ax: Any, lr_ax: Any, key: str, curve: dict, settings: dict, colour: Any
) -> None:
  is_pes = key.startswith("pes_")
  style = {"color": "black", "linestyle": "--"} if is_pes else {"color": colour}
  name = f"PES, {curve['truncation_length']}" if is_pes else f"{curve['truncation_length']}"
  marker = "o" if len(curve["inner_step"]) <= 20 else None
  loss_ax.plot(
    curve["inner_step"],
    curve["rolling_loss"],
    marker=marker,
    label=f"{name} ({curve['final_run_mean_loss']:.3f})",
    lw=1.2,
    **style,
  )
  run_ends = [settings["horizon"] * (r + 1) for r in range(len(curve["run_mean_loss"]))]
  loss_ax.plot(run_ends, curve["run_mean_loss"], "o", color=style["color"], ms=4)
  lr_ax.plot(
    curve["inner_step"],
    curve["learning_rate"],
    marker=marker,
    label=f"{name}: {curve['final_learning_rate']:.2g}",
    lw=1.2,
    **style,
  )


def _plot_gradients(ax: Any, sum_ax: Any, gradients: dict, settings: dict, colours: dict) -> None:
  for key, record in gradients.items():
    colour = colours.get(key, "black")
    steps, values = np.asarray(record["start_step"]), np.asarray(record["gradient"])
    label = f"{key} steps: sum {record['sum']:+.3g}"
    if len(values) <= 20:
      ax.plot(steps, values, color=colour, marker="o", ms=5, lw=0.8, label=label)
    else:
      # Many noisy points: each truncation as a dot, and their mean over windows of a tenth of
      # the run as a line.
      ax.plot(steps, values, ".", color=colour, ms=2, alpha=0.35)
      window = max(1, len(values) // 10)
      means = values.reshape(-1, window).mean(axis=1) if len(values) % window == 0 else values
      centres = steps.reshape(-1, window).mean(axis=1) if len(values) % window == 0 else steps
      ax.plot(centres, means, color=colour, marker="s", ms=3, lw=1.2, label=label + " (mean)")
    # A truncation's gradient is counted at the step where the truncation ends.
    length = settings["horizon"] // len(values)
    sum_ax.plot(
      np.concatenate([[0], steps + length]),
      np.concatenate([[0.0], np.cumsum(values)]),
      color=colour,
      drawstyle="steps-post",
      lw=1.2,
      label=f"{key} steps",
    )
  ax.axhline(0.0, color="grey", lw=0.8)
  # Linear within 1e-3 of the largest gradient, logarithmic beyond: short truncations' small
  # gradients and the long ones' large gradients on one axis, with their signs.
  largest = max((abs(g) for r in gradients.values() for g in r["gradient"]), default=1.0)
  ax.set_yscale("symlog", linthresh=max(largest, 1e-12) * 1e-3)
  ax.set_title(
    f"(c) outer-gradient of each truncation over one inner run at fixed lr = "
    f"{settings['initial_learning_rate']:g}",
    fontsize=9,
  )
  ax.set_xlabel("inner step the truncation starts at")
  ax.set_ylabel("d outer loss / d log lr (symlog); < 0 raises the lr")
  ax.legend(fontsize=7, title="steps per truncation", title_fontsize=7)
  sum_ax.axhline(0.0, color="grey", lw=0.8)
  sum_ax.set_title("(d) running sum of (c) over the run: the total outer-gradient", fontsize=9)
  sum_ax.set_xlabel("inner step (each truncation counted where it ends)")
  sum_ax.set_ylabel("sum of the truncations' d outer loss / d log lr so far")
  sum_ax.legend(fontsize=7, title="steps per truncation", title_fontsize=7)


def _colour_cycle(n: int) -> list:
  cmap = colormaps["viridis"]
  return [cmap(0.9 * i / max(n - 1, 1)) for i in range(n)]
