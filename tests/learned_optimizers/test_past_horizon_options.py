"""MLPLOpt's options for running past the horizon: off by default (the paper's update, bit for
bit); set, they do what they say.

time_max_step = T: a step at t > T is exactly the default optimizer's step at t = T.
weight_decay = lambda from step s: the new params are the default's minus lambda * (old params)
at t >= s, the default's before. Both implementations (the fast kernel and the per-tensor
reference) are checked.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.keras import lopt_options
from task_specific_learned_opt.learned_optimizers import features, mlp_lopt

PARAMS = {
  "a": np.array([[1.0, -0.5, 2.0], [0.3, -1.2, 0.7]], np.float32),
  "b": np.array([0.1, -0.4, 1.5, -2.0], np.float32),
}
GRADS = {
  "a": np.array([[0.2, -0.1, 0.5], [-0.3, 0.05, 0.8]], np.float32),
  "b": np.array([1.0, -2.0, 0.5, 0.0], np.float32),
}
SCALES = (3.0, 100.0, 1000.0)
IMPLEMENTATIONS = ("fast", "reference")


def _tf(nest):
  return tf.nest.map_structure(lambda x: tf.constant(x, tf.float32), nest)


def _step(lopt, t):
  """The new params of one update at inner step t from PARAMS with GRADS (theta seed 3)."""
  opt = lopt.opt_fn(mlp_lopt.MLPLOpt().init(3))
  state = opt.init(_tf(PARAMS))._replace(iteration=tf.constant(t, tf.int32))
  return {k: v.numpy() for k, v in opt.update(state, _tf(GRADS)).params.items()}


def _assert_identical(a, b):
  for key in a:
    np.testing.assert_array_equal(a[key], b[key])


def test_time_features_worked_numbers_with_a_cap():
  # t = 7 capped at 3: tanh(3 / 3 - 1) = 0 and tanh(3 / 100 - 1) = tanh(-0.97) = -0.74958.
  actual = features.time_features(tf.constant(7), (3.0, 100.0), max_step=3).numpy()
  np.testing.assert_allclose(actual, [0.0, np.tanh(-0.97)], rtol=1e-6, atol=1e-7)
  # Below the cap nothing changes: t = 2 gives tanh(2 / 3 - 1) = tanh(-1/3) = -0.32151.
  below = features.time_features(tf.constant(2), (3.0,), max_step=3).numpy()
  np.testing.assert_allclose(below, [np.tanh(-1.0 / 3.0)], rtol=1e-6)


def test_default_time_features_are_the_uncapped_formula_bit_for_bit():
  for t in (0, 7, 499, 500, 5000, 10**6):
    old = tf.tanh(tf.cast(tf.constant(t), tf.float32) / tf.constant(SCALES, tf.float32) - 1.0)
    np.testing.assert_array_equal(features.time_features(tf.constant(t), SCALES).numpy(), old)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_default_leaves_the_update_unchanged(implementation):
  """None is the default, and no cap: the step at t = 5000 is that of a cap far above it."""
  assert mlp_lopt.MLPLOpt().time_max_step is None
  default = mlp_lopt.MLPLOpt(implementation=implementation)
  far = mlp_lopt.MLPLOpt(implementation=implementation, time_max_step=10**9)
  _assert_identical(_step(default, 5000), _step(far, 5000))
  # And the time features do act at that step (the comparison is not vacuous).
  with pytest.raises(AssertionError):
    _assert_identical(_step(default, 5000), _step(default, 500))


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_capped_step_past_the_cap_is_the_default_step_at_the_cap(implementation):
  capped = mlp_lopt.MLPLOpt(implementation=implementation, time_max_step=500)
  default = mlp_lopt.MLPLOpt(implementation=implementation)
  _assert_identical(_step(capped, 5000), _step(default, 500))
  _assert_identical(_step(capped, 200), _step(default, 200))  # Below the cap: unchanged.


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_weight_decay_subtracts_lambda_times_the_old_params_from_its_start(implementation):
  default = mlp_lopt.MLPLOpt(implementation=implementation)
  decayed = mlp_lopt.MLPLOpt(implementation=implementation, weight_decay=0.01, weight_decay_start=5)
  _assert_identical(_step(decayed, 4), _step(default, 4))  # Before its start: the default step.
  expected = {k: v - np.float32(0.01) * PARAMS[k] for k, v in _step(default, 5).items()}
  # b = 0.1: the step's new value minus 0.01 * 0.1 = 0.001, up to float32 rounding.
  for key, value in _step(decayed, 5).items():
    np.testing.assert_allclose(value, expected[key], rtol=1e-6, atol=1e-7)
    assert not np.allclose(value, _step(default, 5)[key], rtol=0, atol=1e-5)


def test_update_config_and_keras_options_carry_the_options():
  lopt = mlp_lopt.MLPLOpt(time_max_step=500, weight_decay=1e-3, weight_decay_start=500)
  assert lopt.options.time_max_step == 500
  default = mlp_lopt.MLPLOpt()
  assert default.options.time_max_step is None and default.weight_decay == 0.0
  rebuilt = lopt_options.as_lopt(lopt_options.lopt_options(lopt))
  assert (rebuilt.time_max_step, rebuilt.weight_decay, rebuilt.weight_decay_start) == (
    500,
    1e-3,
    500,
  )
  assert lopt_options.describe(mlp_lopt.MLPLOpt(time_max_step=500)) == "MLPLOpt(time_max_step=500)"
