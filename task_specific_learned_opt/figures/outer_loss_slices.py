"""Fig. 2e-f: 1-D and 2-D slices of the learned optimizer's outer-loss L(theta) for 5, 10, 20 steps.

Sec. 2.3 shows that the outer-loss surface of a neural-network optimizer grows rougher as the
number of unrolled inner steps T grows: (e) the mean validation loss over the unroll along a 1-D
line through theta in the direction of the outer-gradient, and (f) the mean training loss on a 2-D
slice, for T = 5, 10 and 20, the inner problem a 2-layer MLP and the optimizer the paper's
(`mlp_lopt.MLPLOpt`).

L(theta) is exactly the outer-loss of the project's outer-training, `truncated_unroll`'s
`antithetic_losses` run from a fresh inner state for T steps (recompute=False: T is small):
  - L_valid = mean over t = 0..T-1 of clip(loss of w_{t+1} on the valid batch of step t),
  - L_train = mean over t = 1..T of clip(loss of w_t on the training batch of step t),
the inner run starting from one initialisation and seeing one batch sequence for every theta (the
training batches from fold_in(data_seed, 0), the validation batches from fold_in(data_seed, 1):
`truncated_unroll.data_seeds`). Its + and - unrolls take two thetas at once, so each call
evaluates two points of a slice.

Directions, all unit vectors in the flattened theta (`trajectories.flatten` order):
  - (e) for each T, d = g / |g|, g = dL_valid/dtheta at theta by backpropagation through the
    unroll; the slice is L_valid(theta + a d) at evenly spaced offsets a in [-line_range,
    line_range], so it decreases towards negative a near a = 0 (the slope at 0 is |g| > 0);
  - (f) for each T, d1 = the unit outer-gradient of L_train at theta, and d2 = a random Gaussian
    direction (the same draw for every T) made orthogonal to d1; the slice is
    L_train(theta + a d1 + b d2) on a grid_size x grid_size grid of [-grid_range, grid_range]^2.

Roughness, per T, so that "rougher with T" is a number: along the 1-D slice the total variation
sum_i |L_{i+1} - L_i| and the mean |second difference| mean_i |L_{i+1} - 2 L_i + L_{i-1}|; on the
2-D slice the mean |discrete Laplacian| (the 5-point stencil, the 2-D second difference) and the
mean |difference| between neighbouring grid points. Second differences are ~h^2 L'' where L is
smooth (h the spacing) but ~|jump| at a near-discontinuity, so they measure the roughness rather
than the overall slope, which the total variation also counts.

theta is read from `theta_dir` (an export of `checkpoints.save_theta`) or, by default, freshly
initialised (MLPLOpt.init(theta_seed)); the figure says which.
"""

from collections.abc import Callable

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from matplotlib import figure

from task_specific_learned_opt import checkpoints
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.figures import runner, trajectories
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import truncated_unroll
from task_specific_learned_opt.tasks import base as task_base

OBJECTIVE_NAMES = {"train": "L_train", "valid": "L_valid"}


class ThetaVector:
  """Converts between a theta nest and one flat float64 vector (tf.nest.flatten order)."""

  def __init__(self, template: lopt_base.Theta) -> None:
    """Records the structure and shapes of `template`.

    Args:
      template: a theta nest.
    """
    self.template = template
    self.shapes = [tuple(x.shape) for x in tf.nest.flatten(template)]
    self.sizes = [int(np.prod(shape)) for shape in self.shapes]

  def flat(self, theta: lopt_base.Theta) -> np.ndarray:
    """theta as one float64 vector [size].

    Args:
      theta: a nest like the template.
    """
    return trajectories.flatten(theta).numpy().astype(np.float64)

  def nest(self, vector: np.ndarray) -> lopt_base.Theta:
    """The float32 theta nest whose flattening is `vector`.

    Args:
      vector: [size].
    """
    parts = np.split(np.asarray(vector, np.float32), np.cumsum(self.sizes)[:-1])
    leaves = [tf.constant(p.reshape(s)) for p, s in zip(parts, self.shapes, strict=True)]
    return tf.nest.pack_sequence_as(self.template, leaves)


