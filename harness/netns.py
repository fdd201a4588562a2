"""Hosts of a private test network on one machine: network namespaces joined by veth links.

The multi-host fault tests (tests/distributed/test_partitions.py) and the soak benchmark
(benchmarks/soak.py) run the chief and each worker on a host of their own: a network namespace
with one link, `eth0`, to a bridge in a hub namespace, on a private subnet (10.213.0.0/24) that
exists only inside these namespaces. A partition is a host's link taken down at the bridge (the
host then sees no carrier and its packets are lost), healed by bringing it up again; a link can
also be slowed (a token-bucket rate, `tc tbf`) so that a transfer lasts long enough to be cut in
the middle. Traffic never leaves the namespaces: nothing is routed to the machine's own network.

  with netns.TestNetwork(num_hosts=3) as network:       # hosts 10.213.0.10, .11, .12
    process = network.popen(0, [sys.executable, "bin/chief", ...])
    network.cut(1); ...; network.heal(1)

Making namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and `ip`; `unavailable()` says in
one line why they cannot be made here. Every namespace a network made is deleted when it closes
(also when a test fails), and namespaces left by a process that died without closing are deleted
by the next network made on the machine.
"""

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

PREFIX = "tslo"  # Namespaces "tslo<pid>hub", "tslo<pid>h<i>"; links "tslo<pid>b<i>".
SUBNET = "10.213.0"
FIRST_HOST = 10
_NAMESPACE = re.compile(rf"^{PREFIX}(\d+)(hub|h\d+)$")


