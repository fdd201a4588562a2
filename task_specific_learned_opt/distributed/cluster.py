"""Outer-training on a cluster: TensorFlow's distributed runtime (DESIGN.md, paper App. C).

Every process starts a `tf.distribute.Server` for its task of the cluster spec. What the chief and
the workers share lives on the chief's task, in graph mode (`tf.compat.v1.Session`):

  outer_training/theta          theta, flattened (what workers read)
  outer_training/version        the outer step theta was published at
  outer_training/incarnation    a random id of the chief process (a restart changes it)
  outer_training/experiment     the experiment's fingerprint (theta's shapes, gin config hash)
  outer_training/done           set when the chief has finished; workers then leave
  outer_training/samples        a FIFOQueue of samples (shared_name), filled by workers

The chief keeps theta's master copy, Adam's slots and the outer step in its own process
(chief.Chief, checkpointed by tf.train.Checkpoint), applies batches it dequeues and publishes the
new theta. Workers compute samples in their own process (worker.Worker) and enqueue them; they
never wait for each other. The chief never waits for a worker: a killed worker simply stops
adding samples, and a restarted one starts a new inner run and rejoins.

Faults: when the chief is unreachable, workers retry with backoff (logged) for up to
`chief_timeout_secs`; a restarted chief resumes from its checkpoint with a new incarnation, and
samples computed with a theta it never restored (a version past its checkpoint, from the lost
run) are dropped. A sample is enqueued once (a failed enqueue discards it) and dequeued once; the
chief also drops any (worker run, sample index) it has seen before.

Exposure: TensorFlow's gRPC server listens on all interfaces and has no authentication, so
cluster specs with public addresses are refused unless allow_public_addresses is set.
"""

import hashlib
import ipaddress
import json
import os
import random
import socket
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt.distributed import base
from task_specific_learned_opt.distributed import outer_training as outer_lib
from task_specific_learned_opt.distributed import worker as worker_lib

JOBS = ("chief", "worker")
CHIEF_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"
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


class ClusterError(ValueError):
  """A cluster spec, address or port that cannot be used; the message names the fix."""


class ExperimentMismatchError(ClusterError):
  """A worker whose gin experiment differs from the chief's."""


class ChiefUnreachableError(ClusterError):
  """The chief did not answer within the timeout."""


# ---------------------------------------------------------------------------------------------
# The cluster spec.


class TaskSpec(NamedTuple):
  cluster: dict  # {"chief": ["host:port"], "worker": [...]}.
  job: str
  index: int


def _split_address(address: str) -> tuple[str, int]:
  if not isinstance(address, str) or ":" not in address:
    raise ClusterError(f"Address {address!r} in the cluster spec is not 'host:port'.")
  host, port = address.rsplit(":", 1)
  host = host.strip("[]")
  try:
    port_number = int(port)
  except ValueError:
    port_number = -1
  if not host or not 0 < port_number < 65536:
    raise ClusterError(f"Address {address!r} in the cluster spec is not 'host:port'.")
  return host, port_number


