"""A task batch's B samples are, each, the sample its task gives alone (outer/task_batch.py).

For the merged estimator (truncated antithetic pairs) on a batch-normed CNN of the generated
family and on quadratics, and for PES on quadratics, over two truncations (the second starting
from the first's end states): every leaf of g_rp, g_es, L+ and L- of sample b equals the lone
computation from task b's state with task b's seeds, to float tolerance. So does a batch whose
CNNs run as one grouped network (`group_models`): batch-normed with merged, plain with PES; and
a batch whose learned updates are one vectorised computation (`vectorize_updates`): grouped
batch-normed CNNs with merged, quadratics with PES.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import task_batch, truncated_unroll
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import families, generated, networks, quadratic

SIGMA = 0.1


def _cnn_family(batch_norm=True):
  source = generated.GeneratedClassSource(
    num_classes=30, train_images_per_class=20, test_images_per_class=10, image_size=8
  )
  return families.ClassSubsetFamily(
    source=source,
    model=networks.paper_cnn(channels=4, batch_norm=batch_norm),
    num_classes_per_task=3,
    batch_size=8,
  )


def _mixture():
  # Seeds fold_in([1, 2], 0) and (.., 1) draw member 0 and member 1: a batch of two networks.
  return families.MixtureFamily([_cnn_family(), quadratic.QuadraticFamily(dim=6)])


FAMILIES = {
  "cnn_batch_norm": _cnn_family,
  "cnn": lambda: _cnn_family(batch_norm=False),
  "quadratic": lambda: quadratic.QuadraticFamily(dim=6),
  "mixture": _mixture,
}


def _seeds(b, truncation):
  data = random_seeds.fold_in([5, 6], b)
  perturbation = random_seeds.fold_in(random_seeds.fold_in([7, 8], b), truncation)
  return data, perturbation


def _assert_samples_equal(together, alone, b, tolerance=2e-5):
  for x, y in zip(tf.nest.flatten(together), tf.nest.flatten(alone), strict=True):
    x, y = x.numpy()[b], y.numpy()
    scale = max(float(np.max(np.abs(y))), 1e-6)
    np.testing.assert_allclose(x, y, rtol=0, atol=tolerance * scale)


# A grouped convolution and batch norm over B tasks' channels sum in another order than the
# task's own ops (tests/tasks/test_networks.py: logits and derivatives equal to 1e-6); over K
# steps of a learned update with ReLU units at a kink that rounding can flip, a leaf's element
# moves by up to ~3e-4 of the leaf's scale. A batch that mixed tasks or groups is off by O(1).
GROUPED_TOLERANCE = 1e-3


@pytest.mark.parametrize(
  "family_name, estimator_name, group_models, vectorize_updates",
  [
    ("cnn_batch_norm", "merged", False, False),
    ("cnn_batch_norm", "merged", True, True),
    ("cnn", "pes_merged", True, False),
    ("quadratic", "merged", False, False),
    ("quadratic", "pes_merged", False, True),
    ("mixture", "merged", False, False),
  ],
)
def test_each_sample_of_a_batch_is_its_tasks_sample_alone(
  estimator_name, family_name, group_models, vectorize_updates
):
  num_tasks, num_steps = 2, 4
  family = FAMILIES[family_name]()
  lopt = mlp_lopt.MLPLOpt()
  estimator = registry.get(estimator_name)
  theta = tf.nest.map_structure(lambda x: 3.0 * x, lopt.init(1))  # Steps that matter.
  tasks = [family.sample(random_seeds.fold_in([1, 2], b)) for b in range(num_tasks)]
  if family_name == "mixture":
    assert [t.member for t in tasks] == [0, 1]
  states = [
    estimator.init_state(lopt.opt_fn(theta).init(t.init_params(b)), theta)
    for b, t in enumerate(tasks)
  ]
  batch_lopt = task_batch.LOptBatch(lopt, num_tasks, vectorize_updates)
  batch_theta = task_batch.copies(theta, num_tasks)
  batch_unroll = truncated_unroll.Unroll(
    task_batch.TaskBatch(tasks, group_models),
    batch_lopt,
    "train",
    recompute=True,
    loss_shape=[num_tasks],
  )
  inner = [estimator_state_inner(s) for s in states]
  batch_state = estimator.init_state(
    batch_lopt.opt_fn(batch_theta).init(tuple(i.params for i in inner)), batch_theta
  )
  # A vectorised update traces a pfor per call: eagerly that is once per inner step, compiled
  # (as workers run it) once.
  sample = tf.function(estimator.sample, autograph=False) if vectorize_updates else estimator.sample
  for truncation in range(2):
    seeds = [_seeds(b, truncation) for b in range(num_tasks)]
    together, batch_state = sample(
      batch_unroll,
      batch_theta,
      batch_state,
      num_steps,
      tf.stack([s[0] for s in seeds]),
      tf.stack([s[1] for s in seeds]),
      SIGMA,
    )
    assert together.loss_plus.shape == [num_tasks]
    for b, task in enumerate(tasks):
      unroll = truncated_unroll.Unroll(task, lopt, "train", recompute=True)
      alone, states[b] = estimator.sample(
        unroll, theta, states[b], num_steps, seeds[b][0], seeds[b][1], SIGMA
      )
      _assert_samples_equal(together, alone, b, GROUPED_TOLERANCE if group_models else 2e-5)
    assert estimator.inner_step(batch_state) == (truncation + 1) * num_steps
  # The tasks differ: their samples do too (a batch that computed one task B times would fail).
  assert not np.allclose(together.loss_plus[0], together.loss_plus[1])


def estimator_state_inner(state):
  """The inner state an estimator's state starts from (both estimators carry it first)."""
  return state[0]


