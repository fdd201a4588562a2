"""Applying optimizers to held-out tasks: learning curves, tuned baselines, histograms (Sec. 4.4).

An evaluation trains tasks of a family (the outer-test classes) from several inner
initialisations with each candidate optimizer: an exported theta, a hand-designed optimizer with
given hyper-parameters, or a learning-rate grid of one (the paper's baselines: 11 values
log-spaced from 1e-4 to 10, the best per task, judged by the mean training loss of the run). It
records train and test loss and accuracy at log-spaced steps and the training speed, and writes:

  evaluation.json          everything, per candidate [task, init, point] arrays;
  evaluation.csv           one row per (candidate, task, init, step);
  curves.png               median and 25/75 percentiles against steps (Fig. 6a/b) ...
  curves_wallclock.png     ... and against wall-clock, steps rescaled by measured steps/s (App. I);
  histogram_<a>_vs_<b>.png per task, (baseline - learned) mean training loss (Fig. 6c).

Run r of task t uses seed fold_in(fold_in(seed, t), r): its parameters come from
fold_in(run seed, 0) and its data from fold_in(run seed, 1), exactly as inner_training.train,
so an evaluation's per-step losses are those of the plain inner-training loop.
"""

import csv
import json
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import candidates as candidates_lib
from task_specific_learned_opt import checkpoints, inner_training, plots
from task_specific_learned_opt import seeds as seeds_lib
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base

RESULTS_FILENAME = "evaluation.json"
CSV_FILENAME = "evaluation.csv"
CURVES_FILENAME = "curves.png"
WALLCLOCK_FILENAME = "curves_wallclock.png"
LEARNING_RATES = tuple(float(x) for x in np.logspace(-4, 1, 11))  # Sec. 4.4: 1e-4 ... 10.
# A Candidate's `make`: its values (theta, or hyper-parameters, a nest of tensors) -> Optimizer.
_Make = Callable[[Any], opt_base.Optimizer]


def curve_steps(num_steps: int, num_points: int) -> np.ndarray:
  """0 and `num_points` log-spaced steps up to `num_steps` (distinct integers)."""
  steps = np.unique(np.round(np.logspace(0, np.log10(num_steps), num_points)).astype(int))
  return np.concatenate([[0], steps])


class _Compiled:
  """The compiled functions of one (family, make) pair: task data and values are arguments."""

  def __init__(self, template: task_base.Task, make: _Make, num_eval_batches: int):
    """Wraps (but does not yet trace) init, run and the metrics of each split.

    Args:
      template: a task of the family; the compiled functions read other tasks' data through it.
      make: the candidates' values -> Optimizer.
      num_eval_batches: batches averaged by each metrics function.
    """

    def task_opt(task_data: Any, values: Any) -> tuple[task_base.Task, opt_base.Optimizer]:
      return template.with_data(task_data), make(values)

    @tf.function(autograph=False, reduce_retracing=True)
    def init(task_data: Any, values: Any, seed: tf.Tensor) -> opt_base.OptState:
      task, opt = task_opt(task_data, values)
      return opt.init(task.init_params(seed))

    @tf.function(autograph=False, reduce_retracing=True)
    def run(
      task_data: Any,
      values: Any,
      state: opt_base.OptState,
      first: tf.Tensor,
      num_steps: tf.Tensor,
      seed: tf.Tensor,
    ) -> tuple[opt_base.OptState, tf.Tensor]:
      task, opt = task_opt(task_data, values)
      return inner_training.unroll(task, opt, state, num_steps, seed, first)

    def metrics_fn(split: str) -> Callable[..., tuple[tf.Tensor, tf.Tensor]]:
      @tf.function(autograph=False, reduce_retracing=True)
      def metrics(
        task_data: Any, values: Any, state: opt_base.OptState, seed: tf.Tensor
      ) -> tuple[tf.Tensor, tf.Tensor]:
        task, opt = task_opt(task_data, values)
        params = opt.get_params(state)
        losses, accuracies = [], []
        for i in range(num_eval_batches):
          batch = task.batch(split, seeds_lib.fold_in(seed, i))
          losses.append(task.loss(params, batch))
          if hasattr(task, "accuracy"):
            accuracies.append(task.accuracy(params, batch))
        accuracy = tf.reduce_mean(accuracies) if accuracies else tf.constant(np.nan)
        return tf.reduce_mean(losses), accuracy

      return metrics

    self.init, self.run = init, run
    self.metrics = {split: metrics_fn(split) for split in ("train", "valid", "test")}