def parse_cluster(
  cluster_json: str | Mapping | None,
  job: str,
  index: int | None = None,
  environ: Mapping[str, str] | None = None,
) -> TaskSpec:
  """The cluster and this process's task, from --cluster or the TF_CONFIG variable.

  Args:
    cluster_json: the --cluster flag (JSON, {"chief": ["host:port"], "worker": [...]}) or None
      to read TF_CONFIG ({"cluster": {...}, "task": {"type": ..., "index": ...}}).
    job: "chief" or "worker", this binary's role.
    index: --task_index, or None to take it from TF_CONFIG (0 for the chief).
    environ: the environment (os.environ by default).

  Raises:
    ClusterError: no cluster given, malformed JSON, a missing or unknown job, an index out of
      range, an address that is not host:port, or a TF_CONFIG task of another role.
  """
  environ = os.environ if environ is None else environ
  task = {}
  if cluster_json is None:
    if "TF_CONFIG" not in environ:
      raise ClusterError(
        'No cluster given: pass --cluster \'{"chief": ["host:port"], '
        '"worker": ["host:port", ...]}\' or set TF_CONFIG.'
      )
    try:
      config = json.loads(environ["TF_CONFIG"])
    except json.JSONDecodeError as e:
      raise ClusterError(f"TF_CONFIG is not valid JSON ({e}).") from e
    if not isinstance(config, dict) or "cluster" not in config:
      raise ClusterError("TF_CONFIG has no 'cluster' entry.")
    cluster, task = config["cluster"], config.get("task") or {}
  elif isinstance(cluster_json, Mapping):
    cluster = dict(cluster_json)
  else:
    try:
      cluster = json.loads(cluster_json)
    except json.JSONDecodeError as e:
      raise ClusterError(f"--cluster is not valid JSON ({e}): {cluster_json!r}.") from e
  if not isinstance(cluster, dict):
    raise ClusterError(f"The cluster spec must be a JSON object of jobs, got {cluster!r}.")
  unknown = sorted(set(cluster) - set(JOBS))
  if unknown:
    raise ClusterError(f"Unknown job(s) {unknown} in the cluster spec; the jobs are {JOBS}.")
  for name in JOBS:
    addresses = cluster.get(name)
    if not isinstance(addresses, list) or not addresses:
      raise ClusterError(f"The cluster spec needs a non-empty list of addresses for {name!r}.")
    for address in addresses:
      _split_address(address)
  if len(cluster["chief"]) != 1:
    raise ClusterError(f"The cluster spec must have exactly one chief, got {cluster['chief']}.")
  all_addresses = cluster["chief"] + cluster["worker"]
  if len(set(all_addresses)) != len(all_addresses):
    raise ClusterError("The cluster spec lists an address twice; every task needs its own port.")
  if task:
    if task.get("type") != job:
      raise ClusterError(
        f"TF_CONFIG says this task is a {task.get('type')!r}, but this binary runs the {job!r}."
      )
    if index is None:
      index = task.get("index", 0)
  if index is None:
    index = 0 if job == "chief" else None
  if index is None:
    raise ClusterError("No task index: pass --task_index (or set TF_CONFIG's task.index).")
  if not isinstance(index, int) or not 0 <= index < len(cluster[job]):
    raise ClusterError(
      f"Task index {index!r} is out of range: the cluster has {len(cluster[job])} {job} task(s), "
      f"indices 0 to {len(cluster[job]) - 1}."
    )
  return TaskSpec({name: list(cluster[name]) for name in JOBS}, job, index)


def check_private(cluster: Mapping, allow_public_addresses: bool = False) -> None:
  """Refuses addresses outside loopback and the private ranges unless explicitly allowed.

  TensorFlow's gRPC server listens on all interfaces whatever host the spec names, and anyone who
  reaches its port can run graph ops in that process.

  Raises:
    ClusterError: a host that does not resolve, or a public one without allow_public_addresses.
  """
  for job, addresses in cluster.items():
    for address in addresses:
      host, _ = _split_address(address)
      try:
        infos = socket.getaddrinfo(host, None)
      except socket.gaierror as e:
        raise ClusterError(f"Host {host!r} ({job} {address}) does not resolve: {e}.") from e
      for info in infos:
        ip = ipaddress.ip_address(info[4][0].split("%")[0])
        if not (ip.is_loopback or ip.is_private) and not allow_public_addresses:
          raise ClusterError(
            f"{job} address {address} is public ({ip}). TensorFlow's server listens on all "
            "interfaces without authentication: run the cluster on a private network or behind "
            "a firewall, and pass --allow_public_addresses only if you have."
          )


def check_port_free(address: str) -> None:
  """Raises ClusterError if this machine cannot listen on `address`'s port."""
  _, port = _split_address(address)
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    try:
      s.bind(("", port))
    except OSError as e:
      raise ClusterError(
        f"Port {port} (from {address} in the cluster spec) is not free: {e.strerror}. Stop the "
        "process that holds it or give this task another port."
      ) from e


def reachable(address: str, timeout: float = 1.0) -> bool:
  host, port = _split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout):
      return True
  except OSError:
    return False


def start_server(spec: TaskSpec) -> tf.distribute.Server:
  """Starts this task's server (after checking its port)."""
  address = spec.cluster[spec.job][spec.index]
  check_port_free(address)
  try:
    server = tf.distribute.Server(
      tf.train.ClusterSpec(spec.cluster), job_name=spec.job, task_index=spec.index, start=True
    )
  except (tf.errors.OpError, RuntimeError, ValueError) as e:
    raise ClusterError(f"Cannot start the {spec.job} server on {address}: {e}") from e
  logging.info("Started the %s %d server on %s.", spec.job, spec.index, address)
  return server


# ---------------------------------------------------------------------------------------------
# theta as one vector, and the experiment's fingerprint.


