"""Tests for the learned optimizer's input features (paper Sec. 4.1, App. D.1).

Every expected value is written out by hand or in numpy next to the numbers it uses.
"""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.learned_optimizers import features

# update_momenta.


def test_update_momenta_two_steps_worked_numbers():
  decays = (0.5, 0.9)
  momenta = tf.zeros([2, 2])  # [element, decay].

  # Step 1, g = [1, -2], from m = 0: m_d = (1 - d) * g.
  momenta = features.update_momenta(momenta, tf.constant([1.0, -2.0]), decays)
  expected_1 = np.array(
    [
      [0.5 * 1.0, 0.1 * 1.0],  # Element 0: d = 0.5, d = 0.9.
      [0.5 * -2.0, 0.1 * -2.0],  # Element 1.
    ]
  )
  np.testing.assert_allclose(momenta.numpy(), expected_1, rtol=1e-6)
  np.testing.assert_allclose(momenta.numpy(), [[0.5, 0.1], [-1.0, -0.2]], rtol=1e-6)

  # Step 2, g = [3, 0]: m_d = d * m_d + (1 - d) * g.
  momenta = features.update_momenta(momenta, tf.constant([3.0, 0.0]), decays)
  expected_2 = np.array(
    [
      [0.5 * 0.5 + 0.5 * 3.0, 0.9 * 0.1 + 0.1 * 3.0],  # [1.75, 0.39]
      [0.5 * -1.0 + 0.5 * 0.0, 0.9 * -0.2 + 0.1 * 0.0],  # [-0.5, -0.18]
    ]
  )
  np.testing.assert_allclose(momenta.numpy(), expected_2, rtol=1e-6)
  np.testing.assert_allclose(momenta.numpy(), [[1.75, 0.39], [-0.5, -0.18]], rtol=1e-6)


def test_update_momenta_paper_decays_on_a_matrix():
  assert features.MOMENTUM_DECAYS == (0.5, 0.9, 0.99, 0.999, 0.9999)
  decays = np.array([0.5, 0.9, 0.99, 0.999, 0.9999])
  grad = np.array([[2.0, -1.0, 0.0], [4.0, 0.5, -3.0]], np.float32)
  momenta = np.arange(30, dtype=np.float32).reshape(2, 3, 5) / 10.0 - 1.0
  actual = features.update_momenta(tf.constant(momenta), tf.constant(grad), decays).numpy()
  assert actual.shape == (2, 3, 5)
  expected = decays * momenta + (1.0 - decays) * grad[..., None]
  np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)
  # One element written out: m = -1.0 + 0.1 * k for k = 0..4, g = 2.
  np.testing.assert_allclose(
    actual[0, 0],
    [
      0.5 * -1.0 + 0.5 * 2.0,  # 0.0
      0.9 * -0.9 + 0.1 * 2.0,  # -0.61
      0.99 * -0.8 + 0.01 * 2.0,  # -0.772
      0.999 * -0.7 + 0.001 * 2.0,  # -0.6973
      0.9999 * -0.6 + 0.0001 * 2.0,  # -0.59974
    ],
    rtol=1e-6,
  )


# second_moment_normalize.

# A [2, 2, 3] tensor: column 0 has mixed signs, column 1 is the constant 2, column 2 is zero.
X_223 = np.array(
  [
    [[1.0, 2.0, 0.0], [-2.0, 2.0, 0.0]],
    [[3.0, 2.0, 0.0], [-4.0, 2.0, 0.0]],
  ],
  np.float32,
)


def test_second_moment_normalize_worked_numbers():
  actual = features.second_moment_normalize(tf.constant(X_223)).numpy()
  assert actual.shape == (2, 2, 3)
  # Column 0: mean of x^2 over all 4 elements = (1 + 4 + 9 + 16) / 4 = 7.5.
  scale_0 = 1.0 / np.sqrt(7.5 + 1e-5)
  np.testing.assert_allclose(
    actual[..., 0], [[1.0 * scale_0, -2.0 * scale_0], [3.0 * scale_0, -4.0 * scale_0]], rtol=1e-6
  )
  # Column 1, the constant c = 2: c / sqrt(c^2 + 1e-5), just below 1.
  np.testing.assert_allclose(actual[..., 1], np.full([2, 2], 2.0 / np.sqrt(4.0 + 1e-5)), rtol=1e-6)
  # Column 2, all zeros: stays 0 (0 * 1/sqrt(1e-5)).
  np.testing.assert_array_equal(actual[..., 2], np.zeros([2, 2]))
  # No mean subtraction: every sign is kept.
  np.testing.assert_array_equal(np.sign(actual[..., 0]), np.sign(X_223[..., 0]))


