"""Fault injection: a chief and workers on loopback, SIGKILLed and restarted at random.

  python benchmarks/fault_injection.py --duration_secs 300 --output benchmarks/results/FILE.json

Starts bin/chief and --num_workers bin/worker processes on loopback ports (the commands
bin/launch_local runs) with gin/quickstart.gin, a checkpoint every 10 s and the applied samples
recorded. Every 10-30 s (uniformly at random, seeded) it SIGKILLs one of those processes, chief
included, and at once starts it again with the same command; it kills only processes it started,
and stops after --duration_secs (then SIGTERM to all). It watches progress.jsonl and the logs and
reports, per fault, the chief's downtime (kill to the first outer step the restarted chief logs)
or the worker's time to resume (restart to its first sample put). At the end it checks from the
train dir:
  - the outer step never went back past a checkpoint: each restarted chief resumed from the
    latest checkpoint there was when the chief before it was killed;
  - progress.jsonl has every outer step once, 1, 2, ..., in order;
  - no (worker, worker run, sample index) was applied twice;
  - theta is finite and the exported theta equals the last checkpoint's.
"""

import glob
import json
import os
import re
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf
from absl import app, flags, logging

from task_specific_learned_opt import files, layout
from task_specific_learned_opt.distributed import progress

# The test rigs (harness/) sit at the repository root, outside the installed package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import hosts  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_integer("duration_secs", 300, "How long faults are injected.")
flags.DEFINE_integer("num_workers", 3, "Worker processes.")
flags.DEFINE_float("min_interval_secs", 10.0, "Shortest time between two faults.")
flags.DEFINE_float("max_interval_secs", 30.0, "Longest time between two faults.")
flags.DEFINE_integer("seed", 0, "Seeds which process is killed and when.")
flags.DEFINE_string("train_dir", None, "The chief's train dir (default: a new temporary one).")
flags.DEFINE_string("output", None, "Where the JSON report goes (else printed only).")

GIN_FILE = os.path.join(files.PROJECT_ROOT, "gin")
BINDINGS = [
  "outer_training.num_outer_steps = 1000000",
  "outer_training.checkpoint_every_secs = 10",
  "outer_training.record_samples = True",
  "run_chief.linger_secs = 5",
]
RESUMED = re.compile(r"Resumed from .*ckpt-(\d+)")


def _watch(cluster: hosts.HostCluster, until: float, timeline: dict, pending: list) -> None:
  """Notes when new outer steps appear and when restarted processes are back, until `until`."""
  while time.time() < until:
    records = progress.read_records(cluster.train_dir)
    if records and records[-1]["outer_step"] not in timeline:
      timeline[records[-1]["outer_step"]] = time.time()
    for fault in pending:
      if "recovered_at" in fault:
        continue
      if "killed_again_before_it_was_back" in fault:
        continue
      # Back: the restarted chief logged its first outer step; a worker, its first sample put.
      back = r"outer step \d+/" if fault["name"] == "chief" else r"worker \d+: sample 1 at"
      if re.search(back, cluster.log(fault["name"])):
        fault["recovered_at"] = time.time()
    time.sleep(0.2)


def _latest_checkpoint_step(train_dir: str) -> int | None:
  path = tf.train.latest_checkpoint(layout.checkpoint_dir(train_dir))
  return None if path is None else int(path.rsplit("-", 1)[1])


def _checks(cluster: hosts.HostCluster, faults: list[dict]) -> dict:
  chief_kills = [f for f in faults if f.get("name") == "chief" and "killed_at" in f]
  resumes = []
  for i, fault in enumerate(chief_kills, start=1):
    resumed = RESUMED.findall(cluster.log("chief", i))
    resumes.append(
      {
        "outer_step_at_kill": fault["outer_step"],
        "latest_checkpoint_at_kill": fault["latest_checkpoint"],
        "resumed_from": int(resumed[0]) if resumed else None,
      }
    )
  checks = hosts.invariants(cluster.train_dir)
  return {
    "final_outer_step": checks.pop("final_outer_step"),
    "steps_each_once_in_order": checks.pop("steps_each_once_in_order"),
    "samples_applied": checks.pop("samples_applied"),
    "no_sample_applied_twice": checks.pop("no_sample_applied_twice"),
    "chief_resumes": resumes,
    "never_back_past_a_checkpoint": all(
      r["resumed_from"] == r["latest_checkpoint_at_kill"] for r in resumes
    ),
    **checks,
  }


