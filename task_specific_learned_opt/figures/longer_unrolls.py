"""App. H (longer unrolls): a learned optimizer run 10x past its training horizon, and why.

App. H applies a trained optimizer for far more inner steps than it was outer-trained on and
reports that it stays stable. This experiment does that on held-out tasks and records, besides the
losses, what the optimizer reads and emits over the run, so that a failure can be traced to an
input that leaves the range it saw in outer-training:
  - every optimizer (one theta under each `lopts` variant, e.g. the paper's MLPLOpt and one whose
    time features stop at the horizon, and Adam at each of `adam_learning_rates`) trains the same
    held-out tasks from the same initialisation on the same batches as bin/eval's protocol
    (`protocol.task_seed`, `protocol.run_seed`, whose streams `random_seeds.run_seeds` names:
    params, data and the measured batches);
  - every `record_every` steps: the training, validation and test loss (each the mean over
    `num_eval_batches` fixed batches, as bin/eval measures them), the mean minibatch training
    loss since the last record, and per kind of tensor (`lopt_probe.kind_of`) the parameter
    norm and the relative step |w_t - w_t+1| / |w_t| of the update the optimizer takes next (one
    real update, on the batch of step t);
  - for the learned optimizers, `lopt_probe.probe` of that same update: the time features, the
    raw and normalised feature columns, the MLP's outputs and the steps, per kind of tensor;
  - Adam's learning rate per task, chosen twice as Fig. 6 chooses it (evaluation/tuning.py): the
    grid value with the lowest mean minibatch training loss over the whole run ("adam (tuned)",
    beside the training losses) and the one with the lowest mean validation loss
    ("adam (tuned on valid)", beside the test losses), beside each grid value's own runs.
Then, per task (horizon_statistics.py): each run's losses at the last step and over the last
`horizon` steps ("summary"); every recorded statistic averaged before the horizon, over the two
horizons after it and over the last two ("windows"); and, per learned optimizer, time feature and
normalised column, the range before the horizon (exact for the time features, from the recorded
steps otherwise), the first recorded step past it outside that range and how far outside it goes
("time_ranges", "ranges"). The plots are longer_unrolls_plot.py's.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from matplotlib import figure

from task_specific_learned_opt import checkpoints, inner_training, nests, random_seeds
from task_specific_learned_opt.evaluation import protocol, tuning
from task_specific_learned_opt.figures import (
  horizon_statistics,
  longer_unrolls_plot,
  lopt_probe,
  runner,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import base as task_base

ADAM_LEARNING_RATES = tuning.LEARNING_RATES  # Fig. 6's grid (11 values from 1e-4 to 10).
SPLITS = ("train", "valid", "test")  # The splits every record measures.
TUNED_ADAM = "adam (tuned)"  # On the mean minibatch training loss: beside training losses.
TUNED_ADAM_VALID = "adam (tuned on valid)"  # On the mean validation loss: beside test losses.
SIGNIFICANT_DIGITS = 4  # Of every recorded value in the JSON: ample beside the runs' own noise.


def adam_name(learning_rate: float) -> str:
  """The name of Adam's runs at one learning rate, e.g. "adam 0.01"."""
  return f"adam {learning_rate:.3g}"


def _step_statistics(params: nests.Params, new_params: nests.Params) -> dict:
  """Per kind of tensor: |w|_2 and the relative step |w - w_new|_2 / |w|_2 of a real update."""
  old, new = lopt_probe.leaves_with_paths(params), dict(lopt_probe.leaves_with_paths(new_params))
  grouped = {}
  for path, leaf in old:
    grouped.setdefault(lopt_probe.kind_of(path), []).append((leaf, new[path]))
  statistics = {}
  for kind, pairs in grouped.items():
    w = tf.concat([tf.reshape(a, [-1]) for a, _ in pairs], 0)
    step = w - tf.concat([tf.reshape(b, [-1]) for _, b in pairs], 0)
    norm = tf.norm(w)
    statistics[kind] = {
      "param_norm": norm,
      "relative_step": tf.norm(step) / tf.maximum(norm, 1e-30),
    }
  return statistics


