"""The random search's space: every hyper-parameter sampled in its range, reproducibly, and
learning-rate decays that act over the horizon being tuned."""

import math

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.evaluation import search_space
from task_specific_learned_opt.optimizers import hand_designed


def test_random_search_samples_every_hyperparameter_in_range_reproducibly():
  for kind in ("adam", "rmsprop", "sgdm"):
    configs = [search_space.sample_hparams(kind, 0, i, 500) for i in range(200)]
    assert configs[3] == search_space.sample_hparams(kind, 0, 3, 500)
    assert set(configs[0]) == set(search_space.HPARAMS[kind])
    for name, (low, high) in search_space.LOG_UNIFORM.items():
      if name in configs[0]:
        values = np.array([c[name] for c in configs])
        assert low <= values.min() and values.max() <= high
        # Uniform in log space: about half below the geometric middle.
        assert 0.35 < np.mean(values < np.sqrt(low * high)) < 0.65
  adam = [search_space.sample_hparams("adam", 0, i, 500) for i in range(200)]
  assert all(0 <= c["beta1"] <= 0.999 and 0 <= c["beta2"] <= 1 - 1e-5 for c in adam)
  assert {
    c["nesterov"] for c in (search_space.sample_hparams("sgdm", 0, i, 500) for i in range(20))
  } == {
    False,
    True,
  }


def test_decay_rates_leave_the_asked_fractions_at_the_last_step():
  # Worked numbers: a quarter left by the linear decay over 100 steps is a slope of 0.75 / 100;
  # 1/e left by the exponential decay is a rate of 1 / 100.
  rates = search_space.decay_rates(0.25, math.exp(-1.0), 100)
  assert rates["linear_decay"] == pytest.approx(0.0075)
  assert rates["exponential_decay"] == pytest.approx(0.01)
  assert search_space.final_fraction(rates, 100) == pytest.approx(0.25 * math.exp(-1.0))
  # The optimizers' own schedule agrees at the horizon.
  lr = hand_designed.learning_rate_at(
    tf.constant(100), 0.5, rates["linear_decay"], rates["exponential_decay"]
  )
  assert float(lr) == pytest.approx(0.5 * 0.25 * math.exp(-1.0), rel=1e-5)


@pytest.mark.parametrize("num_steps", [500, 10000])
def test_a_sample_of_configurations_decays_from_near_one_to_below_a_hundredth(num_steps):
  for kind in ("adam", "rmsprop", "sgdm"):
    configs = [search_space.sample_hparams(kind, 0, i, num_steps) for i in range(100)]
    left = np.array([search_space.final_fraction(c, num_steps) for c in configs])
    assert left.max() > 0.99 and left.min() < 0.01
    # Spread over the orders, not piled at one end: about a quarter without decay (two coins).
    assert 0.1 < np.mean(left == 1.0) < 0.4
    assert 0.1 < np.mean(left < 0.01) < 0.6
    assert 0.2 < np.mean((left > 0.01) & (left < 0.99))
    for name in ("linear_decay", "exponential_decay"):
      alone = np.array([search_space.final_fraction({name: c[name]}, num_steps) for c in configs])
      low, high = search_space.FINAL_FRACTION[name]
      assert np.all((alone >= low * (1 - 1e-9)) & (alone <= high))
      used = alone[alone < 1.0]
      assert 0.35 < len(used) / len(alone) < 0.65  # The coin.
      # Log-uniform: about half of a used decay's fractions below the geometric middle.
      assert 0.3 < np.mean(used < np.sqrt(low * high)) < 0.7
