"""Evaluation on held-out tasks: candidates beside per-task tuned baselines (Sec. 4.4, Fig. 6).

`evaluate` (bin/eval) and `compare_with_tuned_baseline` (bin/train_local's final comparison)
gather the candidates (exported thetas, fixed hand-designed optimizers, a random search's
winners), build the held-out protocol (protocol.py) from their gin parameters and call
`run_evaluation`: every candidate and every tuned baseline (tuning.py) on the same runs
(running.py), then the files, plots and printed comparisons (reporting.py).
"""

from collections.abc import Mapping, Sequence

import gin
import numpy as np

from task_specific_learned_opt import checkpoints, errors, files, nests
from task_specific_learned_opt.evaluation import candidates as candidates_lib
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.evaluation import reporting, run_cache, running, tuning
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base


class HistogramNameError(errors.UserError, ValueError):
  """evaluate.histograms names a learned optimizer or a baseline the evaluation does not have."""


def run_evaluation(
  output_dir: str,
  protocol: protocol_lib.HeldOutProtocol,
  candidates: Sequence[candidates_lib.Candidate],
  learned_names: Sequence[str],
  tuned_baselines: Sequence[str],
  learning_rates: Sequence[float] = tuning.LEARNING_RATES,
  searched_objectives: Mapping[str, str] | None = None,
  histograms: Sequence[Sequence[str]] | None = None,
  timing_rounds: int = 0,
  runs_from: Sequence[str] = (),
  replace_other_runs: bool = False,
) -> dict:
  """Candidates and per-task tuned baselines on the same runs; files, plots and a summary.

  Each kind of `tuned_baselines` gives two baselines, its learning rate tuned per task on
  training and on validation loss. The train-loss panel draws the learned and fixed candidates
  and the baselines tuned on training loss, and each learned candidate is compared with those on
  mean_loss; the test-loss panel and the comparisons on mean_test_loss and final_test_loss use the
  baselines tuned on validation loss. Each finished run is kept in the output directory
  (run_cache.py), so an evaluation stopped part way resumes there when run again.

  Args:
    output_dir: where the results and plots go.
    protocol: the held-out tasks, inits, steps and seeds.
    candidates: learned, fixed and searched optimizers (distinct names).
    learned_names: the candidates compared with every baseline of their panel (Fig. 6c).
    tuned_baselines: BASELINES kinds whose learning rate is tuned per task on `learning_rates`.
    learning_rates: the grid.
    searched_objectives: {candidate name: "train" or "valid"}: the candidates that are baselines
      tuned on that objective (a random search's winners); other candidates are in both panels.
    histograms: (learned, baseline) pairs drawn as Fig. 6c histograms; None: every comparison.
    timing_rounds: if positive, every candidate and tuned kind is timed in this many interleaved
      rounds (running.time_candidates) for the wall-clock curves, instead of the speeds its runs
      measured beside whatever else was running.
    runs_from: output directories of evaluations of the same protocol (parts of this one run
      elsewhere) whose finished runs are taken instead of running them again.
    replace_other_runs: runs of another protocol in `output_dir` are moved aside and the
      evaluation starts over, instead of being refused (run_cache.RunCache's replace_other).

  Returns:
    The evaluation: running.evaluate_candidates' arrays, "tuned_learning_rates", "panels" and
    "panel_baselines" ({"train": names, "test": names}), "comparisons" and "paths".

  Raises:
    ValueError: two candidates share a name, or an objective of `searched_objectives` is
      neither "train" nor "valid".
    run_cache.OtherEvaluationError: `output_dir` holds the runs of another protocol.
    HistogramNameError: a pair of `histograms` names no learned candidate or no baseline.
  """
  names = [c.name for c in candidates]
  repeated = sorted({n for n in names if names.count(n) > 1})
  if repeated:
    raise ValueError(
      f"Two candidates are named {', '.join(repeated)}; each needs its own name (for two "
      "searches of one objective, label them: --searched 'at 1000=path/to/best.json')."
    )
  searched_objectives = dict(searched_objectives or {})
  for name, objective in searched_objectives.items():
    if objective not in tuning.TUNING_METRICS:
      raise ValueError(
        f"{name} was tuned on {objective!r}; expected one of {tuple(tuning.TUNING_METRICS)}."
      )
  _check_histograms(histograms, learned_names, candidates, tuned_baselines)
  cache = run_cache.RunCache(output_dir, protocol, runs_from, replace_other_runs)
  evaluation = running.evaluate_candidates(protocol, candidates, cache)
  results, rates, objectives, hparams = tuning.tune_each_kind(
    protocol, tuned_baselines, learning_rates, cache
  )
  evaluation["results"].update(results)
  evaluation["tuned_learning_rates"] = rates
  if hparams:
    evaluation["tuned_hparams"] = hparams
  if timing_rounds > 0:
    evaluation["timed_steps_per_second"] = _timed_speeds(
      protocol, candidates, tuned_baselines, rates, timing_rounds
    )
  objectives.update(
    {c.name: searched_objectives[c.name] for c in candidates if c.name in searched_objectives}
  )
  both = [c.name for c in candidates if c.name not in objectives]
  reporting.assign_panels(evaluation, both, objectives)
  comparisons = reporting.comparisons(evaluation, learned_names)
  paths = reporting.write(evaluation, output_dir, protocol.title(), comparisons, histograms)
  evaluation["comparisons"], evaluation["paths"] = comparisons, paths
  reporting.print_summary(evaluation, protocol.num_steps)
  return evaluation


