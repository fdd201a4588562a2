"""The transport on TensorFlow's distributed runtime (paper App. C): bin/chief and bin/worker.

What the chief and the workers share lives on the chief's task, in graph mode
(`tf.compat.v1.Session` on the server's target):

  outer_training/theta          theta, flattened (what workers read)
  outer_training/version        the outer step theta was published at
  outer_training/incarnation    a random id of the chief process (a restart changes it)
  outer_training/experiment     the experiment's fingerprint (theta's shapes, gin config hash)
  outer_training/done           set when the chief has finished; workers then leave
  outer_training/workers_left   workers that saw `done` and left
  outer_training/samples        a FIFOQueue of samples (shared_name), filled by workers

A worker's calls survive a chief that is down, restarting or cut off: every call has a deadline
(rpc_timeout_secs); `read_theta` retries with backoff (`Backoff`) for up to chief_timeout_secs
and checks the fingerprint of every new chief incarnation; `put_sample` discards the sample if
the chief did not answer (the next read retries). A sample is enqueued at most once and dequeued
once.

The queue is bounded (`queue_batches` batches) and a worker reads theta only when the queue has
room: a worker that finds it full waits before computing, so fast workers cannot fill the queue
with samples that would be stale by the time the chief took them (docs/cluster.md, staleness).
"""

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import nests
from task_specific_learned_opt.distributed import base, cluster_spec
from task_specific_learned_opt.distributed import outer_training as outer_lib

SCOPE = "outer_training"
QUEUE_NAME = "outer_training_samples"
# Errors that mean "the chief is not there (yet), or restarted": retried by workers.
CHIEF_DOWN_ERRORS = (
  tf.errors.UnavailableError,
  tf.errors.DeadlineExceededError,
  tf.errors.AbortedError,
  tf.errors.CancelledError,
  tf.errors.FailedPreconditionError,  # Variables not yet initialised by a starting chief.
  tf.errors.NotFoundError,  # A session or queue of a chief that has gone.
  tf.errors.InvalidArgumentError,  # A session handle the restarted chief does not know.
  tf.errors.InternalError,
  tf.errors.UnknownError,
)
FULL_LOG_SECS = 60.0  # At most one "queue full" line per worker this often.
_QUEUE_DTYPES = [tf.as_dtype(base.FIELD_DTYPES[name]) for name in base.Sample._fields]


class ExperimentMismatchError(cluster_spec.ClusterError):
  """A worker whose gin experiment differs from the chief's."""


class QueueMismatchError(cluster_spec.ClusterError):
  """A worker whose sample queue (capacity) differs from the chief's."""


class ChiefUnreachableError(cluster_spec.ClusterError):
  """The chief did not answer within the timeout."""


def fingerprint(theta_template: nests.Theta) -> str:
  """What chief and workers must agree on (outer_training.experiment_record), as JSON.

  Args:
    theta_template: a nest of arrays or tensors shaped like theta.

  Returns:
    The record as a JSON string with sorted keys.
  """
  return json.dumps(outer_lib.experiment_record(theta_template), sort_keys=True)


def mismatch_message(chief: str, mine: str) -> str | None:
  """One line saying how a worker's fingerprint `mine` differs from the chief's; None if not."""
  try:
    chief_record, my_record = json.loads(chief), json.loads(mine)
  except json.JSONDecodeError:
    chief_record, my_record = {"theta_shapes": chief}, {"theta_shapes": mine}
  difference = outer_lib.differences(chief_record, my_record)
  if difference is None:
    return None
  return (
    f"This worker's experiment is not the chief's: {difference} (there: the chief). Start every "
    "worker with the chief's --gin_file and --gin_bindings."
  )


