"""Fig. 3 and App. G: truncation bias when outer-training Adam's learning rate (paper Sec. 2.4).

theta = log(lr) of Adam (init lr = 1e-3) training a small 2-layer ReLU MLP. Each inner run lasts
`horizon` (10,000) steps and is then reset (new initialisation and data order, same task). The
run is split into truncations of L steps (L = 10, 100, 1,000, 10,000); each truncation is one
outer step:

  loss_k, g_k = L-step unroll from the carried state at theta, and d loss_k / d theta
  theta <- outer-optimizer(theta, g_k)

where loss_k is the mean inner training loss over the truncation's L steps (the loss each step
computes before its update) and g_k is its gradient by backpropagation through the L steps only:
the inner state is carried from one truncation to the next with its gradient stopped, so g_k
ignores how theta shaped the state the truncation starts from (no smoothing, as in Sec. 2.4).
Every truncation length sees the same total number of inner steps, the same initialisations and
the same batches (paper Fig. 3 caption).

Beyond the paper, a Persistent ES curve (outer/pes.py, Vicol et al. 2021) uses truncations of
`pes_truncation` steps: each of `pes_pairs` antithetic pairs keeps its own + and - inner states
(at theta + e and theta - e, e redrawn every truncation) and its own sum of perturbations since
the inner run's reset; its outer loss is the mean of L+ and L- over the pairs. PES may have its
own outer-optimizer (it takes as many outer steps as the 10-step truncation, each one an estimate
for a theta held over the whole run so far).

Panels: (a) an exponential rolling average of the outer loss against outer-training progress in
inner steps; (b) the learning rate exp(theta); (c) the outer-gradient g_k of every truncation of
ONE inner run at fixed theta = log 1e-3, against the inner step the truncation starts at (the
paper: early gradients are strongly negative, i.e. raise the lr; later ones slightly positive).
For reference, one fresh untruncated run at each curve's final lr and at a grid of fixed lrs
gives the outer loss each lr really has (JSON "evaluation"; panel (b) marks the grid's best).
The App. G figures are (a) and (b) with other outer-optimizers.
"""

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import gin
import numpy as np
import tensorflow as tf
from absl import logging
from matplotlib import colormaps, figure

from task_specific_learned_opt import inner_training
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.figures import runner
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.outer import pes, truncated_unroll
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import networks

PARAMETER = "learning_rate"  # The hyper-parameter theta holds (as its natural logarithm).
# Seed tags: the inner runs' initialisations and batches, the PES perturbations, the evaluation.
_RUN_TAG, _PES_TAG, _EVAL_TAG = 0, 1, 2


class TruncationOutput(NamedTuple):
  """What one truncation gives: its outer loss, d loss / d theta and the end state."""

  loss: tf.Tensor  # Mean inner training loss over the truncation's steps.
  gradient: lopt_base.Theta
  state: opt_base.OptState


class PESOutput(NamedTuple):
  """What one PES truncation of every antithetic pair gives; pairs on axis 0 of every leaf."""

  loss_plus: tf.Tensor  # [pairs]
  loss_minus: tf.Tensor  # [pairs]
  perturbation: lopt_base.Theta  # e, like theta with a leading [pairs] axis.
  states: opt_base.OptState  # The + states then the - states: leading axis [2 * pairs].


def run_seeds(seed: int, run: int, tag: int = _RUN_TAG) -> tuple[tf.Tensor, tf.Tensor]:
  """(init seed, data seed) of inner run `run`: the same for every truncation length and PES.

  Args:
    seed: the experiment's seed.
    run: the index of the inner run (0, 1, ...).
    tag: which stream: the outer-training runs, or the evaluation runs.
  """
  run_seed = seeds_lib.fold_in(seeds_lib.fold_in(seed, tag), run)
  return seeds_lib.fold_in(run_seed, 0), seeds_lib.fold_in(run_seed, 1)


def initial_state(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, theta: lopt_base.Theta, seed: tf.Tensor
) -> opt_base.OptState:
  """A fresh inner state: the rule's init of task.init_params(seed).

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    theta: the meta-parameters (Adam's init does not read the learning rate).
    seed: the initialisation seed.
  """
  return lopt.opt_fn(theta).init(task.init_params(seed))