_COMPILED = {}


def _compiled(
  family: task_base.TaskFamily, task: task_base.Task, make: _Make, num_eval_batches: int
) -> _Compiled:
  key = (id(family), id(make), num_eval_batches)
  if key not in _COMPILED:
    # Holding family and make keeps their ids from being reused by other objects.
    _COMPILED[key] = (_Compiled(task, make, num_eval_batches), family, make)
  return _COMPILED[key][0]


def evaluate_run(
  family: task_base.TaskFamily,
  task: task_base.Task,
  candidate: candidates_lib.Candidate,
  num_steps: int,
  seed: seeds_lib.SeedLike,
  points: np.ndarray,
  num_eval_batches: int = 5,
  splits: Sequence[str] = ("train", "test"),
) -> dict:
  """One inner run of `candidate` on `task`, measured at `points` (steps, starting with 0).

  Returns:
    {"losses": [num_steps] clipped minibatch training losses (as inner_training.train),
     "train_loss", "train_accuracy", "test_loss", "test_accuracy": [len(points)] arrays,
     "steps_per_second": training speed, over every chunk but the first}.
  """
  compiled = _compiled(family, task, candidate.make, num_eval_batches)
  seed = seeds_lib.as_seed(seed)
  init_seed, data_seed = seeds_lib.fold_in(seed, 0), seeds_lib.fold_in(seed, 1)
  eval_seed = seeds_lib.fold_in(seed, 2)
  values = tf.nest.map_structure(tf.convert_to_tensor, candidate.values)
  state = compiled.init(task.data, values, init_seed)
  record = {f"{s}_{m}": [] for s in splits for m in ("loss", "accuracy")}
  losses, timed_steps, timed_seconds, done = [], 0, 0.0, 0

  def measure() -> None:
    for split in splits:
      i = ("train", "test", "valid").index(split)
      loss, accuracy = compiled.metrics[split](
        task.data, values, state, seeds_lib.fold_in(eval_seed, i)
      )
      record[f"{split}_loss"].append(float(loss))
      record[f"{split}_accuracy"].append(float(accuracy))

  for point in points:
    n = int(point) - done
    if n > 0:
      start = time.perf_counter()
      state, chunk = compiled.run(
        task.data, values, state, tf.constant(done), tf.constant(n), data_seed
      )
      chunk = chunk.numpy()
      if done > 0:  # The first chunk (one step) may include tracing.
        timed_steps, timed_seconds = timed_steps + n, timed_seconds + time.perf_counter() - start
      losses.append(chunk)
      done += n
    measure()
  result = {k: np.asarray(v) for k, v in record.items()}
  result["losses"] = np.concatenate(losses) if losses else np.zeros([0])
  result["steps_per_second"] = timed_steps / timed_seconds if timed_seconds else float("nan")
  return result


def run_seed(seed: int, task_index: int, init_index: int) -> tf.Tensor:
  """The seed of run `init_index` of held-out task `task_index` (its params and its data)."""
  return seeds_lib.fold_in(seeds_lib.fold_in(seeds_lib.as_seed(seed), task_index), init_index)


def task_seed(seed: int, task_index: int) -> tf.Tensor:
  """The seed a held-out task is sampled with (independent of the run seeds)."""
  return seeds_lib.fold_in(seeds_lib.fold_in(seeds_lib.as_seed(seed), 1_000_003), task_index)


