"""Fig. 2a-c and App. B (Fig. 5): the final loss of a toy problem against one hyper-parameter.

Sec. 2.3 trains the 1-D loss l(w) = (w - 4)(w - 3) w^2 (`tasks/toy.py`) from w0 = -1.2 with
heavy-ball SGD+momentum (m <- mu m + g; w <- w - lr m) and treats one hyper-parameter as theta:
the momentum (Fig. 2), the learning rate at a fixed momentum (App. B, top) or the learning rate
of plain SGD (App. B, bottom). Low theta converges to the local minimum w = 0, larger theta
escapes to the global minimum w = 3.569, and even larger theta oscillates between the two (and,
for the learning rate, diverges). The paper's point: as the number of inner steps T grows, the
final loss l(w_T) as a function of theta develops near-discontinuities at the transitions between
the minima, so its derivative (the outer-gradient) becomes huge there.

Panels: (a) l(w) with w0; (b) w_t against t for a few values of theta; (c) l(w_T) against theta
on a dense grid for several T; (d, not in the paper) |d l(w_T) / d theta| computed by
backpropagation through the unroll, on a log scale.

Every run is the project's graph-mode `inner_training.unroll` of `sgd.Momentum` (or `sgd.SGD`)
whose theta is a `LearnedHyperparameters` hyper-parameter, one unroll training every theta of the
grid at once (`toy_unrolls`).

The inner loss must not be clipped: l(w0) = 31.4 is above `inner_training.clip_loss`'s default
of 10, where the clipped gradient is 0 (and the clip would apply to the sum over copies). The gin
files bind `clip_loss.max_loss = None`, and `compute` refuses to run with a clip.

A run "diverges" when w_T is not finite or |w_T| > `max_abs_w`; the plots leave diverged runs
out (the JSON keeps their values and counts them).
"""

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from matplotlib import axes, cm, colors, figure

from task_specific_learned_opt.figures import inner_problems, runner, toy_unrolls
from task_specific_learned_opt.tasks import toy

BASIN_NAMES = ("w=0", "w=3.569", "other", "diverged")  # The labels of `basins`.
BASIN_RADIUS = 0.3  # w_T within this of a minimum counts as having settled in that minimum.
# Panel (c)'s axis stops here, above the barrier l(1.681) = 8.7 between the minima: only runs
# still far from both minima (at T = 10) go above it.
MAX_LOSS_SHOWN = 12.0
MIN_GRADIENT_SHOWN = 1e-10  # Panel (d)'s axis stops here (converged runs reach 1e-35).


def diverged(w: np.ndarray, max_abs_w: float) -> np.ndarray:
  """Where a run diverged: w not finite or |w| > max_abs_w.

  Args:
    w: final (or current) values of w.
    max_abs_w: the largest |w| that counts as not diverged.
  """
  with np.errstate(invalid="ignore"):
    return ~np.isfinite(w) | (np.abs(w) > max_abs_w)


def basins(w: np.ndarray, max_abs_w: float) -> np.ndarray:
  """Where each run ended: 0 (near w = 0), 1 (near the global minimum), 2 (elsewhere), 3 (diverged).

  Args:
    w: final values of w.
    max_abs_w: the largest |w| that counts as not diverged.
  """
  with np.errstate(invalid="ignore"):
    labels = np.full(w.shape, 2)
    labels[np.abs(w - toy.LOCAL_MINIMUM) < BASIN_RADIUS] = 0
    labels[np.abs(w - toy.GLOBAL_MINIMUM) < BASIN_RADIUS] = 1
  labels[diverged(w, max_abs_w)] = 3
  return labels


