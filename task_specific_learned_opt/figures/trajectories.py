"""Fig. 2d: Adam's trajectories on a small MLP diverge under tiny changes of the learning rate.

Sec. 2.3 trains a 2-layer ReLU MLP with Adam for 40 steps at 100 learning rates log-spaced in
[0.1469, 0.1484], with every source of randomness fixed (the same initial parameters, the same
batch at each step), and plots a random 2-D projection of each run's parameters at every step,
coloured by the learning rate. The paper's claim: early in training the trajectories are similar,
later they diverge, giving very different trained models for learning rates 1% apart.

Every run is the project's graph-mode `inner_training.unroll` of `adam.Adam`, one step at a time
inside one compiled tf.function whose learning rate is a tensor argument, so the 100 runs share
one trace. The projection is fixed and linear: x = flat(w) @ P, flat(w) being all the parameters
flattened in `tf.nest.flatten` order and P a [num_params, 2] Gaussian matrix (entries
N(0, 1 / num_params)) drawn from `projection_seed` (`divergence`).

The divergence is also measured, per step t, over the learning rates k:
  - spread_2d: the RMS distance of the projected points to their centroid,
    sqrt(mean_k |x_k - mean_k x_k|^2), and max_pairwise_2d, the largest distance between two points;
  - spread: the same RMS distance in the full parameter space, and relative_spread =
    spread / |mean_k w_k(t) - w(0)|, the spread as a fraction of how far the runs have moved.
Were the runs only rescaled copies of each other (w_k(t) - w(0) proportional to lr_k, as when the
gradients do not depend on the learning rate), relative_spread would stay at the relative spread
of the learning rates, ~0.3%, for every t; divergence means it grows.

`inner_problems.mlp_task` makes the inner problem: a ReLU MLP on 14x14 MNIST when it is prepared
in the TFDS data dir, or on the embedded generated image family (no download).
"""

from collections.abc import Callable

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from matplotlib import axes, cm, colors, figure, ticker

from task_specific_learned_opt import inner_training, nests, random_seeds
from task_specific_learned_opt.figures import divergence, inner_problems, runner
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import base as task_base


