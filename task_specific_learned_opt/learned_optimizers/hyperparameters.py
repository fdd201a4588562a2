"""A hand-designed rule whose hyper-parameters are theta: the pathology experiments' optimizer.

Sec. 2.3-2.4 and App. A, B, G learn a learning rate or a momentum instead of an MLP's weights:

  lopt = LearnedHyperparameters(adam.Adam, learned={"learning_rate": "log"},
                                initial={"learning_rate": 1e-3})
  theta = lopt.init(seed)    # {"learning_rate": log(1e-3)}, a float32 scalar
  opt = lopt.opt_fn(theta)   # adam.Adam(learning_rate=exp(theta["learning_rate"]))

It is a `base.LearnedOptimizer`, so everything that outer-trains a learned optimizer (the
truncated antithetic unrolls, g_rp, g_es, PES, the chief's Adam) trains these scalars too. Each
learned hyper-parameter is either the value itself ("identity") or its natural logarithm ("log",
which keeps a learning rate positive and makes a perturbation relative).
"""

import math
from collections.abc import Callable, Mapping

import gin
import tensorflow as tf

from task_specific_learned_opt import random_seeds
from task_specific_learned_opt.learned_optimizers import base
from task_specific_learned_opt.optimizers import base as opt_base

TRANSFORMS = ("identity", "log")


@gin.configurable
class LearnedHyperparameters(base.LearnedOptimizer):
  """theta = some of a hand-designed rule's hyper-parameters (or their logarithms)."""

  def __init__(
    self,
    optimizer: Callable[..., opt_base.Optimizer],
    learned: Mapping[str, str],
    initial: Mapping[str, float],
    fixed: Mapping[str, object] | None = None,
  ):
    """Makes the learned optimizer.

    Args:
      optimizer: the rule's class (or any callable taking its hyper-parameters by name), e.g.
        adam.Adam or sgd.Momentum.
      learned: {hyper-parameter name: "identity" or "log"}, the hyper-parameters theta holds.
      initial: {name: initial value} for every learned hyper-parameter (the value, not its log).
      fixed: other hyper-parameters passed to the rule unchanged.

    Raises:
      ValueError: an unknown transform, a learned name without an initial value, a
        non-positive initial value for "log", or a name both learned and fixed.
    """
    learned, initial, fixed = dict(learned), dict(initial), dict(fixed or {})
    for name, transform in learned.items():
      if transform not in TRANSFORMS:
        raise ValueError(f"Unknown transform {transform!r} for {name!r}; expected {TRANSFORMS}.")
      if name not in initial:
        raise ValueError(f"The learned hyper-parameter {name!r} needs an initial value.")
      if transform == "log" and initial[name] <= 0:
        raise ValueError(f"{name!r} is learned as a logarithm; its initial value must be > 0.")
      if name in fixed:
        raise ValueError(f"{name!r} is both learned and fixed.")
    self.optimizer = optimizer
    self.learned = learned
    self.initial = initial
    self.fixed = fixed
    self.name = f"learned_{'_'.join(sorted(learned))}"

  def init(self, seed: random_seeds.SeedLike) -> dict[str, tf.Tensor]:
    """theta at the initial values ({name: float32 scalar}); the seed is not used."""
    del seed
    return {
      name: tf.constant(
        math.log(self.initial[name]) if transform == "log" else self.initial[name], tf.float32
      )
      for name, transform in self.learned.items()
    }

  def hyperparameters(self, theta: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The learned hyper-parameters' values at theta: exp(theta[name]) for "log" ones.

    Args:
      theta: {name: scalar}, as init returns.

    Returns:
      {name: float32 scalar tensor}, differentiable with respect to theta.
    """
    return {
      name: tf.exp(theta[name]) if transform == "log" else tf.convert_to_tensor(theta[name])
      for name, transform in self.learned.items()
    }

  def opt_fn(self, theta: Mapping[str, tf.Tensor]) -> opt_base.Optimizer:
    """The rule with the learned hyper-parameters at theta and the fixed ones as given.

    Args:
      theta: {name: scalar}, as init returns.

    Returns:
      optimizer(**fixed, **hyperparameters(theta)).
    """
    return self.optimizer(**self.fixed, **self.hyperparameters(theta))
