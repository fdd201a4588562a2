"""The plots of the longer-unroll figure (App. H, longer_unrolls.py), drawn from its result alone.

Every panel has the inner step on its x-axis and a dotted line at the training horizon. Lines:
one colour per optimizer (the learned variants; Adam with its learning rate tuned on training loss
in black, on validation loss in dark grey when that chose another, and bin/eval's 0.01 in light
grey when neither chose it); the losses of every task (one line style
per task), the other panels of task 0 only (the tasks look alike; fewer lines stay readable).
The per-step statistics (all but the losses and the norms) are running means over 5 records.
  Row 1, the losses and the inputs: (a) training and (b) test loss; (c) the time features of the
  first learned variant (the shaded span: the steps of its outer-training); (d) the RMS of its
  normalised feature columns on the conv kernels (task 0).
  Row 2, the conv kernels (followed by batch norm, so the loss is blind to their scale): (e) the
  raw RMS of the columns of (d) against sqrt(epsilon) of the normaliser; (f) the relative step
  |w_t - w_t+1| / |w_t|, the effective learning rate; (g) their norm |w|; (h) the RMS of the
  normalised gradient column, per variant.
  Row 3, the outputs and the other weights: (i) the RMS of the step the MLP emits on the kernels,
  lambda_lin * o_dir * exp(lambda_exp * o_mag) (exp(1e-3 * o_mag) stays within a few
  percent of 1, so o_dir sets it); (j) the norms of the last layer's weights and of the
  batch-norm gains, which set the logits' scale; (k) how outward the first variant's steps
  point, cos(-step, w), and its drift (the step it takes with no gradient and no momenta)
  relative to its step, per kind; (l) cos(step, g) on the kernels, per variant.
"""

from collections.abc import Callable

import numpy as np
from matplotlib import axes, colormaps, figure

MAIN_KIND = "conv/w"  # The kernels of the batch-normed CNN: the loss is blind to their scale.
LOGIT_KINDS = ("linear/w", "conv/scale")  # The weights that set the logits' scale.
LINE_STYLES = ("-", "--", ":", "-.")
REFERENCE_ADAM = "adam 0.01"  # bin/eval's tuned learning rate on this family at 500 steps.
SMOOTH_RECORDS = 5  # The noisy per-step statistics are drawn as running means over 5 records.