class CompiledRun:
  """init, train and measure of one optimizer kind, compiled once for a family's tasks.

  The task's data and the optimizer's values (theta, or Adam's learning rate) are arguments, so
  every task and every grid value reuses one trace.
  """

  def __init__(
    self,
    template: task_base.Task,
    make: Callable[[Any], Any],
    num_eval_batches: int,
    lopt: mlp_lopt.MLPLOpt | None = None,
  ):
    """Wraps (but does not yet trace) the three functions.

    Args:
      template: a task of the family.
      make: the optimizer's values -> its Optimizer.
      num_eval_batches: fixed batches averaged by each measured loss.
      lopt: the learned optimizer `make` builds (its updates are probed), or None.
    """

    def task_opt(data: Any, values: Any) -> tuple[task_base.Task, Any]:
      return template.with_data(data), make(values)

    @tf.function(autograph=False, reduce_retracing=True)
    def init(data: Any, values: Any, seed: tf.Tensor) -> Any:
      task, opt = task_opt(data, values)
      return opt.init(task.init_params(seed))

    @tf.function(autograph=False, reduce_retracing=True)
    def train(
      data: Any, values: Any, state: Any, first: tf.Tensor, num_steps: tf.Tensor, seed: tf.Tensor
    ) -> tuple[Any, tf.Tensor]:
      task, opt = task_opt(data, values)
      return inner_training.unroll(task, opt, state, num_steps, seed, first)

    @tf.function(autograph=False, reduce_retracing=True)
    def measure(
      data: Any, values: Any, state: Any, data_seed: tf.Tensor, eval_seed: tf.Tensor
    ) -> dict:
      task, opt = task_opt(data, values)
      params = opt.get_params(state)
      record = {}
      for split in SPLITS:  # Measured on the batches evaluation/running.py uses.
        seed = random_seeds.measured_split_seed(eval_seed, split)
        losses = [
          task.loss(params, task.batch(split, random_seeds.fold_in(seed, b)))
          for b in range(num_eval_batches)
        ]
        record[f"{split}_loss"] = tf.reduce_mean(losses)
      # The update of step t, on the batch inner_training.unroll gives step t.
      batch = task.batch("train", random_seeds.fold_in(data_seed, state.iteration))
      _, grads = inner_training.loss_and_grads(task, params, batch)
      record["kinds"] = _step_statistics(params, opt.get_params(opt.update(state, grads)))
      if lopt is not None:
        record["probe"] = lopt_probe.probe(lopt, values, state, grads)
      return record

    self.init, self.train, self.measure = init, train, measure

  def run(
    self, task: task_base.Task, values: Any, seed: tf.Tensor, record_steps: np.ndarray
  ) -> dict:
    """One run measured at `record_steps` (0 first, increasing).

    Args:
      task: the task.
      values: the optimizer's values.
      seed: the run's seed (protocol.run_seed).
      record_steps: where the run is measured; the last is its length.

    Returns:
      The measurements stacked over the records (a nest of numpy arrays, leading axis
      len(record_steps)) and "minibatch_loss": [len(record_steps) - 1], the mean clipped training
      loss of the steps between consecutive records.
    """
    init_seed, data_seed, eval_seed = random_seeds.run_seeds(seed)
    state = self.init(task.data, values, init_seed)
    records, minibatch, done = [], [], 0
    for step in record_steps:
      if step > done:
        state, losses = self.train(
          task.data, values, state, tf.constant(done), tf.constant(int(step) - done), data_seed
        )
        minibatch.append(float(np.mean(losses.numpy())))
        done = int(step)
      records.append(
        tf.nest.map_structure(
          np.asarray, self.measure(task.data, values, state, data_seed, eval_seed)
        )
      )
    stacked = tf.nest.map_structure(lambda *x: np.stack(x), *records)
    stacked["minibatch_loss"] = np.asarray(minibatch)
    return tf.nest.map_structure(_significant, stacked)


def _significant(x: np.ndarray) -> np.ndarray:
  """`x` rounded to SIGNIFICANT_DIGITS significant digits (short numbers in the JSON)."""
  return np.vectorize(lambda v: float(f"{v:.{SIGNIFICANT_DIGITS}g}"), otypes=[np.float64])(x)


def _column_ranges(steps: np.ndarray, probe: dict, columns: list[str], horizon: int) -> dict:
  """{kind: {column: training_range of its normalised RMS}} of one run's probe."""
  return {
    kind: {
      column: horizon_statistics.training_range(steps, stats["normalized_rms"][:, c], horizon)
      for c, column in enumerate(columns)
    }
    for kind, stats in probe["kinds"].items()
  }


def _windows(steps: np.ndarray, run: dict, spans: dict) -> dict:
  """{"kinds": {kind: {statistic: {window: mean}}}, "probe": the same of the probe, if any}."""

  def of(kinds: dict) -> dict:
    return {
      kind: {name: horizon_statistics.window_means(steps, v, spans) for name, v in stats.items()}
      for kind, stats in kinds.items()
    }

  means = {"kinds": of(run["kinds"])}
  if "probe" in run:
    means["probe"] = of(run["probe"]["kinds"])
  return means


