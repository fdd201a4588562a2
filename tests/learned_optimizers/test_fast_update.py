"""The fast kernel of MLPLOpt's update (fast_update.py, App. D.1) against the specification.

The kernel folds the normalisation and the feature map into one matrix per tensor (see
fast_update's docstring). MLPLOpt.opt_fn, which calls it, and the per-tensor reference
(reference_opt_fn) must agree to float32 rounding on a real multi-tensor params nest (the paper's
CNN) for every feature set and ablation, with or without the kernel's grouping of small tensors
and its fused ReLU, and so must their gradients with respect to theta, which the outer-training
backpropagates through.
"""

import ast
import inspect

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.learned_optimizers import fast_update, features, mlp_lopt
from task_specific_learned_opt.tasks import networks, random_data

CONFIGS = {
  "paper": {},
  "original_code": {
    "feature_set": "original_code",
    "time_scales": features.ORIGINAL_CODE_TIME_SCALES,
  },
  "no_momentum": {"use_momentum": False},
  "no_time": {"use_time": False},
  "no_momentum_no_time": {"use_momentum": False, "use_time": False},
  # The guarded step: the growth gate and a cap on each tensor's step rms, which the large steps
  # of _theta reach on some tensors and not on others.
  "guarded": {"gate_growth": True, "max_step_rms": 3e-3},
  "gated": {"gate_growth": True},
  "capped": {"max_step_rms": 1e-3},
  "relative": {"max_relative_step": 3e-2, "gate_growth": True},
}


def _theta(lopt, seed=3, scale=3.0):
  """A random theta, scaled up and with biases so that steps are large and exp(o_mag) matters."""
  theta = tf.nest.map_structure(lambda x: scale * x, lopt.init(seed))
  theta["hidden"]["b"] = tf.linspace(-0.3, 0.3, lopt.hidden_size)
  theta["output"]["b"] = tf.constant([0.1, 300.0])  # exp(1e-3 * 300) = 1.35.
  return theta


def _assert_close(actual, expected, scale, rtol):
  np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


# Worked numbers for the constant matrices.


def test_feature_maps_worked_numbers():
  lopt = mlp_lopt.MLPLOpt(decays=(0.5, 0.9), time_scales=())
  b, c = fast_update.feature_maps(lopt.options)
  z = np.array([2.0, 3.0, 1.0, 1.0, -1.0], np.float32)  # [g, w, 1, m_0.5, m_0.9].
  # m_0.5 <- 0.5 * 1 + 0.5 * 2 = 1.5; m_0.9 <- 0.9 * (-1) + 0.1 * 2 = -0.7.
  y = b @ z
  np.testing.assert_allclose(y, [2.0, 3.0, 1.0, 1.5, -0.7], rtol=1e-6)
  np.testing.assert_allclose(c @ y, [2.0, 3.0, 1.5, -0.7], rtol=1e-6)  # [g, w, m_0.5, m_0.9].

  no_momentum = mlp_lopt.MLPLOpt(decays=(0.5, 0.9), use_momentum=False)
  c_no_momentum = fast_update.feature_maps(no_momentum.options)[1]
  np.testing.assert_allclose(c_no_momentum @ y, [2.0, 3.0], rtol=1e-6)

  original = mlp_lopt.MLPLOpt(decays=(0.5, 0.9), feature_set="original_code")
  c = fast_update.feature_maps(original.options)[1]
  # [g, 1000 m x2, w, m x2, rms = 0 x2, rsqrt(0 + 1e-6) = 1000 x2]: 22 columns with 5 decays.
  expected = [2.0, 1500.0, -700.0, 3.0, 1.5, -0.7, 0.0, 0.0, 1000.0, 1000.0]
  np.testing.assert_allclose(c @ y, expected, rtol=1e-6)
  assert c.shape[0] == original.num_normalized_inputs
  assert np.all(np.sum(c != 0, axis=1) <= 1)  # One non-zero per row: C^2 gives the normalisers.


# Equality with the reference on the paper's CNN.


