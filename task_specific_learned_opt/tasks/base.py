"""The inner problem: Task and TaskFamily (paper Sec. 2.1, 4.2).

A Task is one inner problem: a model to train (its parameters, a loss on a batch) and the data to
train it on. Every method is a pure function of its arguments, so a task can be trained inside a
graph-mode tf.while_loop and differentiated through:

  task = family.sample(seed)                    # a TaskFamily samples tasks
  params = task.init_params(seed)               # a nest of float32 tensors
  batch = task.batch("train", seed)             # "train", "valid" or "test"
  loss = task.loss(params, batch)               # scalar float32

Batches are drawn statelessly from the seed, so the same seed always gives the same batch.

Every tensor a task reads (images, labels, a quadratic's centre) is in `task.data`, and
`task.with_data(data)` is the same task reading other tensors. Compiled code passes `data` in as
an argument instead of capturing it, so one trace serves every task of a family with the same
`trace_key` (all of them, except in a family of several networks such as families.MixtureFamily),
and the outer-training's recomputed segments see no captured constants.
"""

import abc
from collections.abc import Hashable
from typing import Any

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds

SPLITS = ("train", "valid", "test")


class Task(abc.ABC):
  """One inner problem: parameters, a loss, and batches by split."""

  name: str = "task"
  # What besides its data sets the computation the task traces (its network, for one): compiled
  # functions are shared by the tasks of a family whose keys are equal. None: every task of the
  # family computes the same.
  trace_key: Hashable = None

  @abc.abstractmethod
  def init_params(self, seed: random_seeds.SeedLike) -> nests.Params:
    """Initial parameters, a nest of float32 tensors, from a stateless seed."""

  @abc.abstractmethod
  def loss(self, params: nests.Params, batch: nests.Batch) -> tf.Tensor:
    """Scalar loss of `params` on `batch`."""

  @abc.abstractmethod
  def batch(self, split: str, seed: random_seeds.SeedLike) -> nests.Batch:
    """A batch of `split` ("train", "valid" or "test"), drawn statelessly from `seed`."""

  @property
  def data(self) -> Any:
    """The nest of every tensor the task reads; () for a task that reads none."""
    return ()

  def with_data(self, data: Any) -> "Task":
    """This task reading `data` (a nest like `self.data`) instead of its own tensors."""
    del data
    return self


class TaskFamily(abc.ABC):
  """A distribution over tasks (paper Sec. 4.2: 10-class subsets of a class split)."""

  name: str = "family"

  @abc.abstractmethod
  def sample(self, seed: random_seeds.SeedLike) -> Task:
    """A task sampled with a (numpy-convertible) seed; the same seed gives the same task."""


def check_split(split: str) -> None:
  """Raises ValueError unless `split` is one of SPLITS."""
  if split not in SPLITS:
    raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")