def test_second_moment_normalize_mean_is_over_all_other_axes_not_per_row():
  actual = features.second_moment_normalize(tf.constant(X_223)).numpy()
  per_tensor = X_223 / np.sqrt(np.mean(X_223**2, axis=(0, 1), keepdims=True) + 1e-5)
  np.testing.assert_allclose(actual, per_tensor, rtol=1e-6)
  # Per row (axis 1 only), column 0 would use (1 + 4) / 2 = 2.5 and (9 + 16) / 2 = 12.5 instead.
  per_row = X_223 / np.sqrt(np.mean(X_223**2, axis=1, keepdims=True) + 1e-5)
  assert not np.allclose(actual[..., 0], per_row[..., 0], rtol=1e-3)
  # The column's second moment over the whole tensor becomes ~1.
  np.testing.assert_allclose(np.mean(actual[..., 0] ** 2), 7.5 / (7.5 + 1e-5), rtol=1e-6)


def test_second_moment_normalize_random_against_numpy():
  x = np.random.default_rng(0).normal(size=[4, 3, 5, 7]).astype(np.float32) * [
    1e-3,
    1e-1,
    1.0,
    10.0,
    1e3,
    -2.0,
    0.5,
  ]
  actual = features.second_moment_normalize(tf.constant(x)).numpy()
  expected = x / np.sqrt(np.mean(np.float64(x) ** 2, axis=(0, 1, 2), keepdims=True) + 1e-5)
  np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-7)


def test_second_moment_normalize_custom_epsilon():
  x = np.array([[3.0], [4.0]], np.float32)  # mean(x^2) = (9 + 16) / 2 = 12.5.
  actual = features.second_moment_normalize(tf.constant(x), epsilon=0.5).numpy()
  np.testing.assert_allclose(actual, [[3.0 / np.sqrt(13.0)], [4.0 / np.sqrt(13.0)]], rtol=1e-6)


# time_features.


def test_time_features_worked_numbers():
  actual = features.time_features(tf.constant(3), (3.0, 1.0, 10.0, 30.0)).numpy()
  assert actual.dtype == np.float32
  np.testing.assert_allclose(
    actual,
    [
      0.0,  # tanh(3 / 3 - 1) = tanh(0)
      np.tanh(2.0),  # tanh(3 / 1 - 1) = 0.96403
      np.tanh(-0.7),  # tanh(3 / 10 - 1) = -0.60437
      np.tanh(-0.9),  # tanh(3 / 30 - 1) = -0.71630
    ],
    rtol=1e-6,
    atol=1e-7,
  )
  # t = 0 gives tanh(-1) = -0.76159 for every timescale.
  at_zero = features.time_features(tf.constant(0), (3.0, 300000.0)).numpy()
  np.testing.assert_allclose(at_zero, [np.tanh(-1.0), np.tanh(-1.0)], rtol=1e-6)
  np.testing.assert_allclose(at_zero, [-0.7615942, -0.7615942], rtol=1e-6)
  # t = 6, eta = 3: tanh(1).
  np.testing.assert_allclose(
    features.time_features(tf.constant(6, tf.int32), (3.0,)).numpy(), [0.7615942], rtol=1e-6
  )


def test_paper_time_scales_log_spaced_from_3_to_300k():
  scales = np.array(features.PAPER_TIME_SCALES)
  assert len(scales) == 9
  np.testing.assert_allclose(scales[0], 3.0, rtol=1e-12)
  np.testing.assert_allclose(scales[-1], 3e5, rtol=1e-12)
  # Constant ratio (3e5 / 3)^(1/8) = 10^(5/8) = 4.2170 between consecutive scales.
  np.testing.assert_allclose(scales[1:] / scales[:-1], np.full(8, 10.0 ** (5.0 / 8.0)), rtol=1e-9)


