"""An evaluation's finished runs on disk, so that a stopped evaluation resumes where it stopped.

A held-out evaluation with every Fig. 6 baseline is thousands of inner runs (hours on 2 cores).
`RunCache` appends each finished run to `runs.jsonl` in the output directory; run again with the
same output directory, the evaluation takes the runs found there and computes only the others.
A run is found by its candidate's name, a digest of the candidate's values (a theta, or a
hyper-parameter dict) and settings (a learned optimizer's options), its task and its init, so a
changed theta, learning rate or update is run again.
The first line records the protocol (its settings, the family's name and a digest of the first
held-out task's data); a directory holding another evaluation's runs is refused, since mixing
them would compare runs on different tasks. Runs of the same protocol made elsewhere (a long
evaluation split over processes, each with a part of the optimizers in its own directory) are
taken in with `sources`; so are those of an evaluation that differs only in how many tasks or
inits it has (task t's run r is the same run in both: `protocol.task_seed`, `protocol.run_seed`),
so that an evaluation grows to more tasks by running only the new ones.
"""

import hashlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import errors, files
from task_specific_learned_opt.evaluation import protocol as protocol_lib
from task_specific_learned_opt.tasks import base as task_base

FILENAME = "runs.jsonl"
SIZE = ("num_tasks", "num_inits")  # What two evaluations with the same runs may differ in.


class OtherEvaluationError(errors.UserError, ValueError):
  """The output directory holds the runs of an evaluation with another protocol."""


class SourceNotFoundError(errors.UserError, FileNotFoundError):
  """A directory to take runs from has no runs.jsonl."""


def digest(nest: Any, settings: str = "") -> str:
  """A short digest of a nest of arrays or numbers (its structure, shapes, dtypes and values)
  and of `settings`, a description of what else the runs depend on (a learned optimizer's
  options; "" for none, which leaves the digest of the nest alone as it was)."""
  h = hashlib.sha256(repr(tf.nest.map_structure(lambda _: 0, nest)).encode())
  if settings:
    h.update(settings.encode())
  for leaf in tf.nest.flatten(nest):
    array = np.asarray(leaf)
    h.update(f"{array.dtype}{array.shape}".encode())
    h.update(np.ascontiguousarray(array).tobytes())
  return h.hexdigest()[:16]


def describe(protocol: protocol_lib.HeldOutProtocol, first_task: task_base.Task) -> dict:
  """What identifies `protocol`'s runs: its settings, the family's name, task 0's data digest."""
  settings = protocol._asdict()
  settings.pop("family")
  return {
    **settings,
    "family": protocol.family.name,
    "first_task_data": digest(first_task.data),
  }


def same_runs(header: dict, other: dict) -> bool:
  """Whether two evaluations' runs are the same runs: their protocols differ at most in SIZE."""
  return {k: v for k, v in header.items() if k not in SIZE} == {
    k: v for k, v in other.items() if k not in SIZE
  }


class RunCache:
  """The finished runs of one evaluation, in `<directory>/runs.jsonl`."""

  def __init__(
    self,
    directory: str,
    protocol: protocol_lib.HeldOutProtocol,
    sources: Sequence[str] = (),
    replace_other: bool = False,
  ):
    """Opens (or starts) the cache of `protocol`'s runs in `directory`.

    Args:
      directory: the evaluation's output directory (created if missing).
      protocol: the runs the evaluation makes.
      sources: output directories of evaluations of the same protocol, or of one differing only
        in its number of tasks or inits, whose finished runs of this protocol's tasks and inits
        are added to this one's (runs it has already are kept).
      replace_other: runs of another protocol in `directory` are moved aside (to
        runs.jsonl.other) and the evaluation starts over, instead of being refused: for the
        comparison that ends an outer-training run, whose directory belongs to the run.

    Raises:
      OtherEvaluationError: `directory` or a source holds the runs of another protocol.
      SourceNotFoundError: a source has no runs.jsonl.
    """
    os.makedirs(directory, exist_ok=True)
    self.path = os.path.join(directory, FILENAME)
    first_task = protocol.family.sample(protocol_lib.task_seed(protocol.seed, 0))
    header = {"protocol": describe(protocol, first_task)}
    records = files.read_jsonl(self.path)
    if not records:
      records = [header]
    elif records[0] != header and replace_other:
      logging.warning(
        "%s holds the runs of another evaluation (%s); moved to %s.other, starting over.",
        self.path,
        records[0].get("protocol"),
        self.path,
      )
      os.replace(self.path, f"{self.path}.other")
      records = [header]
    elif records[0] != header:
      raise OtherEvaluationError(
        f"{self.path} holds the runs of another evaluation ({records[0].get('protocol')}, not "
        f"{header['protocol']}); give a new --output_dir, or delete {FILENAME} to start over."
      )
    keys = {self._key(**r["key"]) for r in records[1:]}
    for source in sources:
      path = os.path.join(source, FILENAME)
      if not os.path.exists(path):
        raise SourceNotFoundError(
          f"{path} does not exist: --runs_from takes an output directory of bin/eval."
        )
      found = files.read_jsonl(path)
      theirs = found[0].get("protocol") if found else None
      if not isinstance(theirs, dict) or not same_runs(header["protocol"], theirs):
        raise OtherEvaluationError(
          f"{path} holds the runs of another evaluation ({theirs}, not {header['protocol']}); "
          "only runs of the same tasks, seed and steps can be joined (the number of tasks and "
          "inits may differ)."
        )
      for record in found[1:]:
        if (
          record["key"]["task"] >= protocol.num_tasks or record["key"]["init"] >= protocol.num_inits
        ):
          continue  # A run of a larger evaluation that this one does not make.
        if self._key(**record["key"]) not in keys:
          keys.add(self._key(**record["key"]))
          records.append(record)
      logging.info("%s: runs taken from %s", self.path, path)
    # Rewritten whole, so that a last line cut short by a crash is not followed by another.
    files.write_jsonl(self.path, records)
    self._runs = {self._key(**r["key"]): r["run"] for r in records[1:]}
    if self._runs:
      logging.info("%s: %d finished runs found; they are not run again", self.path, len(self))

  def __len__(self) -> int:
    return len(self._runs)

  @staticmethod
  def _key(candidate: str, values: str, task: int, init: int) -> tuple:
    return candidate, values, task, init

  def get(self, candidate: str, values: str, task: int, init: int) -> dict | None:
    """The finished run (evaluate_run's dict, arrays as numpy) or None."""
    run = self._runs.get(self._key(candidate, values, task, init))
    if run is None:
      return None
    return {k: np.asarray(v) if isinstance(v, list) else v for k, v in run.items()}

  def put(self, candidate: str, values: str, task: int, init: int, run: dict) -> None:
    """Records a finished run (appended to the file at once)."""
    key = {"candidate": candidate, "values": values, "task": task, "init": init}
    files.append_jsonl(self.path, [{"key": key, "run": run}])
    self._runs[self._key(**key)] = files.from_json(files.to_json(run))
