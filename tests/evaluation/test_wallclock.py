"""The wall-clock benchmark (App. I): its statistics, its library function and bin/wallclock."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import checkpoints, inner_training
from task_specific_learned_opt.evaluation import wallclock
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam, sgd
from task_specific_learned_opt.tasks import networks, quadratic, random_data

GIN_FILE = os.path.join(testing_utils.REPO, "gin/benchmark/paper_cnn.gin")
SMOKE = [
  "paper_cnn.channels = 4",
  "RandomDataTask.image_shape = (8, 8, 3)",
  "RandomDataTask.batch_size = 16",
]


def _tiny_task():
  model = networks.ConvNet(channels=(4,), strides=(2,))
  return random_data.RandomDataTask(model, image_shape=(8, 8, 3), batch_size=16)


def _optimizers():
  return {"sgd": sgd.SGD(0.01), "adam": adam.Adam(), "mlp_lopt": mlp_lopt.MLPLOpt()}


def test_summary_and_per_round_ratios_worked_numbers():
  s = wallclock.summarize([90.0, 100.0, 80.0, 110.0])
  assert (s["median"], s["min"], s["max"]) == (95.0, 80.0, 110.0)
  assert (s["q25"], s["q75"]) == (87.5, 102.5)
  # Rounds 1-3: 0.5, 0.9, 1.0 -> median 0.9 (a slow round for both does not move it).
  r = wallclock.round_ratios([50.0, 90.0, 20.0], [100.0, 100.0, 20.0])
  assert r["median"] == pytest.approx(0.9)
  assert r["values"] == pytest.approx([0.5, 0.9, 1.0])


def test_check_device():
  assert wallclock.check_device("/CPU:0") == "/device:CPU:0"
  assert wallclock.check_device("cpu:0") == "/device:CPU:0"
  with pytest.raises(wallclock.DeviceNotFoundError, match="GPU:7.*does not exist.*CPU:0"):
    wallclock.check_device("/GPU:7")
  with pytest.raises(wallclock.DeviceNotFoundError):
    wallclock.check_device("/not a device")


def _assert_ratios_are_per_round(result):
  """Each reported ratio is the median of the ratios of the rates recorded in the same round.

  With an odd number of rounds the median is one of the per-round ratios, so the check is exact.
  """
  rates = result["batches_per_second"]
  assert set(result["ratios"]) == {"mlp_lopt/sgd", "mlp_lopt/adam"}
  for key, s in result["ratios"].items():
    num, den = key.split("/")
    per_round = [n / d for n, d in zip(rates[num]["values"], rates[den]["values"], strict=True)]
    assert len(per_round) == result["repetitions"] and len(per_round) % 2 == 1
    assert s["values"] == per_round, key
    assert s["median"] == sorted(per_round)[len(per_round) // 2] == np.median(per_round), key
    assert (s["min"], s["max"]) == (min(per_round), max(per_round)), key


def test_run_on_a_tiny_model_interleaves_and_reports(tmp_path):
  result = wallclock.run(
    str(tmp_path),
    task=_tiny_task(),
    optimizers=_optimizers(),
    num_steps=10,
    repetitions=3,
    warmup=1,
  )
  assert result == json.load(open(tmp_path / wallclock.RESULTS_FILENAME))
  assert result["order"] == ["sgd", "adam", "mlp_lopt"] * 3
  for s in result["batches_per_second"].values():
    assert len(s["values"]) == 3 and s["min"] > 0
    assert s["median"] == sorted(s["values"])[1] and (s["min"], s["max"]) == (
      min(s["values"]),
      max(s["values"]),
    )
  _assert_ratios_are_per_round(result)
  env = result["environment"]
  assert env["device"] == "/device:CPU:0" and env["tensorflow"] == tf.__version__
  assert env["xla_update"] == [] and env["inter_op_threads"] >= 0
  assert result["num_params"] == 3 * 3 * 3 * 4 + 4 + 4 * 10 + 10
  assert result["paper_batches_per_second"]["cpu"]["mlp_lopt"] == 80.0


class _FakeClock:
  """A stand-in for the time module whose timed calls last the given durations, in order."""

  def __init__(self, durations):
    self._ticks = iter(np.concatenate([[0.0, d] for d in durations]))

  def perf_counter(self):
    return float(next(self._ticks))


def test_ratios_are_medians_of_per_round_ratios_on_a_known_clock(tmp_path, monkeypatch):
  # Batches/s per round (sgd, adam, mlp_lopt): chosen so that the median of the per-round ratios,
  # the ratio of the medians and the mean of the ratios all differ.
  rates = {"sgd": [200.0, 25.0, 40.0], "adam": [100.0, 20.0, 50.0], "mlp_lopt": [50.0, 10.0, 40.0]}
  num_steps = 4
  durations = [num_steps / rates[name][r] for r in range(3) for name in rates]
  monkeypatch.setattr(wallclock, "time", _FakeClock(durations))
  result = wallclock.run(
    str(tmp_path),
    task=quadratic.QuadraticTask(dim=4),
    optimizers=_optimizers(),
    num_steps=num_steps,
    repetitions=3,
    warmup=1,
  )
  for name, expected in rates.items():
    assert result["batches_per_second"][name]["values"] == pytest.approx(expected, rel=1e-12)
  ratios = result["ratios"]
  # mlp_lopt/adam per round: 0.5, 0.5, 0.8 -> 0.5 (ratio of medians 40/50 = 0.8, mean 0.6).
  assert ratios["mlp_lopt/adam"]["values"] == pytest.approx([0.5, 0.5, 0.8], rel=1e-12)
  assert ratios["mlp_lopt/adam"]["median"] == pytest.approx(0.5, rel=1e-12)
  # mlp_lopt/sgd per round: 0.25, 0.4, 1.0 -> 0.4 (ratio of medians 40/40 = 1, mean 0.55).
  assert ratios["mlp_lopt/sgd"]["values"] == pytest.approx([0.25, 0.4, 1.0], rel=1e-12)
  assert ratios["mlp_lopt/sgd"]["median"] == pytest.approx(0.4, rel=1e-12)
  _assert_ratios_are_per_round(result)
  assert "mlp_lopt/adam: median 0.500 [min 0.500, max 0.800]" in wallclock.format_table(result)


def test_run_loads_an_exported_theta(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(5))
  result = wallclock.run(
    str(tmp_path),
    task=_tiny_task(),
    optimizers={"sgd": sgd.SGD(0.01), "mlp_lopt": lopt},
    num_steps=5,
    repetitions=1,
    warmup=1,
    theta_dir=theta_dir,
  )
  assert result["theta"] == theta_dir and set(result["ratios"]) == {"mlp_lopt/sgd"}


def test_train_fn_does_not_retrace_for_new_lengths_or_seeds():
  task = quadratic.QuadraticTask(dim=4)
  opt_fn, theta = wallclock.optimizer_fn(mlp_lopt.MLPLOpt()), mlp_lopt.MLPLOpt().init(0)
  train = inner_training.make_train_fn(task, opt_fn, theta)
  state = opt_fn(theta).init(task.init_params(0))
  for num_steps, seed in ((3, 1), (5, 2), (4, [7, 8])):
    _, losses = train(state, num_steps, seed)
    assert losses.shape == (num_steps,)
  assert train.tracing_count() == 1


def test_a_jit_compiled_update_gives_the_same_steps():
  task = quadratic.QuadraticTask(dim=6)
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)
  results = []
  for xla in (False, True):
    opt_fn = wallclock.optimizer_fn(lopt, xla_update=xla)
    train = inner_training.make_train_fn(task, opt_fn, theta)
    results.append(train(opt_fn(theta).init(task.init_params(0)), 3, 1)[0].params["w"].numpy())
  np.testing.assert_allclose(results[0], results[1], rtol=1e-5, atol=1e-6)


def _run_binary(argv, tmp_path):
  """Runs bin/benchmark in its own process (its flags are its own), with a short timeout."""
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
  return subprocess.run(
    [sys.executable, os.path.join(testing_utils.REPO, "bin", "benchmark"), *argv],
    capture_output=True,
    text=True,
    timeout=300,
    cwd=tmp_path,
    env=env,
  )


@pytest.mark.integration
def test_main_writes_json_and_config(tmp_path):
  argv = [f"--output_dir={tmp_path}", "--num_steps=5", "--repetitions=3"]
  argv += ["--warmup=1", f"--gin_file={GIN_FILE}"]
  argv += [f"--gin_bindings={b}" for b in SMOKE]
  done = _run_binary(argv, tmp_path)
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.load(open(tmp_path / wallclock.RESULTS_FILENAME))
  assert result["order"] == ["sgd", "adam", "mlp_lopt"] * 3 and result["num_steps"] == 5
  _assert_ratios_are_per_round(result)  # From the rates in benchmark.json, as written.
  assert "paper_cnn.channels = 4" in open(tmp_path / "operative_config.gin").read()
  assert "mlp_lopt/adam: median" in done.stdout


@pytest.mark.integration
def test_a_bad_device_exits_with_one_line(tmp_path):
  done = _run_binary(
    [f"--output_dir={tmp_path}", "--device=/GPU:9", f"--gin_file={GIN_FILE}"], tmp_path
  )
  assert done.returncode == 1
  message = done.stderr.strip().splitlines()[-1]
  assert message.startswith("error: Device '/GPU:9' does not exist"), done.stderr[-2000:]
  assert not os.path.exists(tmp_path / wallclock.RESULTS_FILENAME)