class OuterLoss:
  """L(theta) for a fixed inner run (task, initial state, batches), and its gradient."""

  def __init__(
    self,
    task: task_base.Task,
    lopt: lopt_base.LearnedOptimizer,
    state: opt_base.OptState,
    data_seed: seeds_lib.SeedLike,
  ) -> None:
    """Fixes everything but theta and T.

    Args:
      task: the inner problem.
      lopt: the learned optimizer.
      state: the inner state every unroll starts from (its iteration is the first step).
      data_seed: the inner run's data seed (see truncated_unroll.data_seeds).
    """
    self.task = task
    self.lopt = lopt
    self.state = state
    self.data_seed = seeds_lib.as_seed(data_seed)
    self._pair = tf.function(self._pair_losses, autograph=False)
    self._value_and_gradient = tf.function(self._loss_and_gradient, autograph=False)

  def _losses(
    self, theta_a: lopt_base.Theta, theta_b: lopt_base.Theta, num_steps: tf.Tensor, objective: str
  ) -> tuple[tf.Tensor, tf.Tensor]:
    loss_a, loss_b, _ = truncated_unroll.antithetic_losses(
      self.task,
      self.lopt,
      theta_a,
      theta_b,
      self.state,
      num_steps,
      self.data_seed,
      objective,
      recompute=False,
    )
    return loss_a, loss_b

  def _pair_losses(
    self, theta_a: lopt_base.Theta, theta_b: lopt_base.Theta, num_steps: tf.Tensor, objective: str
  ) -> tf.Tensor:
    return tf.stack(self._losses(theta_a, theta_b, num_steps, objective))

  def _loss_and_gradient(
    self, theta: lopt_base.Theta, num_steps: tf.Tensor, objective: str
  ) -> tuple[tf.Tensor, lopt_base.Theta]:
    with tf.GradientTape() as tape:
      tape.watch(theta)
      loss, _ = self._losses(theta, theta, num_steps, objective)
    return loss, tape.gradient(loss, theta)

  def pair(
    self, theta_a: lopt_base.Theta, theta_b: lopt_base.Theta, num_steps: int, objective: str
  ) -> tuple[float, float]:
    """(L(theta_a), L(theta_b)), both on the same inner run.

    Args:
      theta_a: one theta.
      theta_b: another theta (may be theta_a).
      num_steps: T.
      objective: "train" or "valid".
    """
    losses = self._pair(theta_a, theta_b, tf.constant(num_steps, tf.int32), objective).numpy()
    return float(losses[0]), float(losses[1])

  def value_and_gradient(
    self, theta: lopt_base.Theta, num_steps: int, objective: str
  ) -> tuple[float, lopt_base.Theta]:
    """L(theta) and dL/dtheta by backpropagation through the T-step unroll.

    Args:
      theta: where L is evaluated.
      num_steps: T.
      objective: "train" or "valid".
    """
    loss, gradient = self._value_and_gradient(theta, tf.constant(num_steps, tf.int32), objective)
    return float(loss), gradient

  def losses_at(
    self,
    vectors: np.ndarray,
    to_theta: Callable[[np.ndarray], lopt_base.Theta],
    num_steps: int,
    objective: str,
  ) -> np.ndarray:
    """L at each of `vectors` ([n, size] flat thetas), two per call: float64 [n].

    Args:
      vectors: [n, size] flat thetas.
      to_theta: flat vector -> theta nest (ThetaVector.nest).
      num_steps: T.
      objective: "train" or "valid".
    """
    losses = np.zeros(len(vectors))
    for i in range(0, len(vectors), 2):
      j = min(i + 1, len(vectors) - 1)
      losses[i], losses[j] = self.pair(
        to_theta(vectors[i]), to_theta(vectors[j]), num_steps, objective
      )
    return losses


def unit(vector: np.ndarray) -> np.ndarray:
  """vector / |vector|.

  Args:
    vector: a non-zero vector.

  Raises:
    ValueError: the vector is zero or not finite.
  """
  norm = float(np.linalg.norm(vector))
  if not np.isfinite(norm) or norm == 0.0:
    raise ValueError(f"Cannot normalise a vector of norm {norm}.")
  return vector / norm


