"""Hand-designed inner update rules: the paper's baselines (Sec. 4.4, App. F).

`OPTIMIZERS` maps each rule's `name` to its class; `get` builds one by name.
"""

from task_specific_learned_opt.optimizers import adam, base, rmsprop, sgd

OPTIMIZERS = {
  "sgd": sgd.SGD,
  "momentum": sgd.Momentum,
  "rmsprop": rmsprop.RMSProp,
  "adam": adam.Adam,
}


def get(name: str, **hparams) -> base.Optimizer:
  """Builds the hand-designed optimizer called `name`.

  Args:
    name: a key of `OPTIMIZERS`.
    **hparams: keyword arguments of that optimizer's constructor.

  Returns:
    The optimizer.

  Raises:
    ValueError: if `name` is not a key of `OPTIMIZERS`.
  """
  if name not in OPTIMIZERS:
    raise ValueError(f"Unknown optimizer {name!r}; known: {sorted(OPTIMIZERS)}.")
  return OPTIMIZERS[name](**hparams)
