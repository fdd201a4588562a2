"""The paper's baselines: a learning rate per task from a grid, per objective (Sec. 4.4, Fig. 6).

Sec. 4.4 tunes each hand-designed baseline's learning rate per task over 11 values log-spaced
from 1e-4 to 10 (LEARNING_RATES). The grid runs once on the protocol's runs; for each objective
of TUNING_METRICS every task takes the grid value whose runs have the lowest mean of that
metric: "train" the mean training loss, "valid" the mean validation loss (non-finite counts as
worst). A grid baseline thus gives two baselines, "<kind> (lr tuned per task on train loss)" and
"... on valid loss": the first for the curves' train-loss panel and the comparisons on training
loss, the second for the test-loss panel and the comparisons on test loss.

"adam_refined" (REFINED_KINDS) is a baseline a sceptic would tune: per task and objective, the
grid's best learning rate, then a grid 4x finer over the decade around it, then beta1 at that
rate, the finer rates again at that beta1, then epsilon (`tune_refined_per_task`).
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from task_specific_learned_opt.evaluation import candidates as candidates_lib
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import run_cache, running

LEARNING_RATES = tuple(float(x) for x in np.logspace(-4, 1, 11))  # Sec. 4.4: 1e-4 ... 10.
# What a baseline is tuned on (the objectives of baseline_search.py) -> the run-averaged metric
# it picks.
TUNING_METRICS = {"train": "mean_loss", "valid": "mean_valid_loss"}
# Kinds refined per task beyond the grid -> the BASELINES kind they run.
REFINED_KINDS = {"adam_refined": "adam"}
REFINE_POINTS = 9  # log-spaced over the decade around the grid's best: 4x the grid's density.
BETA1S = (0.0, 0.25, 0.5, 0.8, 0.9, 0.95)  # 0.9: the grid's (Adam's default); 0: RMSProp's
# step with Adam's bias correction.
EPSILONS = (1e-8, 1e-6, 1e-4, 1e-2)  # 1e-8: the grid's (Adam's default).
_DEFAULTS = {"beta1": 0.9, "epsilon": 1e-8}


class TunedBaseline(NamedTuple):
  """A baseline whose learning rate was chosen per task on one objective."""

  results: dict  # The chosen runs' arrays, as running.evaluate_candidates gives them.
  learning_rates: np.ndarray  # [num_tasks] the chosen learning rate of each task.
  hparams: dict | None = None  # {name: [num_tasks]} any other hyper-parameter chosen per task.


def tuned_name(kind: str, objective: str) -> str:
  """The name of a BASELINES kind whose learning rate is tuned per task on `objective`.

  Args:
    kind: the BASELINES kind ("adam", "rmsprop", "sgdm", "sgd") or a REFINED_KINDS one.
    objective: "train" (mean training loss) or "valid" (mean validation loss).
  """
  if kind in REFINED_KINDS:
    return f"{REFINED_KINDS[kind]} (refined lr, beta1, eps, tuned per task on {objective} loss)"
  return f"{kind} (lr tuned per task on {objective} loss)"


def base_kind(kind: str) -> str:
  """The BASELINES kind a tuned kind runs (itself, or a REFINED_KINDS one's)."""
  return REFINED_KINDS.get(kind, kind)


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
  runs = _grid_runs(protocol, kind, learning_rates, cache)
  return {
    objective: _choose_per_task(runs, metric, learning_rates, protocol.num_tasks)
    for objective, metric in TUNING_METRICS.items()
  }


def _grid_runs(
  protocol: protocol_lib.HeldOutProtocol,
  kind: str,
  learning_rates: Sequence[float],
  cache: run_cache.RunCache | None,
) -> list[dict]:
  """The grid's arrays, one per learning rate (candidates named "<kind> lr=<value>")."""
  grid = [_candidate(kind, lr) for lr in learning_rates]
  evaluated = running.evaluate_candidates(protocol, grid, cache)
  return [evaluated["results"][c.name] for c in grid]


def _candidate(kind: str, lr: float, **hparams: float) -> candidates_lib.Candidate:
  """The grid's candidate at `lr`; with other hyper-parameters, one named by them too."""
  name = f"{kind} lr={lr:.3g}" + "".join(f" {k}={v:.3g}" for k, v in hparams.items())
  return candidates_lib.baseline(name, kind, learning_rate=lr, **hparams)


def _objective(run: dict, metric: str) -> float:
  """A run's tuning number on one task: the mean over inits of `metric` (non-finite: inf)."""
  value = float(np.mean(run[metric]))
  return value if np.isfinite(value) else np.inf


def refined_learning_rates(best: float, num_points: int = REFINE_POINTS) -> np.ndarray:
  """`num_points` log-spaced values from best / sqrt(10) to best * sqrt(10) (one decade)."""
  return best * np.logspace(-0.5, 0.5, num_points)


def tune_refined_per_task(
  protocol: protocol_lib.HeldOutProtocol,
  kind: str = "adam_refined",
  learning_rates: Sequence[float] = LEARNING_RATES,
  cache: run_cache.RunCache | None = None,
) -> dict[str, TunedBaseline]:
  """Adam tuned per task by a coordinate search from the grid's best, per objective.

  Per task and per objective (TUNING_METRICS: mean training loss, or mean validation loss; the
  test split is never read), a coordinate search, each stage keeping the best so far:
  1. the grid's best learning rate (`tune_learning_rate_per_task`'s choice);
  2. REFINE_POINTS learning rates log-spaced over the decade around it (best / sqrt(10) to
     best * sqrt(10), the grid's best and its two neighbours among them: 4x the grid's density);
  3. beta1 over BETA1S at that rate (epsilon 1e-8);
  4. the learning rates of stage 2 again, at that beta1 (a lower beta1 may want another rate);
  5. epsilon over EPSILONS at that rate and beta1.
  The chosen configuration is thus never worse on the tuning split than the grid's best. Not a
  joint search: the rate, beta1 and epsilon are tuned one at a time.

  Cost per task, in configurations (each run on the protocol's num_inits inits): the grid's 11
  (shared with the kind's plain grid), then per objective at most 7 learning rates (6 where the
  grid's best has both neighbours), 5 beta1 values, 8 rates at the new beta1 (none when beta1
  stays 0.9) and 3 epsilon values: at most 11 + 2 x 23 = 57, and fewer where both objectives pick
  the same configurations. Every run is taken from `cache` if it holds it (the grid's runs of an
  evaluation that also tunes plain Adam are not made again).

  Args:
    protocol: the runs.
    kind: a REFINED_KINDS kind.
    learning_rates: the grid of stage 1.
    cache: finished runs taken instead of running them again; each run made is added.

  Returns:
    {objective: TunedBaseline} for "train" and "valid", with hparams {"beta1", "epsilon"}.
  """
  base = base_kind(kind)
  grid = _grid_runs(protocol, base, learning_rates, cache)
  tuned = {}
  for objective, metric in TUNING_METRICS.items():
    chosen_runs, rates, beta1s, epsilons = [], [], [], []
    for t in range(protocol.num_tasks):
      known = {  # (lr, beta1, epsilon) -> this task's arrays.
        (float(lr), *_DEFAULTS.values()): {k: v[t : t + 1] for k, v in run.items()}
        for lr, run in zip(learning_rates, grid, strict=True)
      }

      def runs(configs: list[tuple], t: int = t, known: dict = known) -> list[dict]:
        missing = [c for c in configs if c not in known]
        made = [
          _candidate(base, lr, **{k: v for k, v in zip(_DEFAULTS, rest, strict=True)})
          if tuple(rest) != tuple(_DEFAULTS.values())
          else _candidate(base, lr)
          for lr, *rest in missing
        ]
        results = running.evaluate_candidates(protocol, made, cache, tasks=[t])["results"]
        known.update({c: results[m.name] for c, m in zip(missing, made, strict=True)})
        return [known[c] for c in configs]

      def best(configs: list[tuple], runs: Callable = runs, metric: str = metric) -> tuple:
        values = [_objective(r, metric) for r in runs(configs)]
        return configs[int(np.argmin(values))]

      grid_best = best([(float(lr), *_DEFAULTS.values()) for lr in learning_rates])
      refined = [(float(x), *_DEFAULTS.values()) for x in refined_learning_rates(grid_best[0])]
      lr = best([grid_best, *refined])[0]
      beta1 = best([(lr, float(b), _DEFAULTS["epsilon"]) for b in BETA1S])[1]
      again = [(float(x), beta1, _DEFAULTS["epsilon"]) for x in refined_learning_rates(lr)]
      lr = best([(lr, beta1, _DEFAULTS["epsilon"]), *again])[0]
      chosen = best([(lr, beta1, float(e)) for e in EPSILONS])
      chosen_runs.append(known[chosen])
      rates.append(chosen[0])
      beta1s.append(chosen[1])
      epsilons.append(chosen[2])
    results = {k: np.concatenate([r[k] for r in chosen_runs]) for k in chosen_runs[0]}
    tuned[objective] = TunedBaseline(
      results, np.asarray(rates), {"beta1": np.asarray(beta1s), "epsilon": np.asarray(epsilons)}
    )
  return tuned


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
    ({name: results}, {name: [num_tasks] chosen learning rates}, {name: objective}, {name:
    {hyper-parameter: [num_tasks] chosen values}} of the refined kinds).
  """
  results, rates, objectives, hparams = {}, {}, {}, {}
  for kind in kinds:
    tune = tune_refined_per_task if kind in REFINED_KINDS else tune_learning_rate_per_task
    for objective, tuned in tune(protocol, kind, learning_rates, cache).items():
      name = tuned_name(kind, objective)
      results[name], rates[name], objectives[name] = tuned.results, tuned.learning_rates, objective
      if tuned.hparams:
        hparams[name] = tuned.hparams
  return results, rates, objectives, hparams