def orthogonal_random_direction(direction: np.ndarray, seed: int) -> np.ndarray:
  """A unit Gaussian direction with its component along the unit `direction` removed.

  Args:
    direction: a unit vector.
    seed: the numpy seed of the Gaussian draw.
  """
  draw = np.random.default_rng(seed).standard_normal(direction.shape)
  return unit(draw - np.dot(draw, direction) * direction)


def total_variation(values: np.ndarray) -> float:
  """sum_i |v_{i+1} - v_i| of a 1-D array.

  Args:
    values: [n].
  """
  return float(np.sum(np.abs(np.diff(np.asarray(values, np.float64)))))


def mean_abs_second_difference(values: np.ndarray) -> float:
  """mean_i |v_{i+1} - 2 v_i + v_{i-1}| of a 1-D array.

  Args:
    values: [n], n >= 3.
  """
  return float(np.mean(np.abs(np.diff(np.asarray(values, np.float64), n=2))))


def mean_abs_laplacian(grid: np.ndarray) -> float:
  """The mean |discrete Laplacian| over the interior of a 2-D grid (5-point stencil, unit spacing).

  Args:
    grid: [n, m], n, m >= 3.
  """
  grid = np.asarray(grid, np.float64)
  laplacian = (
    grid[2:, 1:-1] + grid[:-2, 1:-1] + grid[1:-1, 2:] + grid[1:-1, :-2] - 4.0 * grid[1:-1, 1:-1]
  )
  return float(np.mean(np.abs(laplacian)))


