"""A cluster of real bin/chief and bin/worker processes, for fault tests and fault benchmarks.

Each process runs on its own host of a netns.TestNetwork (the chief on host 0, worker i on host
i + 1, all on port 2222 of their host's address), or, without a network, on loopback ports of
this machine. The cluster starts, kills and restarts them, keeps one log file per start, and
checks from the chief's train dir what must hold after any fault (`invariants`):

  - progress.jsonl holds every outer step once, 1, 2, ..., in order;
  - no sample (worker, worker run, sample index) was applied twice;
  - theta is finite, and the exported theta equals the last checkpoint's.

Used by tests/distributed/test_partitions.py and benchmarks/soak.py.
"""

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from harness import netns
from task_specific_learned_opt import checkpoints, layout
from task_specific_learned_opt.distributed import chief_update, launch, progress
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.learned_optimizers import mlp_lopt

PORT = 2222
# cgroup v1's CPU controller, where a cluster's CPU can be capped (cap_cpu).
CPU_CGROUPS = "/sys/fs/cgroup/cpu"
CPU_PERIOD_US = 100_000
_CGROUP = re.compile(r"^tslo_cluster_(\d+)_\d+$")
WORKER_PUT = re.compile(r"worker \d+: sample (\d+) at")
# An absl log line's prefix: severity, MMDD, HH:MM:SS.micros.
LOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) ")


def log_time(line: str, now: float | None = None) -> float | None:
  """The time (seconds since the epoch, this machine's zone) an absl log line was written."""
  match = LOG_TIME.match(line)
  if match is None:
    return None
  month, day, hour, minute, second = match.groups()
  year = time.localtime(now).tm_year
  whole = time.mktime((year, int(month), int(day), int(hour), int(minute), 0, 0, 0, -1))
  return whole + float(second)


