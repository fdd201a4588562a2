"""A full or a read-only disk under the chief's train dir, and under other output dirs.

Each test mounts a small tmpfs of its own (root only; elsewhere the tests skip with the reason)
and fills it, or makes it read-only, at the worst moment: inside a checkpoint, between two
appends, while the chief runs. What must hold (docs/cluster.md, "A full or read-only disk"): one
line naming the path and the free space; the last complete checkpoint intact and resumable;
nothing half-written left to be picked up.
"""

import errno
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

from harness import hosts
from task_specific_learned_opt import checkpoints, files, gin_config
from task_specific_learned_opt.cli import common
from task_specific_learned_opt.distributed import (
  chief_files,
  evaluator_role,
  local,
  outer_training,
)
from task_specific_learned_opt.evaluation import held_out, running
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import schedules
from task_specific_learned_opt.tasks import quadratic

QUADRATIC = [
  "outer_training.family = @QuadraticFamily()",
  "QuadraticFamily.dim = 4",
  "Worker.horizon = 30",
  "LinearCurriculum.min_length = 3",
  "LinearCurriculum.max_length = 5",
]


def _mount_tmpfs(directory, size):
  os.makedirs(directory, exist_ok=True)
  done = subprocess.run(
    ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
    capture_output=True,
    text=True,
  )
  return None if done.returncode == 0 else (done.stderr.strip() or "mount failed")


@pytest.fixture
def small_disk(tmp_path):
  """A function mounting a tmpfs of a given size at a new folder (unmounted at the end)."""
  mounted = []

  def mount(size="4m", name="disk"):
    directory = tmp_path / name
    problem = _mount_tmpfs(directory, size)
    if problem is not None:
      pytest.skip(f"cannot mount a small file system here: {problem}")
    mounted.append(directory)
    return directory

  yield mount
  for directory in mounted:
    subprocess.run(["umount", "-l", str(directory)], capture_output=True)


class Ext4Disk:
  """A small ext4 file system on a loop device that turns read-only on an error, as a failing
  disk does (errors=remount-ro); `fail` makes it so, `repair` checks it and mounts it again."""

  def __init__(self, tmp_path, size_mb=16):
    self.image, self.path = tmp_path / "disk.img", tmp_path / "disk"
    os.makedirs(self.path)
    with open(self.image, "wb") as f:
      f.truncate(size_mb << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(self.image)], check=True, capture_output=True)
    self.mounted = False
    self._mount()

  def _mount(self):
    options = "loop,errors=remount-ro"
    subprocess.run(["mount", "-o", options, str(self.image), str(self.path)], check=True)
    self.mounted = True
    source = subprocess.run(
      ["findmnt", "-n", "-o", "SOURCE", str(self.path)], capture_output=True, text=True
    )
    self.device = os.path.basename(source.stdout.strip())

  def fail(self):
    with open(f"/sys/fs/ext4/{self.device}/trigger_fs_error", "w") as f:
      f.write("1")

  def repair(self):
    self.unmount()
    subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True)
    self._mount()

  def unmount(self):
    if self.mounted:
      subprocess.run(["umount", str(self.path)], check=True)
      self.mounted = False


@pytest.fixture
def ext4_disk(tmp_path):
  try:
    disk = Ext4Disk(tmp_path)
  except (OSError, subprocess.CalledProcessError) as e:
    pytest.skip(f"cannot make an ext4 file system on a loop device here: {e}")
  if not os.path.exists(f"/sys/fs/ext4/{disk.device}/trigger_fs_error"):
    disk.unmount()
    pytest.skip("this kernel cannot trigger an ext4 error (no trigger_fs_error)")
  yield disk
  subprocess.run(["umount", "-l", str(disk.path)], capture_output=True)


def _free_bytes(directory):
  stats = os.statvfs(directory)
  return stats.f_bavail * stats.f_frsize


def _fill(directory, leave=0, name="filler"):
  """Fills the file system of `directory` until about `leave` bytes are free; returns the filler.

  The disk may fill under it (a running chief writes too), at any write or at the file's
  creation: every one of those is the disk full, which is what the caller asked for.
  """
  filler = os.path.join(directory, name)
  try:
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
  except OSError as e:
    assert e.errno == errno.ENOSPC, e
    return filler
  try:
    chunk = b"\0" * (64 << 10)
    while (room := _free_bytes(directory) - leave) > 0:
      os.write(fd, chunk[:room])
  except OSError as e:
    assert e.errno == errno.ENOSPC, e
  finally:
    os.close(fd)
  return filler


