"""JSON results written whole and valid (NaN included), JSON lines that survive a cut append."""

import math
import os

import numpy as np
import pytest

from task_specific_learned_opt import files


def test_non_finite_and_numpy_values_round_trip_as_valid_json(tmp_path):
  path = str(tmp_path / "sub" / "result.json")
  value = {"a": np.float32(1.5), "b": [float("nan"), float("inf"), -math.inf], "c": np.arange(3)}
  files.write_json(path, value)
  with open(path) as f:
    text = f.read()
  assert "NaN" not in text and "Infinity" not in text  # Standard JSON only.
  back = files.read_json(path)
  assert back["a"] == 1.5 and back["c"] == [0, 1, 2]
  assert math.isnan(back["b"][0]) and back["b"][1:] == [math.inf, -math.inf]
  assert not os.path.exists(path + ".tmp")


def test_read_json_gives_the_default_for_a_missing_file_and_raises_without_one(tmp_path):
  assert files.read_json(str(tmp_path / "missing.json"), {}) == {}
  with pytest.raises(OSError):
    files.read_json(str(tmp_path / "missing.json"))


def test_jsonl_skips_a_cut_last_line_and_names_a_bad_earlier_one(tmp_path):
  path = str(tmp_path / "records.jsonl")
  assert files.read_jsonl(path) == []
  files.append_jsonl(path, [{"step": 1, "loss": float("nan")}, {"step": 2}])
  with open(path, "a") as f:
    f.write('{"step": 3, "lo')  # A crash in the middle of an append.
  records = files.read_jsonl(path)
  assert [r["step"] for r in records] == [1, 2] and math.isnan(records[0]["loss"])
  with open(path, "a") as f:
    f.write('\n{"step": 4}\n')
  with pytest.raises(ValueError, match="records.jsonl: line 3"):
    files.read_jsonl(path)