def make_truncation_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, length: int
) -> Callable[[lopt_base.Theta, opt_base.OptState, int, tf.Tensor], TruncationOutput]:
  """A compiled truncation of `length` steps: (theta, state, first_step, data_seed) -> output.

  The unroll (inner_training.unroll, one tf.while_loop) runs under a tf.GradientTape watching
  theta; the start state's gradient is stopped, so the gradient is that of this truncation alone.
  The task's data is passed in as an argument, never captured.

  Args:
    task: the inner problem.
    lopt: the learned optimizer; theta is what it `init`s.
    length: steps per truncation, a Python int (one trace per length).

  Returns:
    fn(theta, state, first_step, data_seed) -> TruncationOutput, where step i of the truncation
    trains on the batch of inner step first_step + i of the run's data stream `data_seed`.
  """

  @tf.function(autograph=False)
  def truncation(
    theta: lopt_base.Theta,
    state: opt_base.OptState,
    first_step: tf.Tensor,
    data_seed: tf.Tensor,
    data: Any,
  ) -> TruncationOutput:
    inner_task = task.with_data(data)
    state = tf.nest.map_structure(tf.stop_gradient, state)
    with tf.GradientTape() as tape:
      tape.watch(theta)
      end_state, losses = inner_training.unroll(
        inner_task, lopt.opt_fn(theta), state, length, data_seed, first_step
      )
      loss = tf.reduce_mean(losses)
    gradient = tape.gradient(loss, theta, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return TruncationOutput(loss, gradient, end_state)

  def call(
    theta: lopt_base.Theta, state: opt_base.OptState, first_step: int, data_seed: tf.Tensor
  ) -> TruncationOutput:
    return truncation(
      theta, state, tf.constant(first_step, tf.int32), seeds_lib.as_seed(data_seed), task.data
    )

  return call


def stack_states(state: opt_base.OptState, num: int) -> opt_base.OptState:
  """`num` copies of an inner state, stacked on a new leading axis of every leaf.

  Args:
    state: one inner state.
    num: copies.
  """
  return tf.nest.map_structure(lambda x: tf.stack([x] * num), state)


def make_pes_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, length: int, sigma: float
) -> Callable[..., PESOutput]:
  """A compiled PES truncation of every antithetic pair (forward only, no backpropagation).

  Pair p draws e_p (truncated_unroll.perturbation, one N(0, sigma^2) draw per pair and leaf of
  theta) and unrolls its + state at theta + e_p and its - state at theta - e_p for `length`
  steps on the run's batches. The 2 * pairs unrolls are one inner_training.unroll vectorized
  over the particles (tf.vectorized_map): the same numbers as separate unrolls, in fewer ops.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    length: steps per truncation.
    sigma: the standard deviation of each coordinate of e.

  Returns:
    fn(theta, states, first_step, data_seed, perturbation_seed) -> PESOutput, with `states`
    the + states then the - states stacked on axis 0 (stack_states of a fresh state, 2 * pairs
    copies, at the start of an inner run).
  """

  @tf.function(autograph=False)
  def pes_truncation(
    theta: lopt_base.Theta,
    states: opt_base.OptState,
    first_step: tf.Tensor,
    data_seed: tf.Tensor,
    perturbation_seed: tf.Tensor,
    data: Any,
  ) -> PESOutput:
    inner_task = task.with_data(data)
    pairs = tf.shape(tf.nest.flatten(states)[0])[0] // 2
    template = tf.nest.map_structure(lambda t: tf.fill([pairs], t), theta)
    e = truncated_unroll.perturbation(template, perturbation_seed, sigma)
    thetas = tf.nest.map_structure(lambda t, e: tf.concat([t + e, t - e], 0), theta, e)

    def particle(args: tuple) -> tuple[opt_base.OptState, tf.Tensor]:
      particle_theta, state = args
      end_state, losses = inner_training.unroll(
        inner_task, lopt.opt_fn(particle_theta), state, length, data_seed, first_step
      )
      return end_state, tf.reduce_mean(losses)

    end_states, losses = tf.vectorized_map(particle, (thetas, states))
    return PESOutput(losses[:pairs], losses[pairs:], e, end_states)

  def call(
    theta: lopt_base.Theta,
    states: opt_base.OptState,
    first_step: int,
    data_seed: tf.Tensor,
    perturbation_seed: tf.Tensor,
  ) -> PESOutput:
    return pes_truncation(
      theta,
      states,
      tf.constant(first_step, tf.int32),
      seeds_lib.as_seed(data_seed),
      seeds_lib.as_seed(perturbation_seed),
      task.data,
    )

  return call


