"""The cluster roles as real bin/chief and bin/worker processes on loopback.

The multi-process tests start bin/chief and bin/worker as separate processes. Where network
namespaces can be made (as root, with `ip`), a test's processes run in a namespace of their own
(harness/netns.py, a network of one host) and talk over its loopback, so no test server is
reachable from outside or from another test's processes; elsewhere they run on plain loopback.
"""

import itertools
import json
import os
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from harness import netns
from task_specific_learned_opt import checkpoints, layout
from task_specific_learned_opt.distributed import (
  cluster,
  launch,
  outer_training,
  progress,
  tf_runtime,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer.estimators import persistent_es, registry
from task_specific_learned_opt.tasks import quadratic

# ---------------------------------------------------------------------------------------------
# Real processes.


_NETWORKS = itertools.count()  # Tags: one process's networks need different names.


@pytest.fixture
def host():
  """A network namespace for a test's processes (host 0 of a one-host netns.TestNetwork), or
  None where none can be made (they then run on this machine's loopback)."""
  if netns.unavailable() is not None:
    yield None
    return
  network = netns.TestNetwork(1, tag=f"c{next(_NETWORKS)}")
  try:
    yield network
  finally:
    network.close()


def _on(host, args):
  """`args` run in `host`'s namespace (the process keeps its PID), or here if host is None."""
  return args if host is None else host.command(0, args)


SMOKE = [
  # The quickstart's machinery on quadratic tasks, which compile in a moment.
  "outer_training.family = @QuadraticFamily()",
  "QuadraticFamily.dim = 4",
  "outer_training.batch_size = 4",
  "Worker.horizon = 30",
  "LinearCurriculum.min_length = 3",
  "LinearCurriculum.max_length = 5",
  "outer_training.checkpoint_every_secs = 0",  # A checkpoint after every step.
  "run_chief.poll_secs = 0.05",
  "run_chief.linger_secs = 30",
]


EVALUATOR = [  # A small evaluation on quadratic tasks, every 2 outer steps.
  "outer_training.snapshot_every = 2",
  "Evaluator.test_family = @eval/QuadraticFamily()",
  "eval/QuadraticFamily.dim = 4",
  "Evaluator.num_tasks = 2",
  "Evaluator.num_steps = 30",
  "Evaluator.learning_rates = (0.01, 0.1)",
]


class Cluster:
  """bin/chief and bin/worker processes with logs in a directory; all killed at the end."""

  def __init__(self, directory, num_workers, steps, host=None):
    self.directory = directory
    self.host = host
    self.steps = steps  # Chief and workers must be given the same experiment.
    self.spec = launch.loopback_cluster(num_workers)
    self.train_dir = os.path.join(directory, "train")
    self.processes = []

  def start(self, role, name, *flags):
    args = [
      sys.executable,
      os.path.join(testing_utils.REPO, "bin", role),
      f"--cluster={json.dumps(self.spec)}",
      f"--gin_file={os.path.join(testing_utils.REPO, 'gin/quickstart.gin')}",
      *[f"--gin_bindings={b}" for b in SMOKE + [f"outer_training.num_outer_steps = {self.steps}"]],
      *flags,
    ]
    if role == "chief":
      args.append(f"--train_dir={self.train_dir}")
    log = open(os.path.join(self.directory, f"{name}.log"), "w")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(_on(self.host, args), stdout=log, stderr=subprocess.STDOUT, env=env)
    process.args = args  # Without the namespace's prefix: args[1] names the binary.
    process.log_path = log.name
    self.processes.append(process)
    return process

  def log(self, name):
    with open(os.path.join(self.directory, f"{name}.log")) as f:
      return f.read()

  def records(self):
    return progress.read_records(self.train_dir)

  def wait_for_step(self, step, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
      records = self.records()
      if records and records[-1]["outer_step"] >= step:
        return records[-1]["outer_step"]
      for p in self.processes:
        if p.poll() not in (None, 0):
          with open(p.log_path) as f:
            raise AssertionError(f"{p.args[1]} exited {p.returncode}:\n{f.read()[-3000:]}")
      time.sleep(0.2)
    raise AssertionError(f"No outer step {step} within {timeout} s:\n{self.log('chief')[-3000:]}")

  def kill_all(self):
    for p in self.processes:
      if p.poll() is None:
        p.kill()
        p.wait(timeout=30)


@pytest.fixture
def make_cluster(tmp_path, host):
  clusters = []

  def make(num_workers, steps=8):
    clusters.append(Cluster(str(tmp_path), num_workers, steps, host))
    return clusters[-1]

  yield make
  for c in clusters:
    c.kill_all()


def _wait(process, timeout=240):
  try:
    return process.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    with open(process.log_path) as f:
      raise AssertionError(f"{process.args[1]} did not finish:\n{f.read()[-3000:]}") from None


@pytest.mark.integration
def test_two_workers_a_killed_worker_and_a_mismatched_one(make_cluster):
  c = make_cluster(num_workers=2, steps=10)
  chief = c.start("chief", "chief")
  c.start("worker", "worker0", "--task_index=0")
  worker1 = c.start("worker", "worker1", "--task_index=1")
  c.wait_for_step(3)
  deadline = time.time() + 120
  while "worker 1: sample 1 " not in c.log("worker1") and time.time() < deadline:
    time.sleep(0.2)
  assert "worker 1: sample 1 " in c.log("worker1")
  worker1.send_signal(signal.SIGKILL)
  worker1.wait(timeout=30)
  killed_at = c.records()[-1]["outer_step"]
  # The freed task slot, taken by a worker with another experiment: refused, in one line.
  mismatched = c.start(
    "worker", "mismatched", "--task_index=1", "--gin_bindings=MLPLOpt.hidden_size = 8"
  )
  assert _wait(mismatched, timeout=120) == 1
  last_line = c.log("mismatched").strip().splitlines()[-1]
  assert last_line.startswith("error: This worker's experiment is not the chief's: theta's shapes")
  assert _wait(chief) == 0  # The chief kept stepping with one worker, to the end.
  steps = [r["outer_step"] for r in c.records()]
  assert steps == list(range(1, 11)) and killed_at < 10
  assert "Training finished" in c.log("chief")
  assert "worker 0 leaves" in c.log("worker0")
  theta = checkpoints.load_theta(
    os.path.join(c.train_dir, layout.THETA_DIRNAME), mlp_lopt.MLPLOpt()
  )
  assert not np.array_equal(
    tf.nest.flatten(theta)[0], tf.nest.flatten(mlp_lopt.MLPLOpt().init(0))[0]
  )


@pytest.mark.integration
@pytest.mark.parametrize("stop", ["SIGKILL", "SIGTERM"])
def test_a_chief_restarted_at_once_resumes_and_its_workers_carry_on(make_cluster, stop):
  c = make_cluster(num_workers=2, steps=10)
  chief = c.start("chief", "chief")
  workers = [c.start("worker", f"worker{i}", f"--task_index={i}") for i in range(2)]
  c.wait_for_step(3)
  chief.send_signal(getattr(signal, stop))
  assert chief.wait(timeout=60) == (0 if stop == "SIGTERM" else -signal.SIGKILL)
  saved = int(tf_latest_step(c.train_dir))
  # The same command at once: the dead chief's connections in TIME-WAIT do not hold the port.
  restarted = c.start("chief", "chief_restarted")
  assert _wait(restarted) == 0, c.log("chief_restarted")[-3000:]
  assert [_wait(w, timeout=120) for w in workers] == [0, 0]
  log = c.log("chief_restarted")
  assert "Resumed from" in log and f"outer step {saved + 1}/10" in log
  steps = [r["outer_step"] for r in c.records()]
  assert steps == list(range(1, 11))  # Continuous: nothing after the checkpoint kept twice.
  for i in range(2):
    assert "The chief restarted" in c.log(f"worker{i}")
    assert "Traceback" not in c.log(f"worker{i}")


def tf_latest_step(train_dir):
  path = tf.train.latest_checkpoint(os.path.join(train_dir, layout.CHECKPOINT_DIRNAME))
  return None if path is None else path.rsplit("-", 1)[1]


@pytest.mark.integration
def test_sigterm_stops_chief_and_worker_cleanly_and_a_train_dir_keeps_its_experiment(
  make_cluster,
):
  c = make_cluster(num_workers=1, steps=100000)  # Still training when SIGTERM comes.
  lonely = c.start("worker", "lonely", "--task_index=0", "--chief_timeout_secs=3")
  assert _wait(lonely, timeout=120) == 1
  last_line = c.log("lonely").strip().splitlines()[-1]
  assert last_line.startswith("error: The chief at ") and "has not answered" in last_line
  c.processes.remove(lonely)
  rarely = "--gin_bindings=outer_training.checkpoint_every_secs = 600"  # Both: one experiment.
  chief = c.start("chief", "chief", rarely)
  worker = c.start("worker", "worker0", "--task_index=0", rarely)
  c.wait_for_step(2)
  chief.send_signal(signal.SIGTERM)
  assert _wait(chief, timeout=60) == 0  # A clean stop, for a supervisor.
  assert tf_latest_step(c.train_dir) is not None, c.log("chief")[-4000:]
  saved = int(tf_latest_step(c.train_dir))
  assert saved >= 2 and c.log("chief").strip().splitlines()[-1] == "stopped by SIGTERM"
  assert saved == c.records()[-1]["outer_step"]  # Nothing recorded after the checkpoint.
  # The worker now waits for the chief: SIGTERM makes it leave at once, with one line.
  deadline = time.time() + 60
  while "unreachable" not in c.log("worker0") and time.time() < deadline:
    time.sleep(0.2)
  sent = time.time()
  worker.send_signal(signal.SIGTERM)
  assert _wait(worker, timeout=30) == 0 and time.time() - sent < 5
  log = c.log("worker0")
  assert log.strip().splitlines()[-1] == "worker 0: stopped (SIGTERM)" and "Traceback" not in log
  # Another experiment on this train dir is refused in one line, and changes nothing.
  before = sorted(os.listdir(c.train_dir))
  other = c.start("chief", "other", rarely, "--gin_bindings=Chief.learning_rate = 0.1")
  assert _wait(other, timeout=120) == 1
  last_line = c.log("other").strip().splitlines()[-1]
  assert last_line.startswith("error: ") and "holds another experiment" in last_line
  assert "Chief.learning_rate" in last_line and sorted(os.listdir(c.train_dir)) == before


@pytest.mark.integration
def test_launch_local_runs_a_chief_and_workers_to_the_end(tmp_path, host):
  train_dir = tmp_path / "train"
  args = [
    sys.executable,
    os.path.join(testing_utils.REPO, "bin", "launch_local"),
    "--num_workers=2",
    f"--train_dir={train_dir}",
    f"--gin_file={os.path.join(testing_utils.REPO, 'gin/quickstart.gin')}",
    "--evaluator",
    *[f"--gin_bindings={b}" for b in SMOKE + EVALUATOR + ["outer_training.num_outer_steps = 3"]],
  ]
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
  done = subprocess.run(_on(host, args), capture_output=True, text=True, timeout=300, env=env)
  assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
  assert "Started a chief" in done.stderr and "and an evaluator" in done.stderr
  assert [r["outer_step"] for r in progress.read_records(str(train_dir))] == [1, 2, 3]
  logs = sorted(os.listdir(train_dir / "logs"))
  assert logs == ["chief.log", "evaluator.log", "worker0.log", "worker1.log"]
  for name in ("worker0", "worker1"):
    assert "The chief has finished" in (train_dir / "logs" / f"{name}.log").read_text()
  # The evaluator evaluated every snapshot (steps 0, 2 and the last, 3), then left on its own.
  with open(train_dir / layout.EVALUATION_PROGRESS_FILENAME) as f:
    assert [json.loads(line)["outer_step"] for line in f] == [0, 2, 3]
  log = (train_dir / "logs" / "evaluator.log").read_text()
  assert "every snapshot is evaluated" in log and "Traceback" not in log


# ---------------------------------------------------------------------------------------------
# In process, no servers: what a worker task builds from the gin files it shares with the chief.


@pytest.mark.parametrize(
  "estimator, persistent",
  [(None, False), ("es", False), ("rp", False), ("pes", True), ("pes_merged", True)],
)
def test_a_worker_task_runs_the_experiments_estimator(estimator, persistent):
  if estimator is not None:
    gin.bind_parameter("outer_training.estimator", estimator)
  lopt = mlp_lopt.MLPLOpt()
  setup = outer_training.outer_training(family=quadratic.QuadraticFamily(dim=4), lopt=lopt)
  worker = cluster.make_worker(setup, index=1, worker_run=5)
  assert type(worker.estimator) is registry.ESTIMATORS[estimator or "merged"]
  assert (worker.estimator.state_type is persistent_es.PESState) == persistent
  assert worker.worker_id == 1
  # A worker whose binding differs from the chief's is refused: the binding is in the
  # fingerprint both roles compare.
  template = tf.nest.map_structure(np.asarray, lopt.init(0))
  mine = tf_runtime.fingerprint(template)
  gin.bind_parameter("outer_training.estimator", "merged" if persistent else "pes")
  assert tf_runtime.mismatch_message(tf_runtime.fingerprint(template), mine) is not None
