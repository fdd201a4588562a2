"""The random search's space: the hyper-parameters of each baseline and their ranges (App. F).

"+Reg+Decay" samples every hyper-parameter of a baseline uniformly (Adam's 8: learning rate,
beta1, beta2, epsilon, linear and exponential decay, l1, l2; RMSProp's and SGDM's analogues):
scale parameters uniform in log space, decay rates as 1 - u with u uniform in log space. The
paper gives no ranges; LOG_UNIFORM and ONE_MINUS_LOG_UNIFORM are ours. Configuration i of kind k
is a pure function of (seed, k, i), so a resumed search samples the same configurations.
"""

import numpy as np

KINDS = ("adam", "rmsprop", "sgdm", "sgd")  # sgd: plain SGD, for the learning-rate grid.

# Random-search ranges (the paper gives none): log-uniform for scales; 1 - log-uniform for decays.
LOG_UNIFORM = {
  "learning_rate": (1e-5, 1.0),
  "epsilon": (1e-10, 1.0),
  "linear_decay": (1e-7, 1e-4),
  "exponential_decay": (1e-7, 1e-3),
  "l1": (1e-8, 1e-1),
  "l2": (1e-8, 1e-1),
}
ONE_MINUS_LOG_UNIFORM = {  # x = 1 - u, log10(u) uniform.
  "beta1": (1e-3, 1.0),
  "beta2": (1e-5, 1.0),
  "decay": (1e-3, 1.0),
  "momentum": (1e-3, 1.0),
}
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


def sample_hparams(kind: str, seed: int, index: int) -> dict:
  """Configuration `index` of the random search for `kind` (deterministic)."""
  rng = np.random.default_rng([seed, KINDS.index(kind), index])
  hparams = {}
  for name in HPARAMS[kind]:
    if name == "nesterov":
      hparams[name] = bool(rng.integers(2))
    elif name in LOG_UNIFORM:
      low, high = np.log10(LOG_UNIFORM[name])
      hparams[name] = float(10 ** rng.uniform(low, high))
    else:
      low, high = np.log10(ONE_MINUS_LOG_UNIFORM[name])
      hparams[name] = float(1 - 10 ** rng.uniform(low, high))
  return hparams
