"""Fig. 2e-f: 1-D and 2-D slices of the learned optimizer's outer-loss L(theta) for 5, 10, 20 steps.

Sec. 2.3 shows that the outer-loss surface of a neural-network optimizer grows rougher as the
number of unrolled inner steps T grows: (e) the mean validation loss over the unroll along a 1-D
line through theta in the direction of the outer-gradient, and (f) the mean training loss on a 2-D
slice, for T = 5, 10 and 20, the inner problem a 2-layer MLP and the optimizer the paper's
(`mlp_lopt.MLPLOpt`).

L(theta) (`flat_outer_loss.OuterLoss`) is exactly the outer-loss of the project's outer-training,
`truncated_unroll`'s `antithetic_losses` run from a fresh inner state for T steps (recompute=False:
T is small):
  - L_valid = mean over t = 0..T-1 of clip(loss of w_{t+1} on the valid batch of step t),
  - L_train = mean over t = 1..T of clip(loss of w_t on the training batch of step t),
the inner run starting from one initialisation and seeing one batch sequence for every theta (the
training batches from stream(data_seed, "unroll_train"), the validation batches from
stream(data_seed, "unroll_valid"): `truncated_unroll.data_seeds`). Its + and - unrolls take two
thetas at once, so each call evaluates two points of a slice.

Directions, all unit vectors in the flattened theta (`nests.flatten` order):
  - (e) for each T, d = g / |g|, g = dL_valid/dtheta at theta by backpropagation through the
    unroll; the slice is L_valid(theta + a d) at evenly spaced offsets a in [-line_range,
    line_range], so it decreases towards negative a near a = 0 (the slope at 0 is |g| > 0);
  - (f) for each T, d1 = the unit outer-gradient of L_train at theta, and d2 = a random Gaussian
    direction (the same draw for every T) made orthogonal to d1; the slice is
    L_train(theta + a d1 + b d2) on a grid_size x grid_size grid of [-grid_range, grid_range]^2.

Roughness, per T, so that "rougher with T" is a number (`roughness`): along the 1-D slice the
total variation and the mean |second difference|; on the 2-D slice the mean |discrete Laplacian|
and the mean |difference| between neighbouring grid points.

theta is read from `theta_dir` (an export of `checkpoints.save_theta`) or, by default, freshly
initialised (MLPLOpt.init(theta_seed)); the figure says which.
"""

import gin
import matplotlib
import numpy as np
from matplotlib import axes, figure, gridspec

from task_specific_learned_opt import checkpoints, nests, random_seeds
from task_specific_learned_opt.figures import flat_outer_loss, inner_problems, roughness, runner
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import base as task_base

OBJECTIVE_NAMES = {"train": "L_train", "valid": "L_valid"}


