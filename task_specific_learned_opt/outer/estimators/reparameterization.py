"""The reparameterisation gradient alone: the mean of the samples' g_rp (Sec. 3; Fig. 8
"Gradients").

  g = mean_i g_rp_i,   g_rp = d/dtheta (L+ + L-) / 2,

backpropagation through both unrolls of each truncation (at theta + e and theta - e). Its
variance can explode with the unroll length (Sec. 2.3, Fig. 4).
"""

from task_specific_learned_opt import nests
from task_specific_learned_opt.outer import estimates
from task_specific_learned_opt.outer.estimators import base


class Reparameterization(base.TruncatedAntithetic):
  """The mean of g_rp over the batch; the workers run truncated antithetic pairs."""

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """mean(g_rp) over axis 0; `es` is not read."""
    del es  # Unused: the reparameterisation gradient alone.
    return estimates.mean(rp)
