"""Sec. 2.3 and App. A: the outer-gradient of a learned learning rate explodes exponentially.

Gradient descent w_{t+1} = w_t - theta g_t with a learned learning rate theta has App. A's
d l(w_T) / d theta = < g_T, d w_T / d theta >, d w_T / d theta a sum of products of
(I - theta H_j) (`lr_closed_form`). On a quadratic the Hessian H is constant, and along an
eigenvector of H with eigenvalue lambda everything is a power of (1 - theta lambda):
w_t - w* = (1 - theta lambda)^t (w_0 - w*), so

  d w_T / d theta = -T lambda (1 - theta lambda)^(T-1) (w_0 - w*)      (per eigen-direction),
  d l(w_T) / d theta = -sum_lambda T lambda^2 (1 - theta lambda)^(2T-1) (w_0 - w*)_lambda^2.

With rho = max_lambda |1 - theta lambda| (the spectral radius of I - theta H, which is
|1 - theta lambda_max| = theta lambda_max - 1 once theta > 2 / lambda_max), ||d w_T / d theta||
grows (or decays) like T rho^T, slope log(rho) per step on a log scale, and d l(w_T) / d theta
like T rho^(2T): slope 2 log(rho), twice the paper's exponent, because the gradient g_T at the
end of a diverging run grows at the same rate as the sum of products.

The experiment measures both by differentiating the project's graph-mode `inner_training.unroll`
of `sgd.SGD` whose learning rate is a `LearnedHyperparameters` theta, on `QuadraticTask` with no
noise (Hessian diag(curvatures)): d l(w_T) / d theta by backpropagation, d w_T / d theta by
forward-mode differentiation (one pass for the whole vector). All the learning rates run in one
unroll: the parameters are a [num learning rates, dim] matrix, one row per run (the task's loss
is the sum over rows), and theta a column of learning rates. It checks both against App. A's
closed form evaluated independently in numpy (float64) from a numpy trajectory (`lr_closed_form`),
and fits the slope of log|.| against T over the second half of the T range. The polynomial
factor T adds about the mean of 1/T to the fitted slope (0.007 over T = 101..200).

The quadratic's centre is put at 0 (w* = 0): w_t - w* then keeps float32's relative precision as
it shrinks, so the decaying derivatives stay accurate far below 1e-7. Inner losses must not be
clipped (a diverging run's loss passes 10, where the clipped gradient is 0): the gin file binds
`clip_loss.max_loss = None`, and `compute` refuses to run with a clip.
"""

from collections.abc import Callable, Sequence

import gin
import matplotlib
import numpy as np
import tensorflow as tf
from matplotlib import axes, figure

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.figures import inner_problems, lr_closed_form, runner
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.tasks import quadratic


