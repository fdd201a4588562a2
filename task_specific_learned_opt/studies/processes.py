"""The process runner of the studies: many outer-trainings, each a bin/train_local process.

A study (the ablations of Sec. 4.5, the theta seeds of Fig. 5) is a list of `Run`s, a
configuration (a gin file) and a theta seed each, with its own train dir
<output_dir>/runs/<configuration>/seed_<k> holding its log (train.log) and, once it reached its
budget of inner steps (or its last outer step), done.json. `run_all` runs the unfinished ones, P
processes at a time; running it again skips finished runs and resumes cut ones from their last
checkpoint (train_local resumes on its own).
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
from absl import logging

from task_specific_learned_opt import errors, files, gin_config, layout
from task_specific_learned_opt.distributed import launch, progress

DONE_FILENAME = "done.json"
LOG_FILENAME = "train.log"


class AblationError(errors.UserError, RuntimeError):
  """A run of the study failed; the message names its log."""


class Run(NamedTuple):
  """One outer-training run of the study: a configuration and a theta seed."""

  name: str  # The configuration's name (its gin file's stem).
  gin_file: str
  seed: int
  train_dir: str


def runs_of(output_dir: str, configurations: Mapping[str, str], num_seeds: int) -> list[Run]:
  """Every (configuration, seed) run, seeds 0 ... num_seeds - 1, with its train dir."""
  return [
    Run(name, gin_file, seed, os.path.join(output_dir, "runs", name, f"seed_{seed}"))
    for name, gin_file in configurations.items()
    for seed in range(num_seeds)
  ]


def command(run: Run, max_inner_steps: int | None, bindings: Sequence[str] = ()) -> list[str]:
  """The bin/train_local command of `run` (this Python), stopped at `max_inner_steps` if set,
  with the --import_module of each of the user's modules this process imported."""
  flags = [f"--gin_file={run.gin_file}", f"--train_dir={run.train_dir}"]
  budget = (
    [] if max_inner_steps is None else [f"outer_training.max_inner_steps = {max_inner_steps}"]
  )
  flags += [
    f"--gin_bindings={b}"
    for b in (
      f"outer_training.seed = {run.seed}",
      *budget,
      "train_local.final_evaluation = None",
      *bindings,
    )
  ]
  flags += gin_config.import_module_flags()  # The user's modules this process imported.
  return [sys.executable, launch.binary("train_local"), *flags]


def read_done(run: Run) -> dict:
  """The run's done.json (see `finished`)."""
  return files.read_json(os.path.join(run.train_dir, DONE_FILENAME))


def finished(run: Run, max_inner_steps: int | None, bindings: Sequence[str] = ()) -> bool:
  """Whether `run` already ran to a budget of at least `max_inner_steps` (its done.json).

  With `max_inner_steps` None: whether it ran to its last outer step without a budget. A run
  finished with other study bindings (e.g. more outer steps) is not finished: it resumes.
  """
  if not os.path.exists(os.path.join(run.train_dir, DONE_FILENAME)):
    return False
  record = read_done(run)
  if record.get("bindings", []) != list(bindings):
    return False
  done = record.get("max_inner_steps", -1)
  if max_inner_steps is None or done is None:
    return done == max_inner_steps
  return done >= max_inner_steps


def _mark_done(
  run: Run, max_inner_steps: int | None, seconds: float, bindings: Sequence[str] = ()
) -> dict:
  """Writes the run's done.json once it has finished (its budget, or its last outer step).

  Raises:
    AblationError: it stopped before (e.g. a SIGTERM), or before the budget.
  """
  records = progress.read_records(run.train_dir)
  inner_steps = records[-1]["inner_steps"] if records else 0
  if not os.path.exists(os.path.join(run.train_dir, layout.FINISHED_FILENAME)):
    raise AblationError(
      f"{run.name} seed {run.seed} stopped before its end; run the study again to resume it "
      f"(see {run.train_dir}/{LOG_FILENAME})."
    )
  if max_inner_steps is not None and inner_steps < max_inner_steps:
    raise AblationError(
      f"{run.name} seed {run.seed} stopped at {inner_steps} of {max_inner_steps} inner steps "
      f"(outer_training.num_outer_steps too small?); see {run.train_dir}/{LOG_FILENAME}."
    )
  done = {
    "max_inner_steps": max_inner_steps,
    "bindings": list(bindings),
    "inner_steps": inner_steps,
    "outer_steps": records[-1]["outer_step"],
    "seconds": seconds,
  }
  files.write_json(os.path.join(run.train_dir, DONE_FILENAME), done, indent=None)
  return done