def test_original_code_time_scales():
  assert features.ORIGINAL_CODE_TIME_SCALES == (
    3.0,
    10.0,
    30.0,
    100.0,
    300.0,
    1000.0,
    3000.0,
    10000.0,
    300000.0,
  )


# Feature columns.

GRAD = np.array([0.1, -0.2], np.float32)
PARAM = np.array([1.5, -2.5], np.float32)
MOMENTA = np.array([[1.0, 2.0, 3.0, 4.0, 5.0], [-1.0, -2.0, -3.0, -4.0, -5.0]], np.float32)


def test_paper_columns_order():
  actual = features.paper_columns(tf.constant(GRAD), tf.constant(PARAM), tf.constant(MOMENTA))
  np.testing.assert_array_equal(
    actual.numpy(),
    np.float32(
      [
        # g, w, m_0.5, m_0.9, m_0.99, m_0.999, m_0.9999
        [0.1, 1.5, 1.0, 2.0, 3.0, 4.0, 5.0],
        [-0.2, -2.5, -1.0, -2.0, -3.0, -4.0, -5.0],
      ]
    ),
  )


def test_paper_columns_without_momentum():
  actual = features.paper_columns(
    tf.constant(GRAD), tf.constant(PARAM), tf.constant(MOMENTA), use_momentum=False
  )
  np.testing.assert_array_equal(actual.numpy(), np.float32([[0.1, 1.5], [-0.2, -2.5]]))


def test_paper_columns_keep_tensor_shape():
  grad = tf.ones([2, 3])
  actual = features.paper_columns(grad, 2.0 * grad, tf.zeros([2, 3, 5]))
  assert actual.shape == (2, 3, 7)
  np.testing.assert_array_equal(actual.numpy()[1, 2], [1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0])


def test_original_code_columns_order():
  actual = features.original_code_columns(
    tf.constant(GRAD), tf.constant(PARAM), tf.constant(MOMENTA)
  ).numpy()
  assert actual.shape == (2, 22)
  rsqrt = 1.0 / np.sqrt(0.0 + 1e-6)  # 1000.
  for i in range(2):
    expected = np.concatenate(
      [
        [GRAD[i]],  # g
        1000.0 * MOMENTA[i],  # 1000 * m x5
        [PARAM[i]],  # w
        MOMENTA[i],  # m x5
        np.zeros(5),  # rms x5, never updated
        np.full(5, rsqrt),  # rsqrt(rms + 1e-6) x5
      ]
    )
    np.testing.assert_allclose(actual[i], expected, rtol=1e-6)
  np.testing.assert_allclose(
    actual[0],
    [0.1, 1000, 2000, 3000, 4000, 5000, 1.5, 1, 2, 3, 4, 5]
    + [0, 0, 0, 0, 0]
    + [1000, 1000, 1000, 1000, 1000],
    rtol=1e-6,
  )


@pytest.mark.parametrize("shape", [[4], [2, 3], [3, 1, 2]])
@pytest.mark.parametrize("columns", ["paper", "original_code"])
def test_columns_of_a_tensor_are_each_elements_own(shape, columns):
  # Distinct values everywhere, so that a column taken from another element, or a tensor
  # reshaped in another order, shows.
  rng = np.random.default_rng(len(shape))
  grad, param = (rng.normal(size=shape).astype(np.float32) for _ in range(2))
  momenta = rng.normal(size=shape + [5]).astype(np.float32)
  column_fn = features.paper_columns if columns == "paper" else features.original_code_columns
  actual = column_fn(tf.constant(grad), tf.constant(param), tf.constant(momenta)).numpy()
  assert actual.shape == tuple(shape) + ((7,) if columns == "paper" else (22,))
  # Each element's columns are those the flattened tensor gives it: no mixing across elements.
  flat_inputs = (grad.reshape(-1), param.reshape(-1), momenta.reshape(-1, 5))
  flat = column_fn(*(tf.constant(x) for x in flat_inputs)).numpy()
  np.testing.assert_array_equal(actual.reshape(flat.shape), flat)
  np.testing.assert_array_equal(actual[..., 0], grad)  # g is column 0 in both sets.
