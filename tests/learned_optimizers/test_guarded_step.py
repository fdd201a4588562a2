"""MLPLOpt's guarded step and its momentum initialisation: off by default (the paper's update and
init, bit for bit); set, they do what they say, in both implementations.

gate_growth: an element's step that would grow |w| (step * w < 0) is zero unless the gradient
points that way (g * w < 0). max_step_rms = c: each tensor's step is scaled down to a root mean
square of c when it is larger. momentum_init = c: at theta's start the step is normalised
momentum SGD, c * lambda_lin * m_0.9 / rms(m_0.9) per tensor.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import checkpoints
from task_specific_learned_opt.distributed import chief_update
from task_specific_learned_opt.learned_optimizers import fast_update, features, mlp_lopt

PARAMS = {
  "a": np.array([[1.0, -0.5, 2.0], [0.3, -1.2, 0.7]], np.float32),
  "b": np.array([0.1, -0.4, 1.5, -2.0], np.float32),
  "c": np.linspace(-1.0, 1.0, 5000).astype(np.float32).reshape(50, 100),  # Not grouped.
}
GRADS = {
  "a": np.array([[0.2, -0.1, 0.5], [-0.3, 0.05, 0.8]], np.float32),
  "b": np.array([1.0, -2.0, 0.5, 0.0], np.float32),
  "c": np.cos(np.arange(5000.0)).astype(np.float32).reshape(50, 100),
}
IMPLEMENTATIONS = ("fast", "reference")


def _tf(nest):
  return tf.nest.map_structure(lambda x: tf.constant(x, tf.float32), nest)


def _steps(lopt, theta, t=3):
  """Per tensor, old params minus new of one update at step t from PARAMS with GRADS."""
  opt = lopt.opt_fn(theta)
  state = opt.init(_tf(PARAMS))._replace(iteration=tf.constant(t, tf.int32))
  new = opt.update(state, _tf(GRADS)).params
  return {k: PARAMS[k] - new[k].numpy() for k in PARAMS}


def _ulps(k):
  """A step is read back as old - new params: it carries a few ulps of the parameters."""
  return 4 * np.spacing(np.max(np.abs(PARAMS[k])))


def _big_theta():
  """A theta whose steps are large (rms well above 1e-3) and drift: a non-zero output bias."""
  theta = tf.nest.map_structure(lambda x: 30.0 * x, mlp_lopt.MLPLOpt().init(3))
  theta["output"]["b"] = tf.constant([2.0, 0.0])
  return theta


def test_gate_growth_worked_numbers():
  step = tf.constant([0.1, -0.1, -0.1, 0.1, -0.2, 0.3])
  w = tf.constant([1.0, 1.0, 1.0, -1.0, 0.0, 2.0])
  g = tf.constant([0.5, 0.5, -0.5, -0.5, 1.0, 0.0])
  # 1: shrinks |w| (kept); 2: grows w = 1 while g > 0 asks to shrink it (zeroed); 3: grows it and
  # g < 0 asks for that (kept); 4: grows |w| of w = -1 (step > 0) unasked, g < 0 (zeroed);
  # 5: w = 0, step * w = 0 is not growth (kept); 6: shrinks w = 2 with g = 0 (kept).
  actual = fast_update.gate_growth(step, w, g).numpy()
  np.testing.assert_array_equal(actual, np.float32([0.1, 0.0, -0.1, 0.0, -0.2, 0.3]))


def test_step_rms_factor_worked_numbers():
  # rms 2e-3 against a cap of 1e-3: halved; rms 5e-4: unchanged; a zero step: unchanged.
  mean_squares = tf.constant([4e-6, 2.5e-7, 0.0])
  actual = fast_update.step_rms_factor(mean_squares, 1e-3).numpy()
  np.testing.assert_allclose(actual, [0.5, 1.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_gate_zeroes_exactly_the_unasked_growth(implementation):
  theta = _big_theta()
  plain = _steps(mlp_lopt.MLPLOpt(implementation=implementation), theta)
  gated = _steps(mlp_lopt.MLPLOpt(implementation=implementation, gate_growth=True), theta)
  num_zeroed = 0
  for k in PARAMS:
    w, g = PARAMS[k], GRADS[k]
    unasked = (plain[k] * w < 0) & (g * w >= 0)
    num_zeroed += int(unasked.sum())
    np.testing.assert_array_equal(gated[k][unasked], 0.0)
    np.testing.assert_allclose(gated[k][~unasked], plain[k][~unasked], rtol=1e-5, atol=_ulps(k))
  assert num_zeroed > 100  # The drifting theta does try to grow weights unasked.


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_cap_bounds_every_tensors_step_rms(implementation):
  theta = _big_theta()
  plain = _steps(mlp_lopt.MLPLOpt(implementation=implementation), theta)
  cap = 1e-3
  capped = _steps(mlp_lopt.MLPLOpt(implementation=implementation, max_step_rms=cap), theta)
  for k in PARAMS:
    rms = np.sqrt(np.mean(plain[k].astype(np.float64) ** 2))
    assert rms > 2 * cap  # Every tensor's step is over the cap ...
    expected = plain[k] * cap / rms  # ... and is scaled down to it, direction unchanged.
    np.testing.assert_allclose(capped[k], expected, rtol=2e-3, atol=_ulps(k))
  loose = _steps(mlp_lopt.MLPLOpt(implementation=implementation, max_step_rms=1.0), theta)
  for k in PARAMS:  # A cap above every step changes nothing.
    np.testing.assert_allclose(loose[k], plain[k], rtol=1e-6, atol=_ulps(k))


def test_defaults_are_the_papers_update_and_init_bit_for_bit():
  lopt = mlp_lopt.MLPLOpt()
  assert not lopt.gate_growth and lopt.max_step_rms is None and lopt.momentum_init is None
  assert lopt.output_init_scale == 1.0
  explicit = mlp_lopt.MLPLOpt(gate_growth=False, max_step_rms=None, output_init_scale=1.0)
  for a, b in zip(tf.nest.flatten(lopt.init(5)), tf.nest.flatten(explicit.init(5)), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  a, b = _steps(lopt, lopt.init(5)), _steps(explicit, lopt.init(5))
  for k in PARAMS:
    np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_momentum_init_is_normalised_momentum_sgd(implementation):
  scale = 3.0
  lopt = mlp_lopt.MLPLOpt(implementation=implementation, momentum_init=scale, output_init_scale=0.0)
  steps = _steps(lopt, lopt.init(7), t=0)
  for k in PARAMS:
    # From zero momenta, m_0.9 = (1 - 0.9) g after the first update.
    m = (1.0 - 0.9) * GRADS[k].astype(np.float64)
    normalised = m / np.sqrt(np.mean(m**2) + features.NORMALIZER_EPSILON)
    expected = mlp_lopt.STEP_SCALE * scale * normalised
    np.testing.assert_allclose(steps[k], expected, rtol=1e-4, atol=_ulps(k))


def test_momentum_init_keeps_the_other_units_as_the_papers_init_scaled():
  paper = mlp_lopt.MLPLOpt().init(7)
  theta = mlp_lopt.MLPLOpt(momentum_init=2.0, output_init_scale=0.1).init(7)
  np.testing.assert_array_equal(theta["hidden"]["w"][:, 2:], paper["hidden"]["w"][:, 2:])
  np.testing.assert_allclose(theta["output"]["w"][2:], 0.1 * paper["output"]["w"][2:], rtol=1e-6)
  hidden = theta["hidden"]["w"].numpy()
  assert hidden[mlp_lopt.MOMENTUM_INIT_COLUMN, 0] == 1.0 and hidden[:, 0].sum() == 1.0
  np.testing.assert_array_equal(theta["output"]["w"][:2].numpy(), [[2.0, 0.0], [-2.0, 0.0]])


def test_momentum_init_needs_the_papers_momentum_features():
  with pytest.raises(ValueError, match="momentum_init"):
    mlp_lopt.MLPLOpt(momentum_init=1.0, use_momentum=False)


def test_a_chief_can_start_from_a_theta_export(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  start = tf.nest.map_structure(lambda x: x + 1.0, lopt.init(11))
  checkpoints.save_theta(str(tmp_path / "theta"), start)
  chief = chief_update.Chief(lopt, seed=0, initial_theta=str(tmp_path / "theta"))
  for a, b in zip(tf.nest.flatten(chief.theta()), tf.nest.flatten(start), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  fresh = chief_update.Chief(lopt, seed=0)
  for a, b in zip(tf.nest.flatten(fresh.theta()), tf.nest.flatten(lopt.init(0)), strict=True):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_relative_step_factor_worked_numbers():
  # Caps r * max(rms(w), floor) with r = 0.01: w rms 1 -> cap 1e-2, a step of rms 2e-2 is halved;
  # w rms 1e-4 (under the floor 1e-2) -> cap 1e-4, a step of rms 1e-4 is kept; w = 0 -> the same.
  step_ms = tf.constant([4e-4, 1e-8, 4e-8])
  param_ms = tf.constant([1.0, 1e-8, 0.0])
  actual = fast_update.relative_step_factor(step_ms, param_ms, 0.01).numpy()
  np.testing.assert_allclose(actual, [0.5, 1.0, 0.5], rtol=1e-5)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_relative_cap_bounds_each_step_by_its_tensors_scale(implementation):
  theta = _big_theta()
  plain = _steps(mlp_lopt.MLPLOpt(implementation=implementation), theta)
  r = 1e-3
  lopt = mlp_lopt.MLPLOpt(implementation=implementation, max_relative_step=r)
  capped = _steps(lopt, theta)
  for k in PARAMS:
    w_rms = np.sqrt(np.mean(PARAMS[k].astype(np.float64) ** 2))
    cap = r * max(w_rms, fast_update.RELATIVE_STEP_FLOOR)
    rms = np.sqrt(np.mean(plain[k].astype(np.float64) ** 2))
    assert rms > 2 * cap  # Every tensor's step is over its own cap ...
    expected = plain[k] * cap / rms  # ... and is scaled down to it, direction unchanged.
    np.testing.assert_allclose(capped[k], expected, rtol=2e-3, atol=_ulps(k))
  # The caps differ per tensor: "a" and "c" have different weight scales.
  assert not np.isclose(np.sqrt(np.mean(capped["a"] ** 2)), np.sqrt(np.mean(capped["c"] ** 2)))
  loose = _steps(mlp_lopt.MLPLOpt(implementation=implementation, max_relative_step=100.0), theta)
  for k in PARAMS:  # A cap above every step changes nothing.
    np.testing.assert_allclose(loose[k], plain[k], rtol=1e-6, atol=_ulps(k))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_the_step_weight_decay_takes_kappa_times_the_steps_size_off_each_tensor(implementation):
  theta = _big_theta()
  options = {"implementation": implementation, "max_relative_step": 3e-2, "gate_growth": True}
  plain = _steps(mlp_lopt.MLPLOpt(**options), theta)
  kappa = 0.5
  decayed = _steps(mlp_lopt.MLPLOpt(step_weight_decay=kappa, **options), theta)
  for k in PARAMS:
    w = PARAMS[k].astype(np.float64)
    w_rms = max(np.sqrt(np.mean(w**2)), fast_update.RELATIVE_STEP_FLOOR)
    step_rms = np.sqrt(np.mean(plain[k].astype(np.float64) ** 2))
    assert step_rms > 0
    # w - new = step + kappa * rms(step) / rms(w) * w: the decay's rms is kappa * rms(step).
    expected = plain[k] + kappa * step_rms / w_rms * w
    np.testing.assert_allclose(decayed[k], expected, rtol=2e-3, atol=_ulps(k))
    decay = decayed[k] - plain[k]
    np.testing.assert_allclose(np.sqrt(np.mean(decay**2)), kappa * step_rms, rtol=2e-3)


def test_the_step_weight_decay_scales_with_the_step_and_leaves_a_still_tensor_alone():
  theta = _big_theta()
  small = tf.nest.map_structure(lambda x: x, theta)
  small["output"]["w"] = theta["output"]["w"] * 0.1  # Smaller steps, same kappa.
  ratios = []
  for t in (theta, small):
    plain = _steps(mlp_lopt.MLPLOpt(), t)
    decayed = _steps(mlp_lopt.MLPLOpt(step_weight_decay=1.0), t)
    step = np.sqrt(np.mean(plain["c"].astype(np.float64) ** 2))
    ratios.append(np.sqrt(np.mean((decayed["c"] - plain["c"]) ** 2)) / step)
  np.testing.assert_allclose(ratios, [1.0, 1.0], rtol=5e-3)  # A fixed weight_decay would not.
  zero = tf.nest.map_structure(tf.zeros_like, theta)  # Zero steps: nothing decays.
  assert all(np.all(v == 0) for v in _steps(mlp_lopt.MLPLOpt(step_weight_decay=1.0), zero).values())


def test_a_negative_step_weight_decay_is_refused():
  with pytest.raises(ValueError, match="step_weight_decay"):
    mlp_lopt.MLPLOpt(step_weight_decay=-0.1)


def test_max_norm_worked_numbers():
  kernel = tf.fill([4, 25], 0.3)  # fan_in 4: bound c / 2; rms 0.3.
  np.testing.assert_allclose(mlp_lopt.max_norm(kernel, 0.2).numpy(), np.full([4, 25], 0.1))
  np.testing.assert_allclose(mlp_lopt.max_norm(kernel, 1.0).numpy(), kernel.numpy())  # Below.
  conv = tf.fill([3, 3, 4, 8], -1.0)  # fan_in 36: bound c / 6.
  np.testing.assert_allclose(mlp_lopt.max_norm(conv, 3.0).numpy(), np.full([3, 3, 4, 8], -0.5))
  bias = tf.constant([5.0, -7.0])  # Vectors are left alone.
  np.testing.assert_array_equal(mlp_lopt.max_norm(bias, 1e-3).numpy(), bias.numpy())


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_max_weight_rms_bounds_every_kernel_after_the_step(implementation):
  theta = _big_theta()
  c = 0.5
  plain = _steps(mlp_lopt.MLPLOpt(implementation=implementation), theta)
  bounded = _steps(mlp_lopt.MLPLOpt(implementation=implementation, max_weight_rms=c), theta)
  for k in PARAMS:
    new = PARAMS[k] - bounded[k]
    free = PARAMS[k] - plain[k]
    if PARAMS[k].ndim < 2:
      np.testing.assert_array_equal(new, free)  # "b" is a vector: untouched.
      continue
    bound = c / np.sqrt(PARAMS[k].shape[0])
    assert np.sqrt(np.mean(free.astype(np.float64) ** 2)) > bound  # Over the bound ...
    # ... and scaled back onto it, direction unchanged.
    np.testing.assert_allclose(np.sqrt(np.mean(new.astype(np.float64) ** 2)), bound, rtol=1e-5)
    cosine = np.sum(new * free) / np.linalg.norm(new) / np.linalg.norm(free)
    np.testing.assert_allclose(cosine, 1.0, rtol=1e-5)
  loose = _steps(mlp_lopt.MLPLOpt(implementation=implementation, max_weight_rms=1e3), theta)
  for k in PARAMS:
    np.testing.assert_array_equal(loose[k], plain[k])  # A bound above every kernel: no change.
  with pytest.raises(ValueError, match="max_weight_rms"):
    mlp_lopt.MLPLOpt(max_weight_rms=0.0)