def test_a_batch_refuses_seeds_of_another_size():
  tasks = [quadratic.QuadraticFamily(dim=3).sample(b) for b in range(2)]
  with pytest.raises(ValueError, match=r"2 tasks takes 2 seeds \[2, 2\]"):
    task_batch.TaskBatch(tasks).batch("train", [1, 2])


def test_grouping_refuses_tasks_whose_networks_differ():
  wide = families.ClassSubsetFamily(
    source=generated.GeneratedClassSource(
      num_classes=30, train_images_per_class=20, test_images_per_class=10, image_size=8
    ),
    model=networks.paper_cnn(channels=6, batch_norm=True),
    num_classes_per_task=3,
    batch_size=8,
  )
  tasks = [_cnn_family().sample([1, 2]), wide.sample([1, 2])]
  with pytest.raises(ValueError, match="one network, batch size and image shape"):
    task_batch.TaskBatch(tasks, group_models=True)
  quadratics = [quadratic.QuadraticFamily(dim=3).sample(b) for b in range(2)]
  with pytest.raises(ValueError, match="not an image classifier with a ConvNet"):
    task_batch.TaskBatch(quadratics, group_models=True)
  assert task_batch.TaskBatch(tasks[:1] * 2, group_models=True).trace_key[-1] == "grouped"


def test_vectorized_updates_refuse_tasks_of_different_structures():
  tasks = [_mixture().sample(random_seeds.fold_in([1, 2], b)) for b in range(2)]
  lopt = task_batch.LOptBatch(mlp_lopt.MLPLOpt(), 2, vectorize_updates=True)
  theta = lopt.init(0)
  opt = lopt.opt_fn(theta)
  state = opt.init(tuple(t.init_params(b) for b, t in enumerate(tasks)))
  grads = tuple(tf.nest.map_structure(tf.zeros_like, p) for p in state.params)
  with pytest.raises(ValueError, match="Leave BatchedWorker.vectorize_updates False"):
    opt.update(state, grads)
  # Two tasks of one network stack; their vectorised update is each task's own update.
  same = [_cnn_family().sample(random_seeds.fold_in([1, 2], b)) for b in range(2)]
  state = opt.init(tuple(t.init_params(b) for b, t in enumerate(same)))
  grads = tuple(tf.nest.map_structure(lambda p: 0.1 * tf.ones_like(p), p) for p in state.params)
  new = opt.update(state, grads)
  alone = task_batch.LOptBatch(mlp_lopt.MLPLOpt(), 2).opt_fn(theta).update(state, grads)
  for x, y in zip(tf.nest.flatten(new), tf.nest.flatten(alone), strict=True):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
