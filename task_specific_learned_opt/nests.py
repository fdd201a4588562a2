"""The type names of the project's nests of tensors, and flattening a nest into one vector.

Parameters, optimizer states, theta and batches are nests (dicts, lists, NamedTuples) of
tensors, walked with tf.nest. The aliases below only name what a signature expects; they are
defined here once and imported everywhere.
"""

from typing import Any

import numpy as np
import tensorflow as tf

Nest = Any  # A nest (dicts, lists, tuples, NamedTuples) of tensors or arrays.
Params = Any  # An inner problem's parameters: a nest (dicts) of float32 tensors.
Batch = Any  # A nest of tensors, e.g. {"image": [B, H, W, C], "label": [B]}.
Theta = Any  # A learned optimizer's meta-parameters: a nest of float32 tensors.


def flatten(nest: Nest) -> tf.Tensor:
  """Every element of `nest`, in tf.nest order, as one float32 vector."""
  leaves = tf.nest.flatten(nest)
  if not leaves:
    return tf.zeros([0], tf.float32)
  return tf.concat([tf.reshape(tf.cast(x, tf.float32), [-1]) for x in leaves], axis=0)


def flatten_numpy(nest: Nest) -> np.ndarray:
  """`flatten` as a float32 numpy vector, computed in numpy (no TensorFlow op per leaf)."""
  leaves = [np.asarray(x, dtype=np.float32).reshape(-1) for x in tf.nest.flatten(nest)]
  return np.concatenate(leaves) if leaves else np.zeros([0], np.float32)
