"""Sec. 2.3 and App. A: the outer-gradient of a learned learning rate explodes exponentially.

Gradient descent w_{t+1} = w_t - theta g_t with a learned learning rate theta has (App. A)

  d l(w_T) / d theta = < g_T, d w_T / d theta >,
  d w_T / d theta = - sum_{i=0}^{T-1} ( prod_{j=i+1}^{T-1} (I - theta H_j) ) g_i,

with g_t and H_t the gradient and Hessian of the loss at w_t. On a quadratic the Hessian H is
constant, and along an eigenvector of H with eigenvalue lambda everything is a power of
(1 - theta lambda): w_t - w* = (1 - theta lambda)^t (w_0 - w*), so

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
closed form evaluated independently in numpy (float64) from a numpy trajectory, and fits the
slope of log|.| against T over the second half of the T range. The polynomial factor T adds
about the mean of 1/T to the fitted slope (0.007 over T = 101..200).

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
from matplotlib import figure

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.figures import runner, toy
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.tasks import quadratic


def gradient_descent_gradients(
  hessian: np.ndarray, center: np.ndarray, w0: np.ndarray, theta: float, num_steps: int
) -> np.ndarray:
  """The gradients g_0..g_T of gradient descent on l(w) = 1/2 (w - c)^T H (w - c), in float64.

  Args:
    hessian: H, [dim, dim].
    center: c, [dim].
    w0: the initial parameters, [dim].
    theta: the learning rate.
    num_steps: T.

  Returns:
    [T + 1, dim]: row t is g_t = H (w_t - c), with w_{t+1} = w_t - theta g_t.
  """
  hessian = np.asarray(hessian, np.float64)
  w = np.asarray(w0, np.float64).copy()
  center = np.asarray(center, np.float64)
  grads = []
  for _ in range(num_steps + 1):
    g = hessian @ (w - center)
    grads.append(g)
    w = w - theta * g
  return np.stack(grads)


def closed_form_dw_dtheta(grads: np.ndarray, hessians: np.ndarray, theta: float) -> np.ndarray:
  """App. A's d w_T / d theta = -sum_{i<T} (prod_{j=i+1}^{T-1} (I - theta H_j)) g_i.

  The product is ordered as the chain rule gives it, (I - theta H_{T-1}) ... (I - theta H_{i+1});
  it is built from i = T-1 down to 0, one matrix product per term.

  Args:
    grads: [T + 1, dim] (or [T, dim]) gradients g_0.. of the run; g_T is not used.
    hessians: [T, dim, dim] Hessians H_0..H_{T-1}, or one [dim, dim] Hessian for every step.
    theta: the learning rate.

  Returns:
    [dim], float64.
  """
  grads = np.asarray(grads, np.float64)
  num_steps = len(hessians) if np.ndim(hessians) == 3 else len(grads) - 1
  dim = grads.shape[1]
  identity = np.eye(dim)

  def hessian(j: int) -> np.ndarray:
    return np.asarray(hessians[j] if np.ndim(hessians) == 3 else hessians, np.float64)

  total = np.zeros(dim)
  product = identity  # prod_{j=i+1}^{T-1} (I - theta H_j), empty (I) for i = T-1.
  for i in range(num_steps - 1, -1, -1):
    total += product @ grads[i]
    product = product @ (identity - theta * hessian(i))
  return -total


def closed_form_dloss_dtheta(grads: np.ndarray, hessians: np.ndarray, theta: float) -> float:
  """App. A's d l(w_T) / d theta = <g_T, d w_T / d theta> (closed_form_dw_dtheta).

  Args:
    grads: [T + 1, dim] gradients g_0..g_T of the run.
    hessians: [T, dim, dim] Hessians H_0..H_{T-1}, or one [dim, dim] Hessian for every step.
    theta: the learning rate.
  """
  grads = np.asarray(grads, np.float64)
  return float(grads[-1] @ closed_form_dw_dtheta(grads, hessians, theta))


def spectral_radius(curvatures: Sequence[float], theta: float) -> float:
  """rho = max_i |1 - theta lambda_i|, the spectral radius of I - theta H for H = diag(lambda).

  Args:
    curvatures: the eigenvalues lambda_i of H.
    theta: the learning rate.
  """
  return float(np.max(np.abs(1.0 - theta * np.asarray(curvatures, np.float64))))


def fit_slope(num_steps: np.ndarray, values: np.ndarray) -> float:
  """The least-squares slope of log|values| against num_steps (natural log, per step).

  Args:
    num_steps: the T values.
    values: the derivatives at those T.
  """
  return float(np.polyfit(np.asarray(num_steps, np.float64), np.log(np.abs(values)), 1)[0])


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
      ValueError: the inner loss is clipped (see toy.check_no_loss_clip).
    """
    toy.check_no_loss_clip("App. A's derivative is that of the unclipped loss")
    thetas = np.array(self.learning_rates)
    curvatures = self.task.curvatures.numpy().astype(np.float64)
    hessian = np.diag(curvatures)
    lambda_max = float(curvatures.max())
    num_steps = np.arange(1, self.max_num_steps + 1)
    derivative_fn = make_derivative_fn(self.task, self.w0, len(thetas))
    dloss, dw_norm = [], []
    for steps in num_steps:
      d_loss, d_w = derivative_fn(thetas, int(steps))
      dloss.append(d_loss)
      dw_norm.append(np.linalg.norm(d_w.astype(np.float64), axis=1))
    dloss, dw_norm = np.stack(dloss, axis=1), np.stack(dw_norm, axis=1)

    every = self.closed_form_every
    closed_steps = sorted({1, *range(every, self.max_num_steps + 1, every)})
    closed_dloss = np.zeros((len(thetas), len(closed_steps)))
    closed_dw = np.zeros((len(thetas), len(closed_steps)))
    for k, theta in enumerate(thetas):
      grads = gradient_descent_gradients(
        hessian, np.zeros_like(self.w0), self.w0, theta, self.max_num_steps
      )
      for n, steps in enumerate(closed_steps):
        closed_dloss[k, n] = closed_form_dloss_dtheta(grads[: steps + 1], hessian, theta)
        closed_dw[k, n] = np.linalg.norm(closed_form_dw_dtheta(grads[: steps + 1], hessian, theta))
    index = np.array(closed_steps) - 1
    relative_error = np.abs(dloss[:, index] - closed_dloss) / np.abs(closed_dloss)
    relative_error_dw = np.abs(dw_norm[:, index] - closed_dw) / closed_dw

    half = num_steps >= (self.max_num_steps + 1) / 2
    rho = np.array([spectral_radius(curvatures, theta) for theta in thetas])
    measured = [fit_slope(num_steps[half], d[half]) for d in dloss]
    measured_dw = [fit_slope(num_steps[half], d[half]) for d in dw_norm]
    panels.done(
      "(a) |d l(w_T) / d theta|",
      "measured / predicted slopes "
      + ", ".join(
        f"lr {t}: {m:.3f} / {2 * np.log(r):.3f}"
        for t, m, r in zip(thetas, measured, rho, strict=True)
      )
      + f"; max relative error against the closed form {relative_error.max():.1e}",
    )
    panels.done(
      "(b) ||d w_T / d theta||",
      "measured / predicted slopes "
      + ", ".join(
        f"lr {t}: {m:.3f} / {np.log(r):.3f}"
        for t, m, r in zip(thetas, measured_dw, rho, strict=True)
      ),
    )
    with np.errstate(divide="ignore"):  # -inf at lr = 1 / lambda_max.
      log_abs_one_minus = np.log(np.abs(1.0 - thetas * lambda_max))
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
      "spectral_radius": rho,
      "log_abs_one_minus_theta_lambda_max": log_abs_one_minus,
      "predicted_slope": 2.0 * np.log(rho),
      "predicted_slope_dw": np.log(rho),
      "measured_slope": measured,
      "measured_slope_dw": measured_dw,
      "fit_num_steps": [int(num_steps[half][0]), int(num_steps[half][-1])],
    }

  def plot(self, result: dict) -> figure.Figure:
    """(a) |d l(w_T) / d theta| and (b) ||d w_T / d theta|| against T, log scale.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    fig = figure.Figure(figsize=(13, 4.8))
    axes = fig.subplots(1, 2)
    num_steps = np.asarray(result["num_steps"], float)
    closed_steps = np.asarray(result["closed_form_num_steps"], float)
    thetas = result["learning_rates"]
    # Blues below 2 / lambda_max (the derivative vanishes), reds above (it explodes).
    below = [theta < result["two_over_lambda_max"] for theta in thetas]
    blues = matplotlib.colormaps["Blues"](np.linspace(0.4, 0.95, max(sum(below), 1)))
    reds = matplotlib.colormaps["Reds"](np.linspace(0.5, 0.95, max(len(thetas) - sum(below), 1)))
    line_colors = [*blues[: sum(below)], *reds[: len(thetas) - sum(below)]]
    panels = [
      ("dloss_dtheta", "closed_form_dloss_dtheta", "predicted_slope", "measured_slope"),
      ("dw_dtheta_norm", "closed_form_dw_dtheta_norm", "predicted_slope_dw", "measured_slope_dw"),
    ]
    for ax, (key, closed_key, predicted_key, measured_key) in zip(axes, panels, strict=True):
      for k, theta in enumerate(thetas):
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
    lam = result["lambda_max"]
    axes[0].set(
      ylabel="|d l($w_T$) / d lr|",
      title=f"(a) outer-gradient; 2/$\\lambda_{{max}}$ = {2 / lam:g}\n"
      "lines: backprop, o: App. A closed form, - -: slope 2 log $\\rho$",
    )
    axes[1].set(
      ylabel="||d $w_T$ / d lr||",
      title="(b) sum of products of App. A (forward mode)\n"
      "o: closed form, - -: slope log $\\rho$, $\\rho$ = max |1 - lr $\\lambda$|",
    )
    fig.tight_layout()
    return fig
