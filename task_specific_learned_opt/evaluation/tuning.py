"""The paper's baselines: a learning rate per task from a grid, per objective (Sec. 4.4, Fig. 6).

Sec. 4.4 tunes each hand-designed baseline's learning rate per task over 11 values log-spaced
from 1e-4 to 10 (LEARNING_RATES). The grid runs once on the protocol's runs; for each objective
of TUNING_METRICS every task takes the grid value whose runs have the lowest mean of that
metric: "train" the mean training loss, "valid" the mean validation loss (non-finite counts as
worst). A grid baseline thus gives two baselines, "<kind> (lr tuned per task on train loss)" and
"... on valid loss": the first for the curves' train-loss panel and the comparisons on training
loss, the second for the test-loss panel and the comparisons on test loss.
"""

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from task_specific_learned_opt.evaluation import candidates as candidates_lib
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import run_cache, running

LEARNING_RATES = tuple(float(x) for x in np.logspace(-4, 1, 11))  # Sec. 4.4: 1e-4 ... 10.
# What a baseline is tuned on (the objectives of baseline_search.py) -> the run-averaged metric
# it picks.
TUNING_METRICS = {"train": "mean_loss", "valid": "mean_valid_loss"}


class TunedBaseline(NamedTuple):
  """A baseline whose learning rate was chosen per task on one objective."""

  results: dict  # The chosen runs' arrays, as running.evaluate_candidates gives them.
  learning_rates: np.ndarray  # [num_tasks] the chosen learning rate of each task.


def tuned_name(kind: str, objective: str) -> str:
  """The name of a BASELINES kind whose learning rate is tuned per task on `objective`.

  Args:
    kind: the BASELINES kind ("adam", "rmsprop", "sgdm", "sgd").
    objective: "train" (mean training loss) or "valid" (mean validation loss).
  """
  return f"{kind} (lr tuned per task on {objective} loss)"


def tune_learning_rate_per_task(
  protocol: protocol_lib.HeldOutProtocol,
  kind: str,
  learning_rates: Sequence[float] = LEARNING_RATES,
  cache: run_cache.RunCache | None = None,
) -> dict[str, TunedBaseline]:
  """A baseline with its learning rate picked per task from a grid (Sec. 4.4), per objective.

  Args:
    protocol: the runs the grid is evaluated on (those of the candidates it is compared with).
    kind: the BASELINES kind ("adam", "rmsprop", "sgdm", "sgd").
    learning_rates: the grid.
    cache: finished runs taken instead of running them again (running.evaluate_candidates).

  Returns:
    {objective: TunedBaseline} for "train" and "valid".
  """
  grid = [
    candidates_lib.baseline(f"{kind} lr={lr:.3g}", kind, learning_rate=lr) for lr in learning_rates
  ]
  evaluated = running.evaluate_candidates(protocol, grid, cache)
  runs = [evaluated["results"][c.name] for c in grid]
  return {
    objective: _choose_per_task(runs, metric, learning_rates, protocol.num_tasks)
    for objective, metric in TUNING_METRICS.items()
  }


def _choose_per_task(
  runs: Sequence[dict], metric: str, learning_rates: Sequence[float], num_tasks: int
) -> TunedBaseline:
  """Per task, the grid value whose runs have the lowest mean `metric` (non-finite: worst)."""
  values = np.stack([r[metric].mean(axis=1) for r in runs])  # [grid, num_tasks]
  best = np.argmin(np.where(np.isfinite(values), values, np.inf), axis=0)
  chosen = {key: np.stack([r[key] for r in runs])[best, np.arange(num_tasks)] for key in runs[0]}
  return TunedBaseline(chosen, np.asarray(learning_rates)[best])


def tune_each_kind(
  protocol: protocol_lib.HeldOutProtocol,
  kinds: Sequence[str],
  learning_rates: Sequence[float] = LEARNING_RATES,
  cache: run_cache.RunCache | None = None,
) -> tuple[dict, dict, dict]:
  """Every kind of `kinds` tuned per task on both objectives, named by `tuned_name`.

  Args:
    protocol: the runs.
    kinds: BASELINES kinds.
    learning_rates: the grid.
    cache: finished runs taken instead of running them again.

  Returns:
    ({name: results}, {name: [num_tasks] chosen learning rates}, {name: objective}).
  """
  results, rates, objectives = {}, {}, {}
  for kind in kinds:
    for objective, tuned in tune_learning_rate_per_task(
      protocol, kind, learning_rates, cache
    ).items():
      name = tuned_name(kind, objective)
      results[name], rates[name], objectives[name] = tuned.results, tuned.learning_rates, objective
  return results, rates, objectives
