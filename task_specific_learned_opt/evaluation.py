"""Applying optimizers to held-out tasks: learning curves, tuned baselines, histograms (Sec. 4.4).

An evaluation trains tasks of a family (the outer-test classes) from several inner
initialisations with each candidate optimizer: an exported theta, a hand-designed optimizer with
given hyper-parameters, the winner of a random search (baselines.py), or a learning-rate grid of
one (the paper's baselines: 11 values log-spaced from 1e-4 to 10, the best per task). Every run
records train, validation and test loss and accuracy at log-spaced steps and at
`num_average_points` evenly spaced steps, and the training speed. Per run:

  mean_loss        the mean minibatch training loss over the run;
  mean_valid_loss  the mean validation loss at the evenly spaced steps (step 0 excluded): the
                   L_valid of baselines.py, so a search's L_valid and an evaluation's agree;
  mean_test_loss   the mean test loss at the same steps.

The paper's baselines are tuned for both losses it plots (Fig. 6): a grid baseline gets two
learning rates per task, one by mean_loss ("<kind> (lr tuned per task on train loss)") and one by
mean_valid_loss ("... on valid loss"), and a search winner belongs to its search's objective.
The train-loss panel of the curves, and the comparisons on mean_loss, use the baselines tuned on
training loss; the test-loss panel, and the comparisons on mean_test_loss, those tuned on
validation loss. Learned and fixed candidates are in both. The outputs:

  evaluation.json          everything, per candidate [task, init, point] arrays, the panels;
  evaluation.csv           one row per (candidate, task, init, step);
  curves.png               median and 25/75 percentiles against steps (Fig. 6a/b) ...
  curves_wallclock.png     ... and against wall-clock, steps rescaled by measured steps/s (App. I);
  histogram_<metric>_<a>_vs_<b>.png
                           per task, (baseline - learned) run-averaged loss (Fig. 6c).

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
from typing import Any, NamedTuple

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
NUM_AVERAGE_POINTS = 20  # Evenly spaced steps of mean_valid_loss and mean_test_loss.
SPLITS = ("train", "valid", "test")  # Measured at every point of every run.
# What a baseline is tuned on (the objectives of baselines.py) -> the run-averaged metric it picks.
TUNING_METRICS = {"train": "mean_loss", "valid": "mean_valid_loss"}
# Fig. 6a/b: the loss each panel of the curves plots -> the objective its baselines are tuned on;
# and the run-averaged metric each panel's comparisons (Fig. 6c) are made on.
PANEL_OBJECTIVES = {"train": "train", "test": "valid"}
PANEL_METRICS = {"train": "mean_loss", "test": "mean_test_loss"}
METRIC_NAMES = {
  "mean_loss": "mean training loss",
  "mean_valid_loss": "mean validation loss",
  "mean_test_loss": "mean test loss",
}
_OBJECTIVE_NAMES = {"train": "training", "valid": "validation"}
# A Candidate's `make`: its values (theta, or hyper-parameters, a nest of tensors) -> Optimizer.
_Make = Callable[[Any], opt_base.Optimizer]


def curve_steps(num_steps: int, num_points: int) -> np.ndarray:
  """0 and `num_points` log-spaced steps up to `num_steps` (distinct integers)."""
  steps = np.unique(np.round(np.logspace(0, np.log10(num_steps), num_points)).astype(int))
  return np.concatenate([[0], steps])


def average_steps(num_steps: int, num_points: int) -> np.ndarray:
  """The evenly spaced steps the run-averaged validation and test losses are measured at.

  linspace(0, num_steps, num_points + 1) as integers, without step 0: the steps of
  baselines.py's L_valid (fewer than `num_points` if `num_steps` is smaller).

  Args:
    num_steps: inner steps per run.
    num_points: how many steps (at least 1).

  Raises:
    ValueError: `num_points` is below 1.
  """
  if num_points < 1:
    raise ValueError(f"num_average_points must be at least 1, got {num_points}.")
  return np.unique(np.linspace(0, num_steps, num_points + 1).astype(int))[1:]


def tuned_name(kind: str, objective: str) -> str:
  """The name of a BASELINES kind whose learning rate is tuned per task on `objective`.

  Args:
    kind: the BASELINES kind ("adam", "rmsprop", "sgdm", "sgd").
    objective: "train" (mean training loss) or "valid" (mean validation loss).
  """
  return f"{kind} (lr tuned per task on {objective} loss)"


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

  Args:
    family: the family `task` belongs to (its tasks share compiled functions).
    task: the inner problem.
    candidate: the optimizer.
    num_steps: inner steps of the run.
    seed: the run's seed (params from fold_in(seed, 0), data from fold_in(seed, 1)).
    points: increasing steps where the metrics are measured.
    num_eval_batches: batches averaged for each measurement (the same batches every time).
    splits: the splits measured ("train", "valid", "test").

  Returns:
    {"losses": [num_steps] clipped minibatch training losses (as inner_training.train),
     "<split>_loss", "<split>_accuracy" for each of `splits`: [len(points)] arrays,
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
  num_average_points: int = NUM_AVERAGE_POINTS,
) -> dict:
  """Every candidate on the same tasks, inits and data.

  Each run is measured on every split at the log-spaced curve steps and at the evenly spaced
  steps of the run-averaged losses (one sorted set of points, `steps`).

  Args:
    family: the tasks.
    candidates: the optimizers (distinct names).
    num_tasks: tasks sampled from `family`.
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: log-spaced steps of the curves.
    seed: seeds the tasks, the inits and the data.
    num_eval_batches: batches averaged for each measurement.
    num_average_points: evenly spaced steps of mean_valid_loss and mean_test_loss.

  Returns:
    {"steps": every measured step, "average_steps": the evenly spaced ones, "results": {name:
    arrays}}. Arrays: train/valid/test loss/accuracy [num_tasks, num_inits, len(steps)];
    mean_loss [num_tasks, num_inits] (the mean minibatch training loss of the run);
    mean_valid_loss and mean_test_loss [num_tasks, num_inits] (the mean over average_steps);
    steps_per_second [num_tasks, num_inits].
  """
  averaged = average_steps(num_steps, num_average_points)
  points = np.union1d(curve_steps(num_steps, num_points), averaged)
  where = np.searchsorted(points, averaged)
  results = {c.name: {} for c in candidates}
  start, total, done = time.time(), num_tasks * num_inits * len(candidates), 0
  for t in range(num_tasks):
    task = family.sample(task_seed(seed, t))
    for r in range(num_inits):
      for c in candidates:
        run = evaluate_run(
          family, task, c, num_steps, run_seed(seed, t, r), points, num_eval_batches, SPLITS
        )
        for key, value in run.items():
          if key != "losses":
            results[c.name].setdefault(key, []).append(value)
        means = {
          "mean_loss": np.mean(run["losses"]),
          "mean_valid_loss": np.mean(run["valid_loss"][where]),
          "mean_test_loss": np.mean(run["test_loss"][where]),
        }
        for key, value in means.items():
          results[c.name].setdefault(key, []).append(float(value))
        done += 1
        rate = done / (time.time() - start)
        logging.info(
          "eval %d/%d: task %d init %d %s: mean train loss %.4f, mean valid loss %.4f, "
          "mean test loss %.4f, %.0f steps/s; ETA %.0fs",
          done,
          total,
          t,
          r,
          c.name,
          means["mean_loss"],
          means["mean_valid_loss"],
          means["mean_test_loss"],
          run["steps_per_second"],
          (total - done) / rate,
        )
  shape = [num_tasks, num_inits]
  for name in results:
    results[name] = {
      k: np.reshape(np.asarray(v), shape + list(np.shape(v[0]))) for k, v in results[name].items()
    }
  return {"steps": points, "average_steps": averaged, "results": results}


class TunedBaseline(NamedTuple):
  """A baseline whose learning rate was chosen per task on one objective."""

  results: dict  # The chosen runs' arrays, as evaluate_candidates gives them.
  learning_rates: np.ndarray  # [num_tasks] the chosen learning rate of each task.


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
  num_average_points: int = NUM_AVERAGE_POINTS,
) -> dict[str, TunedBaseline]:
  """A baseline with its learning rate picked per task from a grid (Sec. 4.4), per objective.

  The grid runs once. For each objective of TUNING_METRICS, each task's learning rate is the grid
  value whose runs have the lowest mean of that metric: "train" the mean training loss, "valid"
  the mean validation loss (non-finite counts as worst).

  Args:
    family: the tasks.
    kind: the BASELINES kind ("adam", "rmsprop", "sgdm", "sgd").
    num_tasks: tasks sampled from `family`.
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    learning_rates: the grid.
    num_points: log-spaced steps of the curves.
    seed: seeds the tasks, the inits and the data (as evaluate_candidates).
    num_eval_batches: batches averaged for each measurement.
    num_average_points: evenly spaced steps of mean_valid_loss and mean_test_loss.

  Returns:
    {objective: TunedBaseline} for "train" and "valid".
  """
  candidates = [
    candidates_lib.baseline(f"{kind} lr={lr:.3g}", kind, learning_rate=lr) for lr in learning_rates
  ]
  grid = evaluate_candidates(
    family,
    candidates,
    num_tasks,
    num_inits,
    num_steps,
    num_points,
    seed,
    num_eval_batches,
    num_average_points,
  )
  runs = [grid["results"][c.name] for c in candidates]
  tuned = {}
  for objective, metric in TUNING_METRICS.items():
    values = np.stack([r[metric].mean(axis=1) for r in runs])  # [grid, num_tasks]
    best = np.argmin(np.where(np.isfinite(values), values, np.inf), axis=0)
    chosen = {key: np.stack([r[key] for r in runs])[best, np.arange(num_tasks)] for key in runs[0]}
    tuned[objective] = TunedBaseline(chosen, np.asarray(learning_rates)[best])
  return tuned


def compare(
  evaluation: dict, learned_name: str, baseline_name: str, metric: str = "mean_loss"
) -> dict:
  """Per task, baseline minus learned `metric` (averaged over inits); who wins.

  Args:
    evaluation: an evaluation with both candidates in its "results".
    learned_name: the learned optimizer.
    baseline_name: the baseline.
    metric: a run-averaged metric of METRIC_NAMES ("mean_loss": training loss).

  Returns:
    {"learned", "baseline", "metric", "metric_name", "difference": [num_tasks],
     "learned_mean_loss" and "baseline_mean_loss": the metric's mean over tasks,
     "fraction_learned_wins": the fraction of tasks with a positive difference}.
  """
  results = evaluation["results"]
  learned_loss = np.asarray(results[learned_name][metric]).mean(axis=1)
  baseline_loss = np.asarray(results[baseline_name][metric]).mean(axis=1)
  difference = baseline_loss - learned_loss
  return {
    "learned": learned_name,
    "baseline": baseline_name,
    "metric": metric,
    "metric_name": METRIC_NAMES[metric],
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


def panel_titles(evaluation: dict) -> dict[str, str]:
  """The titles of the curves' panels: the loss each plots and the baselines it uses.

  Args:
    evaluation: an evaluation with "panel_baselines" ({panel: baseline names}).
  """
  titles = {}
  for panel, objective in PANEL_OBJECTIVES.items():
    names = evaluation.get("panel_baselines", {}).get(panel, [])
    titles[panel] = (
      f"{panel} loss; baselines tuned on {_OBJECTIVE_NAMES[objective]} loss: "
      f"{', '.join(names) or 'none'}"
    )
  return titles


def write(evaluation: dict, output_dir: str, title: str, comparisons: Sequence[dict] = ()) -> dict:
  """JSON, CSV and PNG plots in `output_dir`; returns {what: path}.

  Args:
    evaluation: as run_evaluation makes it (steps, results, panels, ...).
    output_dir: where the files go.
    title: the curves' title.
    comparisons: `compare` results, one histogram each.
  """
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
  metrics = [f"{split}_{m}" for split in SPLITS for m in ("loss", "accuracy")]
  with open(paths["csv"], "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["optimizer", "task", "init", "step", *metrics, "steps_per_second"])
    for name, r in evaluation["results"].items():
      num_tasks, num_inits = np.shape(r["mean_loss"])
      for t in range(num_tasks):
        for i in range(num_inits):
          for p, step in enumerate(steps):
            writer.writerow(
              [name, t, i, int(step)]
              + [float(r[k][t][i][p]) for k in metrics]
              + [float(r["steps_per_second"][t][i])]
            )
  titles = panel_titles(evaluation)
  plots.plot_eval_curves(evaluation, paths["curves"], title, panel_titles=titles)
  plots.plot_eval_curves(
    evaluation,
    paths["curves_wallclock"],
    title + " (wall-clock)",
    wallclock=True,
    panel_titles=titles,
  )
  for c in comparisons:
    metric = METRIC_NAMES[c.get("metric", "mean_loss")]
    key = re.sub(r"[^A-Za-z0-9.=-]+", "_", f"histogram_{metric}_{c['baseline']}_vs_{c['learned']}")
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
  searched_objectives: Mapping[str, str] | None = None,
  num_average_points: int = NUM_AVERAGE_POINTS,
) -> dict:
  """Candidates and per-task tuned baselines on the same runs; files, plots and a summary.

  Each kind of `tuned_baselines` gives two baselines, its learning rate tuned per task on
  training and on validation loss. The train-loss panel draws the learned and fixed candidates
  and the baselines tuned on training loss, and each learned candidate is compared with those on
  mean_loss; the test-loss panel and the comparisons on mean_test_loss use the baselines tuned on
  validation loss.

  Args:
    output_dir: where the results and plots go.
    family: the held-out tasks.
    candidates: learned, fixed and searched optimizers (distinct names).
    learned_names: the candidates compared with every baseline of their panel (Fig. 6c).
    tuned_baselines: BASELINES kinds whose learning rate is tuned per task on `learning_rates`.
    learning_rates: the grid.
    num_tasks: held-out tasks.
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: log-spaced steps of the curves.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.
    searched_objectives: {candidate name: "train" or "valid"}: the candidates that are baselines
      tuned on that objective (a random search's winners); other candidates are in both panels.
    num_average_points: evenly spaced steps of mean_valid_loss and mean_test_loss.

  Returns:
    The evaluation: evaluate_candidates' arrays, "tuned_learning_rates", "panels" and
    "panel_baselines" ({"train": names, "test": names}), "comparisons" and "paths".

  Raises:
    ValueError: an objective of `searched_objectives` is neither "train" nor "valid".
  """
  searched_objectives = dict(searched_objectives or {})
  for name, objective in searched_objectives.items():
    if objective not in TUNING_METRICS:
      raise ValueError(
        f"{name} was tuned on {objective!r}; expected one of {tuple(TUNING_METRICS)}."
      )
  evaluation = evaluate_candidates(
    family,
    candidates,
    num_tasks,
    num_inits,
    num_steps,
    num_points,
    seed,
    num_eval_batches,
    num_average_points,
  )
  evaluation["tuned_learning_rates"] = {}
  baseline_objectives = {}  # Baseline name -> the objective it is tuned on.
  for kind in tuned_baselines:
    tuned = tune_learning_rate_per_task(
      family,
      kind,
      num_tasks,
      num_inits,
      num_steps,
      learning_rates,
      num_points,
      seed,
      num_eval_batches,
      num_average_points,
    )
    for objective, (results, rates) in tuned.items():
      name = tuned_name(kind, objective)
      evaluation["results"][name] = results
      evaluation["tuned_learning_rates"][name] = rates
      baseline_objectives[name] = objective
  for c in candidates:
    if c.name in searched_objectives:
      baseline_objectives[c.name] = searched_objectives[c.name]
  both = [c.name for c in candidates if c.name not in baseline_objectives]
  evaluation["panel_baselines"] = {
    panel: [name for name, o in baseline_objectives.items() if o == objective]
    for panel, objective in PANEL_OBJECTIVES.items()
  }
  evaluation["panels"] = {
    panel: both + names for panel, names in evaluation["panel_baselines"].items()
  }
  comparisons = [
    compare(evaluation, learned, baseline, PANEL_METRICS[panel])
    for panel, baseline_names in evaluation["panel_baselines"].items()
    for learned in learned_names
    for baseline in baseline_names
  ]
  title = f"{family.name}: {num_tasks} held-out tasks x {num_inits} inits, {num_steps} steps"
  paths = write(evaluation, output_dir, title, comparisons)
  for c in comparisons:
    print(
      f"{c['learned']} vs {c['baseline']} on {len(c['difference'])} held-out tasks, "
      f"{num_steps} steps: {c['metric_name']} {c['learned_mean_loss']:.4f} vs "
      f"{c['baseline_mean_loss']:.4f}; the learned optimizer wins on "
      f"{100 * c['fraction_learned_wins']:.0f}% of them",
      flush=True,
    )
  for panel, objective in PANEL_OBJECTIVES.items():
    print(
      f"The {panel}-loss panel of {CURVES_FILENAME} and the {METRIC_NAMES[PANEL_METRICS[panel]]} "
      f"comparisons use the baselines tuned on {_OBJECTIVE_NAMES[objective]} loss: "
      f"{', '.join(evaluation['panel_baselines'][panel]) or 'none'}",
      flush=True,
    )
  print(f"Evaluation: {paths['json']}; plots: {paths['curves']}", flush=True)
  evaluation["comparisons"], evaluation["paths"] = comparisons, paths
  return evaluation


def _search_objective(path: str) -> str:
  """The objective ("train" or "valid") a random search's best.json was tuned on."""
  with open(path) as f:
    return json.load(f)["signature"]["objective"]


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
  num_average_points: int = NUM_AVERAGE_POINTS,
) -> dict:
  """bin/eval: exported thetas and baselines on held-out tasks of `family`; files and plots.

  Args:
    output_dir: where the results and plots go.
    thetas: {name: theta export directory} of `lopt`.
    searched: best.json files of random searches (bin/tune_baselines); their winners (the
      paper's Adam+Reg+Decay curves) are baselines tuned on the search's objective: L_train
      winners in the train-loss panel and comparisons, L_valid winners in the test-loss ones.
    family: the held-out tasks (e.g. the outer-test classes).
    lopt: the learned optimizer the thetas belong to.
    optimizers: {name: hand-designed optimizer with fixed hyper-parameters}.
    tuned_baselines: BASELINES kinds whose learning rate is tuned per task on `learning_rates`,
      once on training loss and once on validation loss.
    learning_rates: the grid (Sec. 4.4: 11 values log-spaced from 1e-4 to 10).
    num_tasks: held-out tasks (Fig. 6c: 100).
    num_inits: inner initialisations per task (5).
    num_steps: inner steps per run (10,000; 100,000 for the longer-unroll experiment).
    num_points: log-spaced steps of the curves.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.
    num_average_points: evenly spaced steps (step 0 excluded) whose validation and test losses
      are averaged into mean_valid_loss and mean_test_loss (baselines.py's L_valid).

  Returns:
    The evaluation, with "panels", "comparisons" (each theta against each baseline of each
    panel) and "paths".
  """
  candidates, searched_objectives = [], {}
  for name, directory in (thetas or {}).items():
    if lopt is None:
      raise ValueError("Evaluating a theta needs evaluate.lopt (the learned optimizer) in gin.")
    candidates.append(candidates_lib.learned(name, lopt, checkpoints.load_theta(directory, lopt)))
  candidates += [candidates_lib.fixed(name, opt) for name, opt in (optimizers or {}).items()]
  for path in searched:
    winners = candidates_lib.searched(path)
    candidates += winners
    searched_objectives.update({c.name: _search_objective(path) for c in winners})
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
    searched_objectives,
    num_average_points,
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
  num_average_points: int = NUM_AVERAGE_POINTS,
  thetas: Mapping[str, str] | None = None,
) -> dict:
  """A freshly trained theta against a learning-rate-tuned baseline on held-out tasks.

  What bin/train_local runs at the end when `train_local.final_evaluation` names it. The
  baseline's learning rate is tuned per task on training loss (compared on mean training loss,
  printed first) and on validation loss (compared on mean test loss).

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
    num_points: log-spaced steps of the curves.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.
    num_average_points: evenly spaced steps of mean_valid_loss and mean_test_loss.
    thetas: {name: theta export directory} of `lopt` evaluated beside it on the same runs and
      compared with the same baselines (e.g. a shipped theta, pretrained/<name>/theta).

  Returns:
    The evaluation, as `evaluate` returns it.
  """
  candidates = [candidates_lib.learned("learned", lopt, theta)]
  for name, directory in (thetas or {}).items():
    candidates.append(candidates_lib.learned(name, lopt, checkpoints.load_theta(directory, lopt)))
  return run_evaluation(
    output_dir,
    family,
    candidates,
    [c.name for c in candidates],
    [baseline_kind],
    learning_rates,
    num_tasks,
    num_inits,
    num_steps,
    num_points,
    num_eval_batches,
    seed,
    num_average_points=num_average_points,
  )
