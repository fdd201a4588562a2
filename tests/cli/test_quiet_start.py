"""A binary starts without TensorFlow's C++ notices; a user's TF_CPP_MIN_LOG_LEVEL wins."""

import logging
import os
import re
import subprocess
import sys

import gin
import pytest

from task_specific_learned_opt import gin_config
from task_specific_learned_opt.cli import configurables, quiet_start  # noqa: F401 - gin names.

# TensorFlow's C++ log lines ("I0000 00:00:... port.cc:153] oneDNN ...", "E0000 ... cuInit")
# and absl's note that precedes them.
_CPP_LINE = re.compile(r"^[IWEF]\d{4} |absl::InitializeLog")
_START = "from task_specific_learned_opt.cli import quiet_start; quiet_start.start(); "
_USE_TF = "import tensorflow as tf; print(float(tf.reduce_sum(tf.ones([3]))))"


def _stderr_lines(code: str, env: dict) -> list[str]:
  result = subprocess.run(
    [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, check=True
  )
  assert result.stdout.strip() == "3.0"
  return [line for line in result.stderr.splitlines() if _CPP_LINE.search(line)]


@pytest.mark.integration
def test_start_hides_tensorflows_cpp_notices_unless_the_user_sets_the_level():
  env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
  plain = _stderr_lines(_USE_TF, env)
  if not plain:
    pytest.skip("TensorFlow prints no C++ start-up notices on this machine: nothing to hide.")
  assert _stderr_lines(_START + _USE_TF, env) == []
  # The user's own level wins: notices as without start() (how many varies with the load).
  assert _stderr_lines(_START + _USE_TF, {**env, "TF_CPP_MIN_LOG_LEVEL": "0"})


def test_start_changes_nothing_when_the_user_set_the_level(monkeypatch):
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
  assert not quiet_start.start()
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_tensorflow_info_records_are_dropped_and_the_rest_kept():
  keep = quiet_start.TensorFlowInfoFilter().filter

  def record(path: str, level: int) -> logging.LogRecord:
    return logging.LogRecord("absl", level, path, 1, "message", None, None)

  tf_file = os.path.join("site-packages", "tensorflow", "python", "checkpoint", "saver.py")
  assert not keep(record(tf_file, logging.INFO))
  assert keep(record(tf_file, logging.WARNING))
  assert keep(record(os.path.join("task_specific_learned_opt", "files.py"), logging.INFO))


def test_an_include_found_in_gin_dir_logs_no_path_not_found(caplog, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # The include is not found from here, only under gin/.
  caplog.set_level(logging.INFO)
  gin.clear_config()
  gin_config.parse(["gin/original_code/valid_objective.gin"])
  assert not [r for r in caplog.records if "Path not found" in r.getMessage()]
  assert not [r for r in caplog.records if "system_path_file_exists" in r.getMessage()]
  # Gin's own parse logs both for the same include: what the checks above would catch.
  caplog.clear()
  gin.clear_config()
  gin.parse_config_file(os.path.join(gin_config.GIN_DIR, "original_code", "valid_objective.gin"))
  assert [r for r in caplog.records if "Path not found" in r.getMessage()]
  assert [r for r in caplog.records if "system_path_file_exists" in r.getMessage()]
  gin.clear_config()
