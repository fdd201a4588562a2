"""The cluster spec: parsing, the private-address check, the port check."""

import json
import socket

import pytest

from task_specific_learned_opt.distributed import cluster_spec

CLUSTER = {"chief": ["localhost:2222"], "worker": ["localhost:2223", "127.0.0.1:2224"]}


def test_parse_cluster_from_the_flag_and_from_tf_config():
  spec = cluster_spec.parse_cluster(json.dumps(CLUSTER), "worker", 1, environ={})
  assert spec == cluster_spec.TaskSpec(CLUSTER, "worker", 1)
  assert cluster_spec.parse_cluster(json.dumps(CLUSTER), "chief", None, environ={}).index == 0
  tf_config = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 1}})
  spec = cluster_spec.parse_cluster(None, "worker", None, environ={"TF_CONFIG": tf_config})
  assert spec == cluster_spec.TaskSpec(CLUSTER, "worker", 1)


@pytest.mark.parametrize(
  "cluster_json,job,index,message",
  [
    ("{not json", "chief", None, "not valid JSON"),
    ('["localhost:1"]', "chief", None, "JSON object"),
    (json.dumps({**CLUSTER, "ps": ["localhost:1"]}), "chief", None, "Unknown job.*'ps'"),
    (json.dumps({"worker": ["localhost:1"]}), "chief", None, "addresses for 'chief'"),
    (json.dumps({**CLUSTER, "chief": ["a:1", "b:2"]}), "chief", None, "exactly one chief"),
    (json.dumps({**CLUSTER, "worker": ["localhost"]}), "worker", 0, "not 'host:port'"),
    (json.dumps({**CLUSTER, "worker": ["localhost:99999"]}), "worker", 0, "not 'host:port'"),
    (json.dumps({**CLUSTER, "worker": ["localhost:2222"]}), "worker", 0, "address twice"),
    (json.dumps(CLUSTER), "worker", 2, "out of range.*2 worker task"),
    (json.dumps(CLUSTER), "worker", None, "--task_index"),
  ],
)
def test_bad_cluster_specs_name_the_problem(cluster_json, job, index, message):
  with pytest.raises(cluster_spec.ClusterError, match=message):
    cluster_spec.parse_cluster(cluster_json, job, index, environ={})


def test_tf_config_problems():
  with pytest.raises(cluster_spec.ClusterError, match="No cluster given"):
    cluster_spec.parse_cluster(None, "chief", None, environ={})
  with pytest.raises(cluster_spec.ClusterError, match="TF_CONFIG is not valid JSON"):
    cluster_spec.parse_cluster(None, "chief", None, environ={"TF_CONFIG": "{"})
  wrong_role = json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}})
  with pytest.raises(cluster_spec.ClusterError, match="is a 'worker'.*runs the 'chief'"):
    cluster_spec.parse_cluster(None, "chief", None, environ={"TF_CONFIG": wrong_role})


def test_public_addresses_are_refused_unless_allowed():
  private = {"chief": ["localhost:1"], "worker": ["10.1.2.3:2", "192.168.0.9:3"]}
  cluster_spec.check_private(private)
  public = {"chief": ["localhost:1"], "worker": ["8.8.8.8:2222"]}
  with pytest.raises(cluster_spec.ClusterError, match="8.8.8.8.*public.*--allow_public_addresses"):
    cluster_spec.check_private(public)
  cluster_spec.check_private(public, allow_public_addresses=True)
  with pytest.raises(cluster_spec.ClusterError, match="does not resolve"):
    cluster_spec.check_private({"chief": ["no-such-host.invalid:1"], "worker": ["localhost:2"]})


def test_a_port_something_listens_on_is_reported():
  with socket.socket() as holder:
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    with pytest.raises(cluster_spec.ClusterError, match=f"Port {port} .* not free.*another port"):
      cluster_spec.check_port_free(f"localhost:{port}")
    assert not cluster_spec.nobody_listens(f"127.0.0.1:{port}")
  cluster_spec.check_port_free(f"localhost:{port}")  # Free again once released.
  assert cluster_spec.nobody_listens(f"127.0.0.1:{port}")


def test_a_port_left_in_time_wait_by_a_process_that_has_gone_is_free():
  # A server that closes its side of a connection first leaves it in TIME-WAIT for a minute:
  # what a killed chief leaves behind. Its port must count as free at once. The server sets
  # SO_REUSEADDR, as TensorFlow's gRPC server does.
  server = socket.socket()
  server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  server.bind(("127.0.0.1", 0))
  server.listen()
  port = server.getsockname()[1]
  client = socket.create_connection(("127.0.0.1", port))
  accepted, _ = server.accept()
  accepted.close()
  server.close()
  client.recv(1)  # The server's FIN has arrived.
  client.close()
  states = open("/proc/net/tcp").read()
  assert f":{port:04X} " in states  # The connection is still there (TIME-WAIT)...
  cluster_spec.check_port_free(f"localhost:{port}")  # ...and the port is free.
