"""Training the toy problem of Fig. 2a-c and App. B for a whole grid of hyper-parameters at once.

One hyper-parameter of heavy-ball SGD+momentum (m <- mu m + g; w <- w - lr m) or of plain SGD is
theta, the learning rate or the momentum (`make_optimizer`, a `LearnedHyperparameters` whose theta
is that hyper-parameter itself). Every run is the project's graph-mode `inner_training.unroll` on
`toy.TwoMinimumTask`, which holds one copy of w per theta and sums the copies' losses, theta being
a vector with one entry per copy: one unroll trains every theta of a grid, and the gradient of
the summed final loss with respect to that vector holds each run's own d l(w_T) / d theta
(`make_final_fn`). `trajectories` records w_t of a few runs at every step.
"""

from collections.abc import Callable

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.tasks import toy

OPTIMIZERS = {"momentum": sgd.Momentum, "sgd": sgd.SGD}
THETA_NAMES = ("learning_rate", "momentum")


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
