"""The optimizers an evaluation compares (Sec. 4.4): learned thetas and hand-designed baselines.

A `Candidate` builds its Optimizer from values fed as tensors at run time (theta, or a dict of
hyper-parameters), so one compiled function serves every theta or every point of a search:

  learned("learned", lopt, theta)             an exported theta of a learned optimizer;
  fixed("adam 1e-2", adam.Adam(1e-2))         a hand-designed optimizer as it was built;
  baseline("adam", "adam", learning_rate=lr)  one of the paper's baselines, hyper-parameters fed;
  from_config({"id", "kind", "hparams"})      a configuration of a baseline search;
  searched("runs/search/best.json")           the winners of a random search.
"""

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from task_specific_learned_opt import errors, files, nests
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import adam, rmsprop, sgd
from task_specific_learned_opt.optimizers import base as opt_base

# The paper's three baselines (and plain SGD), each as a function of tensors.
BASELINES: dict[str, Callable[[dict], opt_base.Optimizer]] = {
  "adam": lambda v: adam.Adam(**v),
  "rmsprop": lambda v: rmsprop.RMSProp(**v),
  "sgdm": lambda v: sgd.Momentum(**v),
  "sgd": lambda v: sgd.SGD(**v),
}
# Nesterov changes the graph, so it is a Python bool: one builder (and one trace) per value.
_SGDM = {
  False: lambda v: sgd.Momentum(nesterov=False, **v),
  True: lambda v: sgd.Momentum(nesterov=True, **v),
}


class Candidate(NamedTuple):
  """An optimizer to evaluate, built from tensors fed at run time, so nothing retraces.

  make(values) returns the Optimizer for `values` (a nest of tensors: theta, or a dict of
  hyper-parameters). Candidates that share `make` share compiled functions. `settings` names
  what else `make` depends on (a learned optimizer's options), so that a run made with other
  settings is not taken for this candidate's (run_cache.py).
  """

  name: str
  make: Callable[[Any], opt_base.Optimizer]
  values: Any
  settings: str = ""


def learned(name: str, lopt: lopt_base.LearnedOptimizer, theta: nests.Theta) -> Candidate:
  """`lopt` at `theta` (a nest of tensors or arrays); its settings: `lopt`'s options."""
  settings = repr(getattr(lopt, "options", type(lopt).__name__))
  return Candidate(name, lopt.opt_fn, tf.nest.map_structure(np.asarray, theta), settings)


def fixed(name: str, optimizer: opt_base.Optimizer) -> Candidate:
  """A hand-designed optimizer with the hyper-parameters it was built with."""
  return Candidate(name, lambda _: optimizer, {})


def baseline(name: str, kind: str, **hparams: float) -> Candidate:
  """One of BASELINES ("adam", "rmsprop", "sgdm", "sgd") with the given hyper-parameters.

  Raises:
    KeyError: an unknown kind.
  """
  return Candidate(name, BASELINES[kind], {k: np.float32(v) for k, v in hparams.items()})


def from_config(config: dict) -> Candidate:
  """A search configuration {"id", "kind", "hparams"} (baseline_search.py) as a candidate."""
  kind, hparams = config["kind"], dict(config["hparams"])
  if kind == "sgdm":
    make = _SGDM[bool(hparams.pop("nesterov", False))]
    return Candidate(config["id"], make, {k: np.float32(v) for k, v in hparams.items()})
  return baseline(config["id"], kind, **hparams)


class SearchedNotFoundError(errors.UserError, FileNotFoundError):
  """A --searched best.json that does not exist."""


def searched(path: str, label: str = "") -> list[Candidate]:
  """The winners of a random search (bin/tune_baselines' best.json) as fixed candidates.

  Named "<kind>+reg+decay (L_<objective>)", or "<kind>+reg+decay <label> (L_<objective>)" with a
  label, so that the winners of two searches of one objective can be evaluated side by side.

  Raises:
    SearchedNotFoundError: `path` does not exist.
    ValueError: the file is not a random search's best.json.
  """
  if not os.path.isfile(path):
    raise SearchedNotFoundError(
      f"{path} does not exist: --searched takes the best.json that bin/tune_baselines writes in "
      "its --output_dir (in L_train/ and L_valid/ there for a search of both objectives); run "
      "the search first, or give its path."
    )
  best = files.read_json(path)
  if best["signature"]["mode"] != "random_search":
    raise ValueError(
      f"{path} is not a random search's best.json (mode {best['signature']['mode']})."
    )
  objective = best["signature"]["objective"]
  return [
    from_config(
      {
        "id": f"{kind}+reg+decay{' ' + label if label else ''} (L_{objective})",
        "kind": kind,
        "hparams": b["hparams"],
      }
    )
    for kind, b in best["best"].items()
  ]
