"""What workers send the chief, and the one transport between them (paper App. C).

Every mode (local, cluster) runs the same two loops (loops.py) over a `Transport`:

  worker:  while (published := transport.read_theta()) is not None:  # None: training is over.
             theta, version = published
             transport.put_sample(<one antithetic truncation at theta>)
  chief:   transport.publish_theta(theta, outer_step)
           batch = transport.take_samples(batch_size)  # None until that many are queued.
           <filter, merge, Adam step on theta>; transport.publish_theta(theta, outer_step)
           ...
           transport.finish()  # Workers' next read_theta() returns None.

theta and gradient estimates cross the transport as flat float32 vectors (nests.flatten_numpy);
the chief and the workers turn them back into nests with a template (`unflatten`). A sample
carries the theta version (outer step) it was computed with, so the chief can measure staleness,
and who made it (worker, worker run, index, the chief incarnation theta came from), so the chief
can drop duplicates and samples of a theta it never had. Transports:
in_process.InProcessTransport (local mode and tests) and tf_runtime.TFRuntimeTransport
(TensorFlow's distributed runtime).
"""

import abc
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf


class Sample(NamedTuple):
  """One worker's sample of its estimator (outer/estimators/base.Sample) from one truncation.

  A batch is a Sample whose fields are stacked along a leading axis (`stack`).
  """

  # The estimator's two estimates, theta flattened ([n] float32): its `rp` and its `es`.
  g_rp: np.ndarray  # The reparameterisation gradient g_rp.
  g_es: np.ndarray  # The ES estimate: truncated ES's g_es, or PES's g_pes.
  loss_plus: float  # L+ (outer loss of the + unroll).
  loss_minus: float  # L-.
  theta_version: int  # The outer step of the theta it was computed with.
  num_steps: int  # K, the truncation length.
  inner_step: int  # The inner step t0 the truncation started from.
  worker_id: int  # The worker's task index.
  worker_run: int = 0  # An id of the worker process (a restarted worker gets a new one).
  sample_index: int = 0  # The sample's index within its worker run.
  incarnation: int = 0  # The chief incarnation theta was read from (set by the transport).


SampleBatch = Sample  # With every field stacked: g_rp and g_es [B, n], the rest [B].

_FIELD_DTYPES = (
  np.float32,
  np.float32,
  np.float32,
  np.float32,
  np.int64,
  np.int32,
  np.int32,
  np.int32,
  np.int64,
  np.int64,
  np.int64,
)
FIELD_DTYPES = dict(zip(Sample._fields, _FIELD_DTYPES, strict=True))


def stack(samples: Sequence[Sample]) -> SampleBatch:
  """`samples` as one batch: every field stacked along a new leading axis, with its dtype.

  Raises:
    ValueError: no samples.
  """
  if not samples:
    raise ValueError("A batch needs at least one sample.")
  return Sample(
    *(
      np.stack([np.asarray(s[i]) for s in samples]).astype(dtype, copy=False)
      for i, dtype in enumerate(_FIELD_DTYPES)
    )
  )


def select(batch: SampleBatch, keep: np.ndarray) -> SampleBatch:
  """The samples of `batch` where the boolean mask `keep` [B] is True."""
  return Sample(*(np.asarray(x)[keep] for x in batch))


def unflatten(vector: np.ndarray, template: Any) -> Any:
  """The inverse of nests.flatten_numpy: `vector` as a nest shaped like `template`.

  Args:
    vector: [n] or [B, n] (a batch: every leaf gets the leading B).
    template: a nest of arrays or tensors whose shapes sum to n.

  Returns:
    A nest of numpy arrays, the structure of `template`.

  Raises:
    ValueError: the vector's length is not the template's size.
  """
  leaves, offset = [], 0
  batch = list(vector.shape[:-1])
  for x in tf.nest.flatten(template):
    size = int(np.prod(np.shape(x)))
    leaves.append(np.reshape(vector[..., offset : offset + size], batch + list(np.shape(x))))
    offset += size
  if offset != vector.shape[-1]:
    raise ValueError(f"A vector of {vector.shape[-1]} numbers for a template of {offset}.")
  return tf.nest.pack_sequence_as(template, leaves)


class Transport(abc.ABC):
  """Moves theta from the chief to workers and samples from workers to the chief.

  Worker side: `read_theta`, `put_sample`. Chief side: `publish_theta`, `take_samples`,
  `finish`. Neither side ever waits for the other: `take_samples` returns None until a batch is
  queued, and the chief publishes without knowing who reads.
  """

  @abc.abstractmethod
  def publish_theta(self, theta: np.ndarray, version: int) -> None:
    """Makes `theta` (flat, [n]) at outer step `version` the one workers read."""

  @abc.abstractmethod
  def read_theta(self) -> tuple[np.ndarray, int] | None:
    """The latest published (theta [n], version), or None once training has finished."""

  @abc.abstractmethod
  def put_sample(self, sample: Sample) -> bool:
    """Hands a sample to the chief; False if it was lost on the way (the chief went away)."""

  @abc.abstractmethod
  def take_samples(self, num: int) -> SampleBatch | None:
    """The `num` oldest queued samples as a batch, or None if fewer are queued."""

  @abc.abstractmethod
  def queued(self) -> int:
    """Samples waiting to be taken."""

  @abc.abstractmethod
  def finish(self) -> None:
    """Tells the workers that training has finished."""
