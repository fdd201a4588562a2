"""What the binaries do with errors and stops: one line and the right exit status."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt.cli import common as cli
from task_specific_learned_opt.distributed import stopping, train_dir


def _run(error):
  @cli.exits_on_user_error
  def main(argv):
    del argv
    raise error

  with pytest.raises(SystemExit) as exit_:
    main(["binary"])
  return exit_.value.code


def test_a_stop_after_sigterm_exits_0_with_one_line(capsys):
  assert _run(stopping.Terminated()) == 0
  assert capsys.readouterr().err == "stopped by SIGTERM\n"


def test_a_failed_save_exits_non_zero_with_one_line():
  code = _run(train_dir.CheckpointError("Could not save outer step 3 in d: disk full.\nMore."))
  assert code == "error: Could not save outer step 3 in d: disk full. More."


def test_ctrl_c_exits_non_zero():
  assert _run(KeyboardInterrupt()) == "interrupted (state saved)"


def test_other_errors_are_not_hidden():
  with pytest.raises(ZeroDivisionError):
    _run(ZeroDivisionError())


# A fresh process for each: TensorFlow fixes its visible devices when it first runs an op.
_DEVICE_CHECK = """
import sys
import tensorflow as tf
from task_specific_learned_opt.cli import common as cli
try:
  cli.use_device(sys.argv[1])
except cli.DeviceError as e:
  print("DeviceError:", e)
  sys.exit(3)
print("GPUs:", len(tf.config.list_logical_devices("GPU")))
print("placed:", (tf.constant(1.0) + 1.0).device)
"""


def _device_check(device):
  return subprocess.run(
    [sys.executable, "-c", _DEVICE_CHECK, device], capture_output=True, text=True, timeout=600
  )


def test_device_cpu_hides_every_gpu_and_places_ops_on_the_cpu():
  done = _device_check("cpu")
  assert done.returncode == 0, done.stderr
  assert "GPUs: 0" in done.stdout and "placed: /job:localhost/replica:0/task:0/device:CPU:0" in (
    done.stdout
  )


def test_device_gpu_takes_one_gpu_or_says_there_is_none():
  done = _device_check("gpu")
  if tf.config.list_physical_devices("GPU"):
    assert done.returncode == 0, done.stderr
    assert "GPUs: 1" in done.stdout and "device:GPU:0" in done.stdout
  else:
    assert done.returncode == 3
    assert "--device gpu: TensorFlow sees no GPU" in done.stdout
    assert "--device cpu" in done.stdout


def test_train_local_refuses_a_missing_gpu_in_one_line(tmp_path):
  if tf.config.list_physical_devices("GPU"):
    pytest.skip("this machine has a GPU")
  done = subprocess.run(
    [
      sys.executable,
      os.path.join(testing_utils.REPO, "bin", "train_local"),
      "--device=gpu",
      f"--train_dir={tmp_path / 'train'}",
    ],
    capture_output=True,
    text=True,
    timeout=600,
    cwd=testing_utils.REPO,
  )
  assert done.returncode == 1
  last = done.stderr.strip().splitlines()[-1]
  assert last.startswith("error: --device gpu: TensorFlow sees no GPU"), done.stderr
  assert not (tmp_path / "train").exists()  # Refused before anything was written.


def test_an_unknown_device_is_named():
  with pytest.raises(cli.DeviceError, match="tpu"):
    cli.use_device("tpu")
