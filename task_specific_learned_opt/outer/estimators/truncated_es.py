"""Truncated antithetic ES alone: the mean of the samples' g_es (Sec. 3; Fig. 8 "ES").

  g = mean_i g_es_i,   g_es = (L+ - L-) / 2 * e / sigma^2,

an unbiased estimate of the gradient of the truncation's smoothed outer loss, with the truncation
bias of Sec. 2.4 (the effect of theta on the state a truncation starts from is dropped).
"""

from task_specific_learned_opt import nests
from task_specific_learned_opt.outer import estimates
from task_specific_learned_opt.outer.estimators import base


class TruncatedES(base.TruncatedAntithetic):
  """The mean of g_es over the batch; the workers run truncated antithetic pairs."""

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """mean(g_es) over axis 0; `rp` is not read."""
    del rp  # Unused: ES alone.
    return estimates.mean(es)