def mean_abs_neighbour_difference(grid: np.ndarray) -> float:
  """The mean |difference| between neighbouring points of a 2-D grid, along both axes.

  Args:
    grid: [n, m].
  """
  grid = np.asarray(grid, np.float64)
  differences = np.concatenate(
    [np.abs(np.diff(grid, axis=0)).ravel(), np.abs(np.diff(grid, axis=1)).ravel()]
  )
  return float(np.mean(differences))


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
      task: the inner problem (e.g. `trajectories.mlp_task()`).
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

  def theta(self) -> tuple[lopt_base.Theta, str]:
    """The theta sliced through and a few words saying where it comes from."""
    if self.theta_dir:
      return checkpoints.load_theta(self.theta_dir, self.lopt), f"theta from {self.theta_dir}"
    theta = self.lopt.init(seeds_lib.as_seed(self.theta_seed))
    return theta, f"freshly initialised theta (seed {self.theta_seed}), not outer-trained"

  def outer_loss(self, theta: lopt_base.Theta) -> OuterLoss:
    """L(.) on this experiment's fixed inner run (initial parameters, batches).

    Args:
      theta: any theta (only the inner state's structure comes from it).
    """
    params = self.task.init_params(seeds_lib.as_seed(self.init_seed))
    state = self.lopt.opt_fn(theta).init(params)
    return OuterLoss(self.task, self.lopt, state, self.data_seed)

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
    vectors = ThetaVector(theta)
    theta_flat = vectors.flat(theta)
    outer_loss = self.outer_loss(theta)

    line_losses, line_norms, line_tv, line_second, line_directions = [], [], [], [], []
    for steps in self.num_steps:
      _, gradient = outer_loss.value_and_gradient(theta, steps, self.line_objective)
      gradient = vectors.flat(gradient)
      direction = unit(gradient)
      points = theta_flat + self.line_offsets[:, None] * direction
      losses = outer_loss.losses_at(points, vectors.nest, steps, self.line_objective)
      line_losses.append(losses)
      line_norms.append(float(np.linalg.norm(gradient)))
      line_tv.append(total_variation(losses))
      line_second.append(mean_abs_second_difference(losses))
      line_directions.append(direction)
    panels.done(
      f"(e) 1-D slices of {OBJECTIVE_NAMES[self.line_objective]}",
      "mean |second difference| per T "
      + ", ".join(f"{t}: {v:.3g}" for t, v in zip(self.num_steps, line_second, strict=True)),
    )

    grid_losses, grid_norms, grid_laplacian, grid_differences, grid_directions = [], [], [], [], []
    grid_a, grid_b = np.meshgrid(self.grid_offsets, self.grid_offsets, indexing="ij")
    for steps in self.num_steps:
      _, gradient = outer_loss.value_and_gradient(theta, steps, self.grid_objective)
      gradient = vectors.flat(gradient)
      direction = unit(gradient)
      other = orthogonal_random_direction(direction, self.direction_seed)
      points = theta_flat + grid_a.reshape(-1, 1) * direction + grid_b.reshape(-1, 1) * other
      losses = outer_loss.losses_at(points, vectors.nest, steps, self.grid_objective)
      grid = losses.reshape(grid_a.shape)
      grid_losses.append(grid)
      grid_norms.append(float(np.linalg.norm(gradient)))
      grid_laplacian.append(mean_abs_laplacian(grid))
      grid_differences.append(mean_abs_neighbour_difference(grid))
      grid_directions.append(np.stack([direction, other]))
    cosines = [float(np.dot(grid_directions[0][0], d[0])) for d in grid_directions]
    panels.done(
      f"(f) 2-D slices of {OBJECTIVE_NAMES[self.grid_objective]}",
      "mean |Laplacian| per T "
      + ", ".join(f"{t}: {v:.3g}" for t, v in zip(self.num_steps, grid_laplacian, strict=True)),
    )
    return {
      "task": self.task.name,
      "data": trajectories.data_description(self.task),
      "learned_optimizer": self.lopt.name,
      "theta_source": theta_source,
      "num_theta": int(theta_flat.size),
      "theta_norm": float(np.linalg.norm(theta_flat)),
      "loss_clip": trajectories.loss_clip(),
      "init_seed": self.init_seed,
      "data_seed": self.data_seed,
      "direction_seed": self.direction_seed,
      "num_steps": self.num_steps,
      "line_objective": self.line_objective,
      "line_offsets": self.line_offsets,
      "line_losses": line_losses,
      "line_gradient_norm": line_norms,
      "line_total_variation": line_tv,
      "line_mean_abs_second_difference": line_second,
      "line_directions": line_directions,
      "grid_objective": self.grid_objective,
      "grid_offsets": self.grid_offsets,
      "grid_losses": grid_losses,
      "grid_gradient_norm": grid_norms,
      "grid_mean_abs_laplacian": grid_laplacian,
      "grid_mean_abs_neighbour_difference": grid_differences,
      "grid_directions": grid_directions,
      "grid_direction_cosines": cosines,
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
    step_colors = matplotlib.colormaps["plasma"](np.linspace(0, 0.8, num_t))
    line_name = OBJECTIVE_NAMES[result["line_objective"]]
    grid_name = OBJECTIVE_NAMES[result["grid_objective"]]
    offsets = np.asarray(result["line_offsets"], float)
    for i, steps in enumerate(result["num_steps"]):
      ax_line.plot(
        offsets, result["line_losses"][i], color=step_colors[i], lw=1, label=f"T = {steps}"
      )
    ax_line.axvline(0.0, color="gray", lw=0.8, ls=":")
    ax_line.set(
      xlabel="offset a along the unit outer-gradient d (theta + a d)",
      ylabel=f"{line_name}(theta + a d)",
      title=f"(e) 1-D slices of {line_name} through theta along its outer-gradient "
      f"(one per T)\n{result['learned_optimizer']}, {result['theta_source']}; "
      f"|theta| = {result['theta_norm']:.3g}\ndata: {result['data']}",
    )
    ax_line.legend()

    if ax_rough is not None:
      steps = result["num_steps"]
      for key, marker, label in (
        ("line_mean_abs_second_difference", "o-", f"(e) mean |2nd difference| of {line_name}"),
        ("line_total_variation", "v--", f"(e) total variation of {line_name}"),
        ("grid_mean_abs_laplacian", "s-", f"(f) mean |Laplacian| of {grid_name}"),
      ):
        values = np.asarray(result[key], float)
        ax_rough.plot(steps, values / values[0], marker, label=label)
      ax_rough.axhline(1.0, color="gray", lw=0.8, ls=":")
      ax_rough.set_xticks(steps)
      ax_rough.set(
        xlabel="inner steps T",
        ylabel=f"roughness / roughness at T = {steps[0]}",
        title="roughness against T",
      )
      ax_rough.legend(fontsize=8)

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
    fig.tight_layout()
    return fig