class Backoff:
  """Waits between retries while the chief is down: 1 s, doubling up to 10 s; gives up after a
  timeout without contact.

  The longest wait bounds how soon a worker is back once the chief answers again (after a
  partition heals: at most this wait, plus one call's deadline, plus one sample).
  """

  def __init__(
    self,
    chief_address: str,
    timeout_secs: float,
    first_secs: float = 1.0,
    longest_secs: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.time,
  ):
    """Makes the backoff, counting from now as the last contact.

    Args:
      chief_address: named in the messages.
      timeout_secs: how long the chief may be silent before `wait` gives up.
      first_secs: the first wait after a contact.
      longest_secs: the longest wait.
      sleep: how to wait (tests pass a fake).
      clock: the time in seconds (tests pass a fake).
    """
    self.chief_address = chief_address
    self.timeout_secs = float(timeout_secs)
    self.first_secs = float(first_secs)
    self.longest_secs = float(longest_secs)
    self._sleep, self._clock = sleep, clock
    self.contact()

  def contact(self) -> None:
    """The chief answered: the next wait is the first again."""
    self.last_contact = self._clock()
    self.delay = self.first_secs

  def wait(self, error: Exception, what: str) -> None:
    """Logs the failure and sleeps before the next try.

    Raises:
      ChiefUnreachableError: the chief has been silent for more than the timeout.
    """
    down_for = self._clock() - self.last_contact
    if down_for > self.timeout_secs:
      raise ChiefUnreachableError(
        f"The chief at {self.chief_address} has not answered for {down_for:.0f} s (last error: "
        f"{' '.join(str(error).split())[:200]}). Check that bin/chief is running with this "
        "cluster spec, or raise --chief_timeout_secs."
      ) from error
    logging.warning(
      "Chief at %s unreachable while %s (%s); retrying in %.0f s (down for %.0f s).",
      self.chief_address,
      what,
      type(error).__name__,
      self.delay,
      down_for,
    )
    self._sleep(self.delay)
    self.delay = min(self.delay * 2, self.longest_secs)


def _variable(name: str, shape: Sequence[int], dtype: tf.DType) -> tf.Variable:
  """A zero-initialised resource variable of the shared state (in the current scope)."""
  return tf.compat.v1.get_variable(
    name,
    shape=shape,
    dtype=dtype,
    initializer=tf.compat.v1.zeros_initializer(),
    use_resource=True,
    trainable=False,
  )


