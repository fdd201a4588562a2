"""MLPLOpt's options as data (paper App. D.1; mlp_options.py): rebuilding one, fitting a theta.

A Keras `LearnedOptimizer` stores its MLPLOpt as these options in its config and rebuilds it from
them (`lopt_options`, `as_lopt`). A theta trained with other options (another feature set, a
no-momentum or no-time ablation, another hidden size) has other shapes; `advice` names the
MLPLOpt configurations that read those shapes, for `checkpoints.check_theta_shapes`' message.
"""

from collections.abc import Mapping

from task_specific_learned_opt import checkpoints
from task_specific_learned_opt.learned_optimizers import features, mlp_lopt, mlp_options

# The MLPLOpt options, in the order of its keywords: what lopt_options returns.
LOPT_OPTIONS = mlp_options.NAMES


def lopt_options(lopt: mlp_lopt.MLPLOpt) -> dict:
  """The constructor arguments that rebuild `lopt`: MLPLOpt(**lopt_options(lopt)).

  Args:
    lopt: the learned optimizer.

  Returns:
    A JSON-serialisable dict of its options (LOPT_OPTIONS).
  """
  return mlp_options.as_dict(lopt.options)


def as_lopt(lopt: mlp_lopt.MLPLOpt | Mapping | None) -> mlp_lopt.MLPLOpt:
  """`lopt` itself, the MLPLOpt its options (a dict) describe, or the paper's default MLPLOpt().

  Args:
    lopt: an MLPLOpt, a dict of some of its options (LOPT_OPTIONS), or None.

  Raises:
    ValueError: a dict with an unknown option.
    TypeError: `lopt` is neither an MLPLOpt, a dict nor None.
  """
  if lopt is None:
    return mlp_lopt.MLPLOpt()
  if isinstance(lopt, Mapping):
    unknown = sorted(set(lopt) - set(LOPT_OPTIONS))
    if unknown:
      raise ValueError(f"Unknown MLPLOpt options {unknown}; expected some of {LOPT_OPTIONS}.")
    return mlp_lopt.MLPLOpt(**lopt)
  if not isinstance(lopt, mlp_lopt.MLPLOpt):
    raise TypeError(
      f"LearnedOptimizer applies an MLPLOpt; got lopt={type(lopt).__name__}. Pass an "
      "mlp_lopt.MLPLOpt (or a dict of its options)."
    )
  return lopt


def describe(lopt: mlp_lopt.MLPLOpt) -> str:
  """MLPLOpt(...) with the options that differ from the defaults, e.g. "MLPLOpt(use_time=False)".

  Args:
    lopt: the learned optimizer.
  """
  return mlp_options.describe(lopt.options)


def matching_options(shapes: Mapping, lopt: mlp_lopt.MLPLOpt) -> list[str]:
  """The MLPLOpt configurations (feature set, ablations, hidden size) that read these shapes.

  Args:
    shapes: a theta's {path: shape} (checkpoints.theta_shapes).
    lopt: the MLPLOpt whose other options (decays, step scales, ...) the candidates keep.

  Returns:
    `describe` of each configuration whose theta has exactly these shapes.
  """
  hidden_bias = shapes.get("hidden/b")
  if hidden_bias is None or len(hidden_bias) != 1:
    return []
  found = []
  for feature_set in mlp_lopt.FEATURE_SETS:
    for use_momentum in (True, False):
      for use_time in (True, False):
        if feature_set == "original_code" and not use_momentum:
          continue
        options = lopt_options(lopt)
        options.update(
          hidden_size=hidden_bias[0],
          feature_set=feature_set,
          use_momentum=use_momentum,
          use_time=use_time,
          time_scales=lopt.time_scales or features.PAPER_TIME_SCALES,
        )
        candidate = mlp_lopt.MLPLOpt(**options)
        if checkpoints.theta_shapes(candidate.init(0)) == shapes:
          found.append(describe(candidate))
  return found


def advice(lopt: mlp_lopt.MLPLOpt, shapes: dict) -> tuple[str, str]:
  """What reads theta and how to fix a mismatch: checkpoints.check_theta_shapes' `advice`.

  Args:
    lopt: the MLPLOpt the theta was loaded into.
    shapes: the theta's {path: shape}.

  Returns:
    (`describe(lopt)`, the MLPLOpt to pass instead, or where to find its options).
  """
  matches = matching_options(shapes, lopt)
  if matches:
    return describe(lopt), f"it fits {' or '.join(matches)}: pass lopt={matches[0]}"
  return describe(lopt), (
    "pass lopt=MLPLOpt(...) with the options it was trained with (its train dir's "
    "operative_config.gin lists them)"
  )
