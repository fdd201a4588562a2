"""The held-out protocol as one record: which tasks, inits, steps and seeds a run uses (Sec. 4.4).

An evaluation trains `num_tasks` tasks sampled from a family (the outer-test classes), each from
`num_inits` inner initialisations, for `num_steps` steps, and measures every run at the same
steps: `curve_steps` (0 and log-spaced steps, the curves of Fig. 6a/b) and `average_steps`
(evenly spaced, step 0 excluded: the steps of the run-averaged validation and test losses, the
L_valid of baseline_search.py). Task t is sampled with `task_seed(seed, t)`; its run r uses
`run_seed(seed, t, r)`, whose streams "run_params" and "run_data" (random_seeds.STREAMS) seed the
parameters and the data, exactly as inner_training.train, so an evaluation's per-step losses are
those of the plain inner-training loop. Every candidate and every tuned baseline is run on these
same runs.
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.tasks import base as task_base

NUM_AVERAGE_POINTS = 20  # Evenly spaced steps of mean_valid_loss and mean_test_loss.
SPLITS = ("train", "valid", "test")  # Measured at every point of every run.


class HeldOutProtocol(NamedTuple):
  """The runs every candidate of an evaluation is measured on.

  bin/eval builds it from the gin configurable `evaluate`, bin/train_local's final comparison
  from `compare_with_tuned_baseline`, the in-process evaluator from its own settings.
  """

  family: task_base.TaskFamily  # The held-out tasks (e.g. the outer-test classes).
  num_tasks: int  # Tasks sampled from `family` (Fig. 6c: 100).
  num_inits: int  # Inner initialisations per task (5).
  num_steps: int  # Inner steps per run (10,000).
  num_points: int = 30  # Log-spaced steps of the curves.
  num_eval_batches: int = 5  # Batches averaged for each measurement.
  seed: int = 0  # Seeds the tasks, the inits and the data.
  num_average_points: int = NUM_AVERAGE_POINTS  # Evenly spaced steps of the run averages.

  def average_steps(self) -> np.ndarray:
    """The evenly spaced steps the run-averaged validation and test losses are measured at."""
    return average_steps(self.num_steps, self.num_average_points)

  def points(self) -> np.ndarray:
    """Every measured step: the curve's log-spaced steps and the evenly spaced ones, sorted."""
    return np.union1d(curve_steps(self.num_steps, self.num_points), self.average_steps())

  def title(self) -> str:
    """A one-line description, e.g. for the curves' title."""
    return (
      f"{self.family.name}: {self.num_tasks} held-out tasks x {self.num_inits} inits, "
      f"{self.num_steps} steps"
    )


def curve_steps(num_steps: int, num_points: int) -> np.ndarray:
  """0 and `num_points` log-spaced steps up to `num_steps` (distinct integers)."""
  steps = np.unique(np.round(np.logspace(0, np.log10(num_steps), num_points)).astype(int))
  return np.concatenate([[0], steps])


def average_steps(num_steps: int, num_points: int) -> np.ndarray:
  """The evenly spaced steps the run-averaged validation and test losses are measured at.

  linspace(0, num_steps, num_points + 1) as integers, without step 0: the steps of
  baseline_search.py's L_valid (fewer than `num_points` if `num_steps` is smaller).

  Args:
    num_steps: inner steps per run.
    num_points: how many steps (at least 1).

  Raises:
    ValueError: `num_points` is below 1.
  """
  if num_points < 1:
    raise ValueError(f"num_average_points must be at least 1, got {num_points}.")
  return np.unique(np.linspace(0, num_steps, num_points + 1).astype(int))[1:]


def run_seed(seed: int, task_index: int, init_index: int) -> tf.Tensor:
  """The seed of run `init_index` of held-out task `task_index` (its params and its data)."""
  return random_seeds.fold_in(
    random_seeds.fold_in(random_seeds.as_seed(seed), task_index), init_index
  )


def task_seed(seed: int, task_index: int) -> tf.Tensor:
  """The seed a held-out task is sampled with (independent of the run seeds)."""
  return random_seeds.fold_in(
    random_seeds.stream(random_seeds.as_seed(seed), "held_out_tasks"), task_index
  )