def make_run_loss_fn(
  task: task_base.Task, lopt: lopt_base.LearnedOptimizer, horizon: int
) -> Callable[[lopt_base.Theta, opt_base.OptState, tf.Tensor], tf.Tensor]:
  """A compiled untruncated inner run at fixed theta: (theta, start state, data seed) -> loss.

  Args:
    task: the inner problem.
    lopt: the learned optimizer.
    horizon: the run's length in inner steps.

  Returns:
    fn(theta, state, data_seed) -> the mean training loss over the whole run from `state` (the
    outer loss an untruncated unroll would have).
  """

  @tf.function(autograph=False)
  def run_loss(
    theta: lopt_base.Theta, state: opt_base.OptState, data_seed: tf.Tensor, data: Any
  ) -> tf.Tensor:
    inner_task = task.with_data(data)
    _, losses = inner_training.unroll(inner_task, lopt.opt_fn(theta), state, horizon, data_seed)
    return tf.reduce_mean(losses)

  return lambda theta, state, data_seed: run_loss(theta, state, data_seed, task.data)


def run_means(values: Sequence[float], per_run: int) -> list[float]:
  """The mean of each consecutive block of `per_run` values: each inner run's mean outer loss.

  The truncations of a run tile it, so this is the run's mean inner training loss whatever the
  truncation length (the outer loss an untruncated unroll of the run would report).

  Args:
    values: the outer loss of every truncation, in order.
    per_run: truncations per inner run.
  """
  blocks = np.asarray(values, np.float64).reshape(-1, per_run)
  return blocks.mean(axis=1).tolist()


def rolling_average(values: Sequence[float], decay: float) -> np.ndarray:
  """The bias-corrected exponential rolling average of `values`.

  r_k = sum_{i <= k} decay^(k - i) x_i / sum_{i <= k} decay^(k - i), so r_0 = x_0 (no pull
  towards 0 at the start, as Adam's bias correction). Non-finite values are skipped.

  Args:
    values: x_0, x_1, ... in order.
    decay: the weight of the previous average, in [0, 1).

  Returns:
    float64 [len(values)], NaN until the first finite value.
  """
  out = np.full(len(values), np.nan)
  total, weight = 0.0, 0.0
  for k, x in enumerate(values):
    total, weight = decay * total, decay * weight
    if math.isfinite(x):
      total, weight = total + x, weight + 1.0
    if weight > 0:
      out[k] = total / weight
  return out


def _all_finite(nest: lopt_base.Theta) -> bool:
  return all(bool(tf.reduce_all(tf.math.is_finite(x))) for x in tf.nest.flatten(nest))


def _scalar(theta: lopt_base.Theta) -> float:
  return float(theta[PARAMETER])


