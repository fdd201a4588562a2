"""What workers send the chief, and the transport between them (paper App. C, DESIGN.md).

  worker:  theta, version = transport.read_theta()
           sample = <one antithetic truncation at theta>
           transport.put_sample(sample)
  chief:   samples = transport.take_samples(batch_size)
           <merge, Adam step on theta>
           transport.publish_theta(theta, outer_step)

A sample carries the theta version (outer step) it was computed with, so the chief can measure
staleness. Transports: in_process.InProcessTransport here (local mode and tests); the cluster
transport puts the same calls on TensorFlow's distributed runtime.
"""

import abc
from typing import Any, NamedTuple


class Sample(NamedTuple):
  """One worker's estimate from one antithetic truncation."""

  g_rp: Any  # A theta-shaped nest of float32 numpy arrays.
  g_es: Any  # The same.
  loss_plus: float  # L+ (outer loss of the + unroll).
  loss_minus: float  # L-.
  theta_version: int  # The outer step of the theta it was computed with.
  num_steps: int  # K, the truncation length.
  inner_step: int  # The inner step t0 the truncation started from.
  worker_id: int


class Transport(abc.ABC):
  """Moves theta from the chief to workers and samples from workers to the chief."""

  @abc.abstractmethod
  def publish_theta(self, theta: Any, version: int) -> None:
    """Makes `theta` (a nest of arrays) at outer step `version` the one workers read."""

  @abc.abstractmethod
  def read_theta(self) -> tuple[Any, int]:
    """The latest published (theta, version)."""

  @abc.abstractmethod
  def put_sample(self, sample: Sample) -> None:
    """Hands a sample to the chief."""

  @abc.abstractmethod
  def take_samples(self, num: int, timeout: float | None = None) -> list[Sample]:
    """Up to `num` samples, oldest first; fewer only if `timeout` seconds pass first."""