def evaluate_candidates(
  family: task_base.TaskFamily,
  candidates: Sequence[candidates_lib.Candidate],
  num_tasks: int,
  num_inits: int,
  num_steps: int,
  num_points: int = 30,
  seed: int = 0,
  num_eval_batches: int = 5,
) -> dict:
  """Every candidate on the same tasks, inits and data. Returns {name: arrays}.

  Arrays: train/test loss/accuracy [num_tasks, num_inits, points], mean_loss [num_tasks,
  num_inits] (the mean minibatch training loss of the run), steps_per_second [tasks, inits].
  """
  points = curve_steps(num_steps, num_points)
  results = {c.name: {} for c in candidates}
  start, total, done = time.time(), num_tasks * num_inits * len(candidates), 0
  for t in range(num_tasks):
    task = family.sample(task_seed(seed, t))
    for r in range(num_inits):
      for c in candidates:
        run = evaluate_run(
          family, task, c, num_steps, run_seed(seed, t, r), points, num_eval_batches
        )
        for key, value in run.items():
          if key != "losses":
            results[c.name].setdefault(key, []).append(value)
        results[c.name].setdefault("mean_loss", []).append(float(np.mean(run["losses"])))
        done += 1
        rate = done / (time.time() - start)
        logging.info(
          "eval %d/%d: task %d init %d %s: mean train loss %.4f, final test loss %.4f, "
          "%.0f steps/s; ETA %.0fs",
          done,
          total,
          t,
          r,
          c.name,
          np.mean(run["losses"]),
          run["test_loss"][-1],
          run["steps_per_second"],
          (total - done) / rate,
        )
  shape = [num_tasks, num_inits]
  for name in results:
    results[name] = {
      k: np.reshape(np.asarray(v), shape + list(np.shape(v[0]))) for k, v in results[name].items()
    }
  return {"steps": points, "results": results}


def tune_learning_rate_per_task(
  family: task_base.TaskFamily,
  kind: str,
  num_tasks: int,
  num_inits: int,
  num_steps: int,
  learning_rates: Sequence[float] = LEARNING_RATES,
  num_points: int = 30,
  seed: int = 0,
  num_eval_batches: int = 5,
) -> tuple[dict, np.ndarray]:
  """A baseline with its learning rate picked per task from a grid (Sec. 4.4).

  Each task's learning rate is the grid value with the lowest mean training loss over its runs
  (non-finite counts as worst). Returns (that baseline's arrays, as evaluate_candidates gives
  them, with the chosen runs; the chosen learning rate per task).
  """
  candidates = [
    candidates_lib.baseline(f"{kind} lr={lr:.3g}", kind, learning_rate=lr) for lr in learning_rates
  ]
  grid = evaluate_candidates(
    family, candidates, num_tasks, num_inits, num_steps, num_points, seed, num_eval_batches
  )
  objective = np.stack([grid["results"][c.name]["mean_loss"].mean(axis=1) for c in candidates])
  objective = np.where(np.isfinite(objective), objective, np.inf)
  best = np.argmin(objective, axis=0)  # [num_tasks]
  chosen = {}
  for key in grid["results"][candidates[0].name]:
    stacked = np.stack([grid["results"][c.name][key] for c in candidates])
    chosen[key] = stacked[best, np.arange(num_tasks)]
  return chosen, np.asarray(learning_rates)[best]


def compare(evaluation: dict, learned_name: str, baseline_name: str) -> dict:
  """Per task, baseline minus learned mean training loss (averaged over inits); who wins."""
  results = evaluation["results"]
  learned_loss = np.asarray(results[learned_name]["mean_loss"]).mean(axis=1)
  baseline_loss = np.asarray(results[baseline_name]["mean_loss"]).mean(axis=1)
  difference = baseline_loss - learned_loss
  return {
    "learned": learned_name,
    "baseline": baseline_name,
    "difference": difference,
    "learned_mean_loss": float(np.mean(learned_loss)),
    "baseline_mean_loss": float(np.mean(baseline_loss)),
    "fraction_learned_wins": float(np.mean(difference > 0)),
  }


def _jsonable(x: Any) -> Any:
  if isinstance(x, dict):
    return {k: _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, np.ndarray):
    return x.tolist()
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  return x


