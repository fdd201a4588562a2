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
whose theta is a `LearnedHyperparameters` hyper-parameter. One unroll trains every theta of the
grid at once: the task holds one copy of w per theta and its loss is the sum over the copies, and
theta is a vector with one entry per copy, so the gradient of the summed final loss with respect
to the vector holds each run's own d l(w_T) / d theta.

The inner loss must not be clipped: l(w0) = 31.4 is above `inner_training.clip_loss`'s default
of 10, where the clipped gradient is 0 (and the clip would apply to the sum over copies). The gin
files bind `clip_loss.max_loss = None`, and `compute` refuses to run with a clip.

A run "diverges" when w_T is not finite or |w_T| > `max_abs_w`; the plots leave diverged runs
out (the JSON keeps their values and counts them).
"""

from collections.abc import Callable

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from matplotlib import cm, colors, figure

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.figures import runner
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.tasks import toy

OPTIMIZERS = {"momentum": sgd.Momentum, "sgd": sgd.SGD}
THETA_NAMES = ("learning_rate", "momentum")
BASIN_NAMES = ("w=0", "w=3.569", "other", "diverged")  # The labels of `basins`.
BASIN_RADIUS = 0.3  # w_T within this of a minimum counts as having settled in that minimum.
# Panel (c)'s axis stops here, above the barrier l(1.681) = 8.7 between the minima: only runs
# still far from both minima (at T = 10) go above it.
MAX_LOSS_SHOWN = 12.0
MIN_GRADIENT_SHOWN = 1e-10  # Panel (d)'s axis stops here (converged runs reach 1e-35).


def check_no_loss_clip(why: str) -> None:
  """Raises ValueError unless `inner_training.clip_loss` leaves losses unclipped.

  Args:
    why: why the experiment needs unclipped losses, for the error message.

  Raises:
    ValueError: clip_loss.max_loss is not None (bind `clip_loss.max_loss = None` in gin).
  """
  if float(inner_training.clip_loss(tf.constant(1e6))) != 1e6:
    raise ValueError(f"{why}: bind `clip_loss.max_loss = None`.")


def make_optimizer(
  optimizer: str, theta_name: str, learning_rate: float | None, momentum: float | None
) -> hyperparameters.LearnedHyperparameters:
  """The rule whose hyper-parameter `theta_name` is theta (as itself, "identity").

  Args:
    optimizer: "momentum" (heavy-ball `sgd.Momentum`) or "sgd" (`sgd.SGD`, no momentum).
    theta_name: "learning_rate" or "momentum".
    learning_rate: the fixed learning rate, None when it is theta.
    momentum: the fixed momentum, None when it is theta; must be None or 0 for "sgd".

  Returns:
    A `LearnedHyperparameters` whose opt_fn({theta_name: thetas}) is the rule at thetas.

  Raises:
    ValueError: an unknown optimizer or theta name, a fixed value given for theta or missing for
      the other hyper-parameter, or a momentum for "sgd".
  """
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"Unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}.")
  if theta_name not in THETA_NAMES:
    raise ValueError(f"Unknown theta {theta_name!r}; expected one of {THETA_NAMES}.")
  values = {"learning_rate": learning_rate, "momentum": momentum}
  if values[theta_name] is not None:
    raise ValueError(f"{theta_name} is theta; its fixed value must be None.")
  if optimizer == "sgd":
    if theta_name == "momentum" or momentum:
      raise ValueError("Plain SGD has no momentum.")
    del values["momentum"]
  fixed = {name: value for name, value in values.items() if name != theta_name}
  if any(value is None for value in fixed.values()):
    raise ValueError(f"The fixed hyper-parameters need values: {fixed}.")
  return hyperparameters.LearnedHyperparameters(
    OPTIMIZERS[optimizer], learned={theta_name: "identity"}, initial={theta_name: 1.0}, fixed=fixed
  )


def make_final_fn(
  lopt: hyperparameters.LearnedHyperparameters,
  theta_name: str,
  num_thetas: int,
  w0: float = toy.W0,
) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """A compiled function: (thetas, T) -> the final w, l(w_T) and d l(w_T)/d theta of each run.

  It trains one copy of w per theta for T steps in one `inner_training.unroll`; new values of
  thetas or T reuse the same trace.

  Args:
    lopt: the rule, from `make_optimizer`.
    theta_name: the hyper-parameter that theta is.
    num_thetas: N, the number of thetas (and of runs) per call.
    w0: the initial w of every copy.

  Returns:
    A function of ([N] thetas, T) giving (w_T, l(w_T), d l(w_T) / d theta), each a float32 [N]
    array (non-finite where a run diverged); the derivative is by backpropagation through the
    unroll.
  """
  task = toy.TwoMinimumTask(num_copies=num_thetas, w0=w0)

  @tf.function(autograph=False)
  def final(thetas: tf.Tensor, num_steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
      tape.watch(thetas)
      opt = lopt.opt_fn({theta_name: thetas})
      state = opt.init(task.init_params(0))
      state, _ = inner_training.unroll(task, opt, state, num_steps, seed=0)
      w = opt.get_params(state)["w"]
      losses = toy.toy_loss(w)
      total = tf.reduce_sum(losses)
    return w, losses, tape.gradient(total, thetas)

  def run(thetas: np.ndarray, num_steps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    outputs = final(tf.constant(thetas, tf.float32), tf.constant(num_steps, tf.int32))
    return tuple(x.numpy() for x in outputs)

  return run


def trajectories(
  lopt: hyperparameters.LearnedHyperparameters,
  theta_name: str,
  thetas: np.ndarray,
  num_steps: int,
  w0: float = toy.W0,
) -> np.ndarray:
  """w_t for t = 0..num_steps of one run per theta, one `unroll` step at a time.

  Args:
    lopt: the rule, from `make_optimizer`.
    theta_name: the hyper-parameter that theta is.
    thetas: [N] values of theta.
    num_steps: the number of steps.
    w0: the initial w.

  Returns:
    A float32 [N, num_steps + 1] array; column t is w_t.
  """
  task = toy.TwoMinimumTask(num_copies=len(thetas), w0=w0)
  opt = lopt.opt_fn({theta_name: tf.constant(thetas, tf.float32)})

  @tf.function(autograph=False)
  def step(state: object, t: tf.Tensor) -> object:
    return inner_training.unroll(task, opt, state, 1, seed=0, first_step=t)[0]

  state = opt.init(task.init_params(0))
  ws = [opt.get_params(state)["w"].numpy()]
  for t in range(num_steps):
    state = step(state, tf.constant(t, tf.int32))
    ws.append(opt.get_params(state)["w"].numpy())
  return np.stack(ws, axis=1)


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
    self.lopt = make_optimizer(optimizer, theta_name, learning_rate, momentum)

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
      ValueError: the inner loss is clipped (see check_no_loss_clip).
    """
    check_no_loss_clip("The toy loss must not be clipped (l(w0) = 31.4 is above the clip)")
    name = self.theta_name
    curve_w = np.linspace(-1.5, 4.5, 301)
    curve_loss = toy.toy_loss(tf.constant(curve_w)).numpy()
    loss_w0 = float(toy.toy_loss(tf.constant(self.w0)))
    panels.done(
      "(a) the loss", f"l(w0 = {self.w0}) = {loss_w0:.2f}; minima w = 0, {toy.GLOBAL_MINIMUM:.3f}"
    )

    trajectory_thetas = np.linspace(self.theta_min, self.theta_max, self.num_trajectories)
    paths = trajectories(self.lopt, name, trajectory_thetas, max(self.num_steps), self.w0)
    ends = basins(paths[:, -1], self.max_abs_w)
    panels.done(
      "(b) trajectories",
      f"T = {max(self.num_steps)}: basins (w=0, w=3.57, other, diverged) = "
      f"{np.bincount(ends, minlength=4).tolist()}",
    )

    thetas = np.linspace(self.theta_min, self.theta_max, self.num_thetas)
    final_w, final_loss, grads = [], [], []
    num_diverged, basin_counts, num_changes, max_grad, median_grad = [], [], [], [], []
    final_fn = make_final_fn(self.lopt, name, self.num_thetas, self.w0)
    for steps in self.num_steps:
      w, loss, grad = final_fn(thetas, steps)
      final_w.append(w)
      final_loss.append(loss)
      grads.append(grad)
      labels = basins(w, self.max_abs_w)
      num_diverged.append(int(np.sum(labels == 3)))
      counts = np.bincount(labels, minlength=4)
      basin_counts.append(dict(zip(BASIN_NAMES, counts.tolist(), strict=True)))
      num_changes.append(int(np.sum(labels[1:] != labels[:-1])))
      ok = np.abs(grad[(labels != 3) & np.isfinite(grad)])
      max_grad.append(float(ok.max()) if ok.size else float("nan"))
      median_grad.append(float(np.median(ok)) if ok.size else float("nan"))
    panels.done(
      "(c) final loss against theta",
      f"basin changes along the grid per T {dict(zip(self.num_steps, num_changes, strict=True))}; "
      f"diverged {dict(zip(self.num_steps, num_diverged, strict=True))}",
    )
    panels.done(
      "(d) |d l(w_T) / d theta|",
      "max per T "
      + ", ".join(f"{t}: {g:.3g}" for t, g in zip(self.num_steps, max_grad, strict=True)),
    )
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
      "final_w": final_w,
      "final_loss": final_loss,
      "dloss_dtheta": grads,
      "num_diverged": num_diverged,
      "basin_counts": basin_counts,
      "num_basin_changes": num_changes,
      "max_abs_dloss_dtheta": max_grad,
      "median_abs_dloss_dtheta": median_grad,
    }

  def plot(self, result: dict) -> figure.Figure:
    """Panels (a)-(d) from the result.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    fig = figure.Figure(figsize=(18, 4.2))
    ax_a, ax_b, ax_c, ax_d = fig.subplots(1, 4)
    name = result["theta_name"]
    label = {"momentum": "momentum", "learning_rate": "learning rate"}[name]
    fixed = (
      f"learning rate {result['learning_rate']}"
      if name == "momentum"
      else f"momentum {result['momentum']}"
    )
    max_abs_w = result["max_abs_w"]

    ax_a.plot(result["curve"]["w"], result["curve"]["loss"], color="k")
    ax_a.plot([result["w0"]], [result["loss_w0"]], "*", color="tab:red", ms=14, label="$w_0$")
    ax_a.set(xlabel="w", ylabel="l(w)", title="(a) l(w) = (w-4)(w-3)w$^2$")
    ax_a.legend()

    thetas_b = np.asarray(result["trajectory_thetas"])
    cmap = matplotlib.colormaps["viridis_r"]  # Low theta yellow, high theta purple (Fig. 2b).
    norm = colors.Normalize(thetas_b.min(), thetas_b.max())
    for theta, path in zip(thetas_b, np.asarray(result["trajectories"], float), strict=True):
      path = np.where(diverged(path, max_abs_w), np.nan, path)
      ax_b.plot(np.arange(len(path)), path, color=cmap(norm(theta)), lw=1)
    ax_b.set_xscale("symlog", linthresh=10)
    ax_b.set(xlabel="step t", ylabel="$w_t$", title=f"(b) $w_t$, colour = {label}")
    ax_b.set_ylim(-2, 5.5)
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax_b, label=label)

    thetas = np.asarray(result["thetas"])
    step_colors = matplotlib.colormaps["plasma"](np.linspace(0, 0.85, len(result["num_steps"])))
    for i, steps in enumerate(result["num_steps"]):
      w = np.asarray(result["final_w"][i], float)
      keep = ~diverged(w, max_abs_w)
      loss = np.where(keep, np.asarray(result["final_loss"][i], float), np.nan)
      grad = np.abs(np.asarray(result["dloss_dtheta"][i], float))
      grad = np.where(keep & np.isfinite(grad) & (grad > 0), grad, np.nan)
      ax_c.plot(thetas, loss, color=step_colors[i], lw=1, label=f"T = {steps}")
      max_grad = result["max_abs_dloss_dtheta"][i]
      ax_d.plot(
        thetas, grad, color=step_colors[i], lw=0.8, label=f"T = {steps} (max {max_grad:.2g})"
      )
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
    fig.tight_layout()
    return fig
