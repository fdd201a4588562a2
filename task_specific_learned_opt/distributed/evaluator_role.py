"""The evaluator role: performance over outer-training (paper Fig. 5).

The chief keeps theta every `outer_training.snapshot_every` outer steps in theta_history/
(chief_files.py, train_dir.py). The evaluator applies each snapshot for the experiment's full
inner horizon to M fixed outer-train tasks and M fixed outer-test tasks (the same tasks, inits
and data every time, exactly as bin/eval runs them with the same seed), and records per family
the mean training loss over the run, the final test loss and the final test accuracy:

  evaluation_progress.jsonl   one line per evaluated snapshot (outer step, inner steps, snapshot
                              id, both families' numbers, seconds);
  evaluation_reference.json   the baseline (Adam, learning rate tuned per task over an 11-value
                              grid, Sec. 4.4, on the experiment's objective: training loss for
                              L_train, validation loss for L_valid) on the same tasks and runs:
                              computed once per experiment and evaluation setting, then read
                              back;
  evaluation/events.*         TensorBoard scalars (eval/<family>/<metric>, with the baseline's);
  outer_training_eval.png     the numbers against outer step and against cumulative inner
                              steps, the baseline dashed.

A snapshot is evaluated once: a restarted evaluator skips snapshots already in
evaluation_progress.jsonl (matched by snapshot id, so a step a restarted chief redid is evaluated
again). In local mode `train_local.evaluate_snapshots` runs it in-process after each outer step;
on a cluster it is its own process (bin/evaluator) that watches the chief's train dir, so it
never slows the chief, and can be started, stopped and restarted at any time: it catches up on
every snapshot it has not evaluated, oldest first.
"""

import os
import time
from collections.abc import Callable, Sequence

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import checkpoints, files, layout, plots
from task_specific_learned_opt.distributed import outer_training as outer_lib
from task_specific_learned_opt.distributed import train_dir as train_dir_lib
from task_specific_learned_opt.evaluation import candidates as candidates_lib
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import running, tuning
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.tasks import base as task_base

FAMILIES = ("outer_train", "outer_test")
METRICS = ("mean_train_loss", "final_test_loss", "final_test_accuracy")
# The experiment's objective -> the number a snapshot (or a theta seed) is judged and chosen on,
# on outer-train tasks (Sec. 4.3): an L_train optimizer by its training loss over the run, an
# L_valid one by the test loss it ends at.
OBJECTIVE_METRICS = {"train": "mean_train_loss", "valid": "final_test_loss"}
# METRICS need no losses averaged over evenly spaced steps: one such step (the last, a point of
# the curve anyway) keeps each snapshot's evaluation cheap.
_NUM_AVERAGE_POINTS = 1


def summarize(results: dict) -> dict:
  """One candidate's evaluate_candidates arrays -> the evaluator's numbers (over tasks, inits)."""
  return {
    "mean_train_loss": float(np.mean(results["mean_loss"])),
    "final_test_loss": float(np.mean(np.asarray(results["test_loss"])[..., -1])),
    "final_test_accuracy": float(np.mean(np.asarray(results["test_accuracy"])[..., -1])),
    "per_task_mean_train_loss": np.mean(results["mean_loss"], axis=1).tolist(),
  }


def read_reference(train_dir: str) -> dict:
  """The tuned baseline's numbers in the train dir (evaluation_reference.json); {} if none."""
  return files.read_json(os.path.join(train_dir, layout.EVALUATION_REFERENCE_FILENAME), {})


def read_progress(train_dir: str) -> list[dict]:
  """The evaluated snapshots' records (evaluation_progress.jsonl), in the order written."""
  return files.read_jsonl(os.path.join(train_dir, layout.EVALUATION_PROGRESS_FILENAME))


def _read_theta_info(snapshot: str) -> dict:
  """A snapshot's theta_info; {} if it is missing or unreadable (e.g. being removed)."""
  return files.read_json(os.path.join(snapshot, layout.THETA_INFO_FILENAME), {})


def current_records(train_dir: str) -> list[dict]:
  """The records of the snapshots theta_history/ holds now (not of steps a restart dropped)."""
  ids = {}
  for step, directory in layout.snapshots(train_dir).items():
    ids[step] = _read_theta_info(directory).get("snapshot_id")
  return sorted(
    (r for r in read_progress(train_dir) if ids.get(r["outer_step"], "") == r["snapshot_id"]),
    key=lambda r: r["outer_step"],
  )


