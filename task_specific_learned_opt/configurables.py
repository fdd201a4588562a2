"""Imports every module that registers gin configurables, so that any experiment file parses.

The binaries (and a spawned baseline-search process) import this module before parsing gin;
nothing in the package imports it, so it can import everything without cycles.
"""

# Imported for their @gin.configurable registrations.
from task_specific_learned_opt import (  # noqa: F401
  ablations,
  baselines,
  benchmark,
  evaluation,
  gin_config,
  inner_comparison,
  inner_training,
)
from task_specific_learned_opt.distributed import (  # noqa: F401
  chief,
  cluster,
  local,
  outer_training,
  tf_runtime,
  worker,
)
from task_specific_learned_opt.figures import (  # noqa: F401
  exploding,
  outer_loss_slices,
  runner,
  toy,
  trajectories,
  truncation_bias,
)
from task_specific_learned_opt.learned_optimizers import hyperparameters, mlp_lopt  # noqa: F401
from task_specific_learned_opt.optimizers import adam, rmsprop, sgd  # noqa: F401
from task_specific_learned_opt.outer import schedules, truncated_unroll  # noqa: F401
from task_specific_learned_opt.tasks import (  # noqa: F401, F811 - tasks.toy after figures.toy
  families,
  generated,
  networks,
  quadratic,
  random_data,
  tfds_source,
  toy,
)