def main(argv: list[str]) -> None:
  del argv
  rng = np.random.default_rng(FLAGS.seed)
  train_dir = FLAGS.train_dir or tempfile.mkdtemp(prefix="fault_injection_")
  cluster = hosts.HostCluster(
    train_dir, FLAGS.num_workers, [os.path.join(GIN_FILE, "quickstart.gin")], BINDINGS
  )
  names = ["chief"] + [f"worker{i}" for i in range(FLAGS.num_workers)]
  for name in names:
    cluster.start(name)
  logging.info("Started %s on %s; train dir %s.", names, cluster.spec, train_dir)
  timeline, faults = {}, []
  while not timeline:  # Until the first outer step.
    _watch(cluster, time.time() + 1, timeline, faults)
  start = time.time()
  end = start + FLAGS.duration_secs
  while time.time() < end:
    wait = rng.uniform(FLAGS.min_interval_secs, FLAGS.max_interval_secs)
    _watch(cluster, min(time.time() + wait, end), timeline, faults)
    if time.time() >= end:
      break
    for name in names:  # A process that left on its own is a failure to report.
      if cluster.processes[name].poll() is not None:
        faults.append({"name": name, "exited_on_its_own": cluster.processes[name].returncode})
        cluster.start(name)
    name = names[int(rng.integers(len(names)))]
    step = max(timeline) if timeline else 0
    for earlier in faults:  # A restart killed again before it was back is not counted as one.
      if earlier.get("name") == name and "recovered_at" not in earlier:
        earlier["killed_again_before_it_was_back"] = True
    killed_at = time.time()
    cluster.kill(name)
    fault = {"name": name, "killed_at": killed_at, "outer_step": step}
    fault["latest_checkpoint"] = _latest_checkpoint_step(train_dir)
    cluster.start(name)
    faults.append({**fault, "restarted_at": time.time()})
    logging.info("Fault %d: killed and restarted %s at outer step %d.", len(faults), name, step)
  # The last faults may still be recovering: watch them a while longer.
  pending = [f for f in faults if "killed_at" in f and "killed_again_before_it_was_back" not in f]
  deadline = time.time() + 120
  while time.time() < deadline and any("recovered_at" not in f for f in pending):
    _watch(cluster, time.time() + 1, timeline, pending)
  statuses = cluster.stop_all()
  injected = [f for f in faults if "killed_at" in f]
  chief_down = [
    f["recovered_at"] - f["killed_at"]
    for f in injected
    if f["name"] == "chief" and "recovered_at" in f
  ]
  worker_resume = [
    f["recovered_at"] - f["restarted_at"]
    for f in injected
    if f["name"] != "chief" and "recovered_at" in f
  ]
  report = {
    "duration_secs": FLAGS.duration_secs,
    "num_workers": FLAGS.num_workers,
    "faults": len(injected),
    "faults_by_process": {n: sum(f["name"] == n for f in injected) for n in names},
    "faults_killed_again_before_back": sum(
      "killed_again_before_it_was_back" in f for f in injected
    ),
    "faults_not_recovered": [
      f["name"]
      for f in injected
      if "recovered_at" not in f and "killed_again_before_it_was_back" not in f
    ],
    "processes_that_exited_on_their_own": [f for f in faults if "exited_on_its_own" in f],
    "chief_downtime_secs": chief_down,
    "worker_time_to_resume_secs": worker_resume,
    "exit_statuses_after_sigterm": statuses,
    **_checks(cluster, faults),
    "train_dir": train_dir,
    "cpu_count": os.cpu_count(),
    "load_average": os.getloadavg(),
    "bindings": BINDINGS,
  }
  logging.info("%s", json.dumps(report, indent=1))
  if FLAGS.output:
    files.write_json(FLAGS.output, report, indent=1)
  logs = glob.glob(os.path.join(cluster.log_dir, "*.log"))
  tracebacks = [path for path in logs if "Traceback" in open(path).read()]
  if tracebacks:
    logging.warning("Logs with a traceback: %s", tracebacks)


if __name__ == "__main__":
  app.run(main)