@pytest.fixture(scope="module")
def cnn_task():
  return random_data.RandomDataTask(networks.paper_cnn(), batch_size=32)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_fast_update_matches_the_reference_on_the_cnn(config, cnn_task):
  lopt = mlp_lopt.MLPLOpt(**CONFIGS[config])
  theta = _theta(lopt)
  fast, reference = lopt.opt_fn(theta), lopt.reference_opt_fn(theta)
  assert type(fast) is not type(reference)
  grad_fn = tf.function(
    lambda params, seed: inner_training.loss_and_grads(
      cnn_task, params, cnn_task.batch("train", seed)
    )[1]
  )
  fast_update, reference_update = tf.function(fast.update), tf.function(reference.update)
  params = cnn_task.init_params(0)
  assert len(tf.nest.flatten(params)) == 8  # 3 conv layers and the linear layer, w and b.
  state = reference.init(params)
  tf.nest.assert_same_structure(state, fast.init(params))
  for t in range(3):  # From zero momenta at t = 0 to non-zero ones.
    grads = grad_fn(state.params, tf.constant([t, 1]))
    expected = reference_update(state, grads)
    actual = fast_update(state, grads)
    assert int(actual.iteration) == t + 1
    for old, new, ref in zip(
      tf.nest.flatten(state.params),
      tf.nest.flatten(actual.params),
      tf.nest.flatten(expected.params),
      strict=True,
    ):
      ref_step, step = (old - ref).numpy(), (old - new).numpy()
      assert np.max(np.abs(ref_step)) > 1e-4  # Not a vacuous comparison.
      # A step is read back as old - new, so it carries the rounding of the new parameter:
      # a few ulps of the parameters, beside the steps' own float32 rounding.
      ulps = 4 * np.spacing(np.max(np.abs(old.numpy())))
      np.testing.assert_allclose(
        step, ref_step, rtol=0, atol=1e-5 * np.max(np.abs(ref_step)) + ulps
      )
    for new, ref in zip(
      tf.nest.flatten(actual.momenta), tf.nest.flatten(expected.momenta), strict=True
    ):
      _assert_close(new.numpy(), ref.numpy(), np.max(np.abs(ref.numpy())), rtol=1e-6)
    state = expected


@pytest.mark.parametrize("config", ["paper", "original_code"])
def test_fast_and_reference_unrolls_stay_together(config, cnn_task):
  """Ten steps inside the graph-mode loop, each implementation on its own trajectory."""
  lopt = mlp_lopt.MLPLOpt(**CONFIGS[config])
  theta = _theta(lopt, scale=1.0)

  @tf.function(autograph=False)
  def run(use_reference):
    opt = lopt.reference_opt_fn(theta) if use_reference else lopt.opt_fn(theta)
    state = opt.init(cnn_task.init_params(0))
    return inner_training.unroll(cnn_task, opt, state, 10, seed=1)

  (fast, fast_losses), (ref, ref_losses) = run(False), run(True)
  np.testing.assert_allclose(fast_losses, ref_losses, rtol=1e-5)
  start = tf.nest.flatten(cnn_task.init_params(0))
  for p0, a, b in zip(
    start, tf.nest.flatten(fast.params), tf.nest.flatten(ref.params), strict=True
  ):
    moved = (b - p0).numpy()
    _assert_close((a - p0).numpy(), moved, np.max(np.abs(moved)), rtol=1e-4)
  assert int(fast.iteration) == 10


# Gradients with respect to theta.


