"""LearnedHyperparameters: theta is a rule's hyper-parameters, or their logarithms."""

import math

import pytest
import tensorflow as tf

from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import adam, sgd


def test_log_and_identity_hyperparameters():
  lopt = hyperparameters.LearnedHyperparameters(
    sgd.Momentum,
    learned={"learning_rate": "log", "momentum": "identity"},
    initial={"learning_rate": 0.5, "momentum": 0.9},
    fixed={"nesterov": False},
  )
  theta = lopt.init(0)
  assert float(theta["learning_rate"]) == pytest.approx(math.log(0.5))
  assert float(theta["momentum"]) == pytest.approx(0.9)
  opt = lopt.opt_fn(theta)
  assert isinstance(opt, sgd.Momentum)
  assert float(opt.learning_rate) == pytest.approx(0.5) and float(opt.momentum) == pytest.approx(
    0.9
  )
  assert lopt.name == "learned_learning_rate_momentum"


def test_a_step_is_the_rule_at_theta_and_differentiable():
  # One SGD step on l(w) = w^2 / 2 from w = 2: w1 = 2 - lr * 2, d w1 / d log lr = -2 lr.
  lopt = hyperparameters.LearnedHyperparameters(
    sgd.SGD, {"learning_rate": "log"}, {"learning_rate": 0.1}
  )
  theta = lopt.init(0)
  with tf.GradientTape() as tape:
    tape.watch(theta)
    opt = lopt.opt_fn(theta)
    state = opt.update(opt.init({"w": tf.constant(2.0)}), {"w": tf.constant(2.0)})
    w1 = state.params["w"]
  assert float(w1) == pytest.approx(1.8)
  assert float(tape.gradient(w1, theta)["learning_rate"]) == pytest.approx(-0.2)


@pytest.mark.parametrize(
  "learned, initial, fixed, match",
  [
    ({"learning_rate": "exp"}, {"learning_rate": 1.0}, {}, "Unknown transform"),
    ({"learning_rate": "log"}, {}, {}, "needs an initial value"),
    ({"learning_rate": "log"}, {"learning_rate": 0.0}, {}, "must be > 0"),
    ({"learning_rate": "log"}, {"learning_rate": 1.0}, {"learning_rate": 1.0}, "both learned"),
  ],
)
def test_bad_settings_are_refused(learned, initial, fixed, match):
  with pytest.raises(ValueError, match=match):
    hyperparameters.LearnedHyperparameters(adam.Adam, learned, initial, fixed)
