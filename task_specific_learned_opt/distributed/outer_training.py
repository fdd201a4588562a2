"""The outer-training experiment: what local mode and the cluster roles all read from gin.

An experiment (gin: `outer_training.*`) names the task family, the learned optimizer, the seed and
how long to train; `bin/train_local`, `bin/chief` and `bin/worker` all read it, so one gin file
runs in one process or on a cluster. The chief's files are in train_dir.py, the loops in loops.py.
"""

from typing import NamedTuple

import gin

from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.tasks import base as task_base


class OuterTraining(NamedTuple):
  """One outer-training experiment, whatever runs it."""

  family: task_base.TaskFamily
  lopt: lopt_base.LearnedOptimizer
  seed: int
  num_outer_steps: int
  checkpoint_every_secs: float
  keep_checkpoints: int
  log_every: int


@gin.configurable
def outer_training(
  family: task_base.TaskFamily = gin.REQUIRED,
  lopt: lopt_base.LearnedOptimizer = gin.REQUIRED,
  seed: int = 0,
  num_outer_steps: int = 10000,
  checkpoint_every_secs: float = 600.0,
  keep_checkpoints: int = 3,
  log_every: int = 1,
) -> OuterTraining:
  """The experiment.

  Args:
    family: the task family (outer-train classes).
    lopt: the learned optimizer.
    seed: seeds theta's initialisation and every worker.
    num_outer_steps: stop when the outer step reaches this.
    checkpoint_every_secs: seconds between checkpoints (one is also written at exit).
    keep_checkpoints: checkpoints kept.
    log_every: outer steps between progress lines.
  """
  return OuterTraining(
    family,
    lopt,
    int(seed),
    int(num_outer_steps),
    float(checkpoint_every_secs),
    int(keep_checkpoints),
    int(log_every),
  )