@pytest.mark.parametrize("config", ["paper", "original_code", "guarded"])
def test_theta_gradient_matches_the_reference(config):
  task = random_data.RandomDataTask(
    networks.ConvNet(channels=(4, 4), strides=(2, 2)), image_shape=(8, 8, 3), batch_size=16
  )
  lopt = mlp_lopt.MLPLOpt(**CONFIGS[config])
  theta = _theta(lopt, scale=10.0)

  @tf.function(autograph=False)
  def gradient(theta, use_reference):
    with tf.GradientTape() as tape:
      tape.watch(theta)
      opt = lopt.reference_opt_fn(theta) if use_reference else lopt.opt_fn(theta)
      state = opt.init(task.init_params(0))
      _, losses = inner_training.unroll(task, opt, state, 2, seed=2)
      total = tf.reduce_sum(losses)
    return total, tape.gradient(total, theta)

  fast_total, fast_grad = gradient(theta, False)
  ref_total, ref_grad = gradient(theta, True)
  np.testing.assert_allclose(fast_total, ref_total, rtol=1e-6)
  for name in ("hidden", "output"):
    for key in ("w", "b"):
      expected = ref_grad[name][key].numpy()
      assert np.max(np.abs(expected)) > 0.0
      _assert_close(fast_grad[name][key].numpy(), expected, np.max(np.abs(expected)), rtol=1e-4)


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_scalars_vectors_and_odd_sizes(config):
  lopt = mlp_lopt.MLPLOpt(**CONFIGS[config])
  theta = _theta(lopt)
  params = {
    "scalar": tf.constant(0.7),
    "vector": tf.linspace(-1.0, 2.0, 10),
    "odd": tf.ones([3, 5]),
  }
  grads = {
    "scalar": tf.constant(-0.2),
    "vector": tf.linspace(0.5, -0.3, 10),
    "odd": tf.ones([3, 5]),
  }
  fast, reference = lopt.opt_fn(theta), lopt.reference_opt_fn(theta)
  expected = reference.update(reference.update(reference.init(params), grads), grads)
  actual = fast.update(fast.update(fast.init(params), grads), grads)
  for a, b in zip(tf.nest.flatten(actual), tf.nest.flatten(expected), strict=True):
    assert a.shape == b.shape
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_reference_implementation_is_selectable():
  lopt = mlp_lopt.MLPLOpt(implementation="reference")
  theta = lopt.init(0)
  assert type(lopt.opt_fn(theta)) is type(lopt.reference_opt_fn(theta))
  assert type(mlp_lopt.MLPLOpt().opt_fn(theta)) is not type(lopt.opt_fn(theta))
  with pytest.raises(ValueError, match="implementation"):
    mlp_lopt.MLPLOpt(implementation="nope")


@pytest.mark.parametrize("config", ["paper", "original_code"])
def test_one_small_tensor_beside_large_ones(config):
  """A lone small tensor is not grouped; tensors above GROUP_MAX_ELEMENTS never are."""
  lopt = mlp_lopt.MLPLOpt(**CONFIGS[config])
  theta = _theta(lopt)
  big = fast_update.GROUP_MAX_ELEMENTS + 3
  rng = np.random.default_rng(0)
  params = {
    "big": tf.constant(0.1 * rng.normal(size=[big]), tf.float32),
    "big2": tf.constant(0.1 * rng.normal(size=[2, big]), tf.float32),
    "small": tf.constant(0.1 * rng.normal(size=[7]), tf.float32),
  }
  grads = tf.nest.map_structure(lambda p: tf.sin(30.0 * p), params)  # Small params: float32
  # rounding of w itself stays below the tolerance on the step.
  fast, reference = lopt.opt_fn(theta), lopt.reference_opt_fn(theta)
  expected = reference.update(reference.update(reference.init(params), grads), grads)
  actual = fast.update(fast.update(fast.init(params), grads), grads)
  for key, p0 in params.items():
    moved = (p0 - expected.params[key]).numpy()
    assert np.max(np.abs(moved)) > 1e-4
    _assert_close((p0 - actual.params[key]).numpy(), moved, np.max(np.abs(moved)), rtol=1e-4)


def test_optimizer_built_in_another_graph_still_updates():
  """opt_fn(theta) builds theta's share of the weights where it is called; an update in a graph
  that cannot see those tensors builds them again instead of failing."""
  lopt = mlp_lopt.MLPLOpt()
  theta = tf.nest.map_structure(lambda x: x.numpy(), _theta(lopt))
  params = {"w": tf.linspace(-1.0, 1.0, 12), "b": tf.constant([0.3, -0.2])}
  grads = {"w": tf.linspace(0.5, -0.5, 12), "b": tf.constant([0.1, 0.2])}
  with tf.Graph().as_default():
    elsewhere = lopt.opt_fn(theta)  # Its weights are tensors of this discarded graph.
  here = lopt.opt_fn(theta)
  actual = elsewhere.update(elsewhere.init(params), grads)
  expected = here.update(here.init(params), grads)
  for a, b in zip(tf.nest.flatten(actual), tf.nest.flatten(expected), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def _cnn_update(cnn_task):
  """The paper CNN's params and gradients, the fast and reference optimizers, and a function
  giving the op types and names of the fast update's graph as it would be traced now."""
  lopt = mlp_lopt.MLPLOpt()
  theta = _theta(lopt)
  params = cnn_task.init_params(0)
  grads = tf.nest.map_structure(lambda p: 0.1 * tf.sin(7.0 * p), params)
  fast, reference = lopt.opt_fn(theta), lopt.reference_opt_fn(theta)

  def ops():
    graph = tf.function(fast.update).get_concrete_function(fast.init(params), grads).graph
    return {op.type for op in graph.get_operations()} | {op.name for op in graph.get_operations()}

  return params, grads, fast, reference, ops


def test_unfused_relu_on_one_thread_matches_the_reference(monkeypatch, cnn_task):
  """With one intra-op thread the hidden layer's ReLU is an op of its own; same numbers."""
  params, grads, fast, reference, op_types = _cnn_update(cnn_task)

  # This process may itself run on one intra-op thread: each case says which it asks for.
  monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: 0)
  assert "BiasAdd" in op_types()  # The zero bias that lets grappler fuse the ReLU.
  monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: 1)
  assert "BiasAdd" not in op_types()
  expected = reference.update(reference.init(params), grads)
  actual = tf.function(fast.update)(fast.init(params), grads)
  flat = zip(
    tf.nest.flatten(params),
    tf.nest.flatten(actual.params),
    tf.nest.flatten(expected.params),
    strict=True,
  )
  for p0, a, b in flat:
    moved = (p0 - b).numpy()
    _assert_close((p0 - a).numpy(), moved, np.max(np.abs(moved)), rtol=1e-5)