def _timed_speeds(
  protocol: protocol_lib.HeldOutProtocol,
  candidates: Sequence[candidates_lib.Candidate],
  tuned_baselines: Sequence[str],
  rates: Mapping[str, Sequence[float]],
  repetitions: int,
) -> dict[str, float]:
  """Steps per second of every candidate and tuned baseline, timed alike in one process.

  A tuned kind is timed once, at the learning rate its training-loss tuning chose most often
  (its speed does not depend on the value), and that speed is given to both of its baselines.
  """
  timed = list(candidates)
  for kind in tuned_baselines:
    chosen = np.asarray(rates[tuning.tuned_name(kind, "train")])
    values, counts = np.unique(chosen, return_counts=True)
    timed.append(
      candidates_lib.baseline(
        kind, tuning.base_kind(kind), learning_rate=float(values[np.argmax(counts)])
      )
    )
  speeds = running.time_candidates(protocol, timed, repetitions)
  for kind in tuned_baselines:
    for objective in tuning.TUNING_METRICS:
      speeds[tuning.tuned_name(kind, objective)] = speeds[kind]
    del speeds[kind]
  return speeds


def _check_histograms(
  histograms: Sequence[Sequence[str]] | None,
  learned_names: Sequence[str],
  candidates: Sequence[candidates_lib.Candidate],
  tuned_baselines: Sequence[str],
) -> None:
  """Raises HistogramNameError, before anything runs, if a pair names no learned or baseline."""
  baselines = [c.name for c in candidates if c.name not in learned_names]
  baselines += [tuning.tuned_name(k, o) for k in tuned_baselines for o in tuning.TUNING_METRICS]
  for learned, baseline in histograms or ():
    if learned not in learned_names or baseline not in baselines:
      raise HistogramNameError(
        f"evaluate.histograms names ({learned!r}, {baseline!r}), but the learned optimizers are "
        f"{list(learned_names)} (the --theta names) and the baselines {baselines}; name a pair "
        "of those."
      )


def _search_objective(path: str) -> str:
  """The objective ("train" or "valid") a random search's best.json was tuned on."""
  return files.read_json(path)["signature"]["objective"]


def _learned(
  lopt: lopt_base.LearnedOptimizer | None, thetas: Mapping[str, str] | None
) -> list[candidates_lib.Candidate]:
  """The theta exports of `thetas` ({name: directory}) as candidates of `lopt`."""
  if thetas and lopt is None:
    raise ValueError("Evaluating a theta needs evaluate.lopt (the learned optimizer) in gin.")
  return [
    candidates_lib.learned(name, lopt, checkpoints.load_theta(directory, lopt))
    for name, directory in (thetas or {}).items()
  ]