@gin.configurable(denylist=["target", "num_params", "experiment", "chief_job"])
class TFRuntimeTransport(base.Transport):
  """The chief's shared variables and sample queue, seen from one process's session.

  The chief calls `start` once, then the chief side of base.Transport; a worker calls the worker
  side, which retries while the chief is down.
  """

  def __init__(
    self,
    target: str,
    num_params: int,
    experiment: str,
    chief_job: str = "chief",
    batch_size: int = 1,
    chief_timeout_secs: float = 600.0,
    queue_batches: int = 2,
    rpc_timeout_secs: float = 10.0,
    full_poll_secs: float = 0.05,
  ):
    """Builds the graph; the session on `target` is opened on first use.

    Args:
      target: the session target: the chief server's target, or "grpc://chief-host:port".
      num_params: theta's size.
      experiment: this process's fingerprint (see `fingerprint`).
      chief_job: the job whose task 0 holds the state ("localhost" on a local test server).
      batch_size: samples per outer step (outer_training.batch_size): sizes the queue.
      chief_timeout_secs: how long a worker's read may retry before it gives up.
      queue_batches: the queue holds this many batches; a worker that finds it full waits
        before computing its next sample.
      rpc_timeout_secs: the longest a single call to the chief may take before it counts as a
        failure (workers then retry).
      full_poll_secs: how often a worker looks again at a full queue (doubling up to 1 s).

    Raises:
      ValueError: queue_batches or batch_size below 1.
    """
    if int(queue_batches) < 1 or int(batch_size) < 1:
      raise ValueError(
        f"TFRuntimeTransport.queue_batches ({queue_batches}) and the batch size ({batch_size}) "
        "must be >= 1."
      )
    self.target = target
    self.num_params = int(num_params)
    self.experiment = experiment
    self.chief_job = chief_job
    self.rpc_timeout_ms = int(rpc_timeout_secs * 1000)
    self.capacity = int(queue_batches) * int(batch_size)
    self.full_poll_secs = float(full_poll_secs)
    self.num_full_waits = 0  # Times this worker found the queue full.
    self.backoff = Backoff(target.replace("grpc://", ""), chief_timeout_secs)
    self.incarnation = 0  # The chief's, once started or read.
    self._left = False
    self._session = None
    self.graph = tf.Graph()
    with self.graph.as_default():
      self._build(self.capacity)

  def _build(self, queue_capacity: int) -> None:
    """The shared state and the sample queue, on the chief's task (the same graph everywhere)."""
    device = f"/job:{self.chief_job}/replica:0/task:0/device:CPU:0"
    with tf.device(device), tf.compat.v1.variable_scope(SCOPE):
      self._build_state()
      self._build_queue(queue_capacity)

  def _build_state(self) -> None:
    """theta, its version, the incarnation, done, workers_left, the fingerprint; their ops."""
    theta = _variable("theta", [self.num_params], tf.float32)
    version = _variable("version", [], tf.int64)
    incarnation = _variable("incarnation", [], tf.int64)
    done = _variable("done", [], tf.bool)
    left = _variable("workers_left", [], tf.int64)
    experiment = tf.compat.v1.get_variable(
      "experiment", initializer=tf.constant(""), use_resource=True, trainable=False
    )
    self._theta_in = tf.compat.v1.placeholder(tf.float32, [self.num_params])
    self._version_in = tf.compat.v1.placeholder(tf.int64, [])
    self._publish = [theta.assign(self._theta_in), version.assign(self._version_in)]
    self._incarnation_in = tf.compat.v1.placeholder(tf.int64, [])
    self._experiment_in = tf.compat.v1.placeholder(tf.string, [])
    # Start is one run, and the fingerprint (what workers wait for) is written only after
    # everything else: a worker reads either an unset state (and retries) or all of it.
    # The variables are never zero-initialised, so there is no zero theta to read.
    state = [
      *self._publish,
      incarnation.assign(self._incarnation_in),
      done.assign(False),
      left.assign(tf.constant(0, tf.int64)),
    ]
    with tf.control_dependencies(state):
      self._start = experiment.assign(self._experiment_in, read_value=False)
    self._finish = done.assign(True)
    self._leave = left.assign_add(1)
    self._read = {
      "theta": theta.read_value(),
      "version": version.read_value(),
      "incarnation": incarnation.read_value(),
      "done": done.read_value(),
      "experiment": experiment.read_value(),
    }
    self._read_left = left.read_value()

  def _build_queue(self, queue_capacity: int) -> None:
    """The FIFO queue of samples (shared by name) and its enqueue, size and dequeue ops."""
    shapes = [[self.num_params], [self.num_params]] + [[]] * (len(_QUEUE_DTYPES) - 2)
    queue = tf.queue.FIFOQueue(
      queue_capacity, _QUEUE_DTYPES, shapes=shapes, shared_name=QUEUE_NAME, name="samples"
    )
    self._sample_in = [
      tf.compat.v1.placeholder(d, [None, *s]) for d, s in zip(_QUEUE_DTYPES, shapes, strict=True)
    ]
    self._enqueue = queue.enqueue_many(self._sample_in)
    self._size = queue.size()
    self._take_n = tf.compat.v1.placeholder(tf.int32, [])
    self._dequeue = queue.dequeue_many(self._take_n)

  @property
  def session(self) -> tf.compat.v1.Session:
    """The session on the chief's task (made on first use, and again after `reset`)."""
    if self._session is None:
      config = tf.compat.v1.ConfigProto(
        device_filters=[f"/job:{self.chief_job}"], operation_timeout_in_ms=self.rpc_timeout_ms
      )
      self._session = tf.compat.v1.Session(self.target, graph=self.graph, config=config)
    return self._session

  def reset(self) -> None:
    """Drops the session (after the chief went away); the next call makes a new one."""
    if self._session is not None:
      try:
        self._session.close()
      except Exception:  # noqa: BLE001 - closing a session to a dead chief may fail any way.
        pass
      self._session = None

  def _run(self, fetches: Any, feed_dict: Mapping[tf.Tensor, Any] | None = None) -> Any:
    options = tf.compat.v1.RunOptions(timeout_in_ms=self.rpc_timeout_ms)
    return self.session.run(fetches, feed_dict=feed_dict, options=options)

  # The chief's side.

  def _run_own(self, fetches: Any, feed_dict: Mapping[tf.Tensor, Any] | None = None) -> Any:
    """`_run` for the chief's calls to its own task: a call that TensorFlow's runtime aborted
    or timed out (under load, a retried request is refused as "received twice") is tried again
    on a new session, up to 5 times. Each call is safe to repeat: a dequeue that ran and was
    refused loses its samples, never applies them twice."""
    for attempt in range(5):
      try:
        return self._run(fetches, feed_dict)
      except (tf.errors.AbortedError, tf.errors.DeadlineExceededError, tf.errors.UnavailableError):
        if attempt == 4:
          raise
        logging.warning("A call to the chief's own task failed; trying again (%d).", attempt + 1)
        self.reset()
        time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")

  def start(self, theta: np.ndarray, version: int, incarnation: int) -> None:
    """Sets the whole shared state at once (chief only): theta, its version, the incarnation.

    Until it runs, the variables are unset and workers' reads fail (and are retried).
    """
    self._run_own(
      self._start,
      {
        self._theta_in: theta,
        self._version_in: version,
        self._incarnation_in: incarnation,
        self._experiment_in: self.experiment,
      },
    )
    self.incarnation = int(incarnation)

  def publish_theta(self, theta: np.ndarray, version: int) -> None:
    """Assigns `theta` (flat, [n]) and `version` on the chief's task, where workers read them."""
    self._run_own(self._publish, {self._theta_in: theta, self._version_in: version})

  def take_samples(self, num: int) -> base.SampleBatch | None:
    """The `num` oldest queued samples, dequeued in one call, or None if fewer are queued."""
    if self.queued() < num:
      return None
    return base.Sample(*self._run_own(self._dequeue, {self._take_n: num}))

  def finish(self) -> None:
    """Sets `done`: every worker's next read_theta() counts it as left and returns None."""
    self._run_own(self._finish)

  def queued(self) -> int:
    """Samples waiting in the queue."""
    return int(self._run_own(self._size))

  def workers_left(self) -> int:
    """Workers that saw training finish and left."""
    return int(self._run_own(self._read_left))

  # A worker's side.

  def read_theta(self) -> tuple[np.ndarray, int] | None:
    """The chief's (theta, version) once its queue has room; None once it has finished.

    Retries while the chief is down or unreachable; while the queue holds `capacity` samples,
    waits (polling every full_poll_secs, doubling up to 1 s) and reads again, so the theta
    returned is the newest there is when this worker can contribute.

    Raises:
      ChiefUnreachableError: the chief has not answered for chief_timeout_secs.
      ExperimentMismatchError: the chief runs another experiment.
    """
    delay, last_log = self.full_poll_secs, time.time()
    while True:
      shared = self._read_shared()
      if shared["done"]:
        self._say_left()
        return None
      queued = self._queued_from_worker()
      if queued is None:
        continue  # The chief went away between the two calls: read again.
      if queued < self.capacity:
        return shared["theta"], int(shared["version"])
      self.num_full_waits += 1
      if time.time() - last_log > FULL_LOG_SECS:
        logging.info(
          "The chief's queue is full (%d samples); waiting before the next sample.", queued
        )
        last_log = time.time()
      time.sleep(delay)
      delay = min(2 * delay, 1.0)

  def _queued_from_worker(self) -> int | None:
    """The queue's size, read by a worker whose experiment matches (its queue is the chief's
    shape then); None if the chief did not answer.

    Raises:
      QueueMismatchError: the chief's queue was made with another capacity.
    """
    try:
      return int(self._run(self._size))
    except tf.errors.InvalidArgumentError as e:
      if "Shared queue" in str(e) or "capacity" in str(e):
        raise QueueMismatchError(
          f"This worker's sample queue is not the chief's ({' '.join(str(e).split())[:200]}). "
          "Start every worker with the chief's TFRuntimeTransport.queue_batches."
        ) from e
      self.reset()
      self.backoff.wait(e, "reading the queue")
      return None
    except CHIEF_DOWN_ERRORS as e:
      self.reset()
      self.backoff.wait(e, "reading the queue")
      return None

  def _read_shared(self) -> dict:
    """One read of the shared state that succeeded, retrying while the chief is down."""
    while True:
      try:
        shared = self._run(self._read)
      except CHIEF_DOWN_ERRORS as e:
        self.reset()
        self.backoff.wait(e, "reading theta")
        continue
      if shared["experiment"]:
        break
      # A chief is starting: its server answers before its state is set.
      self.backoff.wait(tf.errors.UnavailableError(None, None, "chief starting"), "it starts")
    self.backoff.contact()
    if shared["incarnation"] != self.incarnation:
      message = mismatch_message(shared["experiment"].decode(), self.experiment)
      if message is not None:
        raise ExperimentMismatchError(message)
      if self.incarnation:
        logging.info("The chief restarted (now at outer step %d); carrying on.", shared["version"])
      self.incarnation = int(shared["incarnation"])
    return shared

  def _say_left(self) -> None:
    """Counts this worker as left (once); a chief that no longer answers needs no telling."""
    if self._left:
      return
    try:
      self._run(self._leave)
    except CHIEF_DOWN_ERRORS:
      self.reset()
    self._left = True

  def put_sample(self, sample: base.Sample) -> bool:
    """Enqueues `sample` (marked with the chief incarnation its theta came from).

    Returns:
      False if the chief went away: the sample is discarded, the next read retries.
    """
    return self.put_batch(base.stack([sample._replace(incarnation=self.incarnation)]))

  def put_batch(self, batch: base.SampleBatch) -> bool:
    """Enqueues stacked samples in one call (put_sample, and the throughput benchmark)."""
    try:
      self._run(self._enqueue, dict(zip(self._sample_in, batch, strict=True)))
    except CHIEF_DOWN_ERRORS as e:
      logging.warning(
        "Chief at %s unreachable while putting a sample (%s); the sample is discarded.",
        self.backoff.chief_address,
        type(e).__name__,
      )
      self.reset()
      return False
    self.backoff.contact()
    return True
