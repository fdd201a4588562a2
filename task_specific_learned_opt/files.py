"""Every file the project writes that is not a checkpoint: JSON, JSON lines, atomic replacement.

One writer for all: a result (evaluation.json, ablations.json, a figure's NAME.json, best.json)
is written whole to a temporary file and renamed over the old one, so a reader or a resumed run
never sees half a file; a record log (progress.jsonl, results.jsonl) is appended one line at a
time, and a reader skips a last line cut by a crash. `to_json` turns numpy values into JSON
types and non-finite floats into strings ("nan", "inf", "-inf"), which json.dump would write as
invalid JSON; `read_json` and `read_jsonl` undo it (`from_json`).

A full or read-only disk never leaves half a file to be picked up: a failed replacement removes
its temporary file, a failed append is cut back to the last whole line, and `disk_problem` tells
such a failure (an OSError, or TensorFlow's error for one) apart from others, so that the binaries
can say in one line which path failed and how much space its file system has (`DiskError`).
"""

import errno
import json
import math
import os
import re
import shutil
from collections.abc import Iterable

import numpy as np

from task_specific_learned_opt import errors

_DISK_ERRNOS = {
  errno.ENOSPC: "no space left on its file system",
  errno.EDQUOT: "the disk quota is exceeded",
  errno.EROFS: "its file system is read-only",
}
_DISK_MESSAGES = {  # How TensorFlow's errors (and OSError's strings) say the same.
  "No space left on device": _DISK_ERRNOS[errno.ENOSPC],
  "Disk quota exceeded": _DISK_ERRNOS[errno.EDQUOT],
  "Read-only file system": _DISK_ERRNOS[errno.EROFS],
}
_PATH_IN_MESSAGE = re.compile(r"(/[^\s;:'\"]+)")


class DiskError(errors.UserError, OSError):
  """A write failed because the disk is full or read-only; what was saved before is intact."""


def disk_problem(error: BaseException) -> str | None:
  """What is wrong with the disk, if `error` is a full or read-only file system; else None."""
  if isinstance(error, OSError) and error.errno in _DISK_ERRNOS:
    return _DISK_ERRNOS[error.errno]
  message = str(error)
  for text, problem in _DISK_MESSAGES.items():
    if text in message:
      return problem
  return None


def failed_path(error: BaseException, default: str) -> str:
  """The path a failed write names: OSError.filename, else the first path in the message under
  `default`, else the first whose top folder exists (not TensorFlow's "/job:..." device
  names), else `default`."""
  if isinstance(error, OSError) and error.filename:
    return str(error.filename)
  found = _PATH_IN_MESSAGE.findall(str(error))
  under = [p for p in found if default and p.startswith(os.path.abspath(default).rstrip("/") + "/")]
  real = [p for p in found if os.path.exists("/" + p.split("/")[1])]
  return (under or real or [default])[0]


def free_space(path: str) -> str:
  """How much space the file system holding `path` has left, as "12.0 KiB free of 4.0 MiB"."""
  existing = os.path.abspath(path)
  while not os.path.exists(existing) and os.path.dirname(existing) != existing:
    existing = os.path.dirname(existing)
  try:
    usage = shutil.disk_usage(existing)
  except OSError:
    return "free space unknown"
  return f"{_size(usage.free)} free of {_size(usage.total)}"


def _size(num_bytes: float) -> str:
  for unit in ("B", "KiB", "MiB", "GiB"):
    if num_bytes < 1024 or unit == "GiB":
      return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.1f} {unit}"
    num_bytes /= 1024
  return f"{num_bytes:.1f} TiB"


def disk_error(error: BaseException, path: str | None, kept: str) -> DiskError:
  """The one-line error for a write to `path` that failed on a full or read-only disk.

  Args:
    error: the failure (disk_problem(error) is not None).
    path: where the write went (used if the error names no path); None if unknown.
    kept: what is intact, e.g. "The last complete checkpoint, ckpt-40 (outer step 40), is
      intact"; said before the fix.
  """
  where = failed_path(error, path or "")
  if not where:
    return DiskError(
      f"A write failed: {disk_problem(error)} ({' '.join(str(error).split())[:200]}). {kept}; "
      "free space (or make it writable) and run the same command to resume."
    )
  return DiskError(
    f"Could not write {where}: {disk_problem(error)} ({free_space(where)}). {kept}; free space "
    "(or make it writable) and run the same command to resume."
  )