def write(evaluation: dict, output_dir: str, title: str, comparisons: Sequence[dict] = ()) -> dict:
  """JSON, CSV and PNG plots in `output_dir`; returns {what: path}."""
  tf.io.gfile.makedirs(output_dir)
  paths = {
    "json": os.path.join(output_dir, RESULTS_FILENAME),
    "csv": os.path.join(output_dir, CSV_FILENAME),
    "curves": os.path.join(output_dir, CURVES_FILENAME),
    "curves_wallclock": os.path.join(output_dir, WALLCLOCK_FILENAME),
  }
  with open(paths["json"], "w") as f:
    json.dump(_jsonable({**evaluation, "comparisons": list(comparisons)}), f)
  steps = evaluation["steps"]
  with open(paths["csv"], "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(
      [
        "optimizer",
        "task",
        "init",
        "step",
        "train_loss",
        "train_accuracy",
        "test_loss",
        "test_accuracy",
        "steps_per_second",
      ]
    )
    for name, r in evaluation["results"].items():
      num_tasks, num_inits = np.shape(r["mean_loss"])
      for t in range(num_tasks):
        for i in range(num_inits):
          for p, step in enumerate(steps):
            writer.writerow(
              [name, t, i, int(step)]
              + [
                float(r[k][t][i][p])
                for k in ("train_loss", "train_accuracy", "test_loss", "test_accuracy")
              ]
              + [float(r["steps_per_second"][t][i])]
            )
  plots.plot_eval_curves(evaluation, paths["curves"], title)
  plots.plot_eval_curves(
    evaluation, paths["curves_wallclock"], title + " (wall-clock)", wallclock=True
  )
  for c in comparisons:
    key = re.sub(r"[^A-Za-z0-9.=-]+", "_", f"histogram_{c['baseline']}_vs_{c['learned']}")
    paths[key] = os.path.join(output_dir, f"{key}.png")
    plots.plot_histogram(c, paths[key])
  return paths


def run_evaluation(
  output_dir: str,
  family: task_base.TaskFamily,
  candidates: Sequence[candidates_lib.Candidate],
  learned_names: Sequence[str],
  tuned_baselines: Sequence[str],
  learning_rates: Sequence[float],
  num_tasks: int,
  num_inits: int,
  num_steps: int,
  num_points: int,
  num_eval_batches: int,
  seed: int,
) -> dict:
  """Candidates and per-task tuned baselines on the same runs; files, plots and a summary."""
  evaluation = evaluate_candidates(
    family, candidates, num_tasks, num_inits, num_steps, num_points, seed, num_eval_batches
  )
  evaluation["tuned_learning_rates"] = {}
  for kind in tuned_baselines:
    name = f"{kind} (lr tuned per task)"
    evaluation["results"][name], rates = tune_learning_rate_per_task(
      family,
      kind,
      num_tasks,
      num_inits,
      num_steps,
      learning_rates,
      num_points,
      seed,
      num_eval_batches,
    )
    evaluation["tuned_learning_rates"][name] = rates
  comparisons = [
    compare(evaluation, name, f"{kind} (lr tuned per task)")
    for name in learned_names
    for kind in tuned_baselines
  ]
  title = f"{family.name}: {num_tasks} held-out tasks x {num_inits} inits, {num_steps} steps"
  paths = write(evaluation, output_dir, title, comparisons)
  for c in comparisons:
    print(
      f"{c['learned']} vs {c['baseline']} on {len(c['difference'])} held-out tasks, "
      f"{num_steps} steps: mean training loss {c['learned_mean_loss']:.4f} vs "
      f"{c['baseline_mean_loss']:.4f}; the learned optimizer wins on "
      f"{100 * c['fraction_learned_wins']:.0f}% of them",
      flush=True,
    )
  print(f"Evaluation: {paths['json']}; plots: {paths['curves']}", flush=True)
  evaluation["comparisons"], evaluation["paths"] = comparisons, paths
  return evaluation


