"""Tests for the paper's per-parameter MLP learned optimizer (App. D.1).

The full-step tests write the optimizer out in numpy (momenta, per-tensor normalised columns,
concatenated time features, the MLP and the exponential step) and compare both implementations
of MLPLOpt with it: the fast kernel (opt_fn) and the per-tensor specification (reference_opt_fn).
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.learned_optimizers import features, mlp_lopt, mlp_options
from task_specific_learned_opt.tasks import quadratic

DECAYS = np.array([0.5, 0.9, 0.99, 0.999, 0.9999])
PAPER_TIME_SCALES = np.logspace(np.log10(3.0), np.log10(3e5), 9)  # 3, 12.65, ..., 3e5.
ORIGINAL_CODE_TIME_SCALES = np.array([3, 10, 30, 100, 300, 1000, 3000, 10000, 300000], float)

PARAMS = {
  "a": np.array([[1.0, -0.5, 2.0], [0.3, -1.2, 0.7]], np.float32),
  "b": np.array([0.1, -0.4, 1.5, -2.0], np.float32),
}
GRADS = [  # Gradients fed at steps t = 0 and t = 1.
  {
    "a": np.array([[0.2, -0.1, 0.5], [-0.3, 0.05, 0.8]], np.float32),
    "b": np.array([1.0, -2.0, 0.5, 0.0], np.float32),
  },
  {
    "a": np.array([[-0.4, 0.3, 0.1], [0.2, -0.6, 0.9]], np.float32),
    "b": np.array([-0.5, 1.5, 2.5, -1.0], np.float32),
  },
]


def _tf(nest):
  return tf.nest.map_structure(lambda x: tf.constant(x, tf.float32), nest)


def _numpy_theta(lopt, seed=3):
  """lopt.init(seed) as float64 numpy arrays, with a non-zero output bias.

  The bias on o_mag (300) makes exp(1e-3 * o_mag) ~ 1.35, so the exponential term matters.
  """
  theta = tf.nest.map_structure(lambda x: np.float64(x.numpy()), lopt.init(seed))
  theta["hidden"]["b"] = np.linspace(-0.3, 0.3, theta["hidden"]["b"].shape[0])
  theta["output"]["b"] = np.array([0.2, 300.0])
  return theta


def _numpy_update(theta, params, grads, momenta, t, feature_set, use_time, time_scales):
  """One MLPLOpt step in numpy (float64): returns (new params, new momenta, steps)."""
  new_params, new_momenta, steps = {}, {}, {}
  for key in params:
    w, g = np.float64(params[key]), np.float64(grads[key])
    # 1. Momenta first: m_d <- d * m_d + (1 - d) * g.
    m = DECAYS * momenta[key] + (1.0 - DECAYS) * g[..., None]
    # 2. Feature columns of this tensor.
    if feature_set == "paper":
      cols = np.concatenate([g[..., None], w[..., None], m], axis=-1)  # [..., 7]
    else:
      zeros = np.zeros_like(m)
      cols = np.concatenate(  # [..., 22]
        [g[..., None], 1000.0 * m, w[..., None], m, zeros, 1.0 / np.sqrt(zeros + 1e-6)], axis=-1
      )
    # Each column divided by its root mean square over this tensor's elements.
    axes = tuple(range(cols.ndim - 1))
    cols = cols / np.sqrt(np.mean(cols**2, axis=axes, keepdims=True) + 1e-5)
    x = cols.reshape(-1, cols.shape[-1])
    # 3. The 9 unnormalised time features tanh(t / eta - 1), the same for every element.
    if use_time:
      time = np.tanh(t / time_scales - 1.0)
      x = np.concatenate([x, np.tile(time, [x.shape[0], 1])], axis=1)
    # 4. The MLP on the concatenated inputs, then the exponential step.
    h = np.maximum(x @ theta["hidden"]["w"] + theta["hidden"]["b"], 0.0)
    out = h @ theta["output"]["w"] + theta["output"]["b"]
    step = 1e-3 * out[:, 0] * np.exp(1e-3 * out[:, 1])
    assert np.all(np.abs(np.exp(1e-3 * out[:, 1]) - 1.0) > 0.05)  # The exponential matters.
    steps[key] = step.reshape(w.shape)
    new_params[key] = w - steps[key]
    new_momenta[key] = m
  return new_params, new_momenta, steps


@pytest.mark.parametrize(
  "kwargs, feature_set, use_time, time_scales, num_inputs",
  [
    ({}, "paper", True, PAPER_TIME_SCALES, 7 + 9),
    (
      {"feature_set": "original_code", "time_scales": features.ORIGINAL_CODE_TIME_SCALES},
      "original_code",
      True,
      ORIGINAL_CODE_TIME_SCALES,
      22 + 9,
    ),
    ({"use_time": False}, "paper", False, None, 7),
  ],
)
@pytest.mark.parametrize("implementation", ["fast", "reference"])
def test_two_full_steps_against_numpy(
  kwargs, feature_set, use_time, time_scales, num_inputs, implementation
):
  lopt = mlp_lopt.MLPLOpt(implementation=implementation, **kwargs)
  theta = _numpy_theta(lopt)
  assert theta["hidden"]["w"].shape == (num_inputs, 32)
  opt = lopt.opt_fn(_tf(theta))

  state = opt.init(_tf(PARAMS))
  params = {k: np.float64(v) for k, v in PARAMS.items()}
  momenta = {k: np.zeros(v.shape + (5,)) for k, v in PARAMS.items()}
  for t, grads in enumerate(GRADS):  # t = 0 with zero momenta, then t = 1 with non-zero ones.
    assert int(state.iteration) == t
    state = opt.update(state, _tf(grads), loss=tf.constant(1.0))
    old_params = params
    params, momenta, steps = _numpy_update(
      theta, params, grads, momenta, float(t), feature_set, use_time, time_scales
    )
    assert int(state.iteration) == t + 1
    for key in PARAMS:
      actual_params = state.params[key].numpy()
      np.testing.assert_allclose(actual_params, params[key], rtol=1e-6, atol=1e-6)
      # The state keeps the momenta decay-major: [num_decays, *param.shape].
      expected_momenta = np.moveaxis(momenta[key], -1, 0)
      np.testing.assert_allclose(state.momenta[key].numpy(), expected_momenta, rtol=1e-6, atol=1e-7)
      # The step itself (~1e-3..1e-2), up to the float32 rounding of the parameters.
      np.testing.assert_allclose(old_params[key] - actual_params, steps[key], rtol=1e-3, atol=2e-7)
      assert np.max(np.abs(steps[key])) > 1e-4  # Not a vacuous comparison.
    params = {k: np.float64(state.params[k].numpy()) for k in PARAMS}


def test_time_features_change_the_step():
  """t enters the update: the same state at t = 0 and t = 50 gives different steps."""
  lopt = mlp_lopt.MLPLOpt()
  opt = lopt.opt_fn(_tf(_numpy_theta(lopt)))
  state = opt.init(_tf(PARAMS))
  later = state._replace(iteration=tf.constant(50, tf.int32))
  a = opt.update(state, _tf(GRADS[0])).params["b"].numpy()
  b = opt.update(later, _tf(GRADS[0])).params["b"].numpy()
  assert not np.allclose(a, b, rtol=1e-6, atol=1e-7)


def test_loss_is_ignored():
  lopt = mlp_lopt.MLPLOpt()
  opt = lopt.opt_fn(lopt.init(0))
  state = opt.init(_tf(PARAMS))
  a = opt.update(state, _tf(GRADS[0]), loss=tf.constant(1.0))
  b = opt.update(state, _tf(GRADS[0]), loss=tf.constant(100.0))
  for key in PARAMS:
    np.testing.assert_array_equal(a.params[key].numpy(), b.params[key].numpy())


# State structure.


def test_state_keeps_structure_dtypes_and_shapes():
  lopt = mlp_lopt.MLPLOpt()
  opt = lopt.opt_fn(lopt.init(0))
  state = opt.init(_tf(PARAMS))
  assert state.iteration.dtype == tf.int32
  assert int(state.iteration) == 0
  for key, value in PARAMS.items():
    assert state.momenta[key].shape == (5,) + value.shape
    np.testing.assert_array_equal(state.momenta[key].numpy(), np.zeros((5,) + value.shape))
  new_state = opt.update(state, _tf(GRADS[0]))
  tf.nest.assert_same_structure(state, new_state)
  for old, new in zip(tf.nest.flatten(state), tf.nest.flatten(new_state), strict=True):
    assert old.dtype == new.dtype
    assert old.shape == new.shape
  assert isinstance(new_state, mlp_lopt.MLPLOptState)
  assert new_state.momenta["a"].shape == (5, 2, 3)
  assert new_state.momenta["b"].shape == (5, 4)
  assert opt.get_params(new_state) is new_state.params


def test_options_are_the_hyperparameters():
  lopt = mlp_lopt.MLPLOpt(decays=(0.5, 0.9), use_time=False, step_scale_exp=2e-3)
  options = lopt.options
  assert options.decays == (0.5, 0.9)
  assert options.time_scales == ()
  assert not options.use_time
  assert options.step_scale_exp == 2e-3
  for name in mlp_options.NAMES:
    assert getattr(lopt, name) == getattr(options, name)


# Meta-parameters.


@pytest.mark.parametrize(
  "kwargs, num_inputs, num_meta_parameters",
  [
    ({}, 16, 16 * 32 + 32 + 32 * 2 + 2),  # 610.
    ({"feature_set": "original_code"}, 31, 31 * 32 + 32 + 32 * 2 + 2),  # 1090.
    ({"use_momentum": False}, 11, 11 * 32 + 32 + 32 * 2 + 2),  # [g, w] + 9 time.
    ({"use_time": False}, 7, 7 * 32 + 32 + 32 * 2 + 2),  # [g, w, m x5].
    ({"use_momentum": False, "use_time": False}, 2, 2 * 32 + 32 + 32 * 2 + 2),
  ],
)
def test_meta_parameter_counts(kwargs, num_inputs, num_meta_parameters):
  lopt = mlp_lopt.MLPLOpt(**kwargs)
  assert lopt.num_inputs == num_inputs
  theta = lopt.init(0)
  assert theta["hidden"]["w"].shape == (num_inputs, 32)
  assert theta["hidden"]["b"].shape == (32,)
  assert theta["output"]["w"].shape == (32, 2)
  assert theta["output"]["b"].shape == (2,)
  assert mlp_lopt.num_meta_parameters(theta) == num_meta_parameters
  assert sum(np.size(x) for x in tf.nest.flatten(theta)) == num_meta_parameters


def test_paper_and_original_code_counts():
  assert mlp_lopt.num_meta_parameters(mlp_lopt.MLPLOpt().init(0)) == 610
  original = mlp_lopt.MLPLOpt(feature_set="original_code").init(0)
  assert mlp_lopt.num_meta_parameters(original) == 1090


@pytest.mark.parametrize("feature_set, fan_in", [("paper", 16), ("original_code", 31)])
def test_theta_init_distribution(feature_set, fan_in):
  theta = mlp_lopt.MLPLOpt(feature_set=feature_set).init(0)
  for x in tf.nest.flatten(theta):
    assert x.dtype == tf.float32
  np.testing.assert_array_equal(theta["hidden"]["b"].numpy(), np.zeros(32))
  np.testing.assert_array_equal(theta["output"]["b"].numpy(), np.zeros(2))
  for name, layer_fan_in in (("hidden", fan_in), ("output", 32)):
    w = theta[name]["w"].numpy()
    stddev = 1.0 / np.sqrt(layer_fan_in)
    # Truncated at 2 stddev.
    assert np.max(np.abs(w)) <= 2.0 * stddev + 1e-7
    assert np.all(np.isfinite(w))
    assert len(np.unique(w)) == w.size
  # A normal truncated at +-2 sigma has stddev ~0.8796 sigma; 512 or 992 samples estimate it to
  # a few percent.
  hidden = theta["hidden"]["w"].numpy()
  np.testing.assert_allclose(np.std(hidden), 0.88 / np.sqrt(fan_in), rtol=0.1)
  assert abs(np.mean(hidden)) < 0.1 / np.sqrt(fan_in)


def test_theta_init_is_a_function_of_the_seed():
  lopt = mlp_lopt.MLPLOpt()
  a, b, c = lopt.init(7), lopt.init(7), lopt.init(8)
  for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b), strict=True):
    np.testing.assert_array_equal(x.numpy(), y.numpy())
  assert not np.allclose(a["hidden"]["w"].numpy(), c["hidden"]["w"].numpy())
  assert not np.allclose(a["output"]["w"].numpy(), c["output"]["w"].numpy())
  # The two layers use different seeds.
  assert not np.allclose(a["hidden"]["w"].numpy()[:2, :2], a["output"]["w"].numpy()[:2, :2])


# Differentiability of an unroll with respect to theta.


def test_unroll_gradient_matches_finite_difference():
  # Initial loss 6.1, below the clip at 10.
  task = quadratic.QuadraticTask(dim=5, seed=2, max_curvature=10.0)
  lopt = mlp_lopt.MLPLOpt()
  # Scaled up, with biases, so that 3 steps change the loss (6.11 -> 7.17 -> 8.45).
  theta = tf.nest.map_structure(lambda x: 10.0 * x, lopt.init(0))
  theta["output"]["b"] = tf.constant([0.5, 300.0])
  init_seed, data_seed = tf.constant([0, 1]), tf.constant([0, 2])

  def sum_of_losses(theta):
    opt = lopt.opt_fn(theta)
    state = opt.init(task.init_params(init_seed))
    _, losses = inner_training.unroll(task, opt, state, 3, data_seed)
    return tf.reduce_sum(losses), losses

  @tf.function
  def value_and_grad(theta):
    with tf.GradientTape() as tape:
      tape.watch(theta)
      total, losses = sum_of_losses(theta)
    return total, losses, tape.gradient(total, theta)

  total_fn = tf.function(lambda theta: sum_of_losses(theta)[0])

  _, losses, grad = value_and_grad(theta)
  losses = losses.numpy()
  assert np.all(losses < 10.0)  # Unclipped, so the gradient is not cut at 10.
  assert abs(losses[2] - losses[0]) > 0.1  # The steps are not negligible.
  flat_grad = [g.numpy() for g in tf.nest.flatten(grad)]
  assert all(np.all(np.isfinite(g)) for g in flat_grad)
  assert sum(np.sum(np.abs(g)) for g in flat_grad) > 0.0
  assert np.any(grad["hidden"]["w"].numpy() != 0.0)
  assert np.any(grad["output"]["w"].numpy() != 0.0)

  rng = np.random.default_rng(0)
  direction = [rng.normal(size=x.shape).astype(np.float32) for x in tf.nest.flatten(theta)]
  norm = np.sqrt(sum(np.sum(d**2) for d in direction))
  direction = [d / norm for d in direction]
  analytic = sum(np.sum(np.float64(g) * d) for g, d in zip(flat_grad, direction, strict=True))

  epsilon = 1e-2

  def shifted(sign):
    flat = [x + sign * epsilon * d for x, d in zip(tf.nest.flatten(theta), direction, strict=True)]
    return tf.nest.pack_sequence_as(theta, flat)

  numeric = (float(total_fn(shifted(1.0))) - float(total_fn(shifted(-1.0)))) / (2.0 * epsilon)
  assert abs(analytic) > 1e-3
  np.testing.assert_allclose(analytic, numeric, rtol=1e-2)


# Configuration errors.


@pytest.mark.parametrize(
  "kwargs",
  [
    {"feature_set": "nope"},
    {"feature_set": "original_code", "use_momentum": False},
  ],
)
def test_invalid_config_raises(kwargs):
  with pytest.raises(ValueError):
    mlp_lopt.MLPLOpt(**kwargs)