# The project's root (the folder holding the package, gin/ and pretrained/).
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def to_json(value: object) -> object:
  """`value` with numpy arrays and scalars as lists and Python numbers; NaN and inf as strings.

  Args:
    value: a nest of dicts, lists, tuples, numpy arrays and numbers.

  Returns:
    The same nest in the types json.dump writes as standard JSON.
  """
  if isinstance(value, dict):
    return {str(k): to_json(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [to_json(v) for v in value]
  if isinstance(value, np.ndarray):
    return to_json(value.tolist())
  if isinstance(value, np.generic):
    return to_json(value.item())
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)
  return value


def from_json(value: object) -> object:
  """Undoes `to_json`'s strings for non-finite floats ("nan", "inf", "-inf")."""
  if isinstance(value, dict):
    return {k: from_json(v) for k, v in value.items()}
  if isinstance(value, list):
    return [from_json(v) for v in value]
  if value in ("nan", "inf", "-inf"):
    return float(value)
  return value


def sync(*paths: str) -> None:
  """Flushes files and folders to the disk (fsync), so they survive the disk failing or the
  machine losing power; a path that is missing is skipped."""
  for path in paths:
    try:
      fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
      continue
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def write_text(path: str, text: str) -> str:
  """Writes `text` to `path` atomically (a temporary file renamed over it); returns `path`."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  temporary = f"{path}.tmp"
  try:
    with open(temporary, "w") as f:
      f.write(text)
    os.replace(temporary, path)
  except OSError:
    _remove_quietly(temporary)  # A full disk leaves no half-written temporary behind.
    raise
  return path


def _remove_quietly(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass


def write_json(path: str, value: object, indent: int | None = 1, sort_keys: bool = False) -> str:
  """Writes `to_json(value)` to `path` atomically; returns `path`.

  Args:
    path: the file (its folder is created if needed).
    value: a nest of dicts, lists, numbers, strings and numpy values.
    indent: json.dump's indent (None: one line).
    sort_keys: json.dump's sort_keys.
  """
  return write_text(path, json.dumps(to_json(value), indent=indent, sort_keys=sort_keys))


def read_json(path: str, default: object = None) -> object:
  """The JSON value in `path`, `from_json` applied; `default` if the file is missing or unreadable
  (being replaced).

  Args:
    path: the file.
    default: what a missing or unreadable file gives; None raises instead.

  Raises:
    OSError, ValueError: the file is missing or not JSON, and no default was given.
  """
  try:
    with open(path) as f:
      return from_json(json.load(f))
  except (OSError, ValueError):
    if default is None:
      raise
    return default


def append_jsonl(path: str, records: Iterable[object]) -> None:
  """Appends each record as one JSON line to `path` (created if missing).

  All or nothing: if the write fails (a full disk), the file is cut back to what it held, so no
  partial line is left for a later append to bury in the middle of the file.
  """
  data = "".join(json.dumps(to_json(record)) + "\n" for record in records).encode()
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    size = os.fstat(fd).st_size
    try:
      written = 0
      while written < len(data):  # Unbuffered: nothing is left to be flushed at close.
        written += os.write(fd, data[written:])
    except OSError:
      try:
        os.ftruncate(fd, size)
      except OSError:
        pass
      raise
  finally:
    os.close(fd)


def write_jsonl(path: str, records: Iterable[object]) -> str:
  """Writes each record as one JSON line to `path`, atomically replacing it; returns `path`."""
  return write_text(path, "".join(json.dumps(to_json(r)) + "\n" for r in records))


def read_jsonl(path: str) -> list:
  """The records of a JSON-lines file, in order, `from_json` applied; [] if it is missing.

  A last line cut short by a crash (not valid JSON) is skipped; a bad line before the last is
  an error, since nothing but a crash mid-append should leave one.

  Raises:
    ValueError: a line other than the last is not valid JSON; the message names the file.
  """
  if not os.path.exists(path):
    return []
  with open(path) as f:
    lines = [line for line in f if line.strip()]
  records = []
  for i, line in enumerate(lines):
    try:
      records.append(from_json(json.loads(line)))
    except ValueError as e:
      if i == len(lines) - 1:
        break
      raise ValueError(f"{path}: line {i + 1} is not valid JSON ({e}).") from e
  return records