@gin.configurable
class LongerUnrolls(runner.Experiment):
  """A theta (and variants of its optimizer) and LR-tuned Adam, 10x past the training horizon."""

  def __init__(
    self,
    family: task_base.TaskFamily = gin.REQUIRED,
    lopts: Mapping[str, mlp_lopt.MLPLOpt] = gin.REQUIRED,
    theta_dir: str = gin.REQUIRED,
    horizon: int = 500,
    num_steps: int = 5000,
    record_every: int = 50,
    num_tasks: int = 2,
    seed: int = 1,
    num_eval_batches: int = 5,
    adam_learning_rates: Sequence[float] = ADAM_LEARNING_RATES,
    theta_dirs: Mapping[str, str] | None = None,
  ):
    """Configures the experiment.

    Args:
      family: the held-out tasks (the outer-test classes of the theta's family).
      lopts: {name: MLPLOpt}: the optimizer the theta was trained as, and variants of it that
        read the same theta (e.g. time_max_step set); all must fit the theta's shapes.
      theta_dir: the theta export (checkpoints.save_theta).
      horizon: the inner horizon the theta was outer-trained on (Worker.horizon).
      num_steps: the length of every run.
      record_every: steps between measurements.
      num_tasks: held-out tasks, the first of bin/eval's tasks with this seed.
      seed: bin/eval's `evaluate.seed` (tasks, initialisations and data).
      num_eval_batches: fixed batches averaged by each measured loss.
      adam_learning_rates: Adam's grid; empty for no Adam.
      theta_dirs: {lopts name: theta export} for variants that read another theta than
        `theta_dir` (two thetas on the same tasks share Adam's runs).
    """
    self.family = family
    self.lopts = dict(lopts)
    self.theta_dir = theta_dir
    self.horizon = int(horizon)
    self.num_steps = int(num_steps)
    self.record_steps = np.arange(0, self.num_steps + 1, int(record_every))
    if self.record_steps[-1] != self.num_steps:
      self.record_steps = np.append(self.record_steps, self.num_steps)
    self.num_tasks = int(num_tasks)
    self.seed = int(seed)
    self.num_eval_batches = int(num_eval_batches)
    self.adam_learning_rates = [float(x) for x in adam_learning_rates]
    self.theta_dirs = {name: (theta_dirs or {}).get(name, theta_dir) for name in self.lopts}
    unknown = set(theta_dirs or {}) - set(self.lopts)
    if unknown:
      raise ValueError(
        f"LongerUnrolls.theta_dirs names {sorted(unknown)}, which are not in LongerUnrolls.lopts "
        f"({sorted(self.lopts)}); name a variant of lopts."
      )

  def _optimizers(self, template: task_base.Task) -> dict[str, tuple[CompiledRun, Any]]:
    """{name: (compiled run, values)} of every learned variant and every Adam learning rate."""
    runs, compiled = {}, {}
    for name, lopt in self.lopts.items():
      theta = checkpoints.load_theta(self.theta_dirs[name], lopt)
      if lopt.options not in compiled:  # Variants that differ only in theta share one trace.
        compiled[lopt.options] = CompiledRun(template, lopt.opt_fn, self.num_eval_batches, lopt)
      runs[name] = (compiled[lopt.options], theta)
    make_adam = CompiledRun(template, lambda lr: adam.Adam(learning_rate=lr), self.num_eval_batches)
    for lr in self.adam_learning_rates:
      runs[adam_name(lr)] = (make_adam, tf.constant(lr, tf.float32))
    return runs

  def compute(self, panels: runner.Panels) -> dict:
    """Runs every optimizer on every task; the measurements, Adam's choice and the ranges.

    Args:
      panels: where each finished task is reported.

    Returns:
      The settings; "record_steps"; "time_scales"; "columns" (the probe's column names);
      "windows" (horizon_statistics.windows); "time_ranges" ({learned name: [training_range per
      time feature]}); "tasks": one dict per task: "name"; "runs" ({optimizer:
      `CompiledRun.run`'s record}); "adam_learning_rate" (the one tuned on training loss) and
      "adam_run" (its run's name), "adam_learning_rate_valid" and "adam_run_valid" (tuned on
      validation loss); "summary" ({optimizer, TUNED_ADAM and TUNED_ADAM_VALID:
      loss_summary}); "windows" ({optimizer: {"kinds"[, "probe"]: {kind: {statistic: {window:
      mean}}}}}); "ranges" ({learned name: {kind: {column:
      training_range of its normalised RMS}}}); "mean_summary" ({optimizer: {statistic: mean
      over the tasks}}); "lopt_best_on_valid" (the learned variant with the lowest mean
      validation loss over the tasks, e.g. a weight decay's strength chosen on outer-train tasks).
    """
    template = self.family.sample(protocol.task_seed(self.seed, 0))
    optimizers = self._optimizers(template)
    first_lopt = next(iter(self.lopts.values()))
    columns = lopt_probe.column_names(first_lopt)
    tasks = []
    for t in range(self.num_tasks):
      task = self.family.sample(protocol.task_seed(self.seed, t))
      seed = protocol.run_seed(self.seed, t, 0)
      runs = {
        name: compiled.run(task, values, seed, self.record_steps)
        for name, (compiled, values) in optimizers.items()
      }
      tasks.append(self._task_result(task, runs, columns))
      panels.done(f"task {t}", _summary(tasks[-1]))
    means = _mean_summary(tasks)
    return {
      "family": self.family.name,
      "theta_dir": self.theta_dir,
      "theta_dirs": self.theta_dirs,
      "lopts": {name: _lopt_settings(lopt) for name, lopt in self.lopts.items()},
      "horizon": self.horizon,
      "num_steps": self.num_steps,
      "seed": self.seed,
      "num_eval_batches": self.num_eval_batches,
      "adam_learning_rates": self.adam_learning_rates,
      "record_steps": self.record_steps,
      "time_scales": list(first_lopt.time_scales),
      "normalizer_epsilon": first_lopt.normalizer_epsilon,
      "columns": columns,
      "windows": horizon_statistics.windows(self.horizon, self.num_steps),
      "time_ranges": {
        name: horizon_statistics.time_feature_ranges(lopt, self.horizon, self.num_steps)
        for name, lopt in self.lopts.items()
      },
      "tasks": tasks,
      "mean_summary": means,
      "lopt_best_on_valid": min(
        self.lopts, key=lambda name: _finite_or_inf(means[name]["mean_valid_loss"])
      ),
    }

  def _task_result(self, task: task_base.Task, runs: dict, columns: list[str]) -> dict:
    """One task's runs with Adam's tuned learning rate, the loss summaries, windows and ranges."""
    steps, spans = self.record_steps, horizon_statistics.windows(self.horizon, self.num_steps)
    result = {"name": task.name, "runs": runs}
    summary = {
      name: horizon_statistics.loss_summary(steps, run, self.horizon) for name, run in runs.items()
    }
    if self.adam_learning_rates:
      names = [adam_name(lr) for lr in self.adam_learning_rates]
      for tuned, metric, suffix in (
        (TUNED_ADAM, "mean_minibatch_loss", ""),
        (TUNED_ADAM_VALID, "mean_valid_loss", "_valid"),
      ):
        best = min(names, key=lambda name: _finite_or_inf(summary[name][metric]))
        result[f"adam_learning_rate{suffix}"] = self.adam_learning_rates[names.index(best)]
        result[f"adam_run{suffix}"] = best
        summary[tuned] = summary[best]
    result["summary"] = summary
    result["windows"] = {name: _windows(steps, run, spans) for name, run in runs.items()}
    result["ranges"] = {
      name: _column_ranges(steps, runs[name]["probe"], columns, self.horizon) for name in self.lopts
    }
    return result

  def plot(self, result: dict) -> figure.Figure:
    """The losses and the learned optimizer's inputs and outputs over the run.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """
    return longer_unrolls_plot.plot(result)


def _mean_summary(tasks: list[dict]) -> dict:
  """{optimizer: {statistic: its mean over the tasks}} of the tasks' loss summaries."""
  names = tasks[0]["summary"]
  return {
    name: {k: float(np.mean([t["summary"][name][k] for t in tasks])) for k in names[name]}
    for name in names
  }


def _finite_or_inf(x: float) -> float:
  """A diverged run's loss (NaN) ranks last."""
  return x if np.isfinite(x) else float("inf")


def _lopt_settings(lopt: mlp_lopt.MLPLOpt) -> dict:
  return {
    "time_max_step": lopt.time_max_step,
    "weight_decay": lopt.weight_decay,
    "weight_decay_start": lopt.weight_decay_start,
    "normalizer_epsilon": lopt.normalizer_epsilon,
    "step_scale_lin": lopt.step_scale_lin,
    "step_scale_exp": lopt.step_scale_exp,
  }


def _summary(task_result: dict) -> str:
  return "; ".join(
    f"{name}: train {f['train_loss']:.3f} (last {f['train_loss_end']:.3f}), test "
    f"{f['test_loss']:.3f} (last {f['test_loss_end']:.3f})"
    for name, f in task_result["summary"].items()
  )
