"""PNG plots of results people would rather look at than read: every figure the project writes.

Figures are made with matplotlib's object API (`matplotlib.figure.Figure`), not pyplot: no global
state or GUI backend, so plotting works headless, in threads and next to a user's own pyplot.
"""

import textwrap

import numpy as np
from matplotlib import figure


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
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=90)


def _percentiles(x: np.ndarray) -> np.ndarray:
  flat = np.reshape(x, [-1, x.shape[-1]])
  return np.nanpercentile(flat, [25, 50, 75], axis=0)


def plot_eval_curves(evaluation: dict, path: str, title: str, wallclock: bool = False) -> None:
  """Median and 25/75 percentiles (over tasks and inits) of train and test loss."""
  steps = np.asarray(evaluation["steps"], np.float64)
  fig = _figure((10, 4))
  axes = fig.subplots(1, 2)
  for name, result in evaluation["results"].items():
    x = steps
    if wallclock:
      rate = np.nanmedian(result["steps_per_second"])
      if not np.isfinite(rate):
        continue
      x = steps / rate
    for ax, split in zip(axes, ("train", "test"), strict=True):
      q25, median, q75 = _percentiles(np.asarray(result[f"{split}_loss"]))
      (line,) = ax.plot(x[1:], median[1:], label=name)
      ax.fill_between(x[1:], q25[1:], q75[1:], color=line.get_color(), alpha=0.2)
  for ax, split in zip(axes, ("train", "test"), strict=True):
    ax.set_xscale("log")
    ax.set_xlabel("seconds (steps / measured steps per second)" if wallclock else "inner step")
    ax.set_ylabel(f"{split} loss (median, 25-75%)")
    ax.set_title(f"{split} loss")
  axes[0].legend(fontsize=7)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def plot_histogram(comparison: dict, path: str) -> None:
  """Fig. 6c: per task, baseline minus learned loss (averaged over the run), as a histogram."""
  fig = _figure((6, 4))
  ax = fig.subplots()
  difference = comparison["difference"]
  ax.hist(difference, bins=max(10, len(difference) // 5), color="tab:blue")
  ax.axvline(0, color="black", linestyle=":")
  ax.set_xlabel(f"{comparison['baseline']} loss - {comparison['learned']} loss (mean over run)")
  ax.set_ylabel("tasks")
  ax.set_title(
    f"learned wins on {100 * comparison['fraction_learned_wins']:.0f}% of "
    f"{len(difference)} held-out tasks",
    fontsize=9,
  )
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