class NetworkError(RuntimeError):
  """A namespace, link or address could not be made or changed."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
  done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
  if check and done.returncode != 0:
    raise NetworkError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
  return done


def unavailable() -> str | None:
  """None if test networks can be made here; else one line saying why not."""
  if shutil.which("ip") is None:
    return "no `ip` command (iproute2) to make network namespaces"
  if os.geteuid() != 0:
    return "network namespaces need root"
  name = f"{PREFIX}{os.getpid()}probe"
  done = _ip("netns", "add", name, check=False)
  if done.returncode != 0:
    return f"cannot make a network namespace: {done.stderr.strip()}"
  _ip("netns", "delete", name, check=False)
  return None


def namespaces() -> list[str]:
  """The names of every network namespace on the machine."""
  listed = _ip("netns", "list", check=False).stdout.splitlines()
  return [line.split()[0] for line in listed if line.strip()]


def remove_orphans() -> list[str]:
  """Deletes the test namespaces of processes that no longer run; returns their names."""
  removed = []
  for name in namespaces():
    match = _NAMESPACE.match(name)
    if match is None or os.path.exists(f"/proc/{match.group(1)}"):
      continue
    _ip("netns", "delete", name, check=False)
    removed.append(name)
  return removed


class TestNetwork:
  """`num_hosts` namespaces on one bridge; host i has address 10.213.0.(10 + i)."""

  __test__ = False  # Not a pytest test class.

  def __init__(self, num_hosts: int, tag: str | None = None):
    """Makes the namespaces, the bridge and one link per host, all up.

    Args:
      num_hosts: hosts on the network (at most 200).
      tag: names this network's namespaces (default: this process's id). Two networks of one
        process need different tags.

    Raises:
      NetworkError: a namespace or link could not be made (what was made is removed).
    """
    if not 1 <= num_hosts <= 200:
      raise ValueError(f"A test network has 1 to 200 hosts, not {num_hosts}.")
    remove_orphans()
    self.tag = f"{PREFIX}{os.getpid()}{tag or ''}"
    self.hub = f"{self.tag}hub"
    self.hosts = [f"{self.tag}h{i}" for i in range(num_hosts)]
    self.addresses = [f"{SUBNET}.{FIRST_HOST + i}" for i in range(num_hosts)]
    self._made = []
    try:
      self._make()
    except Exception:
      self.close()
      raise

  def _port(self, i: int) -> str:
    """The bridge side of host i's link (interface names have at most 15 characters)."""
    return f"b{os.getpid() % 100000}x{i}"

  def _make(self) -> None:
    _ip("netns", "add", self.hub)
    self._made.append(self.hub)
    _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
    _ip("-n", self.hub, "link", "set", "br0", "up")
    for i, (host, address) in enumerate(zip(self.hosts, self.addresses, strict=True)):
      _ip("netns", "add", host)
      self._made.append(host)
      _ip("-n", host, "link", "set", "lo", "up")
      port = self._port(i)
      # Made inside the host, then the bridge side moved to the hub: no name in the machine's
      # own namespace, even for a moment.
      _ip("-n", host, "link", "add", "eth0", "type", "veth", "peer", "name", port)
      _ip("-n", host, "link", "set", port, "netns", self.hub)
      _ip("-n", host, "addr", "add", f"{address}/24", "dev", "eth0")
      _ip("-n", host, "link", "set", "eth0", "up")
      _ip("-n", self.hub, "link", "set", port, "master", "br0")
      _ip("-n", self.hub, "link", "set", port, "up")

  def __enter__(self) -> "TestNetwork":
    return self

  def __exit__(self, *exc: object) -> None:
    self.close()

  def close(self) -> None:
    """Deletes every namespace this network made (their links go with them)."""
    for name in reversed(self._made):
      _ip("netns", "delete", name, check=False)
    self._made = []

  def command(self, i: int, args: Sequence[str]) -> list[str]:
    """`args` run on host i (`ip netns exec`: the process keeps its PID)."""
    return ["ip", "netns", "exec", self.hosts[i], *args]

  def popen(self, i: int, args: Sequence[str], **kwargs: Any) -> subprocess.Popen:
    """Starts `args` on host i; kwargs go to subprocess.Popen."""
    return subprocess.Popen(self.command(i, args), **kwargs)

  def cut(self, i: int) -> None:
    """Takes host i's link down at the bridge: it reaches nobody and nobody reaches it."""
    _ip("-n", self.hub, "link", "set", self._port(i), "down")

  def heal(self, i: int) -> None:
    """Brings host i's link up again."""
    _ip("-n", self.hub, "link", "set", self._port(i), "up")

  def is_cut(self, i: int) -> bool:
    """Whether host i's link is down."""
    shown = _ip("-n", self.hub, "link", "show", self._port(i)).stdout
    return "state DOWN" in shown or ",UP" not in shown.split(">")[0]

  def slow(self, i: int, kbit_per_sec: int) -> None:
    """Limits host i's link to `kbit_per_sec` both ways (tc tbf), so transfers take a while."""
    for namespace, device in ((self.hosts[i], "eth0"), (self.hub, self._port(i))):
      subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "qdisc", "replace", "dev", device, "root",
         "tbf", "rate", f"{kbit_per_sec}kbit", "burst", "1600", "latency", "10s"],
        check=True, capture_output=True, timeout=30,
      )  # fmt: skip

  def unslow(self, i: int) -> None:
    """Lifts the rate limit of `slow`."""
    for namespace, device in ((self.hosts[i], "eth0"), (self.hub, self._port(i))):
      subprocess.run(
        ["ip", "netns", "exec", namespace, "tc", "qdisc", "del", "dev", device, "root"],
        capture_output=True, timeout=30,
      )  # fmt: skip

  def bytes_sent(self, i: int) -> tuple[int, int]:
    """(bytes host i has sent, bytes it has received) on its link."""
    counts = []
    for direction in ("tx_bytes", "rx_bytes"):
      read = ["cat", f"/sys/class/net/eth0/statistics/{direction}"]
      done = subprocess.run(self.command(i, read), capture_output=True, text=True, timeout=30)
      counts.append(int(done.stdout.strip() or 0))
    return counts[0], counts[1]
