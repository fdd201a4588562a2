"""A soak run: a cluster on a private test network under mixed faults for half an hour or more.

  python benchmarks/soak.py --duration_secs 1800 --output benchmarks/results/soak.json

A chief and --num_workers workers, each on its own host of a test network (network namespaces
joined by a bridge, harness/netns.py), outer-train quadratic tasks with the quickstart's
machinery (a checkpoint every 10 s, the applied samples recorded); the chief's train dir is on a
small tmpfs of its own. Every 15-45 s (seeded) one fault, drawn from:

  kill_chief      SIGKILL the chief, start it again at once
  kill_worker     SIGKILL a worker, start it again at once
  cut_worker      take a worker's link down for 10-60 s, then up
  cut_chief       take the chief's link down for 10-45 s, then up
  flap_worker     a worker's link down 3 s, up 3 s, for 30 s
  disk_full       fill the chief's disk to the last byte; the chief stops with one line; free
                  the space and start it again

It measures each fault's recovery (the chief: from the fault to its first new outer step; a
worker: from its restart or heal to its first sample applied) and at the end, after SIGTERM to
all, checks from the train dir what the fault-injection run checks (hosts.invariants: every
outer step once, no sample applied twice, theta finite and equal to the last checkpoint's), that
every process exited 0 on SIGTERM and no log holds a traceback. Needs root (namespaces, mounts);
it only kills processes it started and removes its namespaces and mount at the end.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from absl import app, flags, logging

from task_specific_learned_opt import files

# The test rigs (harness/) sit at the repository root, outside the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import hosts, netns  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("duration_secs", 1800, "How long faults are injected.")
flags.DEFINE_integer("num_workers", 3, "Worker processes.")
flags.DEFINE_float("min_interval_secs", 15.0, "Shortest time between two faults.")
flags.DEFINE_float("max_interval_secs", 45.0, "Longest time between two faults.")
flags.DEFINE_integer("seed", 0, "Seeds which fault, on whom and when.")
flags.DEFINE_string("work_dir", None, "Where the logs and the tmpfs go (default: a new one).")
flags.DEFINE_string(
  "disk_size", "512m", "The chief's tmpfs (progress.jsonl alone grows by about 1 KB per step)."
)
flags.DEFINE_integer("nice", 10, "Niceness of the cluster's processes.")
flags.DEFINE_string("output", None, "Where the JSON report goes (else printed only).")

FAULTS = ("kill_chief", "kill_worker", "cut_worker", "cut_chief", "flap_worker", "disk_full")
BINDINGS = [
  "outer_training.family = @QuadraticFamily()",
  "QuadraticFamily.dim = 4",
  "Worker.horizon = 30",
  "LinearCurriculum.min_length = 3",
  "LinearCurriculum.max_length = 5",
  "outer_training.batch_size = 4",
  "outer_training.num_outer_steps = 100000000",
  "outer_training.checkpoint_every_secs = 10",
  "outer_training.keep_checkpoints = 2",
  "outer_training.record_samples = True",
  "run_chief.linger_secs = 5",
  "run_chief.poll_secs = 0.02",
]
WORKER_FLAGS = ["--chief_timeout_secs=600"]
RECOVERY_TIMEOUT_SECS = 240


def _applied_after(cluster: hosts.HostCluster, worker: int, step: int) -> bool:
  return worker in cluster.workers_in_steps_after(step)


def _wait_chief_steps(cluster: hosts.HostCluster, start: float) -> float | None:
  """Seconds from `start` until the chief's latest start logs an outer step."""
  while time.time() - start < RECOVERY_TIMEOUT_SECS:
    if re.search(r"outer step \d+/", cluster.log("chief")):
      return time.time() - start
    time.sleep(0.2)
  return None


def _wait_worker_applied(cluster: hosts.HostCluster, worker: int, step: int, start: float):
  while time.time() - start < RECOVERY_TIMEOUT_SECS:
    if _applied_after(cluster, worker, step):
      return time.time() - start
    time.sleep(0.2)
  return None


def _fill(directory: str) -> str:
  path = os.path.join(directory, "filler")
  with open(path, "wb") as f:
    try:
      while True:
        f.write(b"\0" * (1 << 20))
        f.flush()
    except OSError:
      pass
  return path


