"""B tasks' truncations as one: a task of B inner problems and a learned optimizer of B thetas.

A worker with a task batch (distributed/batched_worker.py) computes the samples of B tasks in one
compiled call, one while_loop stepping all of them. Nothing in the estimators or the unroll
changes: the batch is one Unroll whose task is `TaskBatch` (B inner problems, loss [B]) and whose
learned optimizer is `LOptBatch` (theta held as B copies, [B, ...] per leaf), so that

  - theta's copy b drives task b's inner run alone, and the gradient of the summed outer losses
    with respect to the B copies is, in copy b, task b's own g_rp;
  - a perturbation drawn with B seeds [B, 2] gives copy b the e that seed b gives one theta
    (antithetic.perturbation), and g_es and g_pes are per problem (estimates.es_gradient);
  - batches come from B data seeds [B, 2] (random_seeds.fold_in folds each), task b's from its
    own, as they would for task b alone.

So sample b equals the sample that task b's worker would compute alone from the same state and
seeds (tests/outer/test_task_batch.py, merged and PES). The B inner runs are in lockstep: they
share the truncation length and the inner step (`BatchState.iteration` is the first one's).

Inside the loop each task's step runs its own ops (its model, its learned update), side by side
in one graph: the batch saves the per-call and per-iteration overhead of B separate samples and
lets the executor interleave them, but its kernels are the single task's. With `group_models`
the B tasks' convolutional networks are one grouped network, one op per layer for all B; with
`LOptBatch(..., vectorize_updates=True)` the B learned updates are one vectorised computation
(docs/performance.md measures what each gives).
"""

from collections.abc import Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import image_task, networks


def _rows(seed: random_seeds.SeedLike, num: int) -> list[tf.Tensor]:
  seed = random_seeds.as_seed(seed)
  if seed.shape.rank != 2 or seed.shape[0] != num:
    raise ValueError(f"A task batch of {num} tasks takes {num} seeds [{num}, 2], got {seed.shape}.")
  return tf.unstack(seed)


def stack(nests_: Sequence[Any]) -> Any:
  """B nests of the same structure as one, each leaf stacked on a new axis 0."""
  return tf.nest.map_structure(lambda *x: tf.stack(x), *nests_)


def unstack(nest: Any, num: int) -> list[Any]:
  """The B nests that `stack` made `nest` of."""
  return [tf.nest.map_structure(lambda x, b=b: x[b], nest) for b in range(num)]


def _shared_convnet(tasks: Sequence[task_base.Task]) -> networks.ConvNet:
  """The ConvNet every task classifies with, the same network, batch size and image shape.

  Raises:
    ValueError: a task that is not an image classifier with a ConvNet, or tasks that differ.
  """
  first = tasks[0]
  for task in tasks:
    if not (isinstance(task, image_task.Classifier) and isinstance(task.model, networks.ConvNet)):
      raise ValueError(
        f"group_models computes the tasks' convolutional networks as one; task {task.name!r} "
        "is not an image classifier with a ConvNet. Leave BatchedWorker.group_models False "
        "for this family."
      )
    if (vars(task.model), task.batch_size, task.image_shape) != (
      vars(first.model),
      first.batch_size,
      first.image_shape,
    ):
      raise ValueError(
        f"group_models needs one network, batch size and image shape for all tasks; "
        f"{task.name!r} differs from {first.name!r}. Leave BatchedWorker.group_models False "
        "for this family."
      )
  return first.model


class TaskBatch(task_base.Task):
  """B tasks as one task of B independent inner problems: params, data and batches are tuples of
  the tasks' own, the loss is [B] and every seed is B seeds [B, 2].

  With `group_models`, the B tasks' networks (one ConvNet for all) run as one network of B
  groups (networks.ConvNet.apply_grouped): one grouped convolution, batch norm and ReLU per
  layer for all B tasks instead of B of each, the same losses and derivatives to float
  rounding. The learned update stays each task's own (LOptBatch's `vectorize_updates` batches
  it).
  """

  def __init__(self, tasks: Sequence[task_base.Task], group_models: bool = False):
    """Makes the batch.

    Args:
      tasks: the B tasks, of one family (a compiled call traced with them serves any B tasks of
        the family with the same trace keys, in the same order).
      group_models: compute the B tasks' networks as one grouped network (image classifiers
        with one ConvNet, batch size and image shape).

    Raises:
      ValueError: `group_models` with tasks whose networks cannot be grouped.
    """
    self.tasks = tuple(tasks)
    self.name = f"{len(self.tasks)} x {self.tasks[0].name}"
    self.group_models = bool(group_models)
    self.model = _shared_convnet(self.tasks) if self.group_models else None
    self.trace_key = tuple(t.trace_key for t in self.tasks) + (
      ("grouped",) if self.group_models else ()
    )

  @property
  def num_tasks(self) -> int:
    """B."""
    return len(self.tasks)

  def init_params(self, seed: random_seeds.SeedLike) -> tuple:
    """Task b's initial params from seed b ([B, 2] seeds)."""
    rows = _rows(seed, self.num_tasks)
    return tuple(t.init_params(s) for t, s in zip(self.tasks, rows, strict=True))

  def loss(self, params: tuple, batch: tuple) -> tf.Tensor:
    """[B]: task b's loss of its params on its batch."""
    if self.group_models:  # Classifier.loss of each task, its network one group of B.
      logits = self.model.apply_grouped(params, [b["image"] for b in batch])
      labels = tf.stack([b["label"] for b in batch])
      return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits), axis=1
      )
    return tf.stack([t.loss(p, b) for t, p, b in zip(self.tasks, params, batch, strict=True)])

  def batch(self, split: str, seed: random_seeds.SeedLike) -> tuple:
    """Task b's batch of `split` from seed b ([B, 2] seeds)."""
    rows = _rows(seed, self.num_tasks)
    return tuple(t.batch(split, s) for t, s in zip(self.tasks, rows, strict=True))

  @property
  def data(self) -> tuple:
    """The tasks' data, a tuple."""
    return tuple(t.data for t in self.tasks)

  def with_data(self, data: tuple) -> "TaskBatch":
    """Task b reading data[b]."""
    return TaskBatch(
      [t.with_data(d) for t, d in zip(self.tasks, data, strict=True)], self.group_models
    )