def flatten(nest) -> np.ndarray:
  return np.concatenate(
    [np.reshape(np.asarray(x, np.float32), [-1]) for x in tf.nest.flatten(nest)]
  )


def unflatten(vector: np.ndarray, template) -> Any:
  """`vector` ([n] or [B, n]) as a nest shaped like `template` (with B leading if given)."""
  leaves, offset = [], 0
  batch = list(vector.shape[:-1])
  for x in tf.nest.flatten(template):
    size = int(np.prod(x.shape))
    leaves.append(np.reshape(vector[..., offset : offset + size], batch + list(x.shape)))
    offset += size
  return tf.nest.pack_sequence_as(template, leaves)


def fingerprint(theta_template) -> str:
  """theta's shapes and a hash of the gin config: what chief and workers must agree on."""
  shapes = [list(np.shape(x)) for x in tf.nest.flatten(theta_template)]
  config = hashlib.sha256(gin.config_str().encode()).hexdigest()[:16]
  return json.dumps({"theta_shapes": shapes, "gin_config_sha256": config}, sort_keys=True)


def mismatch_message(chief: str, mine: str) -> str:
  try:
    chief_info, my_info = json.loads(chief), json.loads(mine)
  except json.JSONDecodeError:
    chief_info, my_info = {"theta_shapes": chief}, {"theta_shapes": mine}
  if chief_info.get("theta_shapes") != my_info.get("theta_shapes"):
    what = (
      f"theta's shapes differ (chief {chief_info.get('theta_shapes')}, this worker "
      f"{my_info.get('theta_shapes')})"
    )
  else:
    what = (
      f"the gin configs differ (sha256 {chief_info.get('gin_config_sha256')} on the chief, "
      f"{my_info.get('gin_config_sha256')} here)"
    )
  return (
    f"This worker's experiment is not the chief's: {what}. Start every worker with the chief's "
    "--gin_file and --gin_bindings."
  )


# ---------------------------------------------------------------------------------------------
# The shared state on the chief's task.


class Batch(NamedTuple):
  """Dequeued samples, stacked (flat theta-sized vectors)."""

  g_rp: np.ndarray  # [B, n]
  g_es: np.ndarray  # [B, n]
  loss_plus: np.ndarray  # [B]
  loss_minus: np.ndarray
  theta_version: np.ndarray  # int64
  num_steps: np.ndarray  # int32
  inner_step: np.ndarray
  worker_id: np.ndarray
  worker_run: np.ndarray  # int64: a random id of the worker process.
  sample_index: np.ndarray  # int64: the sample's index within its worker run.
  incarnation: np.ndarray  # int64: the chief incarnation the theta was read from.


_QUEUE_DTYPES = [
  tf.float32,
  tf.float32,
  tf.float32,
  tf.float32,
  tf.int64,
  tf.int32,
  tf.int32,
  tf.int32,
  tf.int64,
  tf.int64,
  tf.int64,
]


