"""Graph-mode inner training: the loop equals the steps written out, clipping, no retracing."""

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import inner_training, random_seeds
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam, sgd
from task_specific_learned_opt.tasks import quadratic


def test_unroll_equals_sgd_steps_written_out():
  task = quadratic.QuadraticTask(dim=4, noise_std=0.1, min_curvature=0.5, max_curvature=2.0)
  params = task.init_params(1)
  state, losses = inner_training.unroll(
    task, sgd.SGD(learning_rate=0.1), sgd.SGD(0.1).init(params), 5, seed=[3, 4]
  )
  a, c = task.curvatures.numpy(), task.center.numpy()
  w, expected_losses = params["w"].numpy(), []
  for i in range(5):
    noise = task.batch("train", random_seeds.fold_in([3, 4], i))["noise"].numpy()
    expected_losses.append(0.5 * np.sum(a * (w - c - noise) ** 2))
    w = w - 0.1 * a * (w - c - noise)  # SGD: w <- w - lr * grad.
  np.testing.assert_allclose(state.params["w"], w, rtol=1e-5)
  np.testing.assert_allclose(losses, expected_losses, rtol=1e-5)
  assert int(state.iteration) == 5


def test_chunks_give_the_same_run_as_one_unroll():
  task = quadratic.QuadraticTask(dim=6, noise_std=0.3)
  opt = adam.Adam(learning_rate=0.05)
  start = opt.init(task.init_params(0))
  whole, whole_losses = inner_training.unroll(task, opt, start, 8, seed=5)
  half, first = inner_training.unroll(task, opt, start, 3, seed=5)
  half, second = inner_training.unroll(task, opt, half, 5, seed=5, first_step=3)
  np.testing.assert_allclose(half.params["w"], whole.params["w"], rtol=1e-6)
  np.testing.assert_allclose(np.concatenate([first, second]), whole_losses, rtol=1e-6)


def test_clip_loss_caps_the_loss_and_zeroes_its_gradient_above_10():
  x = tf.constant([3.0, 12.0])
  with tf.GradientTape() as tape:
    tape.watch(x)
    clipped = inner_training.clip_loss(x)
  np.testing.assert_array_equal(clipped, [3.0, 10.0])
  np.testing.assert_array_equal(tape.gradient(clipped, x), [1.0, 0.0])
  np.testing.assert_array_equal(inner_training.clip_loss(x, max_loss=None), [3.0, 12.0])


def test_clipping_applies_in_the_loop_and_gin_turns_it_off():
  task = quadratic.QuadraticTask(dim=3, init_std=10.0)  # Loss far above 10 at init.
  opt = sgd.SGD(learning_rate=0.01)
  state = opt.init(task.init_params(0))
  clipped_state, clipped_losses = inner_training.unroll(task, opt, state, 2, seed=0)
  assert np.all(clipped_losses.numpy() == 10.0)
  np.testing.assert_array_equal(clipped_state.params["w"], state.params["w"])  # Zero gradient.
  gin.parse_config("clip_loss.max_loss = None", skip_unknown=False)
  _, losses = inner_training.unroll(task, opt, state, 2, seed=0)
  assert np.all(losses.numpy() > 10.0)


def test_train_fn_does_not_retrace_for_new_seeds_or_lengths():
  task = quadratic.QuadraticTask(dim=3)
  opt = adam.Adam(0.1)
  train_fn = inner_training.make_train_fn(task, lambda _: opt)
  state = opt.init(task.init_params(0))
  for seed, steps in [(0, 3), (1, 5), ([2, 3], 7)]:
    _, losses = train_fn(state, steps, seed)
    assert losses.shape == (steps,)
  assert train_fn.tracing_count() == 1


def _op_types(graph_def):
  types = {node.op for node in graph_def.node}
  for function in graph_def.library.function:
    types |= {node.op for node in function.node_def}
  return types


def test_the_loop_reads_and_writes_no_variables():
  task = quadratic.QuadraticTask(dim=3)
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)

  @tf.function(autograph=False)
  def run(theta):
    opt = lopt.opt_fn(theta)
    return inner_training.unroll(task, opt, opt.init(task.init_params(0)), 4, seed=0)

  graph_def = run.get_concrete_function(theta).graph.as_graph_def()
  types = _op_types(graph_def)
  assert "While" in types or "StatelessWhile" in types
  assert not {t for t in types if "Variable" in t}


def test_adam_reduces_the_quadratic_loss():
  task = quadratic.QuadraticTask(dim=10)
  losses = inner_training.train(task, adam.Adam(learning_rate=0.1), 100, seed=0).losses.numpy()
  assert losses[-1] < 0.01 * losses[0]


@pytest.mark.parametrize("steps", [0, 1])
def test_degenerate_lengths(steps):
  task = quadratic.QuadraticTask(dim=2)
  result = inner_training.train(task, sgd.SGD(0.1), steps, seed=0)
  assert result.losses.shape == (steps,) and int(result.state.iteration) == steps
