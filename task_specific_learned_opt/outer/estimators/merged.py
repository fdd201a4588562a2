"""The paper's estimator: g_rp and g_es merged per coordinate by inverse variance (Sec. 3, eq. 1).

  g_merged = (m_rp / v_rp + m_es / v_es) / (1 / v_rp + 1 / v_es),

m and v the means and empirical variances (+ 1e-8) of the batch's g_rp and g_es samples, each
coordinate separately (estimates.merge_inverse_variance). Where backpropagation's variance
explodes (Fig. 4) the merge leans on ES, elsewhere on the lower-variance g_rp.
"""

from task_specific_learned_opt import nests
from task_specific_learned_opt.outer import estimates
from task_specific_learned_opt.outer.estimators import base


class Merged(base.TruncatedAntithetic):
  """Eq. 1 over the batch's g_rp and g_es; the workers run truncated antithetic pairs."""

  def combine(self, rp: nests.Nest, es: nests.Nest) -> nests.Nest:
    """g_merged of eq. 1 over axis 0."""
    return estimates.merge_inverse_variance(rp, es).gradient
