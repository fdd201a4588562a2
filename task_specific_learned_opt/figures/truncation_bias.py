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

The outer-training itself is figures/hyperparameter_training.py (built from outer/), the plots
figures/truncation_bias_plot.py; this module is the experiment gin configures.
"""

import math
from collections.abc import Sequence

import gin
import numpy as np
import tensorflow as tf
from absl import logging
from matplotlib import figure

from task_specific_learned_opt import nests
from task_specific_learned_opt.figures import hyperparameter_training as training
from task_specific_learned_opt.figures import hyperparameter_truncations as truncations
from task_specific_learned_opt.figures import runner, truncation_bias_plot
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import networks

PARAMETER = truncations.PARAMETER


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

  def _gradients(self, trainer: training.OuterTrainer, curves: dict, theta0: nests.Theta) -> dict:
    gradients = {}
    for length in self.gradient_truncations:
      curve = curves.get(truncation_bias_plot.truncation_key(length))
      if length == self.horizon and curve is not None:
        # One truncation per run: the curve's first outer step is this run at theta0 already.
        gradients[truncation_bias_plot.truncation_key(length)] = {
          "start_step": [0],
          "gradient": curve["gradient"][:1],
          "outer_loss": curve["outer_loss"][:1],
          "sum": curve["gradient"][0],
        }
      else:
        gradients[truncation_bias_plot.truncation_key(length)] = trainer.gradients_over_run(
          length, theta0
        )
    return gradients

  def _evaluate(self, task: task_base.Task, curves: dict, theta0: nests.Theta) -> dict:
    run_loss = truncations.make_run_loss_fn(task, self.lopt, self.horizon)
    init_seed, data_seed = truncations.run_seeds(self.seed, 0, truncations.EVAL_TAG)
    state = truncations.initial_state(task, self.lopt, theta0, init_seed)

    def loss_at(lr: float) -> float:
      return float(run_loss({PARAMETER: tf.constant(math.log(lr), tf.float32)}, state, data_seed))

    evaluation = {"initial": loss_at(math.exp(float(theta0[PARAMETER])))}
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

  def _curves(self, task: task_base.Task, trainer: training.OuterTrainer) -> dict:
    """Every truncation length's curve, then the PES curve."""
    curves = {}
    for length in self.truncation_lengths:
      curve = self._finish_curve(trainer.train(training.BACKPROP, length), length)
      curves[truncation_bias_plot.truncation_key(length)] = curve
      logging.info(
        "truncation %d: lr %.3g, last run's mean loss %.4f, %.1f s",
        length,
        curve["final_learning_rate"],
        curve["final_run_mean_loss"],
        curve["seconds"],
      )
    if self.pes_truncation:
      pes_trainer = training.OuterTrainer(
        task, self.lopt, self.pes_outer_optimizer, self.horizon, self.num_runs, self.seed
      )
      record = pes_trainer.train(
        "pes", self.pes_truncation, num_samples=self.pes_pairs, sigma=self.pes_sigma
      )
      key = truncation_bias_plot.pes_key(self.pes_truncation)
      curves[key] = self._finish_curve(record, self.pes_truncation)
    return curves

  def _settings(self, task: task_base.Task, theta0: nests.Theta) -> dict:
    """The experiment's settings, as the JSON and the figure's title report them."""
    return {
      "task": task.name,
      "data": _describe_task(self.family, task),
      "same_task_every_run": True,
      "theta": "log(learning_rate) of Adam",
      "initial_learning_rate": math.exp(float(theta0[PARAMETER])),
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
    }

  def compute(self, panels: runner.Panels) -> dict:
    """Trains every curve, then the evaluation runs and panel (c)'s gradients.

    Args:
      panels: where each finished panel is reported.
    """
    task = self.family.sample(self.task_seed)
    trainer = training.OuterTrainer(
      task, self.lopt, self.outer_optimizer, self.horizon, self.num_runs, self.seed
    )
    theta0 = self.lopt.init(self.seed)
    curves = self._curves(task, trainer)
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
      "settings": self._settings(task, theta0),
      "curves": curves,
      "gradients_over_run": gradients,
      "evaluation": evaluation,
    }

  def plot(self, result: dict) -> figure.Figure:
    """Panels (a) and (b); with panel (c)'s gradients also (c) and (d) (truncation_bias_plot).

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    return truncation_bias_plot.plot(result)
