"""The learned optimizer interface: meta-parameters theta and the update rule they define.

  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(seed)            # a nest of float32 tensors (the outer-trained parameters)
  opt = lopt.opt_fn(theta)           # an optimizers.base.Optimizer, used like any hand-designed one
  state = opt.init(params); state = opt.update(state, grads, loss=loss); opt.get_params(state)

theta enters the update only through `opt_fn`, so the inner loop can be differentiated with
respect to theta (the reparameterisation gradient) and rerun at theta +/- e (antithetic ES).
"""

import abc

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.optimizers import base as opt_base


class LearnedOptimizer(abc.ABC):
  """init(seed) -> theta; opt_fn(theta) -> Optimizer."""

  name: str = "learned_optimizer"

  @abc.abstractmethod
  def init(self, seed: random_seeds.SeedLike) -> nests.Theta:
    """Initial meta-parameters from a stateless seed."""

  @abc.abstractmethod
  def opt_fn(self, theta: nests.Theta) -> opt_base.Optimizer:
    """The inner Optimizer whose update is parameterised by `theta`."""
