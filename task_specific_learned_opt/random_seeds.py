"""Explicit, stateless randomness.

A seed is an int32 tensor of shape [2], the form TensorFlow's stateless random ops take. Everything
random in the project is a pure function of such a seed, so that the + and - unrolls of an
antithetic pair see the same data and every run is reproducible from its seeds.

A seed's independent sub-seeds are named streams, `stream(seed, name)` = fold_in(seed,
STREAMS[name]): a run's params, data and measured batches (`run_seeds`), a truncated unroll's
training and validation batches, a worker's tasks, truncations and perturbations, the held-out
tasks. Names are unique; the integers behind them are those every run so far was seeded with, so
a name may share its integer with a name of another kind of seed.
"""

from typing import NamedTuple

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
  """Derives a new seed from `seed` and an integer (a step, an index, a tag).

  Args:
    seed: a seed [2], or B seeds [B, 2] (B static: the inner runs of a task batch,
      outer/task_batch.py), each folded with `data`.
    data: the integer.

  Returns:
    The new seed, or the B new seeds [B, 2].
  """
  seed, data = as_seed(seed), tf.cast(data, tf.int32)
  if seed.shape.rank == 2:
    return tf.stack([tf.random.experimental.stateless_fold_in(s, data) for s in tf.unstack(seed)])
  return tf.random.experimental.stateless_fold_in(seed, data)


# {name: the integer folded into the seed}. Each group is fold_ins of one kind of seed.
STREAMS = {
  # A run's seed (inner_training.train, evaluation/running.py, figures/longer_unrolls.py, a
  # worker's task; protocol.run_seed).
  "run_params": 0,  # The initial params: task.init_params(stream(seed, "run_params")).
  "run_data": 1,  # The training batches, step t from fold_in(stream(seed, "run_data"), t).
  "run_eval": 2,  # The batches the metrics are measured on.
  # The data seed of a truncated unroll (outer/truncated_unroll.py).
  "unroll_train": 0,  # L_train's batches.
  "unroll_valid": 1,  # L_valid's batches.
  # A worker's seed (distributed/worker_step.py).
  "worker_tasks": 1,  # The seed of its task_index-th task, a run seed.
  "worker_truncations": 2,  # Each truncation's length.
  "worker_perturbations": 3,  # Each truncation's ES perturbation e.
  "worker_first_truncation": 4,  # Where in its first truncation a worker starts.
  # A task's seed in a mixture of families (tasks/families.py).
  "mixture_member": 0,  # Which family samples the task.
  # The held-out protocol's seed (evaluation/protocol.py); far from the run indices it also folds.
  "held_out_tasks": 1_000_003,
}


def stream(seed: SeedLike, name: str) -> tf.Tensor:
  """The sub-seed `name` of `seed`: fold_in(seed, STREAMS[name]).

  Args:
    seed: the seed.
    name: a key of STREAMS.

  Raises:
    KeyError: an unknown name.
  """
  return fold_in(seed, STREAMS[name])


class RunSeeds(NamedTuple):
  """The three streams of a run's seed."""

  params: tf.Tensor
  data: tf.Tensor
  eval: tf.Tensor


def run_seeds(seed: SeedLike) -> RunSeeds:
  """A run's params, data and measurement seeds (the "run_*" streams of `seed`)."""
  seed = as_seed(seed)
  return RunSeeds(stream(seed, "run_params"), stream(seed, "run_data"), stream(seed, "run_eval"))


# The order a run's measured splits take their seeds from its "run_eval" stream.
MEASURED_SPLITS = ("train", "test", "valid")


def measured_split_seed(eval_seed: SeedLike, split: str) -> tf.Tensor:
  """The seed of the batches a run measures `split` on: fold_in(eval seed, its index).

  Args:
    eval_seed: the run's `run_seeds(seed).eval`.
    split: one of MEASURED_SPLITS.
  """
  return fold_in(eval_seed, MEASURED_SPLITS.index(split))


def split(seed: SeedLike, num: int = 2) -> tf.Tensor:
  """Splits `seed` into `num` independent seeds, shape [num, 2]."""
  return tf.random.experimental.stateless_split(as_seed(seed), num=num)


def to_numpy_seed(seed: SeedLike) -> list:
  """The integers of `seed`, for seeding numpy generators (np.random.default_rng)."""
  return [int(x) & 0xFFFFFFFF for x in np.asarray(as_seed(seed)).reshape(-1)]
