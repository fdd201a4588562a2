"""The in-process transport: the chief and the workers in one Python process (local mode)."""

import collections
import queue
import threading
from typing import Any

from task_specific_learned_opt.distributed import base


class InProcessTransport(base.Transport):
  """A thread-safe theta slot and a FIFO of samples."""

  def __init__(self):
    self._lock = threading.Lock()
    self._theta = None
    self._version = -1
    self._samples = queue.Queue()

  def publish_theta(self, theta: Any, version: int) -> None:
    with self._lock:
      self._theta, self._version = theta, int(version)

  def read_theta(self) -> tuple[Any, int]:
    with self._lock:
      if self._theta is None:
        raise RuntimeError("No theta has been published yet.")
      return self._theta, self._version

  def put_sample(self, sample: base.Sample) -> None:
    self._samples.put(sample)

  def take_samples(self, num: int, timeout: float | None = None) -> list[base.Sample]:
    samples = collections.deque()
    try:
      while len(samples) < num:
        samples.append(self._samples.get(timeout=timeout))
    except queue.Empty:
      pass
    return list(samples)

  def pending(self) -> int:
    """Samples waiting to be taken."""
    return self._samples.qsize()