@gin.configurable
class ToyTwoMinimum(runner.Experiment):
  """Fig. 2a-c (theta = the momentum) and App. B (theta = the learning rate), plus panel (d)."""

  def __init__(
    self,
    theta_name: str = gin.REQUIRED,
    theta_min: float = gin.REQUIRED,
    theta_max: float = gin.REQUIRED,
    optimizer: str = "momentum",
    learning_rate: float | None = None,
    momentum: float | None = None,
    num_thetas: int = 2000,
    num_trajectories: int = 15,
    num_steps: tuple[int, ...] = (10, 30, 100, 300, 1000),
    w0: float = toy.W0,
    max_abs_w: float = 10.0,
  ):
    """Configures the experiment.

    Args:
      theta_name: "momentum" or "learning_rate", the hyper-parameter varied.
      theta_min: the smallest theta of the grid.
      theta_max: the largest theta of the grid.
      optimizer: "momentum" (heavy ball) or "sgd" (no momentum).
      learning_rate: the fixed learning rate (None when it is theta).
      momentum: the fixed momentum (None when it is theta or for "sgd").
      num_thetas: the size of the dense, evenly spaced grid of panels (c) and (d).
      num_trajectories: the number of runs of panel (b), evenly spaced over the same range.
      num_steps: the values of T of panels (c) and (d); panel (b) runs max(num_steps) steps.
      w0: the initial w.
      max_abs_w: runs with |w_T| above this (or non-finite) count as diverged.
    """
    self.theta_name = theta_name
    self.theta_min = float(theta_min)
    self.theta_max = float(theta_max)
    self.optimizer = optimizer
    self.learning_rate = learning_rate
    self.momentum = momentum
    self.num_thetas = int(num_thetas)
    self.num_trajectories = int(num_trajectories)
    self.num_steps = [int(t) for t in num_steps]
    self.w0 = float(w0)
    self.max_abs_w = float(max_abs_w)
    self.lopt = toy_unrolls.make_optimizer(optimizer, theta_name, learning_rate, momentum)

  def compute(self, panels: runner.Panels) -> dict:
    """Runs the grid for every T and the trajectories.

    Args:
      panels: where each finished panel is reported.

    Returns:
      The settings; "curve" (panel a: w and l(w)); "trajectory_thetas" and "trajectories"
      ([num_trajectories][max T + 1], w_t); "thetas"; "final_w", "final_loss" and
      "dloss_dtheta" ([len(num_steps)][num_thetas]); per T "num_diverged", "basin_counts"
      ({basin: count}) and "num_basin_changes" (how often the final basin changes between
      neighbouring thetas of the grid); "max_abs_dloss_dtheta" and "median_abs_dloss_dtheta"
      per T over the runs that did not diverge.

    Raises:
      ValueError: the inner loss is clipped (see inner_problems.check_no_loss_clip).
    """
    inner_problems.check_no_loss_clip(
      "The toy loss must not be clipped (l(w0) = 31.4 is above the clip)"
    )
    name = self.theta_name
    curve_w = np.linspace(-1.5, 4.5, 301)
    curve_loss = toy.toy_loss(tf.constant(curve_w)).numpy()
    loss_w0 = float(toy.toy_loss(tf.constant(self.w0)))
    panels.done(
      "(a) the loss", f"l(w0 = {self.w0}) = {loss_w0:.2f}; minima w = 0, {toy.GLOBAL_MINIMUM:.3f}"
    )

    trajectory_thetas = np.linspace(self.theta_min, self.theta_max, self.num_trajectories)
    paths = toy_unrolls.trajectories(
      self.lopt, name, trajectory_thetas, max(self.num_steps), self.w0
    )
    ends = basins(paths[:, -1], self.max_abs_w)
    panels.done(
      "(b) trajectories",
      f"T = {max(self.num_steps)}: basins (w=0, w=3.57, other, diverged) = "
      f"{np.bincount(ends, minlength=4).tolist()}",
    )

    thetas = np.linspace(self.theta_min, self.theta_max, self.num_thetas)
    grid = self._grid_runs(thetas, panels)
    fixed_momentum = 0.0 if self.optimizer == "sgd" else self.momentum
    return {
      "theta_name": name,
      "optimizer": self.optimizer,
      "learning_rate": "theta" if name == "learning_rate" else self.learning_rate,
      "momentum": "theta" if name == "momentum" else fixed_momentum,
      "w0": self.w0,
      "loss_w0": loss_w0,
      "minima": [toy.LOCAL_MINIMUM, toy.GLOBAL_MINIMUM],
      "max_abs_w": self.max_abs_w,
      "basin_radius": BASIN_RADIUS,
      "curve": {"w": curve_w, "loss": curve_loss},
      "trajectory_thetas": trajectory_thetas,
      "trajectories": paths,
      "thetas": thetas,
      "num_steps": self.num_steps,
      **grid,
    }

  def _grid_runs(self, thetas: np.ndarray, panels: runner.Panels) -> dict:
    """Panels (c) and (d): the runs of the grid `thetas` for every T, and where they ended.

    Args:
      thetas: the grid.
      panels: where the two panels are reported.

    Returns:
      compute's entries from "final_w" to "median_abs_dloss_dtheta", lists over num_steps.
    """
    final_fn = toy_unrolls.make_final_fn(self.lopt, self.theta_name, self.num_thetas, self.w0)
    grid = {}
    for steps in self.num_steps:
      w, loss, grad = final_fn(thetas, steps)
      entries = {"final_w": w, "final_loss": loss, "dloss_dtheta": grad}
      for key, value in {**entries, **_ends(w, grad, self.max_abs_w)}.items():
        grid.setdefault(key, []).append(value)
    changes = dict(zip(self.num_steps, grid["num_basin_changes"], strict=True))
    num_diverged = dict(zip(self.num_steps, grid["num_diverged"], strict=True))
    panels.done(
      "(c) final loss against theta",
      f"basin changes along the grid per T {changes}; diverged {num_diverged}",
    )
    max_grad = zip(self.num_steps, grid["max_abs_dloss_dtheta"], strict=True)
    panels.done(
      "(d) |d l(w_T) / d theta|", "max per T " + ", ".join(f"{t}: {g:.3g}" for t, g in max_grad)
    )
    return grid

  def plot(self, result: dict) -> figure.Figure:
    """Panels (a)-(d) from the result.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    fig = figure.Figure(figsize=(18, 4.2))
    ax_a, ax_b, ax_c, ax_d = fig.subplots(1, 4)
    label = {"momentum": "momentum", "learning_rate": "learning rate"}[result["theta_name"]]
    ax_a.plot(result["curve"]["w"], result["curve"]["loss"], color="k")
    ax_a.plot([result["w0"]], [result["loss_w0"]], "*", color="tab:red", ms=14, label="$w_0$")
    ax_a.set(xlabel="w", ylabel="l(w)", title="(a) l(w) = (w-4)(w-3)w$^2$")
    ax_a.legend()
    _plot_trajectories(fig, ax_b, result, label)
    _plot_grid(ax_c, ax_d, result, label)
    fig.tight_layout()
    return fig


def _ends(w: np.ndarray, grad: np.ndarray, max_abs_w: float) -> dict:
  """Where the runs of one T ended, and how large their outer-gradients are: per-T entries.

  Args:
    w: the final w of each run of the grid.
    grad: each run's d l(w_T) / d theta.
    max_abs_w: runs with |w_T| above this (or non-finite) count as diverged.
  """
  labels = basins(w, max_abs_w)
  ok = np.abs(grad[(labels != 3) & np.isfinite(grad)])
  counts = np.bincount(labels, minlength=4)
  return {
    "num_diverged": int(np.sum(labels == 3)),
    "basin_counts": dict(zip(BASIN_NAMES, counts.tolist(), strict=True)),
    "num_basin_changes": int(np.sum(labels[1:] != labels[:-1])),
    "max_abs_dloss_dtheta": float(ok.max()) if ok.size else float("nan"),
    "median_abs_dloss_dtheta": float(np.median(ok)) if ok.size else float("nan"),
  }


def _plot_trajectories(fig: figure.Figure, ax: axes.Axes, result: dict, label: str) -> None:
  """Panel (b): w_t of the runs of a few thetas, coloured by theta, diverged parts left out."""
  thetas = np.asarray(result["trajectory_thetas"])
  cmap = matplotlib.colormaps["viridis_r"]  # Low theta yellow, high theta purple (Fig. 2b).
  norm = colors.Normalize(thetas.min(), thetas.max())
  for theta, path in zip(thetas, np.asarray(result["trajectories"], float), strict=True):
    path = np.where(diverged(path, result["max_abs_w"]), np.nan, path)
    ax.plot(np.arange(len(path)), path, color=cmap(norm(theta)), lw=1)
  ax.set_xscale("symlog", linthresh=10)
  ax.set(xlabel="step t", ylabel="$w_t$", title=f"(b) $w_t$, colour = {label}")
  ax.set_ylim(-2, 5.5)
  fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=label)


def _plot_grid(ax_c: axes.Axes, ax_d: axes.Axes, result: dict, label: str) -> None:
  """Panels (c) l(w_T) and (d) |d l(w_T) / d theta| against theta, one line per T."""
  if result["theta_name"] == "momentum":
    fixed = f"learning rate {result['learning_rate']}"
  else:
    fixed = f"momentum {result['momentum']}"
  thetas = np.asarray(result["thetas"])
  step_colors = matplotlib.colormaps["plasma"](np.linspace(0, 0.85, len(result["num_steps"])))
  for i, steps in enumerate(result["num_steps"]):
    keep = ~diverged(np.asarray(result["final_w"][i], float), result["max_abs_w"])
    loss = np.where(keep, np.asarray(result["final_loss"][i], float), np.nan)
    grad = np.abs(np.asarray(result["dloss_dtheta"][i], float))
    grad = np.where(keep & np.isfinite(grad) & (grad > 0), grad, np.nan)
    ax_c.plot(thetas, loss, color=step_colors[i], lw=1, label=f"T = {steps}")
    max_grad = result["max_abs_dloss_dtheta"][i]
    ax_d.plot(thetas, grad, color=step_colors[i], lw=0.8, label=f"T = {steps} (max {max_grad:.2g})")
  num_diverged = result["num_diverged"]
  title_c = f"(c) final loss, {fixed}"
  if any(num_diverged):
    title_c += f"\n(up to {max(num_diverged)} of {len(thetas)} runs diverged: left out)"
  ax_c.set(xlabel=label, ylabel="$l(w_T)$", title=title_c)
  ax_c.set_ylim(-4, min(ax_c.get_ylim()[1], MAX_LOSS_SHOWN))  # min l = l(3.569) = -3.12.
  ax_c.legend(fontsize=8)
  ax_d.set_yscale("log")
  ax_d.set_ylim(bottom=MIN_GRADIENT_SHOWN)
  ax_d.set(
    xlabel=label,
    ylabel=f"|d l($w_T$) / d {label}|",
    title=f"(d) outer-gradient by backprop\n(axis cut at {MIN_GRADIENT_SHOWN:g})",
  )
  ax_d.legend(fontsize=8)