class HostCluster:
  """A chief and `num_workers` workers of one experiment, with logs in `<train_dir>/logs/`."""

  def __init__(
    self,
    train_dir: str,
    num_workers: int,
    gin_files: Sequence[str],
    gin_bindings: Sequence[str],
    network: netns.TestNetwork | None = None,
    worker_flags: Sequence[str] = (),
    log_dir: str | None = None,
    nice: int = 0,
  ):
    """Makes the cluster spec; starts nothing.

    Args:
      train_dir: the chief's train dir.
      num_workers: worker tasks.
      gin_files: every process's --gin_file.
      gin_bindings: every process's --gin_bindings.
      network: a network of at least num_workers + 1 hosts; None: loopback ports.
      worker_flags: more flags for every worker (e.g. --chief_timeout_secs).
      log_dir: where the logs go (default `<train_dir>/logs`; elsewhere when the train dir's
        disk is to be filled).
      nice: the processes' niceness (a soak run beside other work).
    """
    self.train_dir = train_dir
    self.network = network
    if network is None:
      self.spec = launch.loopback_cluster(num_workers)
    else:
      if len(network.hosts) < num_workers + 1:
        raise ValueError(f"{num_workers} workers and a chief need {num_workers + 1} hosts.")
      self.spec = {
        "chief": [f"{network.addresses[0]}:{PORT}"],
        "worker": [f"{a}:{PORT}" for a in network.addresses[1 : num_workers + 1]],
      }
    self.names = ["chief"] + [f"worker{i}" for i in range(num_workers)]
    self.gin_files, self.gin_bindings = list(gin_files), list(gin_bindings)
    self.worker_flags = list(worker_flags)
    self.log_dir = log_dir or os.path.join(train_dir, "logs")
    self.nice = int(nice)
    os.makedirs(self.log_dir, exist_ok=True)
    self.processes, self.starts, self.logs = {}, {}, {}
    self.cgroup: str | None = None

  def host(self, name: str) -> int:
    """The network host `name` runs on."""
    return 0 if name == "chief" else int(name[len("worker") :]) + 1

  def start(self, name: str, *flags: str) -> subprocess.Popen:
    """Starts (or restarts) process `name` ("chief" or "worker<i>") with its own log file."""
    if name == "chief":
      role, own = "chief", [f"--train_dir={self.train_dir}"]
    else:
      role, own = "worker", [f"--task_index={self.host(name) - 1}", *self.worker_flags]
    command = launch.role_command(role, self.spec, self.gin_files, self.gin_bindings, *own, *flags)
    if self.network is not None:
      command = self.network.command(self.host(name), command)
    if self.nice:
      command = ["nice", "-n", str(self.nice), *command]
    count = len(self.logs.setdefault(name, []))
    path = os.path.join(self.log_dir, f"{name}.{count}.log")
    self.logs[name].append(path)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
    with open(path, "w") as log:
      self.processes[name] = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
      )
    self.starts[name] = time.time()
    if self.cgroup is not None:
      self._join_cgroup(self.processes[name].pid)
    return self.processes[name]

  def cap_cpu(self, cores: float) -> str | None:
    """Caps the CPU time of the cluster's processes, running and later started, to `cores`
    cores in all (a cgroup of the CPU controller); None if capped, else why it could not be.

    Tests whose processes compute samples as fast as they can while the test waits out a
    fault call it once the cluster is up: what they check needs a few samples a second, and
    the cores go to whatever else the machine runs.
    """
    if not os.path.exists(os.path.join(CPU_CGROUPS, "cpu.cfs_quota_us")):
      return f"no cgroup v1 CPU controller at {CPU_CGROUPS}"  # Nothing is made elsewhere.
    for name in os.listdir(CPU_CGROUPS):  # Left by test processes that were killed.
      match = _CGROUP.match(name)
      if match is not None and not os.path.exists(f"/proc/{match.group(1)}"):
        with contextlib.suppress(OSError):  # Not empty: a process in it still runs.
          os.rmdir(os.path.join(CPU_CGROUPS, name))
    path = os.path.join(CPU_CGROUPS, f"tslo_cluster_{os.getpid()}_{id(self)}")
    try:
      os.mkdir(path)
      with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
        f.write(str(CPU_PERIOD_US))
      with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(int(cores * CPU_PERIOD_US)))
    except OSError as e:
      if os.path.isdir(path):
        os.rmdir(path)
      return f"no CPU cgroup at {CPU_CGROUPS}: {e}"
    self.cgroup = path
    for process in self.processes.values():
      if process.poll() is None:
        self._join_cgroup(process.pid)
    return None

  def _join_cgroup(self, pid: int) -> None:
    try:
      with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
        f.write(str(pid))
    except ProcessLookupError:
      pass  # It has exited already.

  def start_all(self) -> None:
    """Starts the chief and every worker."""
    for name in self.names:
      self.start(name)

  def log(self, name: str, index: int = -1) -> str:
    """The log of start `index` of `name` (the latest by default)."""
    with open(self.logs[name][index]) as f:
      return f.read()

  def first_line_after(self, name: str, text: str, after: float) -> float | None:
    """When `name`'s latest log first has a line containing `text` written after `after`."""
    for line in self.log(name).splitlines():
      written = log_time(line)
      if written is not None and written >= after and text in line:
        return written
    return None

  def samples_put(self, name: str) -> int:
    """The highest sample count worker `name`'s latest start has logged (0 if none)."""
    counts = WORKER_PUT.findall(self.log(name))
    return int(counts[-1]) if counts else 0

  def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
    """Sends `sig` to `name` and waits for it to exit."""
    process = self.processes[name]
    process.send_signal(sig)
    process.wait(timeout=120)

  def running(self, name: str) -> bool:
    """Whether `name` was started and has not exited."""
    return name in self.processes and self.processes[name].poll() is None

  def records(self) -> list[dict]:
    """The chief's progress records so far."""
    return progress.read_records(self.train_dir)

  def outer_step(self) -> int:
    """The last outer step the chief recorded (0 before the first)."""
    records = self.records()
    return records[-1]["outer_step"] if records else 0

  def wait_for_step(self, step: int, timeout: float) -> int:
    """Waits until the chief has recorded outer step `step`; returns the step reached.

    Raises:
      AssertionError: not within `timeout` seconds, or the chief exited with an error.
    """
    deadline = time.time() + timeout
    while time.time() < deadline:
      reached = self.outer_step()
      if reached >= step:
        return reached
      chief = self.processes.get("chief")
      if chief is not None and chief.poll() not in (None, 0):
        raise AssertionError(f"The chief exited {chief.returncode}:\n{self.log('chief')[-3000:]}")
      time.sleep(0.2)
    raise AssertionError(f"No outer step {step} within {timeout} s:\n{self.log('chief')[-3000:]}")

  def workers_in_steps_after(self, step: int) -> set[int]:
    """The worker ids whose samples the chief applied in outer steps after `step`.

    Needs outer_training.record_samples = True.
    """
    return {
      int(s[0]) for r in self.records() if r["outer_step"] > step for s in r.get("samples", [])
    }

  def wait_for_worker(self, worker: int, after_step: int, timeout: float) -> float | None:
    """Seconds until a sample of `worker` is applied in a step after `after_step`; None if not
    within `timeout`."""
    start = time.time()
    while time.time() - start < timeout:
      if worker in self.workers_in_steps_after(after_step):
        return time.time() - start
      time.sleep(0.2)
    return None

  def stop_all(self, timeout: float = 120) -> dict[str, int | None]:
    """SIGTERM to every running process, the chief first; their exit statuses (None: killed
    after `timeout`)."""
    for name in sorted(self.processes, key=lambda n: n != "chief"):
      if self.processes[name].poll() is None:
        self.processes[name].send_signal(signal.SIGTERM)
    statuses = {}
    for name, process in self.processes.items():
      try:
        statuses[name] = process.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=60)
        statuses[name] = None
    return statuses

  def kill_all(self) -> None:
    """SIGKILL to every process still running (a test's cleanup)."""
    for process in self.processes.values():
      if process.poll() is None:
        process.kill()
        process.wait(timeout=60)
    if self.cgroup is not None:
      try:
        os.rmdir(self.cgroup)  # Empty once its processes have exited.
      except OSError:
        pass
      self.cgroup = None