def make_derivative_fn(
  task: quadratic.QuadraticTask, w0: np.ndarray, num_thetas: int
) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
  """A compiled function: (learning rates, T) -> d l(w_T)/d theta and d w_T/d theta of each run.

  One `inner_training.unroll` of `sgd.SGD` trains a [num_thetas, dim] matrix of parameters, row
  k with learning rate thetas[k]; task.loss sums over the rows, so each row is its own run.

  Args:
    task: the quadratic (noise 0).
    w0: the initial parameters of every run, [dim].
    num_thetas: the number of learning rates per call.

  Returns:
    A function of ([num_thetas] thetas, T) giving (d l(w_T) / d theta [num_thetas] by
    backpropagation, d w_T / d theta [num_thetas, dim] by forward-mode differentiation).
  """
  lopt = hyperparameters.LearnedHyperparameters(
    sgd.SGD, learned={"learning_rate": "identity"}, initial={"learning_rate": 1.0}
  )
  start = tf.tile(tf.constant(w0, tf.float32)[None], [num_thetas, 1])

  def final_params(thetas: tf.Tensor, num_steps: tf.Tensor) -> tf.Tensor:
    opt = lopt.opt_fn({"learning_rate": thetas[:, None]})
    state, _ = inner_training.unroll(task, opt, opt.init({"w": start}), num_steps, seed=0)
    return opt.get_params(state)["w"]

  @tf.function(autograph=False)
  def derivatives(thetas: tf.Tensor, num_steps: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    with tf.GradientTape() as tape:
      tape.watch(thetas)
      w = final_params(thetas, num_steps)
      loss = task.loss({"w": w}, task.batch("train", 0))
    dloss = tape.gradient(loss, thetas)
    with tf.autodiff.ForwardAccumulator(thetas, tf.ones_like(thetas)) as accumulator:
      w = final_params(thetas, num_steps)
    return dloss, accumulator.jvp(w)

  def run(thetas: np.ndarray, num_steps: int) -> tuple[np.ndarray, np.ndarray]:
    dloss, dw = derivatives(tf.constant(thetas, tf.float32), tf.constant(num_steps, tf.int32))
    return dloss.numpy(), dw.numpy()

  return run


@gin.configurable
class ExplodingLearningRateGradient(runner.Experiment):
  """|d l(w_T) / d theta| against T for learning rates on both sides of 2 / lambda_max."""

  def __init__(
    self,
    learning_rates: Sequence[float] = (0.5, 1.0, 1.5, 1.9, 2.05, 2.2),
    max_num_steps: int = 200,
    closed_form_every: int = 10,
    dim: int = 10,
    min_curvature: float = 0.1,
    max_curvature: float = 1.0,
    init_seed: int = 0,
  ):
    """Configures the experiment.

    Args:
      learning_rates: the values of theta.
      max_num_steps: T runs over 1..max_num_steps.
      closed_form_every: the closed form is evaluated at every this many T (and at T = 1).
      dim: the quadratic's dimension.
      min_curvature: its smallest Hessian eigenvalue.
      max_curvature: its largest Hessian eigenvalue, lambda_max.
      init_seed: the seed of w_0 (QuadraticTask.init_params).
    """
    self.learning_rates = [float(x) for x in learning_rates]
    self.max_num_steps = int(max_num_steps)
    self.closed_form_every = int(closed_form_every)
    task = quadratic.QuadraticTask(
      dim=dim, min_curvature=min_curvature, max_curvature=max_curvature, noise_std=0.0
    )
    self.task = task.with_data({"curvatures": task.curvatures, "center": tf.zeros([dim])})
    self.w0 = self.task.init_params(init_seed)["w"].numpy()

  def compute(self, panels: runner.Panels) -> dict:
    """Differentiates every unroll length for every learning rate; evaluates the closed form.

    Args:
      panels: where each finished panel is reported.

    Returns:
      The settings ("learning_rates", "curvatures", "lambda_max", "two_over_lambda_max", "w0");
      "num_steps" (1..max); "dloss_dtheta" and "dw_dtheta_norm" ([learning rate][T], backprop
      and forward mode); "closed_form_num_steps", "closed_form_dloss_dtheta" and
      "closed_form_dw_dtheta_norm" ([learning rate][those T]); "max_relative_error" of the
      autodiff values against the closed form; per learning rate "spectral_radius",
      "log_abs_one_minus_theta_lambda_max", "predicted_slope" (2 log rho, for d l / d theta),
      "predicted_slope_dw" (log rho), "measured_slope" and "measured_slope_dw" (least-squares
      fits of log|.| on T over the second half of the T range).

    Raises:
      ValueError: the inner loss is clipped (see inner_problems.check_no_loss_clip).
    """
    inner_problems.check_no_loss_clip("App. A's derivative is that of the unclipped loss")
    thetas = np.array(self.learning_rates)
    curvatures = self.task.curvatures.numpy().astype(np.float64)
    lambda_max = float(curvatures.max())
    num_steps = np.arange(1, self.max_num_steps + 1)
    dloss, dw_norm = self._autodiff(thetas, num_steps)
    closed_steps, closed_dloss, closed_dw = self._closed_form(thetas, np.diag(curvatures))
    index = np.array(closed_steps) - 1
    relative_error = np.abs(dloss[:, index] - closed_dloss) / np.abs(closed_dloss)
    relative_error_dw = np.abs(dw_norm[:, index] - closed_dw) / closed_dw
    slopes = _slopes(thetas, curvatures, num_steps, dloss, dw_norm)
    _report(panels, thetas, slopes, relative_error)
    return {
      "learning_rates": thetas,
      "curvatures": curvatures,
      "lambda_max": lambda_max,
      "two_over_lambda_max": 2.0 / lambda_max,
      "w0": self.w0,
      "num_steps": num_steps,
      "dloss_dtheta": dloss,
      "dw_dtheta_norm": dw_norm,
      "closed_form_num_steps": closed_steps,
      "closed_form_dloss_dtheta": closed_dloss,
      "closed_form_dw_dtheta_norm": closed_dw,
      "max_relative_error": float(relative_error.max()),
      "max_relative_error_dw": float(relative_error_dw.max()),
      **slopes,
    }

  def _autodiff(self, thetas: np.ndarray, num_steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """d l(w_T) / d theta and ||d w_T / d theta|| by autodiff: [learning rate, T] each."""
    derivative_fn = make_derivative_fn(self.task, self.w0, len(thetas))
    dloss, dw_norm = [], []
    for steps in num_steps:
      d_loss, d_w = derivative_fn(thetas, int(steps))
      dloss.append(d_loss)
      dw_norm.append(np.linalg.norm(d_w.astype(np.float64), axis=1))
    return np.stack(dloss, axis=1), np.stack(dw_norm, axis=1)

  def _closed_form(
    self, thetas: np.ndarray, hessian: np.ndarray
  ) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The T of the closed form, and there d l(w_T) / d theta and ||d w_T / d theta||."""
    every = self.closed_form_every
    closed_steps = sorted({1, *range(every, self.max_num_steps + 1, every)})
    closed_dloss = np.zeros((len(thetas), len(closed_steps)))
    closed_dw = np.zeros((len(thetas), len(closed_steps)))
    for k, theta in enumerate(thetas):
      grads = lr_closed_form.gradient_descent_gradients(
        hessian, np.zeros_like(self.w0), self.w0, theta, self.max_num_steps
      )
      for n, steps in enumerate(closed_steps):
        run = grads[: steps + 1]
        closed_dloss[k, n] = lr_closed_form.closed_form_dloss_dtheta(run, hessian, theta)
        closed_dw[k, n] = np.linalg.norm(lr_closed_form.closed_form_dw_dtheta(run, hessian, theta))
    return closed_steps, closed_dloss, closed_dw

  def plot(self, result: dict) -> figure.Figure:
    """(a) |d l(w_T) / d theta| and (b) ||d w_T / d theta|| against T, log scale.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    fig = figure.Figure(figsize=(13, 4.8))
    ax_a, ax_b = fig.subplots(1, 2)
    line_colors = _line_colors(result)
    keys_a = ("dloss_dtheta", "closed_form_dloss_dtheta", "predicted_slope", "measured_slope")
    _plot_derivative(ax_a, result, keys_a, line_colors)
    keys_b = (
      "dw_dtheta_norm",
      "closed_form_dw_dtheta_norm",
      "predicted_slope_dw",
      "measured_slope_dw",
    )
    _plot_derivative(ax_b, result, keys_b, line_colors)
    lam = result["lambda_max"]
    ax_a.set(
      ylabel="|d l($w_T$) / d lr|",
      title=f"(a) outer-gradient; 2/$\\lambda_{{max}}$ = {2 / lam:g}\n"
      "lines: backprop, o: App. A closed form, - -: slope 2 log $\\rho$",
    )
    ax_b.set(
      ylabel="||d $w_T$ / d lr||",
      title="(b) sum of products of App. A (forward mode)\n"
      "o: closed form, - -: slope log $\\rho$, $\\rho$ = max |1 - lr $\\lambda$|",
    )
    fig.tight_layout()
    return fig


def _line_colors(result: dict) -> list:
  """One colour per learning rate: blues below 2 / lambda_max (vanishing), reds above."""
  thetas = result["learning_rates"]
  below = [theta < result["two_over_lambda_max"] for theta in thetas]
  blues = matplotlib.colormaps["Blues"](np.linspace(0.4, 0.95, max(sum(below), 1)))
  reds = matplotlib.colormaps["Reds"](np.linspace(0.5, 0.95, max(len(thetas) - sum(below), 1)))
  return [*blues[: sum(below)], *reds[: len(thetas) - sum(below)]]


def _plot_derivative(
  ax: axes.Axes, result: dict, keys: tuple[str, str, str, str], line_colors: list
) -> None:
  """One panel: a derivative against T per learning rate, its closed form and predicted rate.

  Args:
    ax: the panel.
    result: what `compute` returned.
    keys: the result's autodiff values, closed-form values, predicted and measured slopes.
    line_colors: one colour per learning rate.
  """
  key, closed_key, predicted_key, measured_key = keys
  num_steps = np.asarray(result["num_steps"], float)
  closed_steps = np.asarray(result["closed_form_num_steps"], float)
  for k, theta in enumerate(result["learning_rates"]):
    values = np.abs(np.asarray(result[key][k], float))
    predicted = result[predicted_key][k]
    ax.plot(
      num_steps,
      values,
      color=line_colors[k],
      lw=1.5,
      label=f"lr {theta:g}: slope {result[measured_key][k]:.3f} (pred. {predicted:.3f})",
    )
    ax.plot(
      closed_steps,
      np.abs(np.asarray(result[closed_key][k], float)),
      "o",
      ms=3.5,
      mfc="none",
      color=line_colors[k],
    )
    # The predicted rate, through the last point.
    ax.plot(
      num_steps,
      values[-1] * np.exp(predicted * (num_steps - num_steps[-1])),
      "--",
      color=line_colors[k],
      lw=0.8,
    )
  ax.set_yscale("log")
  ax.set_xlabel("unrolled steps T")
  ax.set_ylim(max(ax.get_ylim()[0], 1e-35), ax.get_ylim()[1])
  ax.legend(fontsize=7, loc="lower left")


def _slopes(
  thetas: np.ndarray,
  curvatures: np.ndarray,
  num_steps: np.ndarray,
  dloss: np.ndarray,
  dw_norm: np.ndarray,
) -> dict:
  """Per learning rate, the predicted and the measured growth rates: compute's last entries."""
  half = num_steps >= (num_steps[-1] + 1) / 2
  rho = np.array([lr_closed_form.spectral_radius(curvatures, theta) for theta in thetas])
  with np.errstate(divide="ignore"):  # -inf at lr = 1 / lambda_max.
    log_abs_one_minus = np.log(np.abs(1.0 - thetas * float(curvatures.max())))
  return {
    "spectral_radius": rho,
    "log_abs_one_minus_theta_lambda_max": log_abs_one_minus,
    "predicted_slope": 2.0 * np.log(rho),
    "predicted_slope_dw": np.log(rho),
    "measured_slope": [lr_closed_form.fit_slope(num_steps[half], d[half]) for d in dloss],
    "measured_slope_dw": [lr_closed_form.fit_slope(num_steps[half], d[half]) for d in dw_norm],
    "fit_num_steps": [int(num_steps[half][0]), int(num_steps[half][-1])],
  }


def _report(
  panels: runner.Panels, thetas: np.ndarray, slopes: dict, relative_error: np.ndarray
) -> None:
  """Logs panels (a) and (b): measured against predicted slopes, and the closed form's error."""
  rho = slopes["spectral_radius"]
  panels.done(
    "(a) |d l(w_T) / d theta|",
    "measured / predicted slopes "
    + ", ".join(
      f"lr {t}: {m:.3f} / {2 * np.log(r):.3f}"
      for t, m, r in zip(thetas, slopes["measured_slope"], rho, strict=True)
    )
    + f"; max relative error against the closed form {relative_error.max():.1e}",
  )
  panels.done(
    "(b) ||d w_T / d theta||",
    "measured / predicted slopes "
    + ", ".join(
      f"lr {t}: {m:.3f} / {np.log(r):.3f}"
      for t, m, r in zip(thetas, slopes["measured_slope_dw"], rho, strict=True)
    ),
  )