@gin.configurable(denylist=["output_dir", "thetas", "searched", "runs_from"])
def evaluate(
  output_dir: str,
  thetas: Mapping[str, str] | None = None,
  searched: Sequence[str] = (),
  runs_from: Sequence[str] = (),
  family: task_base.TaskFamily = gin.REQUIRED,
  lopt: lopt_base.LearnedOptimizer | None = None,
  optimizers: Mapping[str, opt_base.Optimizer] | None = None,
  tuned_baselines: Sequence[str] = ("adam",),
  learning_rates: Sequence[float] = tuning.LEARNING_RATES,
  num_tasks: int = 100,
  num_inits: int = 5,
  num_steps: int = 10000,
  num_points: int = 30,
  num_eval_batches: int = 5,
  seed: int = 0,
  num_average_points: int = protocol_lib.NUM_AVERAGE_POINTS,
  histograms: Sequence[Sequence[str]] | None = None,
  timing_rounds: int = 0,
) -> dict:
  """bin/eval: exported thetas and baselines on held-out tasks of `family`; files and plots.

  Args:
    output_dir: where the results and plots go.
    thetas: {name: theta export directory} of `lopt`.
    searched: best.json files of random searches (bin/tune_baselines), each optionally as
      "label=path" (the label goes into its winners' names, for two searches of one objective
      side by side); their winners (the
      paper's Adam+Reg+Decay curves) are baselines tuned on the search's objective: L_train
      winners in the train-loss panel and comparisons, L_valid winners in the test-loss ones.
    runs_from: output directories of evaluations of the same protocol whose finished runs are
      taken (bin/eval --runs_from: an evaluation split over processes, joined).
    family: the held-out tasks (e.g. the outer-test classes).
    lopt: the learned optimizer the thetas belong to.
    optimizers: {name: hand-designed optimizer with fixed hyper-parameters}.
    tuned_baselines: BASELINES kinds whose learning rate is tuned per task on `learning_rates`,
      once on training loss and once on validation loss; "adam_refined": Adam's learning rate,
      beta1 and epsilon refined per task from the grid's best (tuning.tune_refined_per_task).
    learning_rates: the grid (Sec. 4.4: 11 values log-spaced from 1e-4 to 10).
    num_tasks: held-out tasks (Fig. 6c: 100).
    num_inits: inner initialisations per task (5).
    num_steps: inner steps per run (10,000; 100,000 for the longer-unroll experiment).
    num_points: log-spaced steps of the curves.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.
    num_average_points: evenly spaced steps (step 0 excluded) whose validation and test losses
      are averaged into mean_valid_loss and mean_test_loss (baseline_search.py's L_valid).
    histograms: (theta name, baseline name) pairs drawn as Fig. 6c histograms (e.g. each theta
      against the searched winner of its own objective); None: every comparison.
    timing_rounds: if positive, the wall-clock curves use speeds timed in this many interleaved
      rounds in this process (Fig. 6 is in wall-clock) instead of those the runs measured.

  Returns:
    The evaluation, with "panels", "comparisons" (each theta against each baseline of each
    panel) and "paths".
  """
  candidates, searched_objectives = _learned(lopt, thetas), {}
  candidates += [candidates_lib.fixed(name, opt) for name, opt in (optimizers or {}).items()]
  for value in searched:
    label, _, path = value.rpartition("=")
    winners = candidates_lib.searched(path, label)
    candidates += winners
    searched_objectives.update({c.name: _search_objective(path) for c in winners})
  protocol = protocol_lib.HeldOutProtocol(
    family, num_tasks, num_inits, num_steps, num_points, num_eval_batches, seed, num_average_points
  )
  return run_evaluation(
    output_dir,
    protocol,
    candidates,
    list(thetas or {}),
    tuned_baselines,
    learning_rates,
    searched_objectives,
    histograms,
    timing_rounds,
    runs_from,
  )


@gin.configurable(denylist=["output_dir", "lopt", "theta"])
def compare_with_tuned_baseline(
  output_dir: str,
  lopt: lopt_base.LearnedOptimizer,
  theta: nests.Theta,
  family: task_base.TaskFamily = gin.REQUIRED,
  baseline_kind: str = "adam",
  learning_rates: Sequence[float] = tuning.LEARNING_RATES,
  num_tasks: int = 5,
  num_inits: int = 1,
  num_steps: int = 500,
  num_points: int = 20,
  num_eval_batches: int = 5,
  seed: int = 0,
  num_average_points: int = protocol_lib.NUM_AVERAGE_POINTS,
  thetas: Mapping[str, str] | None = None,
) -> dict:
  """A freshly trained theta against a learning-rate-tuned baseline on held-out tasks.

  What bin/train_local runs at the end when `train_local.final_evaluation` names it. The
  baseline's learning rate is tuned per task on training loss (compared on mean training loss,
  printed first) and on validation loss (compared on mean test loss).

  Args:
    output_dir: where the results and plots go.
    lopt: the learned optimizer `theta` belongs to.
    theta: the trained meta-parameters (a nest of tensors or arrays).
    family: the held-out tasks.
    baseline_kind: the BASELINES kind whose learning rate is tuned per task.
    learning_rates: the baseline's grid.
    num_tasks: held-out tasks.
    num_inits: inner initialisations per task.
    num_steps: inner steps per run.
    num_points: log-spaced steps of the curves.
    num_eval_batches: batches averaged for each measurement.
    seed: seeds the tasks, the inits and the data.
    num_average_points: evenly spaced steps of mean_valid_loss and mean_test_loss.
    thetas: {name: theta export directory} of `lopt` evaluated beside it on the same runs and
      compared with the same baselines (e.g. a shipped theta, pretrained/<name>/theta).

  Returns:
    The evaluation, as `evaluate` returns it.
  """
  candidates = [candidates_lib.learned("learned", lopt, theta), *_learned(lopt, thetas)]
  protocol = protocol_lib.HeldOutProtocol(
    family, num_tasks, num_inits, num_steps, num_points, num_eval_batches, seed, num_average_points
  )
  return run_evaluation(
    output_dir,
    protocol,
    candidates,
    [c.name for c in candidates],
    [baseline_kind],
    learning_rates,
    replace_other_runs=True,  # The run's own eval/ directory: a changed comparison starts over.
  )
