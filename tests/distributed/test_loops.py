"""The loops every mode shares: the chief's sample filter, the chief loop and the worker loop."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.distributed import base, in_process, loops, worker
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
  accept = loops.SampleFilter(incarnation=7, restored_step=10)
  # A previous chief's theta up to the checkpoint (10) is the one restored; 11 was lost.
  keep, lost, duplicate = accept(
    _batch([10, 11, 11, 3], [5, 5, 7, 7], [0, 0, 1, 1], [1] * 4, [0, 1, 0, 1])
  )
  assert keep.tolist() == [True, False, True, True] and (lost, duplicate) == (1, 0)
  # Worker 1 run 1 index 1 again: a duplicate; a new run of worker 1 starts at 0 again.
  keep, lost, duplicate = accept(_batch([12, 12, 12], [7, 7, 7], [1, 1, 1], [1, 2, 1], [1, 0, 2]))
  assert keep.tolist() == [False, True, True] and (lost, duplicate) == (0, 1)


# One family and learned optimizer for every worker: they share one compiled sampler.
FAMILY, LOPT = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()


def _worker(worker_id=0):
  return worker.Worker(
    FAMILY,
    LOPT,
    worker_id=worker_id,
    schedule=schedules.FixedLength(5),
  )


def test_the_worker_loop_puts_samples_at_the_published_theta_until_finished():
  transport = in_process.InProcessTransport(incarnation=9)
  w = _worker()
  theta = w.lopt.init(0)
  transport.publish_theta(base.flatten(theta), 3)
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


def test_a_lost_sample_keeps_its_index_for_the_next():
  class Lossy(in_process.InProcessTransport):
    def __init__(self):
      super().__init__()
      self.calls = 0

    def put_sample(self, sample):
      self.calls += 1
      return self.calls != 2 and super().put_sample(sample)

  transport = Lossy()
  w = _worker()
  transport.publish_theta(base.flatten(w.lopt.init(0)), 0)
  loop = loops.WorkerLoop(w, transport)
  assert loop.run(max_samples=2) == 2 and transport.calls == 3
  assert transport.take_samples(2).sample_index.tolist() == [0, 1]


def test_flatten_and_unflatten_are_inverse():
  theta = mlp_lopt.MLPLOpt().init(0)
  flat = base.flatten(theta)
  assert flat.shape == (mlp_lopt.num_meta_parameters(theta),) and flat.dtype == np.float32
  back = base.unflatten(flat, theta)
  for a, b in zip(tf.nest.flatten(theta), tf.nest.flatten(back), strict=True):
    np.testing.assert_array_equal(a, b)
  batch = base.unflatten(np.stack([flat, 2 * flat]), theta)
  np.testing.assert_array_equal(tf.nest.flatten(batch)[0][1], 2 * tf.nest.flatten(theta)[0])
  with pytest.raises(ValueError, match="611 numbers for a template of 610"):
    base.unflatten(np.zeros(611, np.float32), theta)