@gin.configurable(denylist=["target", "num_params"])
class Channel:
  """The chief's shared variables and sample queue, seen from one process's session."""

  def __init__(
    self, target: str, num_params: int, queue_capacity: int = 1024, rpc_timeout_secs: float = 10.0
  ):
    """Builds the graph and a session on `target`.

    Args:
      target: the session target, e.g. "grpc://chief-host:port" or the chief server's target.
      num_params: theta's size.
      queue_capacity: samples the queue holds; workers wait (briefly) when it is full.
      rpc_timeout_secs: the longest a single call to the chief may take before it counts as a
        failure (workers then retry).
    """
    self.target = target
    self.num_params = int(num_params)
    self.rpc_timeout_ms = int(rpc_timeout_secs * 1000)
    self.graph = tf.Graph()
    n = self.num_params
    with self.graph.as_default(), tf.device(CHIEF_DEVICE), tf.compat.v1.variable_scope(SCOPE):

      def variable(name, shape, dtype):
        return tf.compat.v1.get_variable(
          name,
          shape=shape,
          dtype=dtype,
          initializer=tf.compat.v1.zeros_initializer(),
          use_resource=True,
          trainable=False,
        )

      self._theta = variable("theta", [n], tf.float32)
      self._version = variable("version", [], tf.int64)
      self._incarnation = variable("incarnation", [], tf.int64)
      self._done = variable("done", [], tf.bool)
      self._finished = variable("finished_workers", [], tf.int64)
      self._experiment = tf.compat.v1.get_variable(
        "experiment", initializer=tf.constant(""), use_resource=True, trainable=False
      )
      variables = [
        self._theta,
        self._version,
        self._incarnation,
        self._done,
        self._finished,
        self._experiment,
      ]
      self._initialize = tf.compat.v1.variables_initializer(variables)
      self._theta_in = tf.compat.v1.placeholder(tf.float32, [n])
      self._version_in = tf.compat.v1.placeholder(tf.int64, [])
      self._publish = [self._theta.assign(self._theta_in), self._version.assign(self._version_in)]
      self._incarnation_in = tf.compat.v1.placeholder(tf.int64, [])
      self._experiment_in = tf.compat.v1.placeholder(tf.string, [])
      self._set_identity = [
        self._incarnation.assign(self._incarnation_in),
        self._experiment.assign(self._experiment_in),
      ]
      self._finish = self._done.assign(True)
      self._checkout = self._finished.assign_add(1)
      self._read = {
        "theta": self._theta.read_value(),
        "version": self._version.read_value(),
        "incarnation": self._incarnation.read_value(),
        "done": self._done.read_value(),
        "experiment": self._experiment.read_value(),
      }
      self._read_finished = self._finished.read_value()
      shapes = [[n], [n]] + [[]] * (len(_QUEUE_DTYPES) - 2)
      queue = tf.queue.FIFOQueue(
        int(queue_capacity), _QUEUE_DTYPES, shapes=shapes, shared_name=QUEUE_NAME, name="samples"
      )
      self._sample_in = [
        tf.compat.v1.placeholder(d, s) for d, s in zip(_QUEUE_DTYPES, shapes, strict=True)
      ]
      self._enqueue = queue.enqueue(self._sample_in)
      self._many_in = [
        tf.compat.v1.placeholder(d, [None, *s]) for d, s in zip(_QUEUE_DTYPES, shapes, strict=True)
      ]
      self._enqueue_many = queue.enqueue_many(self._many_in)
      self._size = queue.size()
      self._take_n = tf.compat.v1.placeholder(tf.int32, [])
      self._dequeue = queue.dequeue_many(self._take_n)
    self._session = None

  @property
  def session(self) -> tf.compat.v1.Session:
    if self._session is None:
      config = tf.compat.v1.ConfigProto(
        device_filters=["/job:chief"], operation_timeout_in_ms=self.rpc_timeout_ms
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

  def _run(self, fetches, feed_dict=None):
    options = tf.compat.v1.RunOptions(timeout_in_ms=self.rpc_timeout_ms)
    return self.session.run(fetches, feed_dict=feed_dict, options=options)

  # The chief's side.
  def start(self, theta: np.ndarray, version: int, incarnation: int, experiment: str) -> None:
    self._run(self._initialize)
    self._run(
      self._set_identity, {self._incarnation_in: incarnation, self._experiment_in: experiment}
    )
    self.publish(theta, version)

  def publish(self, theta: np.ndarray, version: int) -> None:
    self._run(self._publish, {self._theta_in: theta, self._version_in: version})

  def finish(self) -> None:
    self._run(self._finish)

  def finished_workers(self) -> int:
    return int(self._run(self._read_finished))

  def size(self) -> int:
    return int(self._run(self._size))

  def take(self, num: int) -> Batch | None:
    """`num` samples if the queue holds that many, else None (never blocks on workers)."""
    if self.size() < num:
      return None
    return Batch(*self._run(self._dequeue, {self._take_n: num}))

  # The worker's side.
  def read(self) -> dict:
    """theta, version, incarnation, done and experiment as the chief has them."""
    values = self._run(self._read)
    values["experiment"] = values["experiment"].decode()
    return values

  def put(self, sample: base.Sample, worker_run: int, sample_index: int, incarnation: int) -> None:
    values = [
      flatten(sample.g_rp),
      flatten(sample.g_es),
      sample.loss_plus,
      sample.loss_minus,
      sample.theta_version,
      sample.num_steps,
      sample.inner_step,
      sample.worker_id,
      worker_run,
      sample_index,
      incarnation,
    ]
    self._run(self._enqueue, dict(zip(self._sample_in, values, strict=True)))

  def put_many(self, batch: Batch) -> None:
    """Enqueues stacked samples in one call (stand-in workers of the throughput benchmark)."""
    self._run(self._enqueue_many, dict(zip(self._many_in, batch, strict=True)))

  def checkout(self) -> None:
    self._run(self._checkout)


def _random_id() -> int:
  return random.SystemRandom().randrange(1, 2**62)


# ---------------------------------------------------------------------------------------------
# The chief.


class SampleFilter:
  """Which dequeued samples the chief may apply (beyond the Chief's own non-finite/stale checks).

  Drops samples computed with a theta this chief never had (an earlier chief run's version past
  the checkpoint it restored) and any (worker run, sample index) seen before.
  """

  def __init__(self, incarnation: int, restored_step: int):
    self.incarnation = int(incarnation)
    self.restored_step = int(restored_step)
    self._last_index = {}  # (worker_id, worker_run) -> highest sample index seen.

  def __call__(self, batch: Batch) -> tuple[np.ndarray, int, int]:
    """(keep mask, number from a lost theta, number of duplicates)."""
    lost = (batch.incarnation != self.incarnation) & (batch.theta_version > self.restored_step)
    duplicate = np.zeros_like(lost)
    for i, key in enumerate(zip(batch.worker_id.tolist(), batch.worker_run.tolist(), strict=True)):
      index = int(batch.sample_index[i])
      if index <= self._last_index.get(key, -1):
        duplicate[i] = True
      else:
        self._last_index[key] = index
    return ~(lost | duplicate), int(np.sum(lost)), int(np.sum(duplicate & ~lost))


@gin.configurable(denylist=["train_dir", "spec", "setup"])
def run_chief(
  train_dir: str,
  spec: TaskSpec,
  setup: outer_lib.OuterTraining | None = None,
  poll_secs: float = 0.005,
  linger_secs: float = 60.0,
) -> dict:
  """The chief's loop: dequeue batches, apply them, publish theta, checkpoint; resumes.

  Args:
    train_dir: where checkpoints, theta exports, summaries and plots go.
    spec: the cluster and this task (the chief).
    setup: the experiment; gin's `outer_training()` if None.
    poll_secs: how long to sleep when the queue holds less than a batch.
    linger_secs: after the last step, how long to wait for workers to see that training is over.

  Returns:
    The last outer step's statistics.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  num_workers = len(spec.cluster["worker"])
  server = start_server(spec)
  files = outer_lib.ChiefFiles(
    train_dir, setup, f"{setup.family.name}, {setup.lopt.name}, {num_workers} workers (cluster)"
  )
  chief = files.chief
  template = chief.theta_numpy()
  incarnation = _random_id()
  channel = Channel(server.target, flatten(template).size)
  channel.start(flatten(template), chief.step, incarnation, fingerprint(template))
  accept = SampleFilter(incarnation, chief.step)
  logging.info(
    "Chief ready at outer step %d on %s, waiting for samples from %d worker task(s).",
    chief.step,
    spec.cluster["chief"][0],
    num_workers,
  )
  stats, samples_done, last_wait_log = {}, 0, time.time()
  finished = chief.step >= setup.num_outer_steps
  try:
    while chief.step < setup.num_outer_steps:
      batch = channel.take(chief.batch_size)
      if batch is None:
        if time.time() - last_wait_log > 60:
          logging.info("Waiting for samples: %d of %d queued.", channel.size(), chief.batch_size)
          last_wait_log = time.time()
        files.save_if_due()
        time.sleep(poll_secs)
        continue
      last_wait_log = time.time()
      samples_done += len(batch.loss_plus)
      keep, num_lost, num_duplicate = accept(batch)
      if not keep.any():
        logging.warning("A whole batch was from a lost theta or seen before; skipped.")
        continue
      with outer_lib.interrupts_deferred():  # Apply, publish and record: all or nothing.
        kept = Batch(*(x[keep] for x in batch))
        stats = chief.apply_arrays(
          unflatten(kept.g_rp, template),
          unflatten(kept.g_es, template),
          kept.loss_plus,
          kept.loss_minus,
          kept.theta_version,
          kept.num_steps.astype(np.float64),
          kept.inner_step.astype(np.float64),
        )
        channel.publish(flatten(chief.theta_numpy()), chief.step)
        stats.update(
          num_lost_theta=num_lost,
          num_duplicate=num_duplicate,
          num_workers_in_batch=len(set(kept.worker_id.tolist())),
        )
        stats = files.record(stats, samples_done)
      files.save_if_due()
    finished = True
  finally:
    files.save()
  if finished:
    _let_workers_leave(channel, num_workers, linger_secs)
  return stats


def _let_workers_leave(channel: Channel, num_workers: int, linger_secs: float) -> None:
  channel.finish()
  deadline = time.time() + linger_secs
  while time.time() < deadline and channel.finished_workers() < num_workers:
    channel.take(channel.size() or 1)  # Unblocks workers waiting on a full queue.
    time.sleep(0.1)
  logging.info(
    "Training finished; %d of %d worker task(s) were told to stop.",
    channel.finished_workers(),
    num_workers,
  )


# ---------------------------------------------------------------------------------------------
# A worker.


@gin.configurable(denylist=["spec", "setup"])
def run_worker(
  spec: TaskSpec,
  setup: outer_lib.OuterTraining | None = None,
  chief_timeout_secs: float = 600.0,
  max_samples: int | None = None,
) -> int:
  """A worker's loop: read theta, compute a sample, enqueue it; until the chief says done.

  Args:
    spec: the cluster and this worker's task.
    setup: the experiment; gin's `outer_training()` if None.
    chief_timeout_secs: how long the chief may be unreachable (at start or after it went away)
      before the worker gives up with an error; meanwhile it retries with backoff.
    max_samples: stop after this many samples (None: until the chief finishes).

  Returns:
    The number of samples this worker enqueued.

  Raises:
    ChiefUnreachableError: the chief did not answer for `chief_timeout_secs`.
    ExperimentMismatchError: the chief runs another experiment.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  start_server(spec)
  chief_address = spec.cluster["chief"][0]
  template = tf.nest.map_structure(np.asarray, setup.lopt.init(setup.seed))
  experiment = fingerprint(template)
  channel = Channel(f"grpc://{chief_address}", flatten(template).size)
  worker_run = _random_id()
  worker = worker_lib.Worker(
    family=setup.family,
    lopt=setup.lopt,
    worker_id=spec.index,
    seed=(setup.seed, worker_run % 2**31),  # A restarted worker does not repeat its samples.
  )
  state, num_put, backoff = worker.initial_state(), 0, 1.0
  last_contact, last_log, checked = time.time(), 0.0, 0
  logging.info(
    "Worker %d (run %d) connecting to the chief at %s.", spec.index, worker_run, chief_address
  )

  def wait(error: Exception, what: str) -> None:
    nonlocal backoff
    down_for = time.time() - last_contact
    if down_for > chief_timeout_secs:
      raise ChiefUnreachableError(
        f"The chief at {chief_address} has not answered for {down_for:.0f} s (last error: "
        f"{' '.join(str(error).split())[:200]}). Check that bin/chief is running with this "
        "cluster spec, or raise --chief_timeout_secs."
      ) from error
    logging.warning(
      "Chief at %s unreachable while %s (%s); retrying in %.0f s (down for %.0f s).",
      chief_address,
      what,
      type(error).__name__,
      backoff,
      down_for,
    )
    channel.reset()
    time.sleep(backoff)
    backoff = min(backoff * 2, 30.0)

  while max_samples is None or num_put < max_samples:
    try:
      shared = channel.read()
    except CHIEF_DOWN_ERRORS as e:
      wait(e, "reading theta")
      continue
    if not shared["experiment"]:  # The chief is starting: its variables are not set yet.
      wait(tf.errors.UnavailableError(None, None, "chief starting"), "the chief starts")
      continue
    if shared["incarnation"] != checked:
      if shared["experiment"] != experiment:
        raise ExperimentMismatchError(mismatch_message(shared["experiment"], experiment))
      if checked:
        logging.info("The chief restarted (now at outer step %d); carrying on.", shared["version"])
      checked = shared["incarnation"]
    last_contact, backoff = time.time(), 1.0
    if shared["done"]:
      channel.checkout()
      logging.info(
        "The chief has finished; worker %d leaves after %d samples.", spec.index, num_put
      )
      return num_put
    start = time.time()
    sample, state = worker.step(unflatten(shared["theta"], template), int(shared["version"]), state)
    computed = time.time()
    try:
      channel.put(sample, worker_run, num_put, int(shared["incarnation"]))
    except CHIEF_DOWN_ERRORS as e:
      wait(e, "enqueueing a sample (discarded)")
      continue
    num_put += 1
    last_contact = time.time()
    if time.time() - last_log > 30 or num_put == 1:
      logging.info(
        "worker %d: sample %d at theta version %d, K %d, L+ %.4f, %.2f s (enqueue %.1f ms)",
        spec.index,
        num_put,
        sample.theta_version,
        sample.num_steps,
        sample.loss_plus,
        computed - start,
        1000 * (time.time() - computed),
      )
      last_log = time.time()
  return num_put