def _remove(filler):
  """Frees what `_fill` took (nothing, where the disk was full before the filler existed)."""
  if os.path.exists(filler):
    os.remove(filler)


def _chief_files(train_dir):
  gin_config.parse([os.path.join(testing_utils.REPO, "gin", "quickstart.gin")], QUADRATIC)
  setup = outer_training.outer_training()
  return chief_files.ChiefFiles(str(train_dir), outer_training.make_chief(setup), setup, "test")


def test_a_disk_that_fills_inside_a_checkpoint_keeps_the_last_one_whole(small_disk):
  disk = small_disk("4m")
  train_dir = disk / "train"
  saved = _chief_files(train_dir)
  saved.chief.outer_step.assign(3)
  saved.recorded_step = 3  # As if steps 1-3 had been recorded.
  saved.save()
  theta_at_3 = saved.chief.theta_numpy()
  filler = _fill(disk, leave=4096)  # Room for less than a checkpoint.
  saved.chief.outer_step.assign(7)
  saved.recorded_step = 7
  first = tf.nest.flatten(saved.chief.variables["params"])[0]
  first.assign_add(tf.ones_like(first))  # A theta unlike step 3's.
  with pytest.raises(files.DiskError) as raised:
    saved.save()
  message = str(raised.value)
  assert "\n" not in message and str(train_dir) in message
  assert "no space left on its file system" in message and "KiB free of 4.0 MiB" in message
  assert "ckpt-3 (outer step 3), is intact" in message
  # Nothing half-written is left where a reader looks: no temporary checkpoint, the export
  # still the one of step 3, the index still naming ckpt-3.
  listed = sorted(os.listdir(train_dir / "checkpoints"))
  assert listed == ["checkpoint", "ckpt-3.data-00000-of-00001", "ckpt-3.index"], listed
  assert not [n for n in os.listdir(train_dir) if n.endswith((".partial", ".old", ".tmp"))]
  exported = checkpoints.load_theta(str(train_dir / "theta"), mlp_lopt.MLPLOpt())
  for a, b in zip(tf.nest.flatten(exported), tf.nest.flatten(theta_at_3), strict=True):
    np.testing.assert_array_equal(a, b)
  # Started again while the disk is still full, to the last byte: the same line, not a trace.
  more = _fill(disk, leave=0, name="more")
  with pytest.raises(files.DiskError, match=r"ckpt-3 \(outer step 3\), is intact"):
    _chief_files(train_dir)
  _remove(more)
  _remove(filler)
  resumed = _chief_files(train_dir)  # Resumable: step 3, its theta.
  assert resumed.chief.step == 3
  for a, b in zip(
    tf.nest.flatten(resumed.chief.theta_numpy()), tf.nest.flatten(theta_at_3), strict=True
  ):
    np.testing.assert_array_equal(a, b)
  resumed.save()
  # A step whose record the disk refused is not saved either (its record would be missing).
  resumed.chief.outer_step.assign(4)
  with pytest.raises(files.DiskError, match="Outer step 4 could not be recorded"):
    resumed.save()
  assert resumed.manager.latest_checkpoint.endswith("ckpt-3")


def test_an_append_on_a_full_disk_leaves_no_partial_line(small_disk):
  disk = small_disk("64k")
  path = str(disk / "runs.jsonl")
  files.append_jsonl(path, [{"run": 0}])
  _fill(disk, leave=0)
  big = {"run": 1, "curve": list(range(20000))}  # More than the disk holds: written in part.
  with pytest.raises(OSError) as raised:
    files.append_jsonl(path, [big])
  assert files.disk_problem(raised.value) == "no space left on its file system"
  with open(path) as f:
    assert f.read() == '{"run": 0}\n'  # Cut back to the last whole line.
  with pytest.raises(OSError):
    files.write_json(str(disk / "evaluation.json"), big)
  assert sorted(os.listdir(disk)) == ["filler", "runs.jsonl"]  # No temporary left.