@gin.configurable
class OuterLossSlices(runner.Experiment):
  """Fig. 2e (a 1-D slice of L_valid along the outer-gradient) and 2f (2-D slices of L_train)."""

  def __init__(
    self,
    task: task_base.Task = gin.REQUIRED,
    lopt: lopt_base.LearnedOptimizer | None = None,
    theta_dir: str | None = None,
    theta_seed: int = 0,
    init_seed: int = 0,
    data_seed: int = 0,
    num_steps: tuple[int, ...] = (5, 10, 20),
    line_objective: str = "valid",
    line_range: float = 10.0,
    num_line_points: int = 401,
    grid_objective: str = "train",
    grid_range: float = 10.0,
    grid_size: int = 41,
    direction_seed: int = 0,
  ) -> None:
    """Configures the experiment.

    Args:
      task: the inner problem (e.g. `inner_problems.mlp_task()`).
      lopt: the learned optimizer (MLPLOpt() by default).
      theta_dir: a directory with an exported theta (checkpoints.load_theta); None slices
        through a freshly initialised theta.
      theta_seed: the seed of the fresh theta (unused with theta_dir).
      init_seed: the seed of the inner initial parameters, shared by every theta.
      data_seed: the seed of the inner batches, shared by every theta.
      num_steps: the values of T.
      line_objective: the outer-loss of the 1-D slice ("valid" in the paper).
      line_range: the 1-D slice spans offsets [-line_range, line_range] along its unit direction.
      num_line_points: points of the 1-D slice (odd, so that offset 0 is one of them).
      grid_objective: the outer-loss of the 2-D slice ("train" in the paper).
      grid_range: the 2-D slice spans [-grid_range, grid_range] along both unit directions.
      grid_size: points per axis of the 2-D slice (odd, so that theta is one of them).
      direction_seed: the seed of the 2-D slice's random direction.

    Raises:
      ValueError: an unknown objective or an even number of points.
    """
    for objective in (line_objective, grid_objective):
      if objective not in OBJECTIVE_NAMES:
        raise ValueError(f"Unknown objective {objective!r}; expected one of {OBJECTIVE_NAMES}.")
    if num_line_points % 2 == 0 or grid_size % 2 == 0:
      raise ValueError("num_line_points and grid_size must be odd (theta itself is the centre).")
    self.task = task
    self.lopt = lopt if lopt is not None else mlp_lopt.MLPLOpt()
    self.theta_dir = theta_dir
    self.theta_seed = int(theta_seed)
    self.init_seed = int(init_seed)
    self.data_seed = int(data_seed)
    self.num_steps = [int(t) for t in num_steps]
    self.line_objective = line_objective
    self.line_offsets = np.linspace(-line_range, line_range, int(num_line_points))
    self.grid_objective = grid_objective
    self.grid_offsets = np.linspace(-grid_range, grid_range, int(grid_size))
    self.direction_seed = int(direction_seed)

  def theta(self) -> tuple[nests.Theta, str]:
    """The theta sliced through and a few words saying where it comes from."""
    if self.theta_dir:
      return checkpoints.load_theta(self.theta_dir, self.lopt), f"theta from {self.theta_dir}"
    theta = self.lopt.init(random_seeds.as_seed(self.theta_seed))
    return theta, f"freshly initialised theta (seed {self.theta_seed}), not outer-trained"

  def outer_loss(self, theta: nests.Theta) -> flat_outer_loss.OuterLoss:
    """L(.) on this experiment's fixed inner run (initial parameters, batches).

    Args:
      theta: any theta (only the inner state's structure comes from it).
    """
    params = self.task.init_params(random_seeds.as_seed(self.init_seed))
    state = self.lopt.opt_fn(theta).init(params)
    return flat_outer_loss.OuterLoss(self.task, self.lopt, state, self.data_seed)

  def compute(self, panels: runner.Panels) -> dict:
    """Computes both slices and their roughness for every T.

    Args:
      panels: where each finished panel is reported.

    Returns:
      The settings; "theta_source"; "num_theta"; "line_offsets" [N]; per T (lists over
      num_steps): "line_losses" [N], "line_gradient_norm" (|dL/dtheta| at theta, the slope of
      the slice at 0), "line_total_variation", "line_mean_abs_second_difference",
      "line_directions" [num_theta] (d); "grid_offsets" [G]; per T "grid_losses" [G][G] (row i:
      offset grid_offsets[i] along the gradient; column j: offset grid_offsets[j] along the random
      direction), "grid_gradient_norm", "grid_mean_abs_laplacian",
      "grid_mean_abs_neighbour_difference", "grid_directions" ([2][num_theta]: d1, d2) and
      "grid_direction_cosines" (the cosine between T's d1 and the first T's).
    """
    theta, theta_source = self.theta()
    vectors = flat_outer_loss.ThetaVector(theta)
    theta_flat = vectors.flat(theta)
    outer_loss = self.outer_loss(theta)
    line = self._line_slices(outer_loss, theta, vectors)
    panels.done(
      f"(e) 1-D slices of {OBJECTIVE_NAMES[self.line_objective]}",
      "mean |second difference| per T "
      + _per_t(self.num_steps, line["line_mean_abs_second_difference"]),
    )
    grid = self._grid_slices(outer_loss, theta, vectors)
    panels.done(
      f"(f) 2-D slices of {OBJECTIVE_NAMES[self.grid_objective]}",
      "mean |Laplacian| per T " + _per_t(self.num_steps, grid["grid_mean_abs_laplacian"]),
    )
    return {
      "task": self.task.name,
      "data": inner_problems.data_description(self.task),
      "learned_optimizer": self.lopt.name,
      "theta_source": theta_source,
      "num_theta": int(theta_flat.size),
      "theta_norm": float(np.linalg.norm(theta_flat)),
      "loss_clip": inner_problems.loss_clip(),
      "init_seed": self.init_seed,
      "data_seed": self.data_seed,
      "direction_seed": self.direction_seed,
      "num_steps": self.num_steps,
      **line,
      **grid,
    }

  def _line_slices(
    self,
    outer_loss: flat_outer_loss.OuterLoss,
    theta: nests.Theta,
    vectors: flat_outer_loss.ThetaVector,
  ) -> dict:
    """(e) per T, L along its unit outer-gradient d: compute's "line_*" entries."""
    theta_flat = vectors.flat(theta)
    losses, norms, directions = [], [], []
    for steps in self.num_steps:
      gradient, direction = _unit_gradient(outer_loss, theta, vectors, steps, self.line_objective)
      points = theta_flat + self.line_offsets[:, None] * direction
      losses.append(outer_loss.losses_at(points, vectors.nest, steps, self.line_objective))
      norms.append(float(np.linalg.norm(gradient)))
      directions.append(direction)
    return {
      "line_objective": self.line_objective,
      "line_offsets": self.line_offsets,
      "line_losses": losses,
      "line_gradient_norm": norms,
      "line_total_variation": [roughness.total_variation(x) for x in losses],
      "line_mean_abs_second_difference": [roughness.mean_abs_second_difference(x) for x in losses],
      "line_directions": directions,
    }

  def _grid_slices(
    self,
    outer_loss: flat_outer_loss.OuterLoss,
    theta: nests.Theta,
    vectors: flat_outer_loss.ThetaVector,
  ) -> dict:
    """(f) per T, L on the plane of d1 (its unit outer-gradient) and d2: the "grid_*" entries."""
    theta_flat = vectors.flat(theta)
    grid_a, grid_b = np.meshgrid(self.grid_offsets, self.grid_offsets, indexing="ij")
    grids, norms, directions = [], [], []
    for steps in self.num_steps:
      gradient, direction = _unit_gradient(outer_loss, theta, vectors, steps, self.grid_objective)
      other = flat_outer_loss.orthogonal_random_direction(direction, self.direction_seed)
      points = theta_flat + grid_a.reshape(-1, 1) * direction + grid_b.reshape(-1, 1) * other
      losses = outer_loss.losses_at(points, vectors.nest, steps, self.grid_objective)
      grids.append(losses.reshape(grid_a.shape))
      norms.append(float(np.linalg.norm(gradient)))
      directions.append(np.stack([direction, other]))
    return {
      "grid_objective": self.grid_objective,
      "grid_offsets": self.grid_offsets,
      "grid_losses": grids,
      "grid_gradient_norm": norms,
      "grid_mean_abs_laplacian": [roughness.mean_abs_laplacian(g) for g in grids],
      "grid_mean_abs_neighbour_difference": [
        roughness.mean_abs_neighbour_difference(g) for g in grids
      ],
      "grid_directions": directions,
      "grid_direction_cosines": [float(np.dot(directions[0][0], d[0])) for d in directions],
    }

  def plot(self, result: dict) -> figure.Figure:
    """(e) the 1-D slices and their roughness; (f) the 2-D slices, one per T.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    num_t = len(result["num_steps"])
    fig = figure.Figure(figsize=(5 * num_t, 9.5))
    grid_spec = fig.add_gridspec(2, num_t)
    ax_line = fig.add_subplot(grid_spec[0, : max(num_t - 1, 1)])
    ax_rough = fig.add_subplot(grid_spec[0, num_t - 1]) if num_t > 1 else None
    _plot_lines(ax_line, result)
    if ax_rough is not None:
      _plot_roughness(ax_rough, result)
    _plot_grids(fig, grid_spec, result)
    fig.tight_layout()
    return fig


def _unit_gradient(
  outer_loss: flat_outer_loss.OuterLoss,
  theta: nests.Theta,
  vectors: flat_outer_loss.ThetaVector,
  num_steps: int,
  objective: str,
) -> tuple[np.ndarray, np.ndarray]:
  """The flat outer-gradient g of L at theta for T = num_steps, and g / |g|."""
  _, gradient = outer_loss.value_and_gradient(theta, num_steps, objective)
  gradient = vectors.flat(gradient)
  return gradient, flat_outer_loss.unit(gradient)


def _per_t(num_steps: list[int], values: list[float]) -> str:
  """Each T with its value ("5: 0.12, 10: 0.34"), for a panel's log line."""
  return ", ".join(f"{t}: {v:.3g}" for t, v in zip(num_steps, values, strict=True))