class OuterTrainer:
  """Outer-trains theta with truncated backpropagation or PES on one task.

  Args:
    task: the inner problem (one task for every inner run).
    lopt: the learned optimizer (LearnedHyperparameters of Adam).
    outer_optimizer: a pure-function rule (optimizers/*) applied to the theta dict.
    horizon: inner steps per inner run before the reset.
    num_runs: inner runs (resets) per curve.
    seed: the experiment's seed (initialisations, batches, perturbations).
  """

  def __init__(
    self,
    task: task_base.Task,
    lopt: lopt_base.LearnedOptimizer,
    outer_optimizer: opt_base.Optimizer,
    horizon: int,
    num_runs: int,
    seed: int,
  ):
    """Stores the settings; see the class docstring for the arguments."""
    self.task = task
    self.lopt = lopt
    self.outer_optimizer = outer_optimizer
    self.horizon = int(horizon)
    self.num_runs = int(num_runs)
    self.seed = int(seed)
    self._outer_update = tf.function(outer_optimizer.update, autograph=False)
    self._truncation_fns: dict[int, Callable[..., TruncationOutput]] = {}

  def truncation_fn(self, length: int) -> Callable[..., TruncationOutput]:
    """The compiled truncation of `length` steps (made once per length)."""
    if length not in self._truncation_fns:
      self._truncation_fns[length] = make_truncation_fn(self.task, self.lopt, length)
    return self._truncation_fns[length]

  def _check_length(self, length: int) -> int:
    if length < 1 or self.horizon % length:
      raise ValueError(f"Truncation length {length} must divide the horizon {self.horizon}.")
    return self.horizon // length

  def fresh_state(self, theta: lopt_base.Theta, run: int) -> tuple[opt_base.OptState, tf.Tensor]:
    """(inner state at the start of run `run`, the run's data seed).

    Args:
      theta: the current meta-parameters.
      run: the index of the inner run.
    """
    init_seed, data_seed = run_seeds(self.seed, run)
    return initial_state(self.task, self.lopt, theta, init_seed), data_seed

  def _outer_step(
    self, outer_state: opt_base.OptState, gradient: lopt_base.Theta, loss: tf.Tensor
  ) -> tuple[opt_base.OptState, bool]:
    if not (_all_finite(gradient) and math.isfinite(float(loss))):
      return outer_state, False
    return self._outer_update(outer_state, gradient), True

  def train_truncated(self, length: int) -> dict:
    """Outer-trains theta from lopt.init with truncations of `length` steps.

    Args:
      length: steps per truncation; it must divide the horizon.

    Returns:
      {"inner_step": [steps trained when each truncation ended], "outer_loss": [its loss],
       "gradient": [its d loss / d log lr], "learning_rate": [exp(theta) after its outer step],
       "skipped": outer steps skipped for a non-finite loss or gradient, "seconds": wall time}.
    """
    truncations_per_run = self._check_length(length)
    truncation = self.truncation_fn(length)
    start = time.time()
    theta = self.lopt.init(self.seed)
    outer_state = self.outer_optimizer.init(theta)
    record = {"inner_step": [], "outer_loss": [], "gradient": [], "learning_rate": []}
    skipped = 0
    for run in range(self.num_runs):
      state, data_seed = self.fresh_state(theta, run)
      for k in range(truncations_per_run):
        out = truncation(theta, state, k * length, data_seed)
        outer_state, applied = self._outer_step(outer_state, out.gradient, out.loss)
        skipped += int(not applied)
        theta = self.outer_optimizer.get_params(outer_state)
        state = out.state
        record["inner_step"].append((run * truncations_per_run + k + 1) * length)
        record["outer_loss"].append(float(out.loss))
        record["gradient"].append(_scalar(out.gradient))
        record["learning_rate"].append(math.exp(_scalar(theta)))
    record.update(skipped=skipped, seconds=round(time.time() - start, 3))
    return record

  def train_pes(
    self,
    length: int,
    pairs: int,
    sigma: float,
    hook: Callable[[int, int, pes.Accumulator, lopt_base.Theta], None] | None = None,
  ) -> dict:
    """Outer-trains theta from lopt.init with Persistent ES over truncations of `length` steps.

    Every pair keeps its own + and - inner states and its own sum of perturbations (one
    pes.Accumulator whose leaves have a leading [pairs] axis), all reset at the start of each
    inner run (the run's fresh state for + and -). The outer gradient is the mean over pairs of
    pes.gradient(L+, L-, xi, sigma).

    Args:
      length: steps per truncation; it must divide the horizon.
      pairs: antithetic pairs.
      sigma: the standard deviation of each perturbation of theta.
      hook: called after every truncation as hook(run, k, accumulator, perturbation), for
        tests.

    Returns:
      As train_truncated, with "outer_loss" the mean of L+ and L- over the pairs, "gradient"
      the mean PES gradient, and "accumulator_count" the accumulator's num_truncations.
    """
    truncations_per_run = self._check_length(length)
    pes_truncation = make_pes_fn(self.task, self.lopt, length, sigma)
    start = time.time()
    theta = self.lopt.init(self.seed)
    outer_state = self.outer_optimizer.init(theta)
    record = {
      "inner_step": [],
      "outer_loss": [],
      "gradient": [],
      "learning_rate": [],
      "accumulator_count": [],
    }
    skipped = 0
    pes_seed = seeds_lib.fold_in(self.seed, _PES_TAG)
    for run in range(self.num_runs):
      state, data_seed = self.fresh_state(theta, run)
      states = stack_states(state, 2 * pairs)
      accumulator = pes.initial_state(tf.nest.map_structure(lambda t: tf.fill([pairs], t), theta))
      run_seed = seeds_lib.fold_in(pes_seed, run)
      for k in range(truncations_per_run):
        out = pes_truncation(theta, states, k * length, data_seed, seeds_lib.fold_in(run_seed, k))
        accumulator = pes.accumulate(accumulator, out.perturbation)
        if hook is not None:
          hook(run, k, accumulator, out.perturbation)
        per_pair = pes.gradient(out.loss_plus, out.loss_minus, accumulator.perturbation_sum, sigma)
        gradient = tf.nest.map_structure(lambda g: tf.reduce_mean(g, axis=0), per_pair)
        loss = tf.reduce_mean(out.loss_plus + out.loss_minus) / 2.0
        outer_state, applied = self._outer_step(outer_state, gradient, loss)
        skipped += int(not applied)
        theta = self.outer_optimizer.get_params(outer_state)
        states = out.states
        record["inner_step"].append((run * truncations_per_run + k + 1) * length)
        record["outer_loss"].append(float(loss))
        record["gradient"].append(_scalar(gradient))
        record["learning_rate"].append(math.exp(_scalar(theta)))
        record["accumulator_count"].append(accumulator.num_truncations)
    record.update(skipped=skipped, seconds=round(time.time() - start, 3))
    return record

  def gradients_over_run(self, length: int, theta: lopt_base.Theta, run: int = 0) -> dict:
    """The outer-gradient of every truncation of one inner run at fixed theta (panel (c)).

    Args:
      length: steps per truncation; it must divide the horizon.
      theta: held fixed over the run (no outer step).
      run: which inner run's initialisation and batches (0: the first run of every curve).

    Returns:
      {"start_step": [first inner step of each truncation], "gradient": [its d loss / d log lr],
       "outer_loss": [its loss], "sum": the sum of the gradients over the run}.
    """
    truncations_per_run = self._check_length(length)
    truncation = self.truncation_fn(length)
    state, data_seed = self.fresh_state(theta, run)
    record = {"start_step": [], "gradient": [], "outer_loss": []}
    for k in range(truncations_per_run):
      out = truncation(theta, state, k * length, data_seed)
      state = out.state
      record["start_step"].append(k * length)
      record["gradient"].append(_scalar(out.gradient))
      record["outer_loss"].append(float(out.loss))
    record["sum"] = float(np.sum(record["gradient"]))
    return record


