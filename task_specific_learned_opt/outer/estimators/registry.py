"""The outer-gradient estimators by name: what gin's `outer_training.estimator` selects.

  estimator = registry.get("merged")   # a base.Estimator

Adding an estimator: its module beside these, and one line in ESTIMATORS (docs/own_tasks.md). A
module outside the package (a test, an --import_module of yours) calls `register` instead.
"""

from task_specific_learned_opt.outer.estimators import (
  base,
  merged,
  persistent_es,
  reparameterization,
  truncated_backprop,
  truncated_es,
)

# Name -> the class; the names are the values of gin's `outer_training.estimator`.
ESTIMATORS: dict[str, type[base.Estimator]] = {
  "merged": merged.Merged,  # Sec. 3, eq. 1: the paper's.
  "rp": reparameterization.Reparameterization,  # Fig. 8 "Gradients".
  "es": truncated_es.TruncatedES,  # Fig. 8 "ES".
  "pes": persistent_es.PersistentES,  # Beyond the paper: docs/pes.md.
  "pes_merged": persistent_es.PersistentESMerged,  # Eq. 1 over g_rp and g_pes.
  "backprop": truncated_backprop.TruncatedBackprop,  # Sec. 2.4, Fig. 3: one unroll at theta.
}


def names() -> tuple[str, ...]:
  """The registered estimators' names."""
  return tuple(ESTIMATORS)


def register(name: str, estimator_class: type[base.Estimator]) -> None:
  """Makes `estimator_class` selectable as `name` (outer_training.estimator = "<name>").

  Args:
    name: the estimator's name.
    estimator_class: a subclass of base.Estimator whose constructor takes no arguments.

  Raises:
    ValueError: `name` is taken, or the class is not an Estimator.
  """
  if name in ESTIMATORS:
    raise ValueError(f"An estimator is already registered as {name!r}.")
  if not (isinstance(estimator_class, type) and issubclass(estimator_class, base.Estimator)):
    raise ValueError(f"{estimator_class!r} is not a subclass of estimators.base.Estimator.")
  ESTIMATORS[name] = estimator_class


def get(name: str) -> base.Estimator:
  """A new instance of the estimator registered as `name`.

  Raises:
    ValueError: no estimator is registered as `name`.
  """
  if name not in ESTIMATORS:
    raise ValueError(f"Unknown estimator {name!r}; known: {list(ESTIMATORS)}.")
  return ESTIMATORS[name]()
