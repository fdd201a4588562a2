"""The in-process transport: the chief and its workers in one Python process (local mode, tests).

A thread-safe theta slot and a FIFO of samples; the same calls as the TensorFlow-runtime
transport (base.Transport), so the loops of loops.py run unchanged over either.
"""

import collections
import threading

import numpy as np

from task_specific_learned_opt.distributed import base


class InProcessTransport(base.Transport):
  """theta and a queue of samples in memory, for a chief and workers of one process."""

  def __init__(self, incarnation: int = 1):
    """Makes an empty transport.

    Args:
      incarnation: the id put on every sample (the chief's run; one per process here).
    """
    self._lock = threading.Lock()
    self._theta = None
    self._version = -1
    self._finished = False
    self._samples = collections.deque()
    self.incarnation = int(incarnation)

  def publish_theta(self, theta: np.ndarray, version: int) -> None:
    """Stores a float32 copy of `theta` (flat, [n]) and `version` for read_theta."""
    with self._lock:
      self._theta, self._version = np.array(theta, np.float32), int(version)

  def read_theta(self) -> tuple[np.ndarray, int] | None:
    """The latest (theta, version); None once finished.

    Raises:
      RuntimeError: nothing was published yet (in one process, a chief publishes first).
    """
    with self._lock:
      if self._finished:
        return None
      if self._theta is None:
        raise RuntimeError("No theta has been published yet.")
      return self._theta, self._version

  def put_sample(self, sample: base.Sample) -> bool:
    """Queues `sample`, marked with this transport's incarnation; True: nothing is lost here."""
    with self._lock:
      self._samples.append(sample._replace(incarnation=self.incarnation))
    return True

  def take_samples(self, num: int) -> base.SampleBatch | None:
    """The `num` oldest queued samples, stacked (base.stack), or None if fewer are queued."""
    with self._lock:
      if len(self._samples) < num:
        return None
      return base.stack([self._samples.popleft() for _ in range(num)])

  def queued(self) -> int:
    """Samples waiting to be taken."""
    with self._lock:
      return len(self._samples)

  def finish(self) -> None:
    """Makes every later read_theta() return None."""
    with self._lock:
      self._finished = True