def _inject(kind, rng, cluster, network, disk) -> dict:
  """Injects one fault of `kind` and waits for the cluster to recover; returns its record."""
  workers = [n for n in cluster.names if n != "chief"]
  step = cluster.outer_step()
  fault = {"kind": kind, "at": time.time(), "outer_step": step}
  if kind == "kill_chief":
    cluster.kill("chief")
    cluster.start("chief")
    fault["recovered_secs"] = _wait_chief_steps(cluster, fault["at"])
  elif kind == "kill_worker":
    name = workers[int(rng.integers(len(workers)))]
    fault["process"] = name
    cluster.kill(name)
    cluster.start(name)
    step = cluster.outer_step()
    fault["recovered_secs"] = _wait_worker_applied(
      cluster, cluster.host(name) - 1, step, time.time()
    )
  elif kind in ("cut_worker", "flap_worker"):
    name = workers[int(rng.integers(len(workers)))]
    host = cluster.host(name)
    fault["process"] = name
    if kind == "cut_worker":
      fault["cut_secs"] = float(rng.uniform(10, 60))
      network.cut(host)
      time.sleep(fault["cut_secs"])
    else:
      end = time.time() + 30
      while time.time() < end:
        network.cut(host)
        time.sleep(3)
        network.heal(host)
        time.sleep(3)
    network.heal(host)
    fault["steps_during"] = cluster.outer_step() - step
    fault["recovered_secs"] = _wait_worker_applied(
      cluster, host - 1, cluster.outer_step(), time.time()
    )
  elif kind == "cut_chief":
    fault["cut_secs"] = float(rng.uniform(10, 45))
    network.cut(0)
    time.sleep(fault["cut_secs"])
    network.heal(0)
    healed, step = time.time(), cluster.outer_step()
    back = [_wait_worker_applied(cluster, w, step, healed) for w in range(len(workers))]
    fault["recovered_secs"] = None if None in back else max(back)
  elif kind == "disk_full":
    filler = _fill(disk)
    chief = cluster.processes["chief"]
    try:
      chief.wait(timeout=120)
    except subprocess.TimeoutExpired:
      fault["chief_did_not_stop"] = True
      cluster.kill("chief")
    fault["stopped_secs"] = time.time() - fault["at"]
    fault["chief_status"] = chief.returncode
    fault["chief_last_line"] = cluster.log("chief").strip().splitlines()[-1][:400]
    os.remove(filler)
    restart = time.time()
    cluster.start("chief")
    fault["recovered_secs"] = _wait_chief_steps(cluster, restart)
    resumed = re.findall(r"Resumed from .*ckpt-(\d+)", cluster.log("chief"))
    fault["resumed_from"] = int(resumed[0]) if resumed else None
  return fault


def main(argv: list[str]) -> None:
  del argv
  signal.signal(signal.SIGTERM, lambda *_: sys.exit("soak: stopped by SIGTERM"))  # Cleans up.
  reason = netns.unavailable()
  if reason is not None:
    raise app.UsageError(f"No test network here: {reason}.")
  rng = np.random.default_rng(FLAGS.seed)
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="soak_")
  disk = os.path.join(work_dir, "disk")
  os.makedirs(disk, exist_ok=True)
  subprocess.run(
    ["mount", "-t", "tmpfs", "-o", f"size={FLAGS.disk_size}", "tmpfs", disk], check=True
  )
  network = netns.TestNetwork(FLAGS.num_workers + 1)
  cluster = hosts.HostCluster(
    os.path.join(disk, "train"),
    FLAGS.num_workers,
    [os.path.join(files.PROJECT_ROOT, "gin", "quickstart.gin")],
    BINDINGS,
    network,
    WORKER_FLAGS,
    log_dir=os.path.join(work_dir, "logs"),
    nice=FLAGS.nice,
  )
  faults = []
  try:
    cluster.start_all()
    cluster.wait_for_step(5, timeout=300)
    start = time.time()
    logging.info("Cluster up on %s; faults for %d s.", cluster.spec, FLAGS.duration_secs)
    while time.time() - start < FLAGS.duration_secs:
      time.sleep(rng.uniform(FLAGS.min_interval_secs, FLAGS.max_interval_secs))
      for name in cluster.names:  # A process that left on its own is a failure to report.
        if not cluster.running(name):
          faults.append({"kind": "exited_on_its_own", "process": name})
          cluster.start(name)
      kind = FAULTS[int(rng.integers(len(FAULTS)))]
      fault = _inject(kind, rng, cluster, network, disk)
      faults.append(fault)
      logging.info(
        "Fault %d (%s) at outer step %d: recovered in %s s.",
        len(faults),
        kind,
        fault["outer_step"],
        fault.get("recovered_secs"),
      )
    statuses = cluster.stop_all()
    checks = hosts.invariants(cluster.train_dir)
  finally:
    cluster.kill_all()
    network.close()
  tracebacks = [
    path for paths in cluster.logs.values() for path in paths if "Traceback" in open(path).read()
  ]
  injected = [f for f in faults if f["kind"] in FAULTS]
  report = {
    "duration_secs": FLAGS.duration_secs,
    "num_workers": FLAGS.num_workers,
    "seed": FLAGS.seed,
    "faults": len(injected),
    "faults_by_kind": {k: sum(f["kind"] == k for f in injected) for k in FAULTS},
    "not_recovered": [f for f in injected if f.get("recovered_secs") is None],
    "processes_that_exited_on_their_own": [f for f in faults if f["kind"] not in FAULTS],
    "recovery_secs_by_kind": {
      k: sorted(
        round(f["recovered_secs"], 1)
        for f in injected
        if f["kind"] == k and f.get("recovered_secs") is not None
      )
      for k in FAULTS
    },  # fmt: skip
    "exit_statuses": statuses,
    "logs_with_a_traceback": tracebacks,
    **checks,
    "fault_log": faults,
  }
  subprocess.run(["umount", "-l", disk], capture_output=True)
  print(json.dumps({k: v for k, v in report.items() if k != "fault_log"}, indent=1))
  if FLAGS.output:
    files.write_json(FLAGS.output, report)


if __name__ == "__main__":
  app.run(main)
