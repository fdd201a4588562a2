"""benchmarks/batched_worker.py times a batched worker against plain workers on the device it is
told, and with --max_separate_tasks times fewer plain workers than B and counts their samples."""

import json
import os
import subprocess
import sys

from . import testing_utils

SCRIPT = os.path.join(testing_utils.REPO, "benchmarks", "batched_worker.py")


def test_a_grouped_vectorized_batch_against_one_plain_worker_on_the_cpu(tmp_path):
  output = tmp_path / "result.json"
  command = [sys.executable, SCRIPT, f"--output={output}", "--device=cpu", "--tasks=2"]
  command += ["--num_steps=2", "--rounds=1", "--max_separate_tasks=1"]
  command += ["--variants=separate,grouped_vectorized"]
  command += [f"--gin_bindings={b}" for b in testing_utils.SMALL_QUICKSTART]
  environment = dict(os.environ, PYTHONPATH=testing_utils.REPO)
  subprocess.run(command, check=True, cwd=testing_utils.REPO, env=environment, timeout=600)
  with open(output) as f:
    result = json.load(f)
  assert result["device"] == "cpu"
  assert result["visible_devices"] and all("GPU" not in d for d in result["visible_devices"])
  (m,) = result["measurements"]
  separate, both = m["separate"], m["grouped_vectorized"]
  assert (m["tasks"], separate["samples"], both["samples"]) == (2, 1, 2)
  assert abs(separate["samples_per_second"] - 1 / separate["seconds"]) < 1e-9
  assert abs(both["samples_per_second"] - 2 / both["seconds"]) < 1e-9
  ratio = m["grouped_vectorized_over_separate_samples_per_second"]
  assert abs(ratio - both["samples_per_second"] / separate["samples_per_second"]) < 1e-9
