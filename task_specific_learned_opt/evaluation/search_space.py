"""The random search's space: the hyper-parameters of each baseline and their ranges (App. F).

"+Reg+Decay" samples every hyper-parameter of a baseline uniformly (Adam's 8: learning rate,
beta1, beta2, epsilon, linear and exponential decay, l1, l2; RMSProp's and SGDM's analogues):
scale parameters uniform in log space, moment decay rates as 1 - u with u uniform in log space.
The two learning-rate decays are drawn relative to the horizon being tuned: each is used with
probability DECAY_PROBABILITY, and then leaves a fraction of the learning rate at the last step
drawn log-uniform in FINAL_FRACTION; the fractions become per-step rates for that horizon
(`decay_rates`). A decay drawn per step from a fixed range would hardly act over a short horizon
and would end a long one at once; the coin keeps configurations without decay (Adam+Reg) as
common as heavily decayed ones. The paper gives no
ranges; LOG_UNIFORM, ONE_MINUS_LOG_UNIFORM and FINAL_FRACTION are ours. Configuration i of kind
k is a pure function of (seed, k, i, the horizon), so a resumed search samples the same
configurations.
"""

import math

import numpy as np

KINDS = ("adam", "rmsprop", "sgdm", "sgd")  # sgd: plain SGD, for the learning-rate grid.

# Random-search ranges (the paper gives none): log-uniform for scales; 1 - log-uniform for decays.
LOG_UNIFORM = {
  "learning_rate": (1e-5, 1.0),
  "epsilon": (1e-10, 1.0),
  "l1": (1e-8, 1e-1),
  "l2": (1e-8, 1e-1),
}
ONE_MINUS_LOG_UNIFORM = {  # x = 1 - u, log10(u) uniform.
  "beta1": (1e-3, 1.0),
  "beta2": (1e-5, 1.0),
  "decay": (1e-3, 1.0),
  "momentum": (1e-3, 1.0),
}
# The fraction of the learning rate each decay leaves at the horizon's last step, log-uniform:
# from no decay to a thousandth (both together: down to a millionth), each decay used at all
# with probability DECAY_PROBABILITY (a coin of its own, so the other draws do not depend on it).
FINAL_FRACTION = {"linear_decay": (1e-3, 1.0), "exponential_decay": (1e-3, 1.0)}
DECAY_PROBABILITY = 0.5
# How the decays are drawn, recorded in a search's signature so that a search drawn otherwise
# is not resumed with these draws.
DECAY_PARAMETERISATION = "fraction_left_at_horizon"
HPARAMS = {
  "adam": (
    "learning_rate",
    "beta1",
    "beta2",
    "epsilon",
    "linear_decay",
    "exponential_decay",
    "l1",
    "l2",
  ),
  "rmsprop": ("learning_rate", "decay", "epsilon", "linear_decay", "exponential_decay", "l1", "l2"),
  "sgdm": (
    "learning_rate",
    "momentum",
    "nesterov",
    "linear_decay",
    "exponential_decay",
    "l1",
    "l2",
  ),
}


def decay_rates(linear_fraction: float, exponential_fraction: float, num_steps: int) -> dict:
  """The per-step decay rates that leave these fractions of the learning rate at `num_steps`.

  lr_t = lr * max(0, 1 - linear_decay t) * exp(-exponential_decay t)
  (optimizers/hand_designed.py), so at t = num_steps the linear factor is `linear_fraction` for
  linear_decay = (1 - linear_fraction) / num_steps and the exponential one is
  `exponential_fraction` for exponential_decay = -ln(exponential_fraction) / num_steps.

  Args:
    linear_fraction: the linear decay's factor at the last step, in (0, 1].
    exponential_fraction: the exponential decay's factor at the last step, in (0, 1].
    num_steps: the horizon.

  Returns:
    {"linear_decay": ..., "exponential_decay": ...}, per step.
  """
  return {
    "linear_decay": (1.0 - linear_fraction) / num_steps,
    "exponential_decay": -math.log(exponential_fraction) / num_steps,
  }


def final_fraction(hparams: dict, num_steps: int) -> float:
  """The fraction of the learning rate both decays of `hparams` leave at step `num_steps`."""
  linear = max(0.0, 1.0 - hparams.get("linear_decay", 0.0) * num_steps)
  return linear * math.exp(-hparams.get("exponential_decay", 0.0) * num_steps)


def sample_hparams(kind: str, seed: int, index: int, num_steps: int) -> dict:
  """Configuration `index` of the random search for `kind` at a horizon of `num_steps`.

  Args:
    kind: "adam", "rmsprop" or "sgdm".
    seed: the search's seed.
    index: the configuration's index.
    num_steps: the horizon the search tunes for; the decays act over it (FINAL_FRACTION,
      DECAY_PROBABILITY).

  Returns:
    {hyper-parameter: value}, the decays as per-step rates; deterministic in the arguments.
  """
  rng = np.random.default_rng([seed, KINDS.index(kind), index])
  coins = np.random.default_rng([seed, KINDS.index(kind), index, 1])
  hparams, fractions = {}, {}
  for name in HPARAMS[kind]:
    if name == "nesterov":
      hparams[name] = bool(rng.integers(2))
    elif name in FINAL_FRACTION:
      low, high = np.log10(FINAL_FRACTION[name])
      fraction = float(10 ** rng.uniform(low, high))
      fractions[name] = fraction if coins.uniform() < DECAY_PROBABILITY else 1.0
    elif name in LOG_UNIFORM:
      low, high = np.log10(LOG_UNIFORM[name])
      hparams[name] = float(10 ** rng.uniform(low, high))
    else:
      low, high = np.log10(ONE_MINUS_LOG_UNIFORM[name])
      hparams[name] = float(1 - 10 ** rng.uniform(low, high))
  if fractions:
    rates = decay_rates(fractions["linear_decay"], fractions["exponential_decay"], num_steps)
    hparams.update(rates)
  return hparams
