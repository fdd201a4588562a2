"""Explicit, stateless randomness.

A seed is an int32 tensor of shape [2], the form TensorFlow's stateless random ops take. Everything
random in the project is a pure function of such a seed, so that the + and - unrolls of an
antithetic pair see the same data and every run is reproducible from its seeds.
"""

import numpy as np
import tensorflow as tf

SeedLike = int | tuple | list | np.ndarray | tf.Tensor


def as_seed(seed: SeedLike) -> tf.Tensor:
  """Returns `seed` as an int32 tensor of shape [2].

  Args:
    seed: an int (expanded to [0, seed]) or anything of shape [2].
  """
  if isinstance(seed, (int, np.integer)):
    return tf.constant([0, int(seed)], dtype=tf.int32)
  seed = tf.convert_to_tensor(seed)
  if seed.dtype != tf.int32:
    seed = tf.cast(seed, tf.int32)
  return seed


def fold_in(seed: SeedLike, data: int | tf.Tensor) -> tf.Tensor:
  """Derives a new seed from `seed` and an integer (a step, an index, a tag)."""
  return tf.random.experimental.stateless_fold_in(as_seed(seed), tf.cast(data, tf.int32))


def split(seed: SeedLike, num: int = 2) -> tf.Tensor:
  """Splits `seed` into `num` independent seeds, shape [num, 2]."""
  return tf.random.experimental.stateless_split(as_seed(seed), num=num)


def to_numpy_seed(seed: SeedLike) -> list:
  """The integers of `seed`, for seeding numpy generators (np.random.default_rng)."""
  return [int(x) & 0xFFFFFFFF for x in np.asarray(as_seed(seed)).reshape(-1)]
