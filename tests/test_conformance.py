"""Every optimizer, learned and hand-designed, through the same checks on the same tasks.

Each runs a few steps on the quadratic and on a small image task inside the graph-mode loop; its
state must keep its structure, dtypes and shapes (the while loop requires it), losses must stay
finite, and the parameters must move; a hand-designed rule's step must descend on both.
"""

import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam, rmsprop, sgd
from task_specific_learned_opt.tasks import quadratic


def _learned(**kwargs):
  lopt = mlp_lopt.MLPLOpt(**kwargs)
  return lopt.opt_fn(lopt.init(0))


OPTIMIZERS = {
  "sgd": lambda: sgd.SGD(learning_rate=0.05),
  "momentum": lambda: sgd.Momentum(learning_rate=0.05, momentum=0.9),
  "nesterov": lambda: sgd.Momentum(learning_rate=0.05, momentum=0.9, nesterov=True),
  "rmsprop": lambda: rmsprop.RMSProp(learning_rate=0.01),
  "adam": lambda: adam.Adam(learning_rate=0.01),
  "adam_reg_decay": lambda: adam.Adam(
    learning_rate=0.01,
    beta1=0.8,
    beta2=0.99,
    epsilon=1e-6,
    linear_decay=1e-3,
    exponential_decay=1e-3,
    l1=1e-4,
    l2=1e-3,
  ),
  "mlp_lopt": lambda: _learned(),
  "mlp_lopt_original_code": lambda: _learned(feature_set="original_code"),
  "mlp_lopt_no_momentum": lambda: _learned(use_momentum=False),
  "mlp_lopt_no_time": lambda: _learned(use_time=False),
}


def _signature(state):
  return tf.nest.map_structure(lambda x: (x.dtype, tuple(x.shape)), state)


def _check(task, opt, steps=5):
  start = opt.init(task.init_params(0))
  final, losses = inner_training.unroll(task, opt, start, steps, seed=1)
  tf.nest.assert_same_structure(start, final)
  assert _signature(start) == _signature(final)
  assert type(start) is type(final)  # noqa: E721 - the NamedTuple class itself must not change.
  assert np.all(np.isfinite(losses.numpy())) and losses.shape == (steps,)
  moved = [
    not np.array_equal(a, b)
    for a, b in zip(tf.nest.flatten(start.params), tf.nest.flatten(final.params), strict=True)
  ]
  assert all(moved)
  assert int(final.iteration) == steps
  return losses.numpy()


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_on_the_quadratic(name):
  losses = _check(quadratic.QuadraticTask(dim=10), OPTIMIZERS[name]())
  if not name.startswith("mlp_lopt"):  # A random theta need not descend.
    assert losses[-1] < losses[0]


def _one_step_loss_change(task, opt) -> float:
  """loss(w_1) - loss(w_0) on the one batch the step w_0 -> w_1 was computed from."""
  params = task.init_params(0)
  batch = task.batch("train", 1)
  with tf.GradientTape() as tape:
    tape.watch(params)
    before = task.loss(params, batch)
  grads = tape.gradient(before, params)
  after = task.loss(opt.get_params(opt.update(opt.init(params), grads, loss=before)), batch)
  return float(after - before)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_on_a_cnn_task(name):
  task = testing_utils.small_generated_family().sample(0)
  _check(task, OPTIMIZERS[name](), steps=3)
  if not name.startswith("mlp_lopt"):  # A random theta need not descend.
    # A first step of every hand-designed rule descends on the batch it was computed from (a
    # minibatch loss over 3 steps is too noisy to show it).
    assert _one_step_loss_change(task, OPTIMIZERS[name]()) < 0.0


def test_a_hand_set_theta_makes_the_learned_optimizer_descend():
  # hidden = [relu(g_hat), relu(-g_hat)], o_dir = h0 - h1 = g_hat (the normalised gradient) and
  # o_mag = 2302.6 from the bias, so step = 1e-3 * g_hat * exp(2.3026) = 1e-2 * g_hat: normalised
  # gradient descent with learning rate 0.01, which must reduce the loss.
  lopt = mlp_lopt.MLPLOpt(hidden_size=2, use_time=False)
  hidden_w = np.zeros([7, 2], np.float32)
  hidden_w[0] = [1.0, -1.0]  # Column 0 of the features is the normalised gradient.
  theta = {
    "hidden": {"w": tf.constant(hidden_w), "b": tf.zeros([2])},
    "output": {"w": tf.constant([[1.0, 0.0], [-1.0, 0.0]]), "b": tf.constant([0.0, 2302.6])},
  }
  opt = lopt.opt_fn(theta)
  task = quadratic.QuadraticTask(dim=10)
  params = task.init_params(0)
  grads = {"w": task.curvatures * (params["w"] - task.center)}
  state = opt.update(opt.init(params), grads)
  g_hat = grads["w"] / tf.sqrt(tf.reduce_mean(tf.square(grads["w"])) + 1e-5)
  np.testing.assert_allclose(state.params["w"], params["w"] - 1e-2 * g_hat, rtol=1e-4, atol=1e-6)
  losses = inner_training.train(task, opt, 200, seed=0).losses.numpy()
  assert losses[-1] < 0.2 * losses[0]
