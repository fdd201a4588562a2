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
N(0, 1 / num_params)) drawn from `projection_seed`.

The divergence is also measured, per step t, over the learning rates k:
  - spread_2d: the RMS distance of the projected points to their centroid,
    sqrt(mean_k |x_k - mean_k x_k|^2), and max_pairwise_2d, the largest distance between two points;
  - spread: the same RMS distance in the full parameter space, and relative_spread =
    spread / |mean_k w_k(t) - w(0)|, the spread as a fraction of how far the runs have moved.
Were the runs only rescaled copies of each other (w_k(t) - w(0) proportional to lr_k, as when the
gradients do not depend on the learning rate), relative_spread would stay at the relative spread
of the learning rates, ~0.3%, for every t; divergence means it grows.

`mlp_task` makes the inner problem: a ReLU MLP on 14x14 MNIST when it is prepared in the TFDS
data dir, or on the embedded generated image family (`tasks/generated.py`, no download).
"""

from collections.abc import Callable

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from absl import logging
from matplotlib import cm, colors, figure, ticker

from task_specific_learned_opt import inner_training
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.figures import runner
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import families, generated, image_task, networks, tfds_source

DATASETS = ("generated", "mnist", "auto")
DATA_DESCRIPTIONS = {
  "generated": "embedded generated textures (no download)",
  "mnist": "MNIST (TFDS)",
}


@gin.configurable
def mlp_task(
  dataset: str = "generated",
  hidden_sizes: tuple[int, ...] = (32, 32),
  image_size: int = 14,
  batch_size: int = 128,
  task_seed: int = 0,
  data_dir: str | None = None,
) -> image_task.ImageTask:
  """A 10-class ReLU MLP classification task on MNIST or on the embedded generated images.

  Args:
    dataset: "generated" (10 classes drawn with `task_seed` from the outer-train classes of
      `generated.GeneratedClassSource`, no download), "mnist" (the 10 digits of TFDS MNIST, which
      must be prepared in `data_dir`) or "auto" (MNIST if it is prepared, else generated).
    hidden_sizes: ReLU units of each hidden layer ((32, 32): App. E's small MNIST MLP).
    image_size: images are image_size x image_size (MNIST is area-resized; 14 as in App. E).
    batch_size: examples per inner batch.
    task_seed: the seed of the class draw (generated only: MNIST has one 10-class task).
    data_dir: the TFDS data dir (None: TFDS's default).

  Returns:
    The task; its name starts with the source's name ("generated" or "mnist_14x14").

  Raises:
    ValueError: an unknown dataset.
    tfds_source.DatasetNotPreparedError: dataset "mnist" is not prepared in the data dir.
  """
  if dataset not in DATASETS:
    raise ValueError(f"Unknown dataset {dataset!r}; expected one of {DATASETS}.")
  model = networks.MLP(hidden_sizes=hidden_sizes)
  if dataset in ("mnist", "auto"):
    try:
      source = tfds_source.TfdsClassSource("mnist", data_dir=data_dir, image_size=image_size)
      family = families.ClassSubsetFamily(source, model, "all", batch_size=batch_size)
      return family.sample(task_seed)
    except tfds_source.DatasetNotPreparedError:
      if dataset == "mnist":
        raise
      logging.info("MNIST is not prepared in the TFDS data dir; using the generated images.")
  source = generated.GeneratedClassSource(image_size=image_size)
  family = families.ClassSubsetFamily(source, model, "outer_train", batch_size=batch_size)
  return family.sample(task_seed)


def data_description(task: task_base.Task) -> str:
  """A few words saying which data a task of `mlp_task` trains on, for figure titles.

  Args:
    task: a task whose name starts with its source's name.
  """
  for prefix, description in DATA_DESCRIPTIONS.items():
    if task.name.startswith(prefix):
      return description
  return task.name


def flatten(nest: object) -> tf.Tensor:
  """Every tensor of `nest` flattened and concatenated in tf.nest.flatten order: float32 [n].

  Args:
    nest: a nest of float32 tensors (parameters, theta).
  """
  return tf.concat([tf.reshape(x, [-1]) for x in tf.nest.flatten(nest)], axis=0)


def random_projection(num_params: int, seed: int) -> np.ndarray:
  """The fixed projection P: float64 [num_params, 2], entries N(0, 1 / num_params).

  Args:
    num_params: the length of the flattened parameter vector.
    seed: the numpy seed; the same seed always gives the same matrix.
  """
  rng = np.random.default_rng(seed)
  return rng.standard_normal((num_params, 2)) / np.sqrt(num_params)


def project(flat_params: np.ndarray, projection: np.ndarray) -> np.ndarray:
  """The 2-D points flat_params @ projection: [..., 2] for flat_params [..., num_params].

  Args:
    flat_params: flattened parameter vectors, [..., num_params].
    projection: P from `random_projection`.
  """
  return np.asarray(flat_params, np.float64) @ projection


def spread_2d(points: np.ndarray) -> np.ndarray:
  """The RMS distance of points to their centroid: sqrt(mean_k |x_k - mean x|^2).

  Args:
    points: [num_runs, ..., dim]; the spread is over axis 0 and the distance over the last axis.

  Returns:
    [...]: one spread per index of the middle axes (e.g. per step).
  """
  points = np.asarray(points, np.float64)
  centred = points - points.mean(axis=0)
  return np.sqrt(np.mean(np.sum(centred**2, axis=-1), axis=0))


def max_pairwise_distance(points: np.ndarray) -> float:
  """The largest Euclidean distance between two of `points` ([num_points, dim]).

  Args:
    points: [num_points, dim].
  """
  points = np.asarray(points, np.float64)
  differences = points[:, None, :] - points[None, :, :]
  return float(np.sqrt(np.max(np.sum(differences**2, axis=-1))))


class SpreadAccumulator:
  """The full-space spread over runs of [num_steps + 1, num_params] trajectories, one run at a time.

  It sums d_k = w_k - w_first (each run minus the first run added) and d_k^2 in float64, so the
  spread sqrt(sum_i var_k(w_k,i)) loses no precision to the parameters' size, and it never holds
  more than two trajectories.
  """

  def __init__(self) -> None:
    """Starts with no runs."""
    self.count = 0
    self.first = None
    self.total = None
    self.total_squares = None

  def add(self, trajectory: np.ndarray) -> None:
    """Adds one run's flattened parameters at every step.

    Args:
      trajectory: [num_steps + 1, num_params].
    """
    trajectory = np.asarray(trajectory, np.float64)
    if self.first is None:
      self.first = trajectory
      self.total = np.zeros_like(trajectory)
      self.total_squares = np.zeros_like(trajectory)
    difference = trajectory - self.first
    self.total += difference
    self.total_squares += difference**2
    self.count += 1

  def mean(self) -> np.ndarray:
    """The mean trajectory over the runs, [num_steps + 1, num_params]."""
    return self.first + self.total / self.count

  def spread(self) -> np.ndarray:
    """Per step, sqrt(mean_k |w_k - mean_k w_k|^2): [num_steps + 1]."""
    mean = self.total / self.count
    variance = np.maximum(self.total_squares / self.count - mean**2, 0.0)
    return np.sqrt(np.sum(variance, axis=-1))


def make_trajectory_fn(
  task: task_base.Task,
  params: task_base.Params,
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
      path = path.write(t + 1, flatten(opt.get_params(state)))
      return t + 1, state, path, losses.write(t, loss[0])

    path = tf.TensorArray(tf.float32, size=num_steps + 1).write(0, flatten(params))
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
      task: the inner problem (e.g. `mlp_task()`).
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
    params = self.task.init_params(seeds_lib.as_seed(self.init_seed))
    num_params = int(flatten(params).shape[0])
    projection = random_projection(num_params, self.projection_seed)
    run = make_trajectory_fn(self.task, params, self.num_steps, self.data_seed, **self.adam_kwargs)
    accumulator = SpreadAccumulator()
    points, losses, max_distance = [], [], np.zeros(self.num_steps + 1)
    for learning_rate in self.learning_rates:
      path, run_losses = run(tf.constant(learning_rate, tf.float32))
      path = path.numpy()
      accumulator.add(path)
      max_distance = np.maximum(max_distance, np.linalg.norm(path - accumulator.first, axis=-1))
      points.append(project(path, projection))
      losses.append(run_losses.numpy())
    points = np.stack(points)
    losses = np.stack(losses)
    spread = accumulator.spread()
    distance_moved = np.linalg.norm(accumulator.mean() - accumulator.first[0], axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
      relative_spread = np.where(distance_moved > 0, spread / distance_moved, np.nan)
    spread_points = spread_2d(points)
    max_pairwise = np.array([max_pairwise_distance(points[:, t]) for t in range(points.shape[1])])
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
      "data": data_description(self.task),
      "num_params": num_params,
      "num_steps": self.num_steps,
      "adam": self.adam_kwargs,
      "loss_clip": loss_clip(),
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

    # From step 1 on: at step 0 every run is at w(0), a spread of 0 that a log scale cannot show.
    steps = np.arange(1, points.shape[1])
    for key, marker, label in (
      ("relative_spread", "o-", "full space: spread / distance moved"),
      ("spread_2d", "s-", "2-D: RMS distance to the centroid"),
      ("max_pairwise_2d", "^-", "2-D: max pairwise distance"),
    ):
      ax_spread.plot(steps, np.asarray(result[key], float)[1:], marker, ms=3, label=label)
    ax_spread.axhline(
      result["relative_lr_spread"],
      color="gray",
      ls="--",
      lw=1,
      label="full space: rescaled copies would stay here",
    )
    ax_spread.set_yscale("log")
    ax_spread.set(
      xlabel="step t", ylabel="spread across learning rates", title="divergence across the runs"
    )
    ax_spread.legend(fontsize=8)

    clip = result["loss_clip"]
    ax_loss.set(
      xlabel="step t",
      ylabel="training loss (before the step)",
      title="training loss of every run" + ("" if clip is None else f" (clipped at {clip:g})"),
    )
    fig.tight_layout()
    return fig


def loss_clip() -> float | None:
  """The inner-loss clip in force (`inner_training.clip_loss.max_loss`), None when there is none."""
  clipped = float(inner_training.clip_loss(tf.constant(np.inf, tf.float32)))
  return None if np.isinf(clipped) else clipped