def _smooth(steps: np.ndarray, values: object) -> tuple[np.ndarray, np.ndarray]:
  """A running mean over SMOOTH_RECORDS records (a vector statistic per component), centred."""
  values = np.asarray(values, float)
  n = min(SMOOTH_RECORDS, len(steps))
  kernel = np.ones(n) / n
  if values.ndim == 1:
    smooth = np.convolve(values, kernel, mode="valid")
  else:
    smooth = np.stack([np.convolve(v, kernel, mode="valid") for v in values.T], axis=1)
  return steps[(n - 1) // 2 : len(steps) - n // 2], smooth


def _curves(task: dict, lopt_names: list[str]) -> dict[str, dict]:
  """{label: run} of the learned variants, the tuned Adam and the reference Adam of one task."""
  runs = {name: task["runs"][name] for name in lopt_names}
  if "adam_run" in task:
    runs["adam (tuned)"] = task["runs"][task["adam_run"]]
    if task.get("adam_run_valid", task["adam_run"]) != task["adam_run"]:
      runs[f"adam (tuned on valid: {task['adam_run_valid']})"] = task["runs"][
        task["adam_run_valid"]
      ]
    if REFERENCE_ADAM in task["runs"] and REFERENCE_ADAM not in (
      task["adam_run"],
      task.get("adam_run_valid"),
    ):
      runs[REFERENCE_ADAM] = task["runs"][REFERENCE_ADAM]
  return runs


def _colour(label: str, lopt_names: list[str]) -> str:
  if label in lopt_names:
    return f"C{lopt_names.index(label)}"
  if label == "adam (tuned)":
    return "black"
  return "dimgrey" if label.startswith("adam (tuned on valid") else "silver"


def _per_optimizer(
  ax: axes.Axes,
  result: dict,
  value: Callable[[dict], object],
  learned_only: bool = False,
  all_tasks: bool = False,
  smooth: bool = True,
) -> None:
  """One line per optimizer (and task, or task 0 only) of `value(run)`, a series over the steps."""
  steps = np.asarray(result["record_steps"], float)
  lopt_names = list(result["lopts"])
  tasks = result["tasks"] if all_tasks else result["tasks"][:1]
  for t, task in enumerate(tasks):
    style = LINE_STYLES[t % len(LINE_STYLES)]
    for label, run in _curves(task, lopt_names).items():
      if learned_only and label not in lopt_names:
        continue
      x, y = _smooth(steps, value(run)) if smooth else (steps, value(run))
      ax.plot(x, y, style, color=_colour(label, lopt_names), lw=1, label=f"{label}, task {t}")


def plot(result: dict) -> figure.Figure:
  """The twelve panels of the module docstring.

  Args:
    result: LongerUnrolls.compute's result (or its JSON, read back).
  """
  fig = figure.Figure(figsize=(22, 14))
  ax = fig.subplots(3, 4).ravel()
  first = next(iter(result["lopts"]))
  kind = MAIN_KIND
  _per_optimizer(ax[0], result, lambda run: run["train_loss"], all_tasks=True, smooth=False)
  _per_optimizer(ax[1], result, lambda run: run["test_loss"], all_tasks=True, smooth=False)
  _plot_inputs(ax[2], ax[3], ax[4], result, kind)
  _per_optimizer(ax[5], result, lambda run: run["kinds"][kind]["relative_step"])
  _per_optimizer(ax[6], result, lambda run: run["kinds"][kind]["param_norm"], smooth=False)
  _per_optimizer(
    ax[7], result, lambda run: np.asarray(run["probe"]["kinds"][kind]["normalized_rms"])[:, 0], True
  )
  _per_optimizer(ax[8], result, lambda run: run["probe"]["kinds"][kind]["step_rms"], True)
  for logit_kind in LOGIT_KINDS:
    _per_optimizer(
      ax[9], result, lambda run, k=logit_kind: run["kinds"][k]["param_norm"], smooth=False
    )
  _plot_drift(ax[10], result, first)
  _per_optimizer(ax[11], result, lambda run: run["probe"]["kinds"][kind]["step_grad_cosine"], True)
  titles = (
    "(a) training loss (5 fixed batches)",
    "(b) test loss (5 fixed batches)",
    f"(c) time features of {first} (shaded: the outer-training steps)",
    f"(d) normalised column RMS on {kind} ({first}, task 0)",
    f"(e) raw column RMS on {kind} ({first}, task 0)",
    f"(f) relative step |w_t - w_t+1| / |w_t| on {kind} (task 0)",
    f"(g) |w| of {kind} (task 0)",
    f"(h) RMS of the normalised gradient column on {kind} (task 0)",
    f"(i) RMS of the learned step on {kind} (task 0)",
    f"(j) |w| of {' and '.join(LOGIT_KINDS)}, the logits' scale (task 0)",
    f"(k) {first}, task 0: cos(-step, w) (solid), |drift| / |step| (dashed)",
    f"(l) cos(step, g) on {kind} (task 0)",
  )
  for a, title in zip(ax, titles, strict=True):
    a.axvline(result["horizon"], color="black", ls=":", lw=1)
    a.set_title(title, fontsize=9)
    a.set_xlabel("inner step")
    handles, labels = a.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    a.legend(unique.values(), unique.keys(), fontsize=5.5)
  for a in (ax[0], ax[1], ax[4], ax[5], ax[6], ax[8], ax[9]):
    a.set_yscale("log")
  fig.suptitle(
    f"{result['family']}: theta {result['theta_dir']} (outer-trained on {result['horizon']}-step "
    f"runs) for {result['num_steps']} steps on {len(result['tasks'])} held-out tasks "
    f"(evaluate.seed = {result['seed']}); dotted: the horizon",
    fontsize=11,
  )
  fig.tight_layout()
  return fig


def _plot_inputs(
  ax_time: axes.Axes, ax_normalized: axes.Axes, ax_raw: axes.Axes, result: dict, kind: str
) -> None:
  """Panels (c)-(e): the time features and the feature columns of the first learned variant."""
  run = result["tasks"][0]["runs"][next(iter(result["lopts"]))]
  steps = np.asarray(result["record_steps"], float)
  time = np.asarray(run["probe"]["time"], float)
  cmap = colormaps["viridis"]
  scales = result["time_scales"]
  for i, scale in enumerate(scales):
    colour = cmap(i / max(len(scales) - 1, 1))
    ax_time.plot(steps, time[:, i], color=colour, label=f"eta = {scale:.3g}")
  ax_time.axvspan(0, result["horizon"], color="grey", alpha=0.15)
  probe = run["probe"]["kinds"][kind]
  x, normalized = _smooth(steps, probe["normalized_rms"])
  _, raw = _smooth(steps, probe["column_rms"])
  for c, column in enumerate(result["columns"]):
    colour = cmap(c / max(len(result["columns"]) - 1, 1))
    ax_normalized.plot(x, normalized[:, c], color=colour, label=column)
    ax_raw.plot(x, raw[:, c], color=colour, label=column)
  epsilon = np.sqrt(result["normalizer_epsilon"])
  ax_raw.axhline(epsilon, color="red", ls="--", lw=1, label="sqrt(eps)")


def _plot_drift(ax: axes.Axes, result: dict, name: str) -> None:
  """Panel (k): per kind, how outward the steps point and the share of the step without signal."""
  steps = np.asarray(result["record_steps"], float)
  kinds = result["tasks"][0]["runs"][name]["probe"]["kinds"]
  for i, (kind, stats) in enumerate(kinds.items()):
    ax.plot(*_smooth(steps, stats["outward_cosine"]), "-", color=f"C{i}", lw=1, label=kind)
    ax.plot(*_smooth(steps, stats["drift_fraction"]), "--", color=f"C{i}", lw=1)
  ax.axhline(0.0, color="grey", lw=0.5)