# The kernel on its own.


def test_kernel_on_flat_lists_is_what_opt_fn_runs():
  lopt = mlp_lopt.MLPLOpt()
  theta = _theta(lopt)
  params = {"w": tf.linspace(-1.0, 1.0, 12), "b": tf.constant([0.3, -0.2])}
  grads = {"w": tf.linspace(0.5, -0.5, 12), "b": tf.constant([0.1, 0.2])}
  opt = lopt.opt_fn(theta)
  state = opt.update(opt.init(params), grads)  # Non-zero momenta, t = 1.
  expected = opt.update(state, grads)
  kernel = fast_update.FastUpdate(lopt.options, theta)
  new_params, new_momenta = kernel(
    tf.nest.flatten(state.params),
    tf.nest.flatten(grads),
    tf.nest.flatten(state.momenta),
    state.iteration,
  )
  assert isinstance(new_params, list) and isinstance(new_momenta, list)
  for a, b in zip(new_params, tf.nest.flatten(expected.params), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  for a, b in zip(new_momenta, tf.nest.flatten(expected.momenta), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


# What benchmarks/learned_update.py patches in the kernel module, the intra-op threads under which
# the kernel would do otherwise (0: all cores), and the op whose presence shows the patch took.
VARIANTS = {
  "ungrouped": ("GROUP_MAX_ELEMENTS", 0, 0, "group_momenta", False),
  "relu_op": ("_relu_matmul", fast_update._relu_matmul_unfused, 0, "BiasAdd", False),
  "relu_fused": ("_relu_matmul", fast_update._relu_matmul_fused, 1, "BiasAdd", True),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_benchmark_variants_of_the_kernel_match_the_reference(variant, monkeypatch, cnn_task):
  name, value, threads, op_name, present = VARIANTS[variant]
  params, grads, fast, reference, ops = _cnn_update(cnn_task)

  monkeypatch.setattr(tf.config.threading, "get_intra_op_parallelism_threads", lambda: threads)
  assert (op_name in ops()) != present
  monkeypatch.setattr(fast_update, name, value)
  assert (op_name in ops()) == present
  actual = tf.function(fast.update)(fast.init(params), grads)
  expected = reference.update(reference.init(params), grads)
  for p0, a, b in zip(
    tf.nest.flatten(params),
    tf.nest.flatten(actual.params),
    tf.nest.flatten(expected.params),
    strict=True,
  ):
    moved = (p0 - b).numpy()
    _assert_close((p0 - a).numpy(), moved, np.max(np.abs(moved)), rtol=1e-5)


def test_kernel_imports_no_more_than_the_features():
  """fast_update must not import mlp_lopt (which imports it) nor MLPLOpt's other dependencies
  (the type names of nests.py and the options record aside)."""
  tree = ast.parse(inspect.getsource(fast_update))
  imported = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      imported |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      imported |= {f"{node.module}.{alias.name}" for alias in node.names}
  project = {name for name in imported if name.startswith("task_specific_learned_opt")}
  assert project == {
    "task_specific_learned_opt.learned_optimizers.features",
    "task_specific_learned_opt.learned_optimizers.mlp_options",
    "task_specific_learned_opt.nests",
  }