def _share_reference(run: Run, runs: Sequence[Run]) -> None:
  """Gives `run` a finished sibling's evaluator reference (the same tasks: it is reused only if
  its settings match, evaluator.Evaluator.reference), so it is computed once per configuration."""
  mine = os.path.join(run.train_dir, layout.EVALUATION_REFERENCE_FILENAME)
  for other in runs:
    theirs = os.path.join(other.train_dir, layout.EVALUATION_REFERENCE_FILENAME)
    if other.name == run.name and os.path.exists(theirs) and not os.path.exists(mine):
      shutil.copyfile(theirs, mine)


def _start(
  run: Run, runs: Sequence[Run], max_inner_steps: int | None, bindings: Sequence[str]
) -> subprocess.Popen:
  """Starts `run`'s process, its output appended to its train.log."""
  os.makedirs(run.train_dir, exist_ok=True)
  _share_reference(run, runs)
  with open(os.path.join(run.train_dir, LOG_FILENAME), "a") as log:
    process = subprocess.Popen(
      command(run, max_inner_steps, bindings),
      stdout=log,
      stderr=subprocess.STDOUT,
      start_new_session=True,  # Ctrl-C reaches the study only; it stops runs in order.
    )
  logging.info("%s seed %d: started (PID %d).", run.name, run.seed, process.pid)
  return process


def _check_exit(
  run: Run, returncode: int, max_inner_steps: int | None, seconds: float, bindings: Sequence[str]
) -> dict:
  """done.json of a run whose process exited with `returncode`.

  Raises:
    AblationError: the process failed, or stopped before its end.
  """
  if returncode != 0:
    raise AblationError(
      f"{run.name} seed {run.seed} exited with status {returncode}; see "
      f"{run.train_dir}/{LOG_FILENAME}."
    )
  return _mark_done(run, max_inner_steps, seconds, bindings)


def _stop(running: Mapping[Run, tuple[subprocess.Popen, float]]) -> None:
  """SIGTERM to every running process (each saves a checkpoint); kills those that hang."""
  logging.info(
    "Stopping %d runs; each saves a checkpoint, and the next call resumes it.", len(running)
  )
  for process, _ in running.values():
    process.send_signal(signal.SIGTERM)
  for process, _ in running.values():
    try:
      process.wait(timeout=120)
    except subprocess.TimeoutExpired:
      process.kill()


def run_all(
  runs: Sequence[Run],
  max_inner_steps: int | None,
  num_parallel: int,
  bindings: Sequence[str] = (),
  poll_secs: float = 1.0,
) -> None:
  """Runs every unfinished run, `num_parallel` processes at a time; logs progress and ETA.

  A KeyboardInterrupt (Ctrl-C, or SIGTERM made one by stopping.interrupt_on_sigterm) stops the
  running processes with SIGTERM (each saves a checkpoint) and is re-raised; the next call
  resumes them.

  Raises:
    AblationError: some runs failed (the others still ran); the message names their logs.
  """
  todo = [r for r in runs if not finished(r, max_inner_steps, bindings)]
  for r in runs:
    if r not in todo:
      logging.info("%s seed %d: finished earlier; kept.", r.name, r.seed)
  running: dict[Run, tuple[subprocess.Popen, float]] = {}
  failures, done_seconds, start = [], [], time.time()
  try:
    while todo or running:
      while todo and len(running) < num_parallel:
        run = todo.pop(0)
        running[run] = (_start(run, runs, max_inner_steps, bindings), time.time())
      time.sleep(poll_secs)
      for run, (process, started) in list(running.items()):
        if process.poll() is None:
          continue
        del running[run]
        seconds = time.time() - started
        try:
          done = _check_exit(run, process.returncode, max_inner_steps, seconds, bindings)
        except AblationError as e:
          logging.error("%s", e)
          failures.append(str(e))
          continue
        done_seconds.append(seconds)
        _log_finished(run, done, seconds, len(todo) + len(running), done_seconds, num_parallel)
  except KeyboardInterrupt:
    _stop(running)
    raise
  logging.info("All runs done in %s.", progress.format_seconds(time.time() - start))
  if failures:
    raise AblationError(f"{len(failures)} runs failed: {' '.join(failures)}")


def _log_finished(
  run: Run,
  done: dict,
  seconds: float,
  left: int,
  done_seconds: Sequence[float],
  num_parallel: int,
) -> None:
  """Logs a finished run and the time the `left` ones should take."""
  eta = np.mean(done_seconds) * left / num_parallel
  logging.info(
    "%s seed %d: finished, %d outer steps, %d inner steps in %s; %d runs left, ETA %s.",
    run.name,
    run.seed,
    done["outer_steps"],
    done["inner_steps"],
    progress.format_seconds(seconds),
    left,
    progress.format_seconds(eta),
  )
