"""Every file the project writes that is not a checkpoint: JSON, JSON lines, atomic replacement.

One writer for all: a result (evaluation.json, ablations.json, a figure's NAME.json, best.json)
is written whole to a temporary file and renamed over the old one, so a reader or a resumed run
never sees half a file; a record log (progress.jsonl, results.jsonl) is appended one line at a
time, and a reader skips a last line cut by a crash. `to_json` turns numpy values into JSON
types and non-finite floats into strings ("nan", "inf", "-inf"), which json.dump would write as
invalid JSON; `read_json` and `read_jsonl` undo it (`from_json`).
"""

import json
import math
import os
from collections.abc import Iterable

import numpy as np

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


def write_text(path: str, text: str) -> str:
  """Writes `text` to `path` atomically (a temporary file renamed over it); returns `path`."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  temporary = f"{path}.tmp"
  with open(temporary, "w") as f:
    f.write(text)
  os.replace(temporary, path)
  return path


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
  """Appends each record as one JSON line to `path` (created if missing)."""
  with open(path, "a") as f:
    for record in records:
      f.write(json.dumps(to_json(record)) + "\n")


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
