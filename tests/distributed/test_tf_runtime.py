"""The TensorFlow-runtime transport, in one process on a local server; fingerprints; backoff."""

import threading
import time

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import base, tf_runtime
from task_specific_learned_opt.learned_optimizers import mlp_lopt

N = 5


@pytest.fixture(scope="module")
def server():
  return tf.distribute.Server.create_local_server()


def _transport(server, experiment="experiment A", **kwargs):
  kwargs.setdefault("batch_size", 512)  # A queue of 1024 samples: these tests never fill it.
  return tf_runtime.TFRuntimeTransport(
    server.target, N, experiment, chief_job="localhost", **kwargs
  )


def _sample(i, version):
  return base.Sample(
    g_rp=np.full(N, i, np.float32),
    g_es=np.full(N, -i, np.float32),
    loss_plus=1.0 + i,
    loss_minus=2.0,
    theta_version=version,
    num_steps=10,
    inner_step=i,
    worker_id=3,
    worker_run=77,
    sample_index=i,
  )


def test_publish_read_put_take_and_finish_on_a_local_server(server):
  chief = _transport(server)
  worker = _transport(server)
  chief.start(np.arange(N, dtype=np.float32), 4, incarnation=123)
  theta, version = worker.read_theta()
  np.testing.assert_array_equal(theta, np.arange(N)) and None
  assert version == 4 and worker.incarnation == 123
  assert chief.take_samples(1) is None  # Nothing queued: no waiting.
  assert worker.put_sample(_sample(0, 4)) and worker.put_sample(_sample(1, 4))
  assert worker.put_sample(_sample(2, 4)) and chief.queued() == 3
  batch = chief.take_samples(2)
  assert batch.sample_index.tolist() == [0, 1] and batch.incarnation.tolist() == [123, 123]
  np.testing.assert_array_equal(batch.g_rp, [[0] * N, [1] * N])
  assert batch.loss_plus.tolist() == [1.0, 2.0] and batch.worker_run.tolist() == [77, 77]
  assert chief.take_samples(2) is None and chief.queued() == 1
  chief.publish_theta(np.full(N, 7.0, np.float32), 5)
  theta, version = worker.read_theta()
  np.testing.assert_array_equal(theta, np.full(N, 7.0))
  assert version == 5
  assert chief.workers_left() == 0
  chief.finish()
  assert worker.read_theta() is None and worker.read_theta() is None
  assert chief.workers_left() == 1  # A worker that learns it is over leaves once.


def test_a_worker_reads_theta_only_when_the_queue_has_room_and_then_the_newest():
  own = tf.distribute.Server.create_local_server()  # Its own queue: 2 batches of 1 sample.
  chief = _transport(own, batch_size=1, queue_batches=2, full_poll_secs=0.01)
  worker = _transport(own, batch_size=1, queue_batches=2, full_poll_secs=0.01)
  chief.start(np.zeros(N, np.float32), 1, incarnation=5)
  assert worker.read_theta()[1] == 1
  assert worker.put_sample(_sample(0, 1)) and worker.put_sample(_sample(1, 1))
  read = {}
  reader = threading.Thread(target=lambda: read.update(value=worker.read_theta()))
  reader.start()
  time.sleep(0.5)
  assert reader.is_alive() and worker.num_full_waits > 0  # Full: it waits, computing nothing.
  chief.publish_theta(np.ones(N, np.float32), 2)
  assert chief.take_samples(1).sample_index.tolist() == [0]
  reader.join(timeout=10)
  assert not reader.is_alive()
  theta, version = read["value"]
  assert version == 2 and theta.tolist() == [1.0] * N  # The theta of when there was room.


def test_a_worker_with_another_queue_capacity_is_refused_in_one_line():
  own = tf.distribute.Server.create_local_server()
  chief = _transport(own, batch_size=1, queue_batches=2)
  chief.start(np.zeros(N, np.float32), 1, incarnation=5)
  assert chief.queued() == 0  # The chief's queue is made: 2 samples.
  worker = _transport(own, batch_size=1, queue_batches=3)
  with pytest.raises(tf_runtime.QueueMismatchError, match="TFRuntimeTransport.queue_batches"):
    worker.read_theta()


