"""The TensorFlow-runtime transport, in one process on a local server; fingerprints; backoff."""

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
  for _ in range(5):
    backoff.wait(error, "reading")
  assert fake.sleeps == [1, 2, 4, 8, 16]
  backoff.contact()
  backoff.wait(error, "reading")
  for _ in range(4):
    backoff.wait(error, "reading")
  assert fake.sleeps[5:] == [1, 2, 4, 8, 16] and fake.now - backoff.last_contact == 31
  for _ in range(3):
    backoff.wait(error, "reading")
  assert fake.sleeps[-3:] == [30, 30, 30]  # 1 + 2 + ... + 16 + 90 = 121 s silent...
  with pytest.raises(tf_runtime.ChiefUnreachableError, match="chief:1 has not answered for 121 s"):
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
