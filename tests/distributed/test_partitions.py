"""Network partitions: a chief and workers each on a host of their own, links cut and healed.

Every process runs in its own network namespace on a private subnet (harness/netns.py); a
partition is a host's link taken down, healed by bringing it up. The expected behaviour of each
fault is written down in docs/cluster.md ("Partitions"); these tests check it. Where namespaces
cannot be made (not root, no `ip`), they skip with the reason.
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import testing_utils

from harness import hosts, netns
from task_specific_learned_opt.learned_optimizers import mlp_lopt

GIN = [os.path.join(testing_utils.REPO, "gin", "quickstart.gin")]
BINDINGS = [  # The quickstart's machinery on quadratic tasks, which compile in a moment.
  "outer_training.family = @QuadraticFamily()",
  "QuadraticFamily.dim = 4",
  "Worker.horizon = 30",
  "LinearCurriculum.min_length = 3",
  "LinearCurriculum.max_length = 5",
  "outer_training.checkpoint_every_secs = 5",
  "outer_training.record_samples = True",
  "outer_training.num_outer_steps = 1000000",  # Until the test stops the chief (SIGTERM).
  "run_chief.linger_secs = 5",
]
CUT_SECS = 30  # How long a partition lasts (docs/cluster.md): past the 20 s a call can take.
CHIEF_TIMEOUT_SECS = 120  # bin/worker --chief_timeout_secs here (default 600): past a cut...
NEVER_BACK_TIMEOUT_SECS = 30  # ...except for the worker whose link never comes back.
BACK_WITHIN_SECS = 60  # A healed worker's sample is applied within this (docs/cluster.md).
# `pytest -s` prints what the tests measured; with PARTITIONS_RESULTS=<file.json> it is also
# written there (benchmarks/results/partitions.json holds the figures of docs/cluster.md).
RESULTS_ENV = "PARTITIONS_RESULTS"
# The cluster's niceness. These tests last as long as their cuts, whatever the processes compute
# meanwhile, and the workers compute samples as fast as they can: niced, they leave the cores to
# the suite's other tests instead of drawing samples no assertion needs.
NICE = 10
# Once it is up, the CPU a cluster may use in all (HostCluster.cap_cpu), where the machine allows
# it: the chief alone would otherwise take half a core applying hundreds of steps during a cut,
# where the tests need a few.
CLUSTER_CORES = 0.3


@pytest.fixture
def network_of():
  reason = netns.unavailable()
  if reason is not None:
    pytest.skip(f"no test network here: {reason}")
  made = []

  def make(num_hosts):
    made.append(netns.TestNetwork(num_hosts))
    return made[-1]

  yield make
  for network in made:
    network.close()


@pytest.fixture
def clusters():
  made = []
  yield made
  for cluster in made:
    cluster.kill_all()


def test_a_network_is_removed_when_its_test_fails(network_of):
  network = network_of(2)
  with pytest.raises(RuntimeError), network:
    assert set(network.hosts) <= set(netns.namespaces())
    raise RuntimeError("a failing test")
  assert not set(network.hosts + [network.hub]) & set(netns.namespaces())
  assert not [n for n in netns.namespaces() if n.startswith(network.tag)]


def test_a_capped_clusters_processes_share_the_cap_and_leave_no_cgroup(tmp_path):
  cluster = hosts.HostCluster(str(tmp_path / "train"), 1, GIN, BINDINGS)
  busy = [sys.executable, "-c", "while True: pass"]
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()
  orphan = os.path.join(hosts.CPU_CGROUPS, f"tslo_cluster_{dead.pid}_1")
  with contextlib.suppress(OSError):  # Left by a test process that was killed.
    os.mkdir(orphan)
  cluster.processes["chief"] = subprocess.Popen(busy)
  try:
    why = cluster.cap_cpu(0.1)
    if why is not None:
      pytest.skip(why)
    assert not os.path.exists(orphan)
    cluster.processes["worker0"] = subprocess.Popen(busy)  # As start() does for a later start.
    cluster._join_cgroup(cluster.processes["worker0"].pid)
    with open(os.path.join(cluster.cgroup, "cgroup.procs")) as f:
      members = {int(line) for line in f}
    assert members == {p.pid for p in cluster.processes.values()}
    with open(os.path.join(cluster.cgroup, "cpu.cfs_quota_us")) as f:
      assert int(f.read()) == int(0.1 * hosts.CPU_PERIOD_US)
    with open(os.path.join(cluster.cgroup, "cpu.stat")) as f:
      before = dict(line.split() for line in f)
    time.sleep(1.0)
    with open(os.path.join(cluster.cgroup, "cpu.stat")) as f:
      after = dict(line.split() for line in f)
    assert int(after["nr_throttled"]) > int(before["nr_throttled"])  # Two busy loops held back.
    path = cluster.cgroup
  finally:
    cluster.kill_all()
  assert cluster.cgroup is None and not os.path.exists(path)


def test_hosts_reach_each_other_until_cut_and_again_once_healed(network_of):
  network = network_of(2)
  listen = "import socket,time; s=socket.socket(); s.bind(('', 5000)); s.listen(); time.sleep(60)"
  server = network.popen(0, [sys.executable, "-c", listen])
  connect = [
    sys.executable,
    "-c",
    f"import socket; socket.create_connection(('{network.addresses[0]}', 5000), timeout=2)",
  ]
  try:
    deadline = time.time() + 20
    while subprocess.run(network.command(1, connect), capture_output=True).returncode != 0:
      assert time.time() < deadline, "host 1 never reached host 0"
      time.sleep(0.2)
    network.cut(0)
    assert network.is_cut(0)
    cut = subprocess.run(network.command(1, connect), capture_output=True, text=True)
    assert cut.returncode != 0 and "timed out" in cut.stderr  # Lost, not refused.
    network.heal(0)
    assert not network.is_cut(0)
    assert subprocess.run(network.command(1, connect), capture_output=True).returncode == 0
  finally:
    server.kill()
    server.wait()


def _report(measured):
  """Prints what a test measured and adds it to the file PARTITIONS_RESULTS names, if any."""
  print(json.dumps(measured, indent=1))
  path = os.environ.get(RESULTS_ENV)
  if not path:
    return
  written = {}
  if os.path.exists(path):
    with open(path) as f:
      written = json.load(f)
  written.update({k: round(v, 1) if isinstance(v, float) else v for k, v in measured.items()})
  written["cut_secs"] = CUT_SECS
  with open(path, "w") as f:
    json.dump(dict(sorted(written.items())), f, indent=1)
    f.write("\n")


def _applied_by(cluster, first_step, last_step):
  """Worker ids of the samples applied in outer steps first_step..last_step."""
  return {
    int(s[0])
    for r in cluster.records()
    if first_step <= r["outer_step"] <= last_step
    for s in r.get("samples", [])
  }


@pytest.mark.integration
def test_workers_and_the_chief_cut_off_then_healed(network_of, clusters, tmp_path):
  # Hosts: the chief on 0, worker i on i + 1. All at once for CUT_SECS: worker 0 cut off (then
  # healed), worker 1's link flapping every 3 s, worker 2 cut off for good, worker 3 untouched.
  # Then the chief cut off from every worker for CUT_SECS, and healed.
  network = network_of(5)
  cluster = hosts.HostCluster(
    str(tmp_path / "train"),
    4,
    GIN,
    BINDINGS + ["outer_training.batch_size = 4"],
    network,
    worker_flags=[f"--chief_timeout_secs={CHIEF_TIMEOUT_SECS}"],
    nice=NICE,
  )
  clusters.append(cluster)
  for name in cluster.names:
    flags = [f"--chief_timeout_secs={NEVER_BACK_TIMEOUT_SECS}"] if name == "worker2" else []
    cluster.start(name, *flags)  # The last --chief_timeout_secs given counts.
  cluster.wait_for_step(5, timeout=240)
  for worker in range(4):  # Everyone is contributing before the faults.
    back = cluster.wait_for_worker(worker, 0, timeout=120)
    assert back is not None, cluster.log(f"worker{worker}")
  cluster.cap_cpu(CLUSTER_CORES)

  measured = {}
  cut_at, cut_step = time.time(), cluster.outer_step()
  network.cut(1)
  network.cut(3)

  def flap():
    while time.time() < cut_at + CUT_SECS:
      network.cut(2)
      time.sleep(3)
      network.heal(2)
      time.sleep(3)

  exits = {}

  def watch_worker2():
    exits["status"] = cluster.processes["worker2"].wait(timeout=NEVER_BACK_TIMEOUT_SECS + 120)
    exits["after"] = time.time() - cut_at

  flapping = threading.Thread(target=flap)
  flapping.start()
  watching = threading.Thread(target=watch_worker2, daemon=True)
  watching.start()
  time.sleep(2)  # What was queued or in flight at the cut is applied by now.
  settled_step = cluster.outer_step() + 2
  flapping.join()
  healed_step = cluster.outer_step()
  network.heal(1)
  # The chief stepped on with the workers it could reach: worker 3 and, between flaps, worker 1.
  assert healed_step > cut_step + 20
  during = _applied_by(cluster, settled_step + 1, healed_step)  # Past what was queued at the cut.
  assert during <= {1, 3} and 3 in during
  back = cluster.wait_for_worker(0, healed_step, timeout=BACK_WITHIN_SECS)
  assert back is not None, cluster.log("worker0")[-3000:]
  detected = cluster.first_line_after("worker0", "unreachable", cut_at)
  measured["worker cut: detected after"] = detected - cut_at
  measured["worker healed: applied again after"] = back
  measured["flapping worker: samples applied while flapping"] = sum(
    int(s[0]) == 1
    for r in cluster.records()
    if cut_step < r["outer_step"] <= healed_step
    for s in r.get("samples", [])
  )
  measured["outer steps while worker 0 was cut"] = healed_step - cut_step
  assert 1 in _applied_by(cluster, healed_step, cluster.outer_step() + 1) or (
    cluster.wait_for_worker(1, healed_step, timeout=BACK_WITHIN_SECS) is not None
  )
  # Worker 2, whose link never came back, gives up after its timeout (plus at most one wait
  # of 10 s and one failed call, twice its deadline of 10 s) with one line; nothing else is
  # disturbed.
  watching.join(timeout=NEVER_BACK_TIMEOUT_SECS + 120)
  assert exits["status"] == 1
  assert NEVER_BACK_TIMEOUT_SECS <= exits["after"] < NEVER_BACK_TIMEOUT_SECS + 10 + 2 * 10 + 5
  measured["worker never back: exited after"] = exits["after"]
  assert "has not answered for" in cluster.log("worker2").strip().splitlines()[-1]

  chief_cut_at = time.time()
  network.cut(0)
  time.sleep(15)  # Past every call's deadline: what was queued or in flight is applied by now.
  settled_step = cluster.outer_step()
  time.sleep(CUT_SECS - 15)
  chief_healed_step = cluster.outer_step()
  network.heal(0)
  healed_at = time.time()
  assert cluster.running("chief") and chief_healed_step == settled_step  # It waits, unblocked.
  for worker in (0, 1, 3):
    detected = cluster.first_line_after(f"worker{worker}", "unreachable", chief_cut_at)
    # A call fails within twice its deadline: TensorFlow retries an unanswered call once.
    assert detected is not None and detected - chief_cut_at < 2 * 10 + 5
    measured[f"chief cut: worker {worker} detected after"] = detected - chief_cut_at
  for worker in (0, 1, 3):
    back = cluster.wait_for_worker(worker, chief_healed_step, timeout=BACK_WITHIN_SECS)
    assert back is not None, cluster.log(f"worker{worker}")[-3000:]
    measured[f"chief healed: worker {worker} applied again after"] = time.time() - healed_at

  statuses = cluster.stop_all()
  assert statuses == {"chief": 0, "worker0": 0, "worker1": 0, "worker2": 1, "worker3": 0}
  checks = hosts.invariants(cluster.train_dir)
  assert checks["steps_each_once_in_order"] and checks["no_sample_applied_twice"], checks
  assert checks["theta_finite"] and checks["theta_export_equals_last_checkpoint"], checks
  for name in ("chief", "worker0", "worker1", "worker3"):
    assert "Traceback" not in cluster.log(name), cluster.log(name)[-3000:]
  _report(measured)


def _wait_for_transfer(network, host, direction, timeout=60):
  """Waits until host `host` is in the middle of sending ("put") or receiving ("read") more
  than a few hundred bytes; True if it saw one within `timeout`."""
  deadline = time.time() + timeout
  last = network.bytes_sent(host)
  while time.time() < deadline:
    time.sleep(0.2)
    now = network.bytes_sent(host)
    sent, received = now[0] - last[0], now[1] - last[1]
    last = now
    if direction == "put" and sent > 600 and received < 300:
      return True
    if direction == "read" and received > 600 and sent < 300:
      return True
  return False


@pytest.mark.integration
def test_a_cut_in_the_middle_of_a_put_and_of_a_theta_read(network_of, clusters, tmp_path):
  # theta of 4,866 numbers (hidden_size 256): on a link slowed to 128 kbit/s, a read takes about
  # 1.2 s and a put (two gradients) about 2.5 s, well inside the deadline, and a cut as soon as
  # one is seen under way lands inside it. The call fails within twice its
  # deadline (10 s): a read is retried, a put's sample is discarded (it may or may not have
  # reached the queue before the cut; either way it is applied at most once).
  network, measured = network_of(3), {}
  wide = ["MLPLOpt.hidden_size = 256", "outer_training.batch_size = 2"]
  cluster = hosts.HostCluster(
    str(tmp_path / "train"),
    2,
    GIN,
    BINDINGS + wide,
    network,
    ["--chief_timeout_secs=120"],
    nice=NICE,
  )
  clusters.append(cluster)
  cluster.start_all()
  cluster.wait_for_step(3, timeout=240)
  cluster.cap_cpu(CLUSTER_CORES)
  for direction, message in (("put", "while putting a sample"), ("read", "while reading theta")):
    network.slow(1, 128)
    assert _wait_for_transfer(network, 1, direction), f"worker 0 never {direction}"
    cut_at = time.time()
    network.cut(1)
    time.sleep(25)  # Past twice the call's deadline (TensorFlow retries an unanswered call).
    network.heal(1)
    network.unslow(1)
    detected = cluster.first_line_after("worker0", message, cut_at)
    assert detected is not None, cluster.log("worker0")[-3000:]
    back = cluster.wait_for_worker(0, cluster.outer_step(), timeout=BACK_WITHIN_SECS)
    assert back is not None, cluster.log("worker0")[-3000:]
    measured[f"cut mid-{direction}: detected after"] = detected - cut_at
    measured[f"cut mid-{direction}: applied again after the heal"] = back
  assert cluster.stop_all() == {"chief": 0, "worker0": 0, "worker1": 0}
  checks = hosts.invariants(cluster.train_dir, mlp_lopt.MLPLOpt(hidden_size=256))
  assert checks["steps_each_once_in_order"] and checks["no_sample_applied_twice"], checks
  assert checks["theta_finite"] and checks["theta_export_equals_last_checkpoint"], checks
  _report(measured)
