"""The loops every mode shares: the chief's sample filter, the chief loop and the worker loop."""

import os
import signal

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import checkpoints, layout, nests
from task_specific_learned_opt import files as files_lib
from task_specific_learned_opt.distributed import (
  base,
  chief_files,
  in_process,
  loops,
  outer_training,
  progress,
  stopping,
  train_dir,
  worker_step,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import schedules
from task_specific_learned_opt.tasks import quadratic


def _batch(versions, incarnations, workers, runs, indices):
  n = len(versions)
  return base.Sample(
    g_rp=np.zeros([n, 3], np.float32),
    g_es=np.zeros([n, 3], np.float32),
    loss_plus=np.zeros(n, np.float32),
    loss_minus=np.zeros(n, np.float32),
    theta_version=np.array(versions, np.int64),
    num_steps=np.ones(n, np.int32),
    inner_step=np.zeros(n, np.int32),
    worker_id=np.array(workers, np.int32),
    worker_run=np.array(runs, np.int64),
    sample_index=np.array(indices, np.int64),
    incarnation=np.array(incarnations, np.int64),
  )


def test_the_chief_drops_samples_of_a_lost_theta_and_duplicates():
  # Chief 5 ran to 11 and died; its checkpoint at 10 is what chief 7 resumed.
  accept = loops.SampleFilter([(5, 0, 10), (7, 10, None)])
  keep, lost, duplicate = accept(
    _batch([10, 11, 11, 3], [5, 5, 7, 7], [0, 0, 1, 1], [1] * 4, [0, 1, 0, 1])
  )
  # 11 from chief 5 was lost; 3 from chief 7 cannot exist and is dropped as well.
  assert keep.tolist() == [True, False, True, False] and (lost, duplicate) == (2, 0)
  # Worker 1 run 1 index 0 again: a duplicate; a new run of worker 1 starts at 0 again.
  keep, lost, duplicate = accept(_batch([12, 12, 12], [7, 7, 7], [1, 1, 1], [1, 2, 1], [0, 0, 2]))
  assert keep.tolist() == [False, True, True] and (lost, duplicate) == (0, 1)


def test_a_lost_branch_stays_lost_after_two_restarts():
  # Chief a: steps 0..10, checkpoint at 5, died. Chief b resumed 5, reached 7, checkpointed 6,
  # died. Chief c resumed 6. a's theta at version 6 is not b's: it must not pass, although 6 is
  # within c's restored step; a's versions up to 5 and b's from 5 to 6 are theta's history.
  a, b, c = 11, 22, 33
  accept = loops.SampleFilter([(a, 0, 5), (b, 5, 6), (c, 6, None)])
  versions = [5, 6, 8, 5, 6, 7, 6, 9]
  owners = [a, a, a, b, b, b, c, c]
  keep, lost, _ = accept(_batch(versions, owners, [0] * 8, list(range(8)), list(range(8))))
  assert keep.tolist() == [True, False, False, True, True, False, True, True] and lost == 3


# One family and learned optimizer for every worker: they share one compiled sampler.
FAMILY, LOPT = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()


def _worker(worker_id=0):
  return worker_step.Worker(
    FAMILY,
    LOPT,
    worker_id=worker_id,
    schedule=schedules.FixedLength(5),
  )


def test_the_worker_loop_puts_samples_at_the_published_theta_until_finished():
  transport = in_process.InProcessTransport(incarnation=9)
  w = _worker()
  theta = w.lopt.init(0)
  transport.publish_theta(nests.flatten_numpy(theta), 3)
  loop = loops.WorkerLoop(w, transport, worker_run=42)
  assert loop.run(max_samples=3) == 3
  batch = transport.take_samples(3)
  assert batch.inner_step.tolist() == [0, 5, 10] and loop.state.truncation_index == 3
  assert batch.theta_version.tolist() == [3, 3, 3] and batch.sample_index.tolist() == [0, 1, 2]
  assert batch.worker_run.tolist() == [42] * 3 and batch.incarnation.tolist() == [9] * 3
  assert transport.take_samples(1) is None
  # The sample is the worker's own step at that theta, flattened.
  expected, _ = _worker().step(theta, 3, w.initial_state())
  np.testing.assert_array_equal(batch.g_rp[0], expected.g_rp)
  transport.finish()
  assert not loop.step() and loop.run() == 3  # Finished: nothing more is computed.
  assert transport.take_samples(1) is None


def test_every_sample_gets_a_new_index_delivered_or_not():
  # A put whose answer was lost (a link cut mid-put) may have reached the queue all the same:
  # the next sample must not share its index, or the chief would drop it as a duplicate.
  class AnswerLost(in_process.InProcessTransport):
    def __init__(self, delivered):
      super().__init__()
      self.calls, self.delivered = 0, delivered

    def put_sample(self, sample):
      self.calls += 1
      if self.calls == 2:  # The second put fails as the worker sees it...
        if self.delivered:  # ...though the sample may have arrived.
          super().put_sample(sample)
        return False
      return super().put_sample(sample)

  for delivered, expected in ((False, [0, 2]), (True, [0, 1, 2])):
    transport = AnswerLost(delivered)
    w = _worker()
    transport.publish_theta(nests.flatten_numpy(w.lopt.init(0)), 0)
    loop = loops.WorkerLoop(w, transport)
    assert loop.run(max_samples=2) == 2 and transport.calls == 3 and loop.num_lost == 1
    batch = transport.take_samples(transport.queued())
    assert batch.sample_index.tolist() == expected
    keep, _, num_duplicate = loops.SampleFilter([(1, 0, None)])(batch)
    assert keep.all() and num_duplicate == 0


def test_flatten_and_unflatten_are_inverse():
  theta = mlp_lopt.MLPLOpt().init(0)
  flat = nests.flatten_numpy(theta)
  assert flat.shape == (mlp_lopt.num_meta_parameters(theta),) and flat.dtype == np.float32
  back = base.unflatten(flat, theta)
  for a, b in zip(tf.nest.flatten(theta), tf.nest.flatten(back), strict=True):
    np.testing.assert_array_equal(a, b)
  batch = base.unflatten(np.stack([flat, 2 * flat]), theta)
  np.testing.assert_array_equal(tf.nest.flatten(batch)[0][1], 2 * tf.nest.flatten(theta)[0])
  with pytest.raises(ValueError, match="611 numbers for a template of 610"):
    base.unflatten(np.zeros(611, np.float32), theta)


def _chief_run(tmp_path, steps, **kwargs):
  gin.bind_parameter("outer_training.batch_size", 2)
  setup = outer_training.outer_training(family=FAMILY, lopt=LOPT, num_outer_steps=steps, **kwargs)
  chief = outer_training.make_chief(setup)
  files = chief_files.ChiefFiles(str(tmp_path), chief, setup, "test")
  transport = in_process.InProcessTransport()
  worker_loop = loops.WorkerLoop(_worker(), transport)
  return files, transport, worker_loop


def test_sigterm_stops_the_chief_loop_between_steps_and_it_saves(tmp_path):
  files, transport, worker_loop = _chief_run(tmp_path, steps=100)
  previous = signal.getsignal(signal.SIGTERM)
  stopping.request_stop_on_sigterm()
  samples = []

  def idle():
    worker_loop.step()
    samples.append(1)
    if len(samples) == 5:  # The 3rd step's first sample: SIGTERM arrives while it is made.
      os.kill(os.getpid(), signal.SIGTERM)

  try:
    with pytest.raises(stopping.Terminated):
      loops.chief_loop(files, transport, transport.incarnation, idle)
  finally:
    signal.signal(signal.SIGTERM, previous)
  # The loop stopped once that sample was made, without waiting for the rest of the batch...
  assert files.chief.step == 2 and len(samples) == 5
  latest = tf.train.latest_checkpoint(os.path.join(str(tmp_path), layout.CHECKPOINT_DIRNAME))
  assert latest.endswith("-2")  # ...and saved the last step.
  assert [r["outer_step"] for r in progress.read_records(str(tmp_path))] == [1, 2]


def test_a_failed_save_is_one_clear_error(tmp_path, monkeypatch):
  files, _, _ = _chief_run(tmp_path, steps=1)
  files.save()

  def full_disk(*args, **kwargs):
    raise OSError(28, "No space left on device")

  monkeypatch.setattr(checkpoints, "save_theta", full_disk)
  with pytest.raises(files_lib.DiskError, match="no space left .* ckpt-0 \\(outer step 0\\), is"):
    files.save()

  def not_allowed(*args, **kwargs):
    raise PermissionError(13, "Permission denied")

  monkeypatch.setattr(checkpoints, "save_theta", not_allowed)
  with pytest.raises(train_dir.CheckpointError, match="Could not save outer step 0 .*Permission"):
    files.save()


def test_the_applied_samples_can_be_recorded_for_audits(tmp_path):
  files, transport, worker_loop = _chief_run(tmp_path, steps=2, record_samples=True)
  worker_loop.worker_run = 77
  loops.chief_loop(files, transport, transport.incarnation, worker_loop.step)
  records = progress.read_records(str(tmp_path))
  # [worker, worker run, sample index, chief incarnation, theta version] of each applied sample.
  assert [r["samples"] for r in records] == [
    [[0, 77, 0, 1, 0], [0, 77, 1, 1, 0]],
    [[0, 77, 2, 1, 1], [0, 77, 3, 1, 1]],
  ]
