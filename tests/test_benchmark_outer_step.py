"""benchmarks/outer_step.py's op profile runs on the current package (it builds the truncation
as the profile mode splits it, `_truncation_fns`) and says what it measures: the op times lie
inside the executor's, and the CNN's convolutions are there."""

import json
import os
import subprocess
import sys

from . import testing_utils

SCRIPT = os.path.join(testing_utils.REPO, "benchmarks", "outer_step.py")
SMALL = [
  *testing_utils.SMALL_QUICKSTART,
  "train_local.num_workers = 2",
  "outer_training.batch_size = 2",
]


def _run(tmp_path, *args) -> dict:
  output = tmp_path / "result.json"
  command = [sys.executable, SCRIPT, f"--output={output}", *args]
  command += [f"--gin_bindings={b}" for b in SMALL]
  environment = dict(os.environ, PYTHONPATH=testing_utils.REPO, CUDA_VISIBLE_DEVICES="")
  subprocess.run(command, check=True, cwd=testing_utils.REPO, env=environment, timeout=600)
  with open(output) as f:
    return json.load(f)


def test_the_op_profile_sums_the_ops_of_one_sample_inside_the_executors_time(tmp_path):
  result = _run(tmp_path, "--mode=ops", "--num_steps=2", "--repeats=1")
  seconds, calls = result["op_seconds_per_sample"], result["op_calls_per_sample"]
  assert result["num_steps"] == 2 and set(seconds) == set(calls)
  assert not [name for name in seconds if "::" in name]  # Bookkeeping events are left out.
  # Forward and both backward kernels of the CNN's convolutions, in every sample.
  assert any("Conv2DBackpropFilter" in name for name in seconds)
  assert any("Conv2DBackpropInput" in name for name in seconds)
  assert 0 < sum(seconds.values()) <= result["executor_seconds_per_sample"]
  assert result["wall_seconds_per_sample"] > 0
