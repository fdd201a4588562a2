"""The cluster spec of bin/chief and bin/worker: parsing, address and port checks, the server.

A cluster is one chief task and one or more worker tasks, each "host:port", given as JSON with
--cluster ({"chief": ["host:port"], "worker": ["host:port", ...]}) or in the standard TF_CONFIG
variable ({"cluster": {...}, "task": {"type": ..., "index": ...}}). Every process starts a
`tf.distribute.Server` for its own task. An evaluator (bin/evaluator) is TF_CONFIG's task type
"evaluator", as in TensorFlow: it checks the spec (it needs a chief) but serves nothing.

Exposure: TensorFlow's gRPC server listens on all interfaces and has no authentication, so
cluster specs with public addresses are refused unless allow_public_addresses is set.
"""

import errno
import ipaddress
import json
import os
import socket
from collections.abc import Mapping
from typing import NamedTuple

import tensorflow as tf
from absl import logging

from task_specific_learned_opt import errors

JOBS = ("chief", "worker")
# TensorFlow's convention: the evaluator is a task type of TF_CONFIG (and may be listed in the
# cluster spec), but not a server of the cluster.
EVALUATOR = "evaluator"


class ClusterError(errors.UserError, ValueError):
  """A cluster spec, address or port that cannot be used; the message names the fix."""


class TaskSpec(NamedTuple):
  """The whole cluster and which of its tasks this process is (what parse_cluster returns)."""

  cluster: dict[str, list[str]]  # {"chief": ["host:port"], "worker": [...]}.
  job: str  # "chief", "worker" or "evaluator".
  index: int  # The task's index in its job.


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
    job: "chief", "worker" or "evaluator", this binary's role.
    index: --task_index, or None to take it from TF_CONFIG (0 for the chief).
    environ: the environment (os.environ by default).

  Raises:
    ClusterError: no cluster given, malformed JSON, a missing or unknown job, an index out of
      range, an address that is not host:port, or a TF_CONFIG task of another role.
  """
  cluster, task = _read_spec(cluster_json, os.environ if environ is None else environ)
  _check_jobs(cluster)
  jobs = {name: list(cluster[name]) for name in JOBS}
  if job == EVALUATOR:  # Not a server: it reads the chief's train dir (evaluator_role.py).
    if task and task.get("type") != EVALUATOR:
      raise ClusterError(
        f"TF_CONFIG says this task is a {task.get('type')!r}, but this binary runs the evaluator."
      )
    return TaskSpec(jobs, EVALUATOR, 0)
  all_addresses = cluster["chief"] + cluster["worker"]
  if len(set(all_addresses)) != len(all_addresses):
    raise ClusterError("The cluster spec lists an address twice; every task needs its own port.")
  return TaskSpec(jobs, job, _task_index(cluster, job, index, task))


def _read_spec(cluster_json: str | Mapping | None, environ: Mapping[str, str]) -> tuple[dict, dict]:
  """(cluster, TF_CONFIG's task or {}) from --cluster, else from TF_CONFIG.

  Raises:
    ClusterError: neither is given, or it is not valid JSON.
  """
  if isinstance(cluster_json, Mapping):
    return dict(cluster_json), {}
  if cluster_json is not None:
    try:
      return json.loads(cluster_json), {}
    except json.JSONDecodeError as e:
      raise ClusterError(f"--cluster is not valid JSON ({e}): {cluster_json!r}.") from e
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
  return config["cluster"], config.get("task") or {}


def _check_jobs(cluster: object) -> None:
  """Raises ClusterError unless `cluster` maps the known jobs to host:port lists, one chief."""
  if not isinstance(cluster, dict):
    raise ClusterError(f"The cluster spec must be a JSON object of jobs, got {cluster!r}.")
  unknown = sorted(set(cluster) - set(JOBS) - {EVALUATOR})
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


def _task_index(cluster: dict, job: str, index: int | None, task: Mapping) -> int:
  """This task's index: --task_index, else TF_CONFIG's, else 0 for the chief.

  Raises:
    ClusterError: TF_CONFIG names another role, no index for a worker, or one out of range.
  """
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
  return index


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
  """Raises ClusterError if a process on this machine listens on `address`'s port.

  A port whose only users are connections of a process that has gone (TIME-WAIT, for a minute
  after a chief is killed or stopped) is free: the bind sets SO_REUSEADDR, as TensorFlow's own
  server does, so only a listening socket makes it fail.
  """
  _, port = _split_address(address)
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      s.bind(("", port))
    except OSError as e:
      raise ClusterError(
        f"Port {port} (from {address} in the cluster spec) is not free: {e.strerror}. Stop the "
        "process that holds it or give this task another port."
      ) from e


def nobody_listens(address: str, timeout: float = 1.0) -> bool:
  """True if a connection to `address` is refused: no process is there (any more).

  A timeout or an unreachable network proves nothing (a firewall may hide a live task), so it
  gives False.
  """
  host, port = _split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout):
      return False
  except ConnectionRefusedError:
    return True
  except OSError as e:
    return e.errno == errno.ECONNREFUSED


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
