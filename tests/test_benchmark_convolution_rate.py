"""benchmarks/convolution_rate.py times every kernel of every conv layer of the CNN it is given
and states their rates against the right number of floating-point operations."""

import json
import os
import subprocess
import sys

from . import testing_utils

SCRIPT = os.path.join(testing_utils.REPO, "benchmarks", "convolution_rate.py")


def test_a_small_cnns_kernels_are_timed_with_their_operations(tmp_path):
  output = tmp_path / "result.json"
  command = [sys.executable, SCRIPT, f"--output={output}", "--batch_size=2", "--channels=4"]
  command += ["--image_size=9", "--strides=2,1", "--iterations=3", "--rounds=2"]
  environment = dict(os.environ, PYTHONPATH=testing_utils.REPO, CUDA_VISIBLE_DEVICES="")
  subprocess.run(command, check=True, cwd=testing_utils.REPO, env=environment, timeout=300)
  with open(output) as f:
    result = json.load(f)
  layers = result["layers"]
  # SAME padding: 9x9 -> 5x5 at stride 2, then 5x5 at stride 1; 3 then 4 input channels.
  assert [(x["size"], x["in_channels"], x["out_size"]) for x in layers] == [(9, 3, 5), (5, 4, 5)]
  assert [x["flops_per_call"] for x in layers] == [2 * 2 * 25 * 9 * 3 * 4, 2 * 2 * 25 * 9 * 4 * 4]
  for i, layer in enumerate(layers):
    for kernel in ("forward", "input_gradient", "filter_gradient", "gemm"):
      seconds = result["seconds"][f"layer{i + 1}/{kernel}"]
      assert len(seconds) == 2 and min(seconds) > 0
      rate = layer["gflops_per_second"][kernel]
      assert (
        abs(rate - layer["flops_per_call"] / (1e3 * layer["microseconds"][kernel])) < 1e-6 * rate
      )
      assert abs(layer["fraction_of_gemm"][kernel] * layer["gflops_per_second"]["gemm"] - rate) < (
        1e-6 * rate
      )
    assert layer["fraction_of_gemm"]["gemm"] == 1.0