def _truncation_key(length: int) -> str:
  return str(int(length))


def _pes_key(length: int) -> str:
  return f"pes_{int(length)}"


def _describe_task(family: task_base.TaskFamily, task: task_base.Task) -> str:
  """A few words saying which data and model the task has, for the figure's title."""
  source = getattr(family, "source", None)
  model = getattr(family, "model", None)
  name = getattr(source, "name", getattr(family, "name", "task"))
  words = "the embedded generated images" if name == "generated" else name
  details = []
  if hasattr(family, "num_classes_per_task"):
    details.append(f"{family.num_classes_per_task} classes")
  if getattr(task, "image_shape", ()):
    details.append("x".join(str(int(d)) for d in task.image_shape))
  if details:
    words += f" ({', '.join(details)})"
  if isinstance(model, networks.MLP):
    words += f", a ReLU MLP {'-'.join(str(h) for h in model.hidden_sizes)}"
  return words


@gin.configurable
class TruncationBias(runner.Experiment):
  """Fig. 3 / App. G: outer-training log lr of Adam with truncations of different lengths."""

  def __init__(
    self,
    family: task_base.TaskFamily = gin.REQUIRED,
    lopt: lopt_base.LearnedOptimizer = gin.REQUIRED,
    outer_optimizer: opt_base.Optimizer = gin.REQUIRED,
    outer_optimizer_label: str = "",
    horizon: int = 10_000,
    num_runs: int = 3,
    truncation_lengths: Sequence[int] = (10, 100, 1000, 10_000),
    gradient_truncations: Sequence[int] = (10, 100, 1000, 10_000),
    pes_truncation: int = 10,
    pes_pairs: int = 4,
    pes_sigma: float = 0.1,
    pes_outer_optimizer: opt_base.Optimizer | None = None,
    pes_outer_optimizer_label: str = "",
    rolling_steps: int = 10_000,
    evaluate: bool = True,
    reference_learning_rates: Sequence[float] = (),
    task_seed: int = 0,
    seed: int = 0,
  ):
    """Describes the experiment.

    Args:
      family: the task family; one task is sampled from it (task_seed) and used for every run.
      lopt: the learned optimizer: LearnedHyperparameters(Adam, {"learning_rate": "log"}, ...).
      outer_optimizer: the pure-function rule that updates theta (optimizers/*).
      outer_optimizer_label: how the figure names the outer-optimizer, e.g. "Adam lr=0.1".
      horizon: inner steps of one inner run before the reset.
      num_runs: inner runs (resets) per curve: every curve trains num_runs * horizon inner steps.
      truncation_lengths: the steps per truncation of the truncated-backpropagation curves.
      gradient_truncations: the lengths of panel (c) (empty: no panel (c)).
      pes_truncation: steps per truncation of the PES curve (0: no PES curve).
      pes_pairs: antithetic pairs of PES.
      pes_sigma: the standard deviation of PES's perturbation of theta = log lr.
      pes_outer_optimizer: the rule that updates PES's theta (None: `outer_optimizer`).
      pes_outer_optimizer_label: how the figure names it.
      rolling_steps: the time constant, in inner steps, of panel (a)'s rolling average: a
        truncation of L steps has the weight exp(-L / rolling_steps) of the one after it.
      evaluate: also measure the mean training loss of one fresh, untruncated inner run at the
        initial lr and at each curve's final lr (the same seeds for all).
      reference_learning_rates: fixed learning rates whose untruncated run loss (the same
        evaluation run) is measured too: where the outer loss's minimum is.
      task_seed: the seed of the task sampled from the family.
      seed: the seed of initialisations, batches and perturbations.
    """
    self.family = family
    self.lopt = lopt
    self.outer_optimizer = outer_optimizer
    self.outer_optimizer_label = outer_optimizer_label or type(outer_optimizer).__name__
    self.horizon = int(horizon)
    self.num_runs = int(num_runs)
    self.truncation_lengths = tuple(int(x) for x in truncation_lengths)
    self.gradient_truncations = tuple(int(x) for x in gradient_truncations)
    self.pes_truncation = int(pes_truncation)
    self.pes_pairs = int(pes_pairs)
    self.pes_sigma = float(pes_sigma)
    self.pes_outer_optimizer = pes_outer_optimizer or outer_optimizer
    self.pes_outer_optimizer_label = (
      pes_outer_optimizer_label if pes_outer_optimizer is not None else self.outer_optimizer_label
    )
    self.rolling_steps = float(rolling_steps)
    self.evaluate = bool(evaluate)
    self.reference_learning_rates = tuple(float(x) for x in reference_learning_rates)
    self.task_seed = int(task_seed)
    self.seed = int(seed)

  def _finish_curve(self, record: dict, length: int) -> dict:
    decay = math.exp(-length / self.rolling_steps)
    record["truncation_length"] = length
    record["rolling_decay"] = decay
    record["rolling_loss"] = rolling_average(record["outer_loss"], decay).tolist()
    record["run_mean_loss"] = run_means(record["outer_loss"], self.horizon // length)
    record["final_learning_rate"] = record["learning_rate"][-1]
    record["final_rolling_loss"] = record["rolling_loss"][-1]
    record["final_run_mean_loss"] = record["run_mean_loss"][-1]
    return record

  def _gradients(self, trainer: OuterTrainer, curves: dict, theta0: lopt_base.Theta) -> dict:
    gradients = {}
    for length in self.gradient_truncations:
      curve = curves.get(_truncation_key(length))
      if length == self.horizon and curve is not None:
        # One truncation per run: the curve's first outer step is this run at theta0 already.
        gradients[_truncation_key(length)] = {
          "start_step": [0],
          "gradient": curve["gradient"][:1],
          "outer_loss": curve["outer_loss"][:1],
          "sum": curve["gradient"][0],
        }
      else:
        gradients[_truncation_key(length)] = trainer.gradients_over_run(length, theta0)
    return gradients

  def _evaluate(self, task: task_base.Task, curves: dict, theta0: lopt_base.Theta) -> dict:
    run_loss = make_run_loss_fn(task, self.lopt, self.horizon)
    init_seed, data_seed = run_seeds(self.seed, 0, _EVAL_TAG)
    state = initial_state(task, self.lopt, theta0, init_seed)

    def loss_at(lr: float) -> float:
      return float(run_loss({PARAMETER: tf.constant(math.log(lr), tf.float32)}, state, data_seed))

    evaluation = {"initial": loss_at(math.exp(_scalar(theta0)))}
    for key, curve in curves.items():
      curve["eval_loss"] = loss_at(curve["final_learning_rate"])
      evaluation[key] = curve["eval_loss"]
    if self.reference_learning_rates:
      losses = [loss_at(lr) for lr in self.reference_learning_rates]
      best = int(np.nanargmin(losses))
      evaluation["reference"] = {
        "learning_rates": list(self.reference_learning_rates),
        "run_loss": losses,
        "best_learning_rate": self.reference_learning_rates[best],
        "best_run_loss": losses[best],
      }
    return evaluation

  def compute(self, panels: runner.Panels) -> dict:
    """Trains every curve, then the evaluation runs and panel (c)'s gradients.

    Args:
      panels: where each finished panel is reported.
    """
    task = self.family.sample(self.task_seed)
    trainer = OuterTrainer(
      task, self.lopt, self.outer_optimizer, self.horizon, self.num_runs, self.seed
    )
    theta0 = self.lopt.init(self.seed)
    curves = {}
    for length in self.truncation_lengths:
      curve = self._finish_curve(trainer.train_truncated(length), length)
      curves[_truncation_key(length)] = curve
      logging.info(
        "truncation %d: lr %.3g, last run's mean loss %.4f, %.1f s",
        length,
        curve["final_learning_rate"],
        curve["final_run_mean_loss"],
        curve["seconds"],
      )
    if self.pes_truncation:
      pes_trainer = OuterTrainer(
        task, self.lopt, self.pes_outer_optimizer, self.horizon, self.num_runs, self.seed
      )
      record = pes_trainer.train_pes(self.pes_truncation, self.pes_pairs, self.pes_sigma)
      curves[_pes_key(self.pes_truncation)] = self._finish_curve(record, self.pes_truncation)

    evaluation = self._evaluate(task, curves, theta0) if self.evaluate else {}
    summary = ", ".join(
      f"{key}: lr {c['final_learning_rate']:.3g} loss {c['final_rolling_loss']:.3f}"
      for key, c in curves.items()
    )
    panels.done("(a) rolling outer loss", summary)
    panels.done("(b) learning rate", summary)

    gradients = self._gradients(trainer, curves, theta0)
    if gradients:
      panels.done(
        "(c) outer-gradients over one inner run",
        ", ".join(f"L={k}: sum {g['sum']:.3g}" for k, g in gradients.items()),
      )

    return {
      "settings": {
        "task": task.name,
        "data": _describe_task(self.family, task),
        "same_task_every_run": True,
        "theta": "log(learning_rate) of Adam",
        "initial_learning_rate": math.exp(_scalar(theta0)),
        "outer_loss": "mean inner training loss over the truncation's steps",
        "outer_optimizer": self.outer_optimizer_label,
        "horizon": self.horizon,
        "num_runs": self.num_runs,
        "total_inner_steps": self.horizon * self.num_runs,
        "truncation_lengths": list(self.truncation_lengths),
        "gradient_truncations": list(self.gradient_truncations),
        "pes_truncation": self.pes_truncation,
        "pes_pairs": self.pes_pairs,
        "pes_sigma": self.pes_sigma,
        "pes_outer_optimizer": self.pes_outer_optimizer_label,
        "rolling_steps": self.rolling_steps,
        "seed": self.seed,
        "task_seed": self.task_seed,
      },
      "curves": curves,
      "gradients_over_run": gradients,
      "evaluation": evaluation,
    }

  def plot(self, result: dict) -> figure.Figure:
    """Panels (a) and (b); with panel (c)'s gradients also (c) and (d), their running sum.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    settings, curves = result["settings"], result["curves"]
    gradients = result.get("gradients_over_run") or {}
    reference = (result.get("evaluation") or {}).get("reference")
    if gradients:
      fig = figure.Figure(figsize=(12.4, 9.2))
      axes = fig.subplots(2, 2).ravel()
    else:
      fig = figure.Figure(figsize=(13.0, 5.0))
      axes = fig.subplots(1, 2)
    lengths = settings["truncation_lengths"]
    colours = {
      _truncation_key(n): c for n, c in zip(lengths, _colour_cycle(len(lengths)), strict=True)
    }
    for key, curve in curves.items():
      _plot_curve(axes[0], axes[1], key, curve, settings, colours.get(key, "black"))
    axes[0].set_title("(a) outer loss: rolling average (lines), run means (dots)", fontsize=9)
    axes[0].set_xlabel("outer-training progress (inner steps)")
    axes[0].set_ylabel("mean inner training loss of a truncation")
    axes[0].legend(fontsize=7, title="steps per truncation (last run's mean)", title_fontsize=7)
    axes[1].axhline(
      settings["initial_learning_rate"], color="grey", linestyle="--", lw=1.2, label="initial"
    )
    if reference:
      axes[1].axhline(
        reference["best_learning_rate"],
        color="tab:red",
        linestyle=":",
        lw=1.2,
        label=f"best fixed lr, untruncated ({reference['best_run_loss']:.2f})",
      )
    axes[1].set_yscale("log")
    axes[1].set_title("(b) learning rate exp(theta)", fontsize=9)
    axes[1].set_xlabel("outer-training progress (inner steps)")
    axes[1].set_ylabel("Adam's learning rate (log scale)")
    low, high = axes[1].get_ylim()
    axes[1].set_ylim(low / 4, high)  # Room for the legend below the curves.
    axes[1].legend(
      fontsize=7, title="final learning rate", title_fontsize=7, loc="lower left", ncol=2
    )
    for ax in axes[:2]:
      for run in range(1, settings["num_runs"]):
        ax.axvline(run * settings["horizon"], color="grey", lw=0.5, alpha=0.5)
    if gradients:
      _plot_gradients(axes[2], axes[3], gradients, settings, colours)
    pes_text = ""
    if settings.get("pes_truncation"):
      pes_text = (
        f"; PES: {settings['pes_pairs']} antithetic pairs, sigma {settings['pes_sigma']:g}, "
        f"outer-optimizer {settings['pes_outer_optimizer']}"
      )
    fig.suptitle(
      f"Truncation bias (Sec. 2.4): theta = log lr of Adam, from lr = "
      f"{settings['initial_learning_rate']:g}, on {settings['data']}; the same task, a new "
      f"initialisation every {settings['horizon']:,} inner steps, {settings['num_runs']} runs\n"
      f"outer-optimizer {settings['outer_optimizer']}; outer loss = mean inner training loss "
      f"over the truncation's steps{pes_text}",
      fontsize=8.5,
    )
    fig.tight_layout()
    return fig


def _plot_curve(
  loss_ax: Any, lr_ax: Any, key: str, curve: dict, settings: dict, colour: Any
) -> None:
  is_pes = key.startswith("pes_")
  style = {"color": "black", "linestyle": "--"} if is_pes else {"color": colour}
  name = f"PES, {curve['truncation_length']}" if is_pes else f"{curve['truncation_length']}"
  marker = "o" if len(curve["inner_step"]) <= 20 else None
  loss_ax.plot(
    curve["inner_step"],
    curve["rolling_loss"],
    marker=marker,
    label=f"{name} ({curve['final_run_mean_loss']:.3f})",
    lw=1.2,
    **style,
  )
  run_ends = [settings["horizon"] * (r + 1) for r in range(len(curve["run_mean_loss"]))]
  loss_ax.plot(run_ends, curve["run_mean_loss"], "o", color=style["color"], ms=4)
  lr_ax.plot(
    curve["inner_step"],
    curve["learning_rate"],
    marker=marker,
    label=f"{name}: {curve['final_learning_rate']:.2g}",
    lw=1.2,
    **style,
  )


def _plot_gradients(ax: Any, sum_ax: Any, gradients: dict, settings: dict, colours: dict) -> None:
  for key, record in gradients.items():
    colour = colours.get(key, "black")
    steps, values = np.asarray(record["start_step"]), np.asarray(record["gradient"])
    label = f"{key} steps: sum {record['sum']:+.3g}"
    if len(values) <= 20:
      ax.plot(steps, values, color=colour, marker="o", ms=5, lw=0.8, label=label)
    else:
      # Many noisy points: each truncation as a dot, and their mean over windows of a tenth of
      # the run as a line.
      ax.plot(steps, values, ".", color=colour, ms=2, alpha=0.35)
      window = max(1, len(values) // 10)
      means = values.reshape(-1, window).mean(axis=1) if len(values) % window == 0 else values
      centres = steps.reshape(-1, window).mean(axis=1) if len(values) % window == 0 else steps
      ax.plot(centres, means, color=colour, marker="s", ms=3, lw=1.2, label=label + " (mean)")
    # A truncation's gradient is counted at the step where the truncation ends.
    length = settings["horizon"] // len(values)
    sum_ax.plot(
      np.concatenate([[0], steps + length]),
      np.concatenate([[0.0], np.cumsum(values)]),
      color=colour,
      drawstyle="steps-post",
      lw=1.2,
      label=f"{key} steps",
    )
  ax.axhline(0.0, color="grey", lw=0.8)
  # Linear within 1e-3 of the largest gradient, logarithmic beyond: short truncations' small
  # gradients and the long ones' large gradients on one axis, with their signs.
  largest = max((abs(g) for r in gradients.values() for g in r["gradient"]), default=1.0)
  ax.set_yscale("symlog", linthresh=max(largest, 1e-12) * 1e-3)
  ax.set_title(
    f"(c) outer-gradient of each truncation over one inner run at fixed lr = "
    f"{settings['initial_learning_rate']:g}",
    fontsize=9,
  )
  ax.set_xlabel("inner step the truncation starts at")
  ax.set_ylabel("d outer loss / d log lr (symlog); < 0 raises the lr")
  ax.legend(fontsize=7, title="steps per truncation", title_fontsize=7)
  sum_ax.axhline(0.0, color="grey", lw=0.8)
  sum_ax.set_title("(d) running sum of (c) over the run: the total outer-gradient", fontsize=9)
  sum_ax.set_xlabel("inner step (each truncation counted where it ends)")
  sum_ax.set_ylabel("sum of the truncations' d outer loss / d log lr so far")
  sum_ax.legend(fontsize=7, title="steps per truncation", title_fontsize=7)


def _colour_cycle(n: int) -> list:
  cmap = colormaps["viridis"]
  return [cmap(0.9 * i / max(n - 1, 1)) for i in range(n)]