@gin.configurable(denylist=["output_dir", "thetas", "searched"])
def evaluate(
  output_dir: str,
  thetas: Mapping[str, str] | None = None,
  searched: Sequence[str] = (),
  family: task_base.TaskFamily = gin.REQUIRED,
  lopt: lopt_base.LearnedOptimizer | None = None,
  optimizers: Mapping[str, opt_base.Optimizer] | None = None,
  tuned_baselines: Sequence[str] = ("adam",),
  learning_rates: Sequence[float] = LEARNING_RATES,
  num_tasks: int = 100,
  num_inits: int = 5,
  num_steps: int = 10000,
  num_points: int = 30,
  num_eval_batches: int = 5,
  seed: int = 0,
) -> dict:
  """bin/eval: exported thetas and baselines on held-out tasks of `family`; files and plots.

  Args:
    output_dir: where the results and plots go.
    thetas: {name: theta export directory} of `lopt`.
    searched: best.json files of random searches (bin/tune_baselines); their winners run as
      fixed candidates (the paper's Adam+Reg+Decay curves).
    family: the held-out tasks (e.g. the outer-test classes).
    lopt: the learned optimizer the thetas belong to.
    optimizers: {name: hand-designed optimizer with fixed hyper-parameters}.
    tuned_baselines: BASELINES kinds whose learning rate is tuned per task on `learning_rates`.
    learning_rates: the grid (Sec. 4.4: 11 values log-spaced from 1e-4 to 10).
    num_tasks: held-out tasks (Fig. 6c: 100).
    num_inits: inner initialisations per task (5).
    num_steps: inner steps per run (10,000; 100,000 for the longer-unroll experiment).
    num_points: log-spaced steps where train and test metrics are measured.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.

  Returns:
    The evaluation, with "comparisons" (each theta against each tuned baseline) and "paths".
  """
  candidates = []
  for name, directory in (thetas or {}).items():
    if lopt is None:
      raise ValueError("Evaluating a theta needs evaluate.lopt (the learned optimizer) in gin.")
    candidates.append(candidates_lib.learned(name, lopt, checkpoints.load_theta(directory, lopt)))
  candidates += [candidates_lib.fixed(name, opt) for name, opt in (optimizers or {}).items()]
  for path in searched:
    candidates += candidates_lib.searched(path)
  return run_evaluation(
    output_dir,
    family,
    candidates,
    list(thetas or {}),
    tuned_baselines,
    learning_rates,
    num_tasks,
    num_inits,
    num_steps,
    num_points,
    num_eval_batches,
    seed,
  )


@gin.configurable(denylist=["output_dir", "lopt", "theta"])
def compare_with_tuned_baseline(
  output_dir: str,
  lopt: lopt_base.LearnedOptimizer,
  theta: lopt_base.Theta,
  family: task_base.TaskFamily = gin.REQUIRED,
  baseline_kind: str = "adam",
  learning_rates: Sequence[float] = LEARNING_RATES,
  num_tasks: int = 5,
  num_inits: int = 1,
  num_steps: int = 500,
  num_points: int = 20,
  num_eval_batches: int = 5,
  seed: int = 0,
) -> dict:
  """A freshly trained theta against a learning-rate-tuned baseline on held-out tasks.

  What bin/train_local runs at the end when `train_local.final_evaluation` names it.

  Args:
    output_dir: where the results and plots go.
    lopt: the learned optimizer `theta` belongs to.
    theta: the trained meta-parameters (a nest of tensors or arrays).
    family: the held-out tasks.
    baseline_kind: the BASELINES kind whose learning rate is tuned per task.
    learning_rates: the baseline's grid.
    num_tasks: held-out tasks.
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: log-spaced steps where train and test metrics are measured.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.

  Returns:
    The evaluation, as `evaluate` returns it.
  """
  candidate = candidates_lib.learned("learned", lopt, theta)
  return run_evaluation(
    output_dir,
    family,
    [candidate],
    ["learned"],
    [baseline_kind],
    learning_rates,
    num_tasks,
    num_inits,
    num_steps,
    num_points,
    num_eval_batches,
    seed,
  )