def invariants(train_dir: str, lopt: lopt_base.LearnedOptimizer | None = None) -> dict:
  """What must hold in a chief's train dir after any fault (see the module's docstring).

  Args:
    train_dir: the chief's train dir, its processes stopped.
    lopt: the learned optimizer theta belongs to (default: MLPLOpt()).

  Returns:
    {"final_outer_step", "steps_each_once_in_order", "samples_applied",
     "no_sample_applied_twice", "theta_finite", "theta_export_equals_last_checkpoint",
     "last_checkpoint"}; the sample checks need outer_training.record_samples = True.
  """
  lopt = lopt if lopt is not None else mlp_lopt.MLPLOpt()
  records = progress.read_records(train_dir)
  steps = [r["outer_step"] for r in records]
  applied = [tuple(s[:3]) for r in records for s in r.get("samples", [])]
  exported = checkpoints.load_theta(layout.theta_dir(train_dir), lopt)
  latest = tf.train.latest_checkpoint(layout.checkpoint_dir(train_dir))
  chief = chief_update.Chief(lopt)
  tf.train.Checkpoint(**chief.checkpoint_items()).read(latest).expect_partial()
  pairs = zip(tf.nest.flatten(exported), tf.nest.flatten(chief.theta_numpy()), strict=True)
  return {
    "final_outer_step": steps[-1] if steps else 0,
    "steps_each_once_in_order": steps == list(range(1, len(steps) + 1)),
    "samples_applied": len(applied),
    "no_sample_applied_twice": len(applied) == len(set(applied)),
    "theta_finite": all(bool(np.all(np.isfinite(a))) for a in tf.nest.flatten(exported)),
    "theta_export_equals_last_checkpoint": bool(all(np.array_equal(a, b) for a, b in pairs)),
    "last_checkpoint": os.path.basename(latest),
  }