def _plot_lines(ax: axes.Axes, result: dict) -> None:
  """(e) the 1-D slices, one line per T."""
  step_colors = matplotlib.colormaps["plasma"](np.linspace(0, 0.8, len(result["num_steps"])))
  line_name = OBJECTIVE_NAMES[result["line_objective"]]
  offsets = np.asarray(result["line_offsets"], float)
  for i, steps in enumerate(result["num_steps"]):
    ax.plot(offsets, result["line_losses"][i], color=step_colors[i], lw=1, label=f"T = {steps}")
  ax.axvline(0.0, color="gray", lw=0.8, ls=":")
  ax.set(
    xlabel="offset a along the unit outer-gradient d (theta + a d)",
    ylabel=f"{line_name}(theta + a d)",
    title=f"(e) 1-D slices of {line_name} through theta along its outer-gradient "
    f"(one per T)\n{result['learned_optimizer']}, {result['theta_source']}; "
    f"|theta| = {result['theta_norm']:.3g}\ndata: {result['data']}",
  )
  ax.legend()


def _plot_roughness(ax: axes.Axes, result: dict) -> None:
  """The roughness of both slices against T, relative to the first T."""
  line_name = OBJECTIVE_NAMES[result["line_objective"]]
  grid_name = OBJECTIVE_NAMES[result["grid_objective"]]
  steps = result["num_steps"]
  for key, marker, label in (
    ("line_mean_abs_second_difference", "o-", f"(e) mean |2nd difference| of {line_name}"),
    ("line_total_variation", "v--", f"(e) total variation of {line_name}"),
    ("grid_mean_abs_laplacian", "s-", f"(f) mean |Laplacian| of {grid_name}"),
  ):
    values = np.asarray(result[key], float)
    ax.plot(steps, values / values[0], marker, label=label)
  ax.axhline(1.0, color="gray", lw=0.8, ls=":")
  ax.set_xticks(steps)
  ax.set(
    xlabel="inner steps T",
    ylabel=f"roughness / roughness at T = {steps[0]}",
    title="roughness against T",
  )
  ax.legend(fontsize=8)


def _plot_grids(fig: figure.Figure, grid_spec: gridspec.GridSpec, result: dict) -> None:
  """(f) the 2-D slices, one image per T on the second row of `grid_spec`, on one colour scale."""
  grid_name = OBJECTIVE_NAMES[result["grid_objective"]]
  grid_offsets = np.asarray(result["grid_offsets"], float)
  extent = [grid_offsets[0], grid_offsets[-1], grid_offsets[0], grid_offsets[-1]]
  all_grids = np.asarray(result["grid_losses"], float)
  low, high = np.nanmin(all_grids), np.nanmax(all_grids)
  for i, steps in enumerate(result["num_steps"]):
    ax = fig.add_subplot(grid_spec[1, i])
    # Rows of the grid are offsets along the gradient: put them on the vertical axis.
    image = ax.imshow(
      all_grids[i], origin="lower", extent=extent, cmap="viridis", vmin=low, vmax=high
    )
    ax.plot([0.0], [0.0], "+", color="white", ms=10)
    ax.set(
      xlabel="random orthogonal direction",
      ylabel="outer-gradient direction",
      title=f"(f) {grid_name}, T = {steps} (darker is lower)",
    )
    fig.colorbar(image, ax=ax, shrink=0.85)