def test_a_queue_of_no_batches_is_refused():
  with pytest.raises(ValueError, match="queue_batches \\(0\\)"):
    tf_runtime.TFRuntimeTransport("grpc://localhost:1", N, "x", batch_size=4, queue_batches=0)


def test_a_worker_of_another_experiment_is_refused(server):
  chief = _transport(server, experiment="ours")
  chief.start(np.zeros(N, np.float32), 0, incarnation=5)
  with pytest.raises(tf_runtime.ExperimentMismatchError, match="not the chief's"):
    _transport(server, experiment="theirs").read_theta()


def test_mismatch_messages_name_what_differs():
  small = tf_runtime.fingerprint(mlp_lopt.MLPLOpt(hidden_size=8).init(0))
  paper = tf_runtime.fingerprint(mlp_lopt.MLPLOpt().init(0))
  assert "theta's shapes differ" in tf_runtime.mismatch_message(paper, small)
  assert tf_runtime.mismatch_message(paper, paper) is None
  gin.parse_config("Chief.learning_rate = 0.1\nrun_worker.chief_timeout_secs = 5.0")
  other = tf_runtime.fingerprint(mlp_lopt.MLPLOpt().init(0))
  message = tf_runtime.mismatch_message(other, paper)
  assert "Chief.learning_rate 0.1 there, (unset) here" in message and "--gin_bindings" in message
  assert "chief_timeout_secs" not in message  # A timeout is not part of the experiment.


def test_start_sets_the_whole_state_at_once(server):
  # After every call start makes to the chief's task, a worker's read either fails (the state is
  # not set yet: it retries) or sees the theta, version and incarnation being started.
  chief, reader = _transport(server), _transport(server)
  seen = []
  original = chief._run

  def run_then_read(fetches, feed_dict=None):
    result = original(fetches, feed_dict)
    try:
      seen.append(reader._run(reader._read))
    except tf.errors.OpError:
      seen.append(None)
    return result

  chief._run = run_then_read
  theta = np.full(N, 3.0, np.float32)
  chief.start(theta, 8, incarnation=99)
  assert seen and seen[-1] is not None
  for shared in seen:
    if shared is not None and shared["experiment"]:
      np.testing.assert_array_equal(shared["theta"], theta)
      assert (shared["version"], shared["incarnation"]) == (8, 99)


class _FakeTime:
  def __init__(self):
    self.now, self.sleeps = 100.0, []

  def sleep(self, seconds):
    self.sleeps.append(seconds)
    self.now += seconds


def test_backoff_doubles_to_its_cap_restarts_on_contact_and_gives_up_after_the_timeout():
  fake = _FakeTime()
  backoff = tf_runtime.Backoff("chief:1", 100.0, sleep=fake.sleep, clock=lambda: fake.now)
  error = tf.errors.UnavailableError(None, None, "down")
  for _ in range(4):
    backoff.wait(error, "reading")
  assert fake.sleeps == [1, 2, 4, 8]
  backoff.contact()
  for _ in range(4):
    backoff.wait(error, "reading")
  assert fake.sleeps[4:] == [1, 2, 4, 8] and fake.now - backoff.last_contact == 15
  for _ in range(9):
    backoff.wait(error, "reading")
  assert fake.sleeps[-9:] == [10] * 9  # 1 + 2 + 4 + 8 + 90 = 105 s silent...
  with pytest.raises(tf_runtime.ChiefUnreachableError, match="chief:1 has not answered for 105 s"):
    backoff.wait(error, "reading")  # ...past the timeout of 100.


def test_a_read_without_a_chief_retries_then_gives_up():
  fake = _FakeTime()
  worker = tf_runtime.TFRuntimeTransport(
    "grpc://127.0.0.1:1", N, "x", rpc_timeout_secs=0.2, chief_timeout_secs=5.0
  )
  worker.backoff = tf_runtime.Backoff("127.0.0.1:1", 5.0, sleep=fake.sleep, clock=lambda: fake.now)
  with pytest.raises(tf_runtime.ChiefUnreachableError, match="127.0.0.1:1 has not answered"):
    worker.read_theta()
  assert fake.sleeps == [1, 2, 4]