def test_a_binary_says_in_one_line_which_path_is_full_or_read_only(tmp_path, capsys):
  def full(argv):
    raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "runs.jsonl"))

  def read_only(argv):
    raise tf.errors.FailedPreconditionError(
      None, None, f"{tmp_path}/train/events.out; Read-only file system"
    )

  for main, problem in ((full, "no space left"), (read_only, "read-only")):
    with pytest.raises(SystemExit) as exited:
      common.exits_on_user_error(main)([])
    message = str(exited.value.code)
    assert message.startswith("error: Could not write ") and "\n" not in message
    assert problem in message and str(tmp_path) in message and " free of " in message
    assert "What was written before is intact" in message

  def other(argv):
    raise OSError(errno.EACCES, "Permission denied", "/x")

  with pytest.raises(PermissionError):  # Not a disk problem: not turned into that line.
    common.exits_on_user_error(other)([])


def _train_local(train_dir, log_path):
  """bin/train_local on quadratic tasks, a checkpoint every 0.5 s, its output in `log_path`."""
  command = [
    sys.executable,
    os.path.join(testing_utils.REPO, "bin", "train_local"),
    f"--gin_file={os.path.join(testing_utils.REPO, 'gin', 'quickstart.gin')}",
    *[f"--gin_bindings={b}" for b in QUADRATIC],
    "--gin_bindings=outer_training.num_outer_steps = 1000000",
    "--gin_bindings=outer_training.checkpoint_every_secs = 0.5",
    "--gin_bindings=outer_training.record_samples = True",
    "--gin_bindings=train_local.final_evaluation = None",
    f"--train_dir={train_dir}",
  ]
  env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="2")
  with open(log_path, "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
  process.log_path = log_path
  return process


def _output(process):
  with open(process.log_path) as f:
    return f.read()


def _wait_for_line(process, text, timeout=240):
  """Waits until the process's output has a line containing `text`."""
  deadline = time.time() + timeout
  while time.time() < deadline:
    if text in _output(process):
      return
    assert process.poll() is None, _output(process)[-3000:]
    time.sleep(0.2)
  raise AssertionError(f"no {text!r} within {timeout} s:\n{_output(process)[-3000:]}")


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_running_chief_stops_in_one_line_and_resumes_once_the_disk_is_fixed(
  request, tmp_path, fault
):
  # Full: a tmpfs filled to the last byte. Read-only: ext4 turned read-only by an error, as a
  # failing disk is (a tmpfs cannot be remounted read-only while the chief holds files open).
  if fault == "full":
    disk = request.getfixturevalue("small_disk")("8m")
  else:
    ext4 = request.getfixturevalue("ext4_disk")
    disk = ext4.path
  train_dir = disk / "train"
  process = _train_local(train_dir, tmp_path / "first.log")
  try:
    _wait_for_line(process, "outer step 5/")
    if fault == "full":
      filler = _fill(disk, leave=0)
    else:
      ext4.fail()
    process.wait(timeout=120)
  finally:
    if process.poll() is None:
      process.kill()
  output = _output(process)
  assert process.returncode == 1, output[-3000:]
  last = output.strip().splitlines()[-1]
  problem = "no space left" if fault == "full" else "its file system is read-only"
  assert last.startswith(f"error: Could not write {train_dir}") and problem in last, last
  assert " MiB free of " in last or " KiB free of " in last or " B free of " in last, last
  assert "), is intact; free space (or make it writable)" in last, last
  assert "Traceback" not in output, output[-3000:]
  kept = int(last.split("(outer step ")[1].split(")")[0].split(";")[0])
  # A disk that fails between a new index and its fsync may keep either index (chief_files.kept).
  either = last.split("(outer step ")[1].split(")")[0].split("; or ckpt-")[1:]
  resumable = {kept, *(int(s.split(" ")[0]) for s in either)}
  if fault == "full":
    _remove(filler)
  else:
    ext4.repair()
  process = _train_local(train_dir, tmp_path / "again.log")  # The same command, at once.
  try:
    _wait_for_line(process, f"outer step {max(resumable) + 3}/")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)
  finally:
    if process.poll() is None:
      process.kill()
  output = _output(process)
  assert process.returncode == 0, output[-3000:]
  resumed = [s for s in resumable if f"Resumed from {train_dir}/checkpoints/ckpt-{s}." in output]
  assert resumed, (resumable, output[-3000:])
  checks = hosts.invariants(str(train_dir))
  assert checks["final_outer_step"] >= resumed[0] + 3, checks
  assert checks["steps_each_once_in_order"] and checks["no_sample_applied_twice"], checks
  assert checks["theta_finite"] and checks["theta_export_equals_last_checkpoint"], checks


