"""Starts a chief and N workers as separate processes on loopback ports (bin/launch_local).

For trying the cluster path on one machine: the same binaries and the same distributed runtime
as on a real cluster, with every address on 127.0.0.1. Logs go to <train_dir>/logs/. The
launcher waits for the chief; when it finishes the workers leave on their own, and the launcher
stops any that are still running. With an evaluator (bin/evaluator beside them), the launcher
also waits, once the chief has finished, for it to evaluate the last snapshots. Ctrl-C or
SIGTERM stops them all (the chief saves first).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

from absl import logging

from task_specific_learned_opt import files, gin_config

BIN_DIR = os.path.join(files.PROJECT_ROOT, "bin")


def free_ports(num: int) -> list[int]:
  """`num` TCP ports on 127.0.0.1 that were free a moment ago."""
  sockets = [socket.socket() for _ in range(num)]
  try:
    for s in sockets:
      s.bind(("127.0.0.1", 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def loopback_cluster(num_workers: int) -> dict[str, list[str]]:
  """A cluster spec of one chief and `num_workers` workers on free 127.0.0.1 ports.

  Args:
    num_workers: worker tasks in the spec.

  Returns:
    {"chief": ["127.0.0.1:port"], "worker": ["127.0.0.1:port", ...]}, as --cluster takes it.
  """
  ports = free_ports(num_workers + 1)
  return {
    "chief": [f"127.0.0.1:{ports[0]}"],
    "worker": [f"127.0.0.1:{p}" for p in ports[1:]],
  }


def binary(name: str) -> str:
  """bin/<name> of this checkout, else the installed script."""
  path = os.path.join(BIN_DIR, name)
  if os.path.exists(path):
    return path
  return os.path.join(os.path.dirname(sys.executable), name)


def role_command(
  role: str,
  cluster: dict[str, list[str]],
  gin_files: Sequence[str],
  gin_bindings: Sequence[str],
  *flags: str,
) -> list[str]:
  """The command line of one process of a cluster: bin/chief or bin/worker with its flags.

  Args:
    role: "chief" or "worker".
    cluster: the spec every process gets (--cluster).
    gin_files: --gin_file of every process.
    gin_bindings: --gin_bindings of every process.
    *flags: this process's own flags (--train_dir, --task_index).

  Returns:
    The argv to run, with this Python interpreter and an --import_module for each of the
    user's modules this process imported (gin_config.import_module_flags).
  """
  common = [f"--cluster={json.dumps(cluster)}"]
  common += [f"--gin_file={f}" for f in gin_files]
  common += [f"--gin_bindings={b}" for b in gin_bindings]
  common += gin_config.import_module_flags()
  return [sys.executable, binary(role), *common, *flags]


def launch(
  num_workers: int,
  train_dir: str,
  gin_files: Sequence[str],
  gin_bindings: Sequence[str],
  poll_secs: float = 1.0,
  evaluator: bool = False,
) -> int:
  """Runs the cluster until the chief exits; returns the chief's exit status.

  Args:
    num_workers: worker processes to start (bin/worker --task_index 0 ... num_workers - 1).
    train_dir: the chief's --train_dir; the processes' logs go to its logs/.
    gin_files: --gin_file of every process.
    gin_bindings: --gin_bindings of every process.
    poll_secs: how often the launcher checks on the processes.
    evaluator: also start bin/evaluator on the chief's train dir (outer_training.snapshot_every
      must be bound for it to have snapshots to evaluate).

  Returns:
    The chief's exit status (0 when outer-training finished).
  """
  spec = loopback_cluster(num_workers)
  log_dir = os.path.join(train_dir, "logs")
  os.makedirs(log_dir, exist_ok=True)

  def start(name: str, role: str, *flags: str) -> subprocess.Popen:
    log = open(os.path.join(log_dir, f"{name}.log"), "w")
    return subprocess.Popen(
      role_command(role, spec, gin_files, gin_bindings, *flags),
      stdout=log,
      stderr=subprocess.STDOUT,
      start_new_session=True,  # Ctrl-C reaches the launcher only; it stops the others in order.
    )

  processes = {"chief": start("chief", "chief", f"--train_dir={train_dir}")}
  for i in range(num_workers):
    processes[f"worker{i}"] = start(f"worker{i}", "worker", f"--task_index={i}")
  if evaluator:
    flags = (f"--train_dir={train_dir}", f"--poll_secs={poll_secs}")
    processes["evaluator"] = start("evaluator", "evaluator", *flags)
  logging.info(
    "Started a chief (PID %d) and %d workers%s on %s; logs in %s. TensorBoard: tensorboard "
    "--logdir %s",
    processes["chief"].pid,
    num_workers,
    " and an evaluator" if evaluator else "",
    ", ".join(spec["chief"] + spec["worker"]),
    log_dir,
    train_dir,
  )
  try:
    _wait_for_chief(processes, poll_secs)
  except KeyboardInterrupt:
    _interrupt_chief(processes["chief"])
  finally:
    _stop_all(processes)
  status = processes["chief"].returncode
  if status != 0:
    _report_failure(log_dir, status)
  return status


def _wait_for_chief(processes: dict[str, subprocess.Popen], poll_secs: float) -> None:
  """Until the chief exits (and then the evaluator, if any, once the chief succeeded).

  A worker that exits with an error is reported once; the others go on.
  """
  chief = processes["chief"]
  while chief.poll() is None:
    for name, p in processes.items():
      if name != "chief" and p.poll() not in (None, 0):
        logging.warning("%s exited with status %d; see %s.log.", name, p.returncode, name)
        p.returncode = 0  # Reported once.
    time.sleep(poll_secs)
  evaluator = processes.get("evaluator")
  if evaluator is not None and chief.returncode == 0 and evaluator.poll() is None:
    logging.info("The chief has finished; waiting for the evaluator's last snapshots.")
    while evaluator.poll() is None:
      time.sleep(poll_secs)


def _interrupt_chief(chief: subprocess.Popen) -> None:
  """Ctrl-C: SIGTERM to the chief, which saves a checkpoint; killed if it takes 2 minutes."""
  logging.info("Stopping: the chief saves a checkpoint first.")
  chief.send_signal(signal.SIGTERM)
  try:
    chief.wait(timeout=120)
  except subprocess.TimeoutExpired:
    chief.kill()


def _stop_all(processes: dict[str, subprocess.Popen]) -> None:
  """Gives every process 30 s in all to leave on its own, then terminates (and kills) it."""
  deadline = time.time() + 30
  for p in processes.values():
    while p.poll() is None and time.time() < deadline:
      time.sleep(0.2)
    if p.poll() is None:
      p.terminate()
      try:
        p.wait(timeout=10)
      except subprocess.TimeoutExpired:
        p.kill()


def _report_failure(log_dir: str, status: int) -> None:
  """Logs the chief's exit status with the last line of its log."""
  with open(os.path.join(log_dir, "chief.log")) as f:
    last = [line for line in f.read().splitlines() if line.strip()][-1:]
  logging.error("The chief exited with status %d: %s", status, last[0] if last else "")