class BatchState(NamedTuple):
  """The B inner optimizer states of a task batch (they share their inner step)."""

  states: tuple

  @property
  def iteration(self) -> tf.Tensor:
    """The inner step the B runs share."""
    return self.states[0].iteration

  @property
  def params(self) -> tuple:
    """The B runs' params."""
    return tuple(s.params for s in self.states)


class _BatchOptimizer(opt_base.Optimizer):
  """Task b's state is updated by opt_fn(theta copy b): B updates side by side or, given the
  learned optimizer and the copies, as one computation over the B tasks (tf.vectorized_map of
  its update over the theta copies, states and gradients stacked on axis 0)."""

  name = "task_batch"

  def __init__(
    self,
    opts: Sequence[opt_base.Optimizer],
    lopt: lopt_base.LearnedOptimizer | None = None,
    theta: nests.Theta | None = None,
  ):
    """`lopt` and the B copies `theta` (both or neither): vectorise the update over them."""
    self.opts = tuple(opts)
    self.lopt, self.theta = lopt, theta

  def init(self, params: tuple) -> BatchState:
    return BatchState(tuple(o.init(p) for o, p in zip(self.opts, params, strict=True)))

  def update(self, state: BatchState, grads: tuple, loss: tf.Tensor | None = None) -> BatchState:
    if self.lopt is not None:
      return self._vectorized_update(state, grads, loss)
    losses = [None] * len(self.opts) if loss is None else tf.unstack(loss)
    return BatchState(
      tuple(
        o.update(s, g, loss=task_loss)
        for o, s, g, task_loss in zip(self.opts, state.states, grads, losses, strict=True)
      )
    )

  def get_params(self, state: BatchState) -> tuple:
    return tuple(o.get_params(s) for o, s in zip(self.opts, state.states, strict=True))

  def _vectorized_update(
    self, state: BatchState, grads: tuple, loss: tf.Tensor | None
  ) -> BatchState:
    _check_stackable(state.states)
    lopt, has_loss = self.lopt, loss is not None

    def update_one(args: tuple) -> Any:
      theta, task_state, task_grads, task_loss = args
      return lopt.opt_fn(theta).update(task_state, task_grads, loss=task_loss if has_loss else None)

    new = tf.vectorized_map(  # Task b's loss goes with it, for optimizers that read the loss.
      update_one,
      (
        self.theta,
        stack(state.states),
        stack(grads),
        loss if has_loss else tf.zeros([len(self.opts)]),
      ),
      fallback_to_while_loop=False,  # One computation, or an error naming the op.
    )
    return BatchState(tuple(unstack(new, len(self.opts))))


def _check_stackable(states: Sequence[Any]) -> None:
  """Raises ValueError naming the binding unless the B states stack into one (one structure,
  one shape per leaf): the tasks of a vectorised update share one network."""
  for other in states[1:]:
    try:
      tf.nest.assert_same_structure(states[0], other)
      same = all(
        x.shape == y.shape
        for x, y in zip(tf.nest.flatten(states[0]), tf.nest.flatten(other), strict=True)
      )
    except (ValueError, TypeError):
      same = False
    if not same:
      raise ValueError(
        "vectorize_updates computes the B tasks' learned updates as one, which needs one "
        "parameter structure and shape for all of them; this batch's tasks differ. Leave "
        "BatchedWorker.vectorize_updates False for this family."
      )


class LOptBatch(lopt_base.LearnedOptimizer):
  """A learned optimizer of B tasks: theta as B copies ([B, ...] per leaf), copy b for task b.

  With `vectorize_updates` the B tasks' updates of an inner step are one computation
  (tf.vectorized_map over the copies: one batched op where there were B), for tasks that share
  one parameter structure; the same states to float rounding (tests/outer/test_task_batch.py).
  """

  def __init__(
    self, lopt: lopt_base.LearnedOptimizer, num_tasks: int, vectorize_updates: bool = False
  ):
    """The learned optimizer `lopt` for a batch of `num_tasks` tasks."""
    self.lopt = lopt
    self.num_tasks = int(num_tasks)
    self.vectorize_updates = bool(vectorize_updates)
    self.name = f"{self.num_tasks} x {lopt.name}"

  def init(self, seed: random_seeds.SeedLike) -> nests.Theta:
    """B copies of lopt.init(seed)."""
    return copies(self.lopt.init(seed), self.num_tasks)

  def opt_fn(self, theta: nests.Theta) -> _BatchOptimizer:
    """The optimizer of the batch's states: task b's by lopt.opt_fn(copy b)."""
    opts = [self.lopt.opt_fn(t) for t in unstack(theta, self.num_tasks)]
    if self.vectorize_updates:
      return _BatchOptimizer(opts, self.lopt, theta)
    return _BatchOptimizer(opts)


def copies(theta: nests.Theta, num: int) -> nests.Theta:
  """`num` copies of theta, stacked on axis 0 of every leaf (LOptBatch's theta)."""
  return tf.nest.map_structure(lambda x: tf.stack([tf.convert_to_tensor(x)] * num), theta)