def test_an_evaluation_on_a_full_disk_keeps_its_runs_and_carries_on(small_disk):
  # A study's output dir (bin/eval's, with its run cache) fills up after some runs: the runs
  # kept are whole, and the same evaluation carries on from them once there is space.
  disk = small_disk("1m")
  output_dir = str(disk / "eval")
  tiny = [
    *testing_utils.TINY_EVAL,
    "evaluate.num_tasks = 2",  # The later binding wins.
    "evaluate.tuned_baselines = ('adam',)",
    "evaluate.histograms = []",
    "evaluate.timing_rounds = 0",
  ]
  gin_config.parse([os.path.join(testing_utils.REPO, "gin", "eval", "pretrained.gin")], tiny)
  thetas = {"learned": str(disk.parent / "theta")}
  checkpoints.save_theta(thetas["learned"], mlp_lopt.MLPLOpt().init(0))
  filler = _fill(disk, leave=48 << 10)  # Room for the runs, not for the figures.
  with pytest.raises((OSError, tf.errors.OpError)) as raised:
    held_out.evaluate(output_dir, thetas)
  assert files.disk_problem(raised.value) == "no space left on its file system"
  kept = files.read_jsonl(os.path.join(output_dir, "runs.jsonl"))
  assert len(kept) > 1  # The protocol's line and whole runs...
  with open(os.path.join(output_dir, "runs.jsonl")) as f:
    assert f.read().endswith("\n")  # ...and no partial line.
  assert not [n for n in os.listdir(output_dir) if n.endswith(".tmp")]
  _remove(filler)
  evaluated = []
  running_runs = running.evaluate_run

  def counted(*args, **kwargs):
    evaluated.append(1)
    return running_runs(*args, **kwargs)

  running.evaluate_run = counted
  try:
    held_out.evaluate(output_dir, thetas)
  finally:
    running.evaluate_run = running_runs
  total = 2 * (1 + 2 * 1)  # 2 tasks x (the theta + Adam at 2 learning rates), 1 init.
  assert len(evaluated) == total - (len(kept) - 1)  # Only the runs not kept are run.
  assert os.path.exists(os.path.join(output_dir, "evaluation.json"))


def test_the_evaluator_on_a_full_disk_keeps_its_records_and_catches_up(small_disk):
  disk = small_disk("2m")
  train_dir = disk / "train"
  gin_config.parse([], [])
  gin.bind_parameter("outer_training.batch_size", 2)
  gin.bind_parameter("Worker.horizon", 12)
  gin.bind_parameter("Worker.schedule", schedules.FixedLength(4))
  gin.bind_parameter("Evaluator.test_family", quadratic.QuadraticFamily(dim=4, noise_std=0.1))
  gin.bind_parameter("Evaluator.num_tasks", 2)
  gin.bind_parameter("Evaluator.num_steps", 12)
  gin.bind_parameter("Evaluator.learning_rates", (0.01, 0.1))
  family, lopt = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()
  setup = outer_training.outer_training(
    family=family, lopt=lopt, num_outer_steps=3, snapshot_every=1
  )
  local.train_local(str(train_dir), num_workers=2, setup=setup)
  filler = _fill(disk, leave=0)
  with pytest.raises((OSError, tf.errors.OpError)) as raised:
    evaluator_role.Evaluator(str(train_dir), lopt, family).run_pending()
  assert files.disk_problem(raised.value) == "no space left on its file system"
  before = evaluator_role.read_progress(str(train_dir))  # Whole records only (maybe none).
  _remove(filler)
  evaluator_role.Evaluator(str(train_dir), lopt, family).run_pending()
  steps = [r["outer_step"] for r in evaluator_role.read_progress(str(train_dir))]
  assert steps == [0, 1, 2, 3] and [r["outer_step"] for r in before] == steps[: len(before)]
