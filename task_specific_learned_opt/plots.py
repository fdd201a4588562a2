"""PNG plots of results people would rather look at than read."""

import numpy as np


def _pyplot():
  import matplotlib

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt

  return plt


def plot_outer_training(records: list[dict], path: str, title: str = "") -> None:
  """Outer-training curves from the per-step records of distributed/local.py.

  Panels: outer loss (mean of L+ and L-) with a running mean; truncation length K; the mean
  per-coordinate variances of g_rp and g_es (log scale, paper Fig. 4); the mean ES weight.
  """
  plt = _pyplot()
  steps = np.array([r["outer_step"] for r in records])
  fig, axes = plt.subplots(2, 2, figsize=(10, 7))
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
  plt.close(fig)