def make_trajectory_fn(
  task: task_base.Task,
  params: nests.Params,
  num_steps: int,
  data_seed: int,
  **adam_kwargs: float,
) -> Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]]:
  """A compiled function: learning rate -> (flattened parameters at every step, training losses).

  Step t trains on task.batch("train", fold_in(data_seed, t)) (`inner_training.unroll` with
  first_step = t), so every learning rate sees the same batches from the same `params`.

  Args:
    task: the inner problem.
    params: the initial parameters, shared by every run.
    num_steps: the number of Adam steps.
    data_seed: the seed of the batches.
    **adam_kwargs: Adam's other hyper-parameters (beta1, beta2, epsilon).

  Returns:
    A tf.function of a float32 scalar learning rate giving (float32 [num_steps + 1, num_params],
    row t the parameters after t steps; float32 [num_steps], the clipped training loss of each
    step before its update). Every learning rate reuses one trace.
  """

  @tf.function(autograph=False)
  def run(learning_rate: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    opt = adam.Adam(learning_rate=learning_rate, **adam_kwargs)
    state = opt.init(params)

    def body(
      t: tf.Tensor, state: adam.AdamState, path: tf.TensorArray, losses: tf.TensorArray
    ) -> tuple[tf.Tensor, adam.AdamState, tf.TensorArray, tf.TensorArray]:
      state, loss = inner_training.unroll(task, opt, state, 1, data_seed, first_step=t)
      path = path.write(t + 1, nests.flatten(opt.get_params(state)))
      return t + 1, state, path, losses.write(t, loss[0])

    path = tf.TensorArray(tf.float32, size=num_steps + 1).write(0, nests.flatten(params))
    losses = tf.TensorArray(tf.float32, size=num_steps, element_shape=[])
    _, _, path, losses = tf.while_loop(
      lambda t, *_: t < num_steps, body, (tf.constant(0), state, path, losses)
    )
    return path.stack(), losses.stack()

  return run


@gin.configurable
class AdamTrajectories(runner.Experiment):
  """Fig. 2d: 2-D random projections of Adam's trajectories for nearby learning rates."""

  def __init__(
    self,
    task: task_base.Task = gin.REQUIRED,
    min_learning_rate: float = 0.1469,
    max_learning_rate: float = 0.1484,
    num_learning_rates: int = 100,
    num_steps: int = 40,
    beta1: float = 0.9,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    init_seed: int = 0,
    data_seed: int = 0,
    projection_seed: int = 0,
  ):
    """Configures the experiment.

    Args:
      task: the inner problem (e.g. `inner_problems.mlp_task()`).
      min_learning_rate: the smallest learning rate.
      max_learning_rate: the largest learning rate.
      num_learning_rates: how many learning rates, log-spaced between the two.
      num_steps: Adam steps per run.
      beta1: Adam's beta1.
      beta2: Adam's beta2.
      epsilon: Adam's epsilon.
      init_seed: the seed of the initial parameters, shared by every run.
      data_seed: the seed of the batches, shared by every run.
      projection_seed: the seed of the random projection.
    """
    self.task = task
    self.learning_rates = np.geomspace(min_learning_rate, max_learning_rate, num_learning_rates)
    self.num_steps = int(num_steps)
    self.adam_kwargs = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}
    self.init_seed = int(init_seed)
    self.data_seed = int(data_seed)
    self.projection_seed = int(projection_seed)

  def _train_runs(
    self, params: nests.Params, num_params: int
  ) -> tuple[np.ndarray, np.ndarray, divergence.SpreadAccumulator, np.ndarray]:
    """Trains one run per learning rate from `params`.

    Returns:
      The projected points [K, num_steps + 1, 2]; the training losses [K, num_steps]; the
      accumulated full-space spread; per step, the largest |w_k(t) - w_first(t)|.
    """
    projection = divergence.random_projection(num_params, self.projection_seed)
    run = make_trajectory_fn(self.task, params, self.num_steps, self.data_seed, **self.adam_kwargs)
    accumulator = divergence.SpreadAccumulator()
    points, losses, max_distance = [], [], np.zeros(self.num_steps + 1)
    for learning_rate in self.learning_rates:
      path, run_losses = run(tf.constant(learning_rate, tf.float32))
      path = path.numpy()
      accumulator.add(path)
      max_distance = np.maximum(max_distance, np.linalg.norm(path - accumulator.first, axis=-1))
      points.append(divergence.project(path, projection))
      losses.append(run_losses.numpy())
    return np.stack(points), np.stack(losses), accumulator, max_distance

  def compute(self, panels: runner.Panels) -> dict:
    """Trains one run per learning rate; projects and measures the spread at every step.

    Args:
      panels: where each finished panel is reported.

    Returns:
      The settings; "learning_rates" [K]; "points" [K][num_steps + 1][2], the projected
      parameters of each run at each step; "losses" [K][num_steps], the training losses; per step
      [num_steps + 1]: "spread_2d", "max_pairwise_2d", "spread", "distance_moved"
      (|mean_k w_k(t) - w(0)|), "relative_spread" (spread / distance_moved, NaN at step 0) and
      "max_distance_to_first" (the largest |w_k(t) - w_first(t)|, w_first the smallest learning
      rate's run); "relative_lr_spread", the relative_spread the runs would keep if they were
      rescaled copies of each other.
    """
    params = self.task.init_params(random_seeds.as_seed(self.init_seed))
    num_params = int(nests.flatten(params).shape[0])
    points, losses, accumulator, max_distance = self._train_runs(params, num_params)
    spread = accumulator.spread()
    distance_moved = np.linalg.norm(accumulator.mean() - accumulator.first[0], axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
      relative_spread = np.where(distance_moved > 0, spread / distance_moved, np.nan)
    spread_points = divergence.spread_2d(points)
    max_pairwise = np.array(
      [divergence.max_pairwise_distance(points[:, t]) for t in range(points.shape[1])]
    )
    lr_scale = self.learning_rates / self.learning_rates.mean()
    relative_lr_spread = float(np.std(lr_scale))
    final = np.isfinite(losses[:, -1])
    panels.done(
      "(d) trajectories",
      f"relative spread after step 1: {relative_spread[1]:.2g}, after step {self.num_steps}: "
      f"{relative_spread[-1]:.2g} (rescaled copies would keep {relative_lr_spread:.2g}); 2-D "
      f"spread {spread_points[1]:.2g} -> {spread_points[-1]:.2g}; final training losses in "
      f"[{np.min(losses[:, -1]):.3f}, {np.max(losses[:, -1]):.3f}]",
    )
    return {
      "task": self.task.name,
      "data": inner_problems.data_description(self.task),
      "num_params": num_params,
      "num_steps": self.num_steps,
      "adam": self.adam_kwargs,
      "loss_clip": inner_problems.loss_clip(),
      "init_seed": self.init_seed,
      "data_seed": self.data_seed,
      "projection_seed": self.projection_seed,
      "learning_rates": self.learning_rates,
      "points": points,
      "losses": losses,
      "final_loss_min": float(np.min(losses[final, -1])) if final.any() else float("nan"),
      "final_loss_max": float(np.max(losses[final, -1])) if final.any() else float("nan"),
      "spread_2d": spread_points,
      "max_pairwise_2d": max_pairwise,
      "spread": spread,
      "distance_moved": distance_moved,
      "relative_spread": relative_spread,
      "max_distance_to_first": max_distance,
      "relative_lr_spread": relative_lr_spread,
    }

  def plot(self, result: dict) -> figure.Figure:
    """The trajectories, the spread against the step, and the training losses.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    fig = figure.Figure(figsize=(17, 5))
    ax_d, ax_spread, ax_loss = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.35, 1, 1]})
    _plot_runs(fig, ax_d, ax_loss, result)
    _plot_spreads(ax_spread, result)
    fig.tight_layout()
    return fig


def _plot_runs(fig: figure.Figure, ax_d: axes.Axes, ax_loss: axes.Axes, result: dict) -> None:
  """Panel (d), the projected trajectories, and the training losses, coloured by learning rate."""
  learning_rates = np.asarray(result["learning_rates"], float)
  points = np.asarray(result["points"], float)
  losses = np.asarray(result["losses"], float)
  cmap = matplotlib.colormaps["viridis"]
  # Linear: the learning rates span 1%, so log spacing is linear to the eye.
  norm = colors.Normalize(learning_rates.min(), learning_rates.max())
  for learning_rate, path, run_losses in zip(learning_rates, points, losses, strict=True):
    color = cmap(norm(learning_rate))
    ax_d.plot(path[:, 0], path[:, 1], "-", color=color, lw=0.5, alpha=0.6)
    ax_d.plot(path[:, 0], path[:, 1], ".", color=color, ms=2.5)
    ax_loss.plot(np.arange(len(run_losses)), run_losses, color=color, lw=0.7)
  ax_d.plot(points[0, 0, 0], points[0, 0, 1], "*", color="tab:red", ms=14, label="$w_0$")
  ax_d.legend(loc="best")
  ax_d.set(
    xlabel="projection 1",
    ylabel="projection 2",
    title=f"(d) Adam, {result['num_steps']} steps: random 2-D projection of all "
    f"{result['num_params']} parameters\ndata: {result['data']}",
  )
  colorbar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax_d)
  colorbar.set_label("learning rate")
  colorbar.formatter = ticker.FormatStrFormatter("%.4f")
  colorbar.update_ticks()
  clip = result["loss_clip"]
  ax_loss.set(
    xlabel="step t",
    ylabel="training loss (before the step)",
    title="training loss of every run" + ("" if clip is None else f" (clipped at {clip:g})"),
  )


def _plot_spreads(ax: axes.Axes, result: dict) -> None:
  """The spreads across the runs against the step, on a log scale."""
  # From step 1 on: at step 0 every run is at w(0), a spread of 0 that a log scale cannot show.
  steps = np.arange(1, np.shape(result["points"])[1])
  for key, marker, label in (
    ("relative_spread", "o-", "full space: spread / distance moved"),
    ("spread_2d", "s-", "2-D: RMS distance to the centroid"),
    ("max_pairwise_2d", "^-", "2-D: max pairwise distance"),
  ):
    ax.plot(steps, np.asarray(result[key], float)[1:], marker, ms=3, label=label)
  ax.axhline(
    result["relative_lr_spread"],
    color="gray",
    ls="--",
    lw=1,
    label="full space: rescaled copies would stay here",
  )
  ax.set_yscale("log")
  ax.set(xlabel="step t", ylabel="spread across learning rates", title="divergence across the runs")
  ax.legend(fontsize=8)
