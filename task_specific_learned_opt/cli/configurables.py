"""Imports every module that registers gin configurables, so that any experiment file parses.

The binaries import it through cli/common.py before parsing gin; no library module imports the
cli/ layer, so it can import everything without cycles (tests/test_imports.py checks both).
"""

# Imported for their @gin.configurable registrations.
from task_specific_learned_opt import (
  gin_config,  # noqa: F401
  inner_training,  # noqa: F401
)
from task_specific_learned_opt.distributed import (
  chief_update,  # noqa: F401
  cluster,  # noqa: F401
  local,  # noqa: F401
  outer_training,  # noqa: F401
  tf_runtime,  # noqa: F401
  worker_step,  # noqa: F401
)
from task_specific_learned_opt.evaluation import (
  baseline_search,  # noqa: F401
  held_out,  # noqa: F401
  single_task,  # noqa: F401
  wallclock,  # noqa: F401
)
from task_specific_learned_opt.figures import (
  exploding,  # noqa: F401
  longer_unrolls,  # noqa: F401
  outer_loss_slices,  # noqa: F401
  runner,  # noqa: F401
  toy_outer_loss,  # noqa: F401
  trajectories,  # noqa: F401
  truncation_bias,  # noqa: F401
)
from task_specific_learned_opt.learned_optimizers import hyperparameters, mlp_lopt  # noqa: F401
from task_specific_learned_opt.optimizers import adam, rmsprop, sgd  # noqa: F401
from task_specific_learned_opt.outer import recomputation, schedules  # noqa: F401
from task_specific_learned_opt.studies import ablation_study, seed_study  # noqa: F401
from task_specific_learned_opt.tasks import (  # noqa: F401
  digits_source,
  families,
  generated,
  keras_data,
  keras_task,
  networks,
  quadratic,
  random_data,
  tfds_source,
  toy,
)