@gin.configurable(denylist=["train_dir", "lopt", "train_family"])
class Evaluator:
  """Evaluates the chief's theta snapshots on fixed outer-train and outer-test tasks."""

  def __init__(
    self,
    train_dir: str,
    lopt: lopt_base.LearnedOptimizer,
    train_family: task_base.TaskFamily,
    test_family: task_base.TaskFamily = gin.REQUIRED,
    num_tasks: int = 4,
    num_inits: int = 1,
    num_steps: int = 10000,
    baseline_kind: str = "adam",
    learning_rates: Sequence[float] = tuning.LEARNING_RATES,
    num_eval_batches: int = 5,
    seed: int = 0,
    objective: str = "train",
  ):
    """Sets up the evaluation (nothing runs yet).

    Args:
      train_dir: the chief's train dir (theta_history/ is read, the evaluator's files written).
      lopt: the learned optimizer of the experiment.
      train_family: the experiment's family (outer-train classes).
      test_family: held-out tasks of the family (outer-test classes).
      num_tasks: M, tasks of each family, the same every time.
      num_inits: inner initialisations per task.
      num_steps: inner steps per run: the experiment's full horizon (Worker.horizon).
      baseline_kind: the baseline whose learning rate is tuned per task (BASELINES kind).
      learning_rates: its grid (Sec. 4.4: 11 values, 1e-4 to 10).
      num_eval_batches: batches averaged for each test measurement.
      seed: seeds the tasks, inits and data (as bin/eval's `evaluate.seed`).
      objective: the experiment's outer objective ("train" or "valid", Worker.objective): the
        baseline's learning rate is tuned on it, and OBJECTIVE_METRICS[objective] is the number
        snapshots are chosen on.

    Raises:
      ValueError: an unknown objective.
    """
    if objective not in OBJECTIVE_METRICS:
      raise ValueError(
        f"Evaluator.objective is {objective!r}; expected one of {tuple(OBJECTIVE_METRICS)} "
        "(the experiment's Worker.objective)."
      )
    self.objective = objective
    self.train_dir = train_dir
    self.lopt = lopt
    self.families = {"outer_train": train_family, "outer_test": test_family}
    self.num_tasks, self.num_inits, self.num_steps = int(num_tasks), int(num_inits), int(num_steps)
    self.baseline_kind = baseline_kind
    self.learning_rates = tuple(float(x) for x in learning_rates)
    self.num_eval_batches, self.seed = int(num_eval_batches), int(seed)
    self.writer = None

  def _protocol(self, family: task_base.TaskFamily) -> protocol_lib.HeldOutProtocol:
    """The fixed runs on `family`: the same tasks, inits and data for every snapshot."""
    return protocol_lib.HeldOutProtocol(
      family,
      self.num_tasks,
      self.num_inits,
      self.num_steps,
      num_points=2,
      num_eval_batches=self.num_eval_batches,
      seed=self.seed,
      num_average_points=_NUM_AVERAGE_POINTS,
    )

  def _evaluate(self, family: task_base.TaskFamily, candidate: candidates_lib.Candidate) -> dict:
    protocol = self._protocol(family)
    return running.evaluate_candidates(protocol, [candidate])["results"][candidate.name]

  def setting(self) -> dict:
    """What the numbers depend on besides theta; the reference is reused only if it matches."""
    return {
      "families": {k: f.name for k, f in self.families.items()},
      "num_tasks": self.num_tasks,
      "num_inits": self.num_inits,
      "num_steps": self.num_steps,
      "baseline_kind": self.baseline_kind,
      "learning_rates": list(self.learning_rates),
      "num_eval_batches": self.num_eval_batches,
      "seed": self.seed,
      "objective": self.objective,
    }

  def reference(self) -> dict:
    """The tuned baseline's numbers per family: read from the train dir, else computed once.

    Returns:
      {"setting": ..., "name": ..., "objective": ..., "metric": the number snapshots are chosen
       on, "outer_train": {metric: value, "learning_rates": [...]}, "outer_test": {...}}.
    """
    path = os.path.join(self.train_dir, layout.EVALUATION_REFERENCE_FILENAME)
    if os.path.exists(path):
      cached = read_reference(self.train_dir)
      if cached.get("setting") == self.setting():
        return cached
      logging.info("%s was made with other settings; computing it again.", path)
    name = tuning.tuned_name(self.baseline_kind, self.objective)
    logging.info("Computing the %s reference on both families (once per experiment).", name)
    reference = {
      "setting": self.setting(),
      "name": name,
      "objective": self.objective,
      "metric": OBJECTIVE_METRICS[self.objective],
    }
    for key, family in self.families.items():
      tuned = tuning.tune_learning_rate_per_task(
        self._protocol(family), self.baseline_kind, self.learning_rates
      )[self.objective]  # Its numbers are training loss over the run and final test loss.
      reference[key] = {
        **summarize(tuned.results),
        "learning_rates": np.asarray(tuned.learning_rates).tolist(),
      }
    files.write_json(path, reference, indent=1)
    return reference

  def pending(self) -> list[tuple[int, str, dict]]:
    """Snapshots not yet evaluated, oldest first: (outer step, directory, theta_info)."""
    done = {(r["outer_step"], r["snapshot_id"]) for r in read_progress(self.train_dir)}
    found = []
    for step, directory in layout.snapshots(self.train_dir).items():
      info = _read_theta_info(directory)
      if info and (step, info.get("snapshot_id")) not in done:
        found.append((step, directory, info))
    return found

  def evaluate_snapshot(self, directory: str, info: dict) -> dict:
    """Applies one snapshot to both families; appends and returns its record."""
    start = time.time()
    candidate = candidates_lib.learned(
      "learned", self.lopt, checkpoints.load_theta(directory, self.lopt)
    )
    record = {
      "outer_step": int(info["outer_step"]),
      "inner_steps": int(info.get("inner_steps", 0)),
      "snapshot_id": info.get("snapshot_id"),
    }
    for key, family in self.families.items():
      record[key] = summarize(self._evaluate(family, candidate))
    record["seconds"] = time.time() - start
    files.append_jsonl(os.path.join(self.train_dir, layout.EVALUATION_PROGRESS_FILENAME), [record])
    return record

  def _summaries(self, record: dict, reference: dict) -> None:
    if self.writer is None:
      self.writer = tf.summary.create_file_writer(
        os.path.join(self.train_dir, layout.EVALUATION_SUMMARY_DIRNAME)
      )
    with self.writer.as_default(step=record["outer_step"]):
      for key in FAMILIES:
        for metric in METRICS:
          tf.summary.scalar(f"eval/{key}/{metric}", record[key][metric])
          tf.summary.scalar(f"eval/{key}/{metric}_baseline", reference[key][metric])
      tf.summary.scalar("eval/inner_steps", record["inner_steps"])
    self.writer.flush()

  def plot(self, reference: dict | None = None) -> str:
    """Redraws outer_training_eval.png from the current records; returns its path."""
    path = os.path.join(self.train_dir, layout.EVALUATION_PLOT_FILENAME)
    reference = reference if reference is not None else self.reference()
    plots.plot_evaluation_progress(
      {"": current_records(self.train_dir)},
      reference,
      path,
      f"{self.num_tasks} outer-train and {self.num_tasks} outer-test tasks x {self.num_inits} "
      f"inits, {self.num_steps} inner steps",
    )
    return path

  def run_pending(self) -> int:
    """Evaluates every snapshot not yet evaluated (oldest first); returns how many."""
    todo = self.pending()
    if not todo:
      return 0
    reference = self.reference()
    for step, directory, info in todo:
      record = self.evaluate_snapshot(directory, info)
      self._summaries(record, reference)
      metric = OBJECTIVE_METRICS[self.objective]
      logging.info(
        "eval of outer step %d (%d inner steps) in %.0fs: %s outer-train %.4f outer-test %.4f "
        "(%s %.4f); final test accuracy outer-test %.3f; %d snapshots left",
        step,
        record["inner_steps"],
        record["seconds"],
        metric.replace("_", " "),
        record["outer_train"][metric],
        record["outer_test"][metric],
        reference["name"],
        reference["outer_test"][metric],
        record["outer_test"]["final_test_accuracy"],
        len(todo) - 1 - todo.index((step, directory, info)),
      )
    self.plot(reference)
    return len(todo)

  def chief_finished(self) -> bool:
    """Whether the chief wrote finished.json (its last snapshot is then in theta_history/)."""
    return os.path.exists(os.path.join(self.train_dir, layout.FINISHED_FILENAME))

  def watch(
    self,
    poll_secs: float = 10.0,
    exit_when_finished: bool = True,
    should_stop: Callable[[], bool] = lambda: False,
  ) -> int:
    """Evaluates snapshots as they appear; returns how many it evaluated.

    Args:
      poll_secs: seconds between looks at theta_history/ when nothing is pending.
      exit_when_finished: return once the chief has finished and every snapshot is evaluated.
      should_stop: checked between polls (tests).
    """
    evaluated = 0
    while not should_stop():
      finished = self.chief_finished()  # Read first: a snapshot may land meanwhile.
      done = self.run_pending()
      evaluated += done
      if done == 0:
        if finished and exit_when_finished:
          logging.info("The chief has finished and every snapshot is evaluated.")
          return evaluated
        time.sleep(poll_secs)
    return evaluated


def check_experiment(train_dir: str, lopt: lopt_base.LearnedOptimizer, seed: int) -> bool:
  """Whether `train_dir` holds this process's experiment; False if it holds none yet.

  Raises:
    train_dir_lib.ExperimentChangedError: it holds another experiment (one line, the fix).
  """
  path = os.path.join(train_dir, layout.EXPERIMENT_FILENAME)
  if not os.path.exists(path):
    return False
  saved = files.read_json(path, {})
  record = outer_lib.experiment_record(tf.nest.map_structure(np.asarray, lopt.init(seed)))
  difference = outer_lib.differences(saved, record)
  if difference is not None:
    raise train_dir_lib.ExperimentChangedError(
      f"{train_dir} holds another experiment than this evaluator's gin config: {difference}. "
      "Pass the chief's --gin_file and --gin_bindings, or the train dir of this experiment."
    )
  return True
