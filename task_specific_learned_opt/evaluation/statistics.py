"""How sure a comparison over tasks is: a bootstrap interval and paired tests (Fig. 6c, App. E).

A comparison (reporting.compare) gives per task the baseline's loss minus the learned
optimizer's, each averaged over the task's inits first, so a positive difference is a task the
learned optimizer wins. Over those per-task differences this module gives:

  the mean difference and its 95% bootstrap interval: the tasks resampled with replacement
    (NUM_RESAMPLES times, a fixed seed, so the interval is the same every time it is computed),
    the interval the 2.5th and 97.5th percentiles of the resampled means;
  the exact two-sided sign test on the tasks won and lost (ties left out): under "neither is
    better" the wins of n untied tasks are Binomial(n, 1/2);
  the exact two-sided Wilcoxon signed-rank test (zeros left out, tied magnitudes given their mean
    rank), whose null distribution is enumerated.

A comparison is resolved when its interval lies on one side of zero; one whose interval holds
zero is "not resolved at this size" (`verdict`), whatever its count of tasks won. A non-finite
difference (a diverged run) makes the mean and the interval non-finite, and an interval with NaN
in it resolves nothing; the tests count such a task by its sign as any other.
Only numpy: no scipy.
"""

import math
from collections.abc import Sequence

import numpy as np

NUM_RESAMPLES = 10_000
SEED = 0
LEVEL = 0.95

LEARNED_AHEAD = "learned ahead"
BASELINE_AHEAD = "baseline ahead"
NOT_RESOLVED = "not resolved at this size"
# What `paired` returns, and what a comparison written by reporting.compare holds.
STATISTICS_KEYS = (
  "num_tasks",
  "wins",
  "losses",
  "ties",
  "mean_difference",
  "ci95",
  "p_value",
  "wilcoxon_p_value",
  "outcome",
)


def sign_test_p(wins: int, losses: int) -> float:
  """The exact two-sided sign test's p-value for `wins` of `wins + losses` untied tasks.

  Twice the probability, under Binomial(wins + losses, 1/2), of a count at least as far from the
  middle as the smaller of the two; at most 1, and 1 with no untied task.

  Raises:
    ValueError: a negative count.
  """
  if wins < 0 or losses < 0:
    raise ValueError(f"Counts must not be negative; got {wins} wins and {losses} losses.")
  n, k = wins + losses, min(wins, losses)
  if n == 0:
    return 1.0
  tail = sum(math.comb(n, i) for i in range(k + 1))
  return min(1.0, 2 * tail / 2**n)


def _ranks(values: np.ndarray) -> np.ndarray:
  """The ranks (1 to n) of `values`, tied values given their mean rank."""
  order = np.argsort(values, kind="stable")
  ranks = np.empty(len(values), dtype=float)
  ranks[order] = np.arange(1, len(values) + 1)
  for value in np.unique(values):
    tied = values == value
    ranks[tied] = np.mean(ranks[tied])
  return ranks


def wilcoxon_p(differences: Sequence[float]) -> float:
  """The exact two-sided Wilcoxon signed-rank test's p-value of paired `differences`.

  Zeros and NaNs are left out; tied magnitudes get their mean rank, and the null distribution of
  the positive ranks' sum is enumerated with those ranks (each sign +/- with probability 1/2).
  1 with no difference left.
  """
  d = np.asarray(differences, dtype=float)
  d = d[~np.isnan(d) & (d != 0)]
  if d.size == 0:
    return 1.0
  doubled = np.rint(2 * _ranks(np.abs(d))).astype(int)  # Mean ranks are whole or halves.
  observed = int(np.sum(doubled[d > 0]))
  probability = np.zeros(int(np.sum(doubled)) + 1)
  probability[0] = 1.0
  for r in doubled:
    shifted = np.zeros_like(probability)
    shifted[r:] = probability[:-r]
    probability = 0.5 * (probability + shifted)
  lower, upper = np.sum(probability[: observed + 1]), np.sum(probability[observed:])
  return float(min(1.0, 2 * min(lower, upper)))


def bootstrap_interval(
  differences: Sequence[float],
  num_resamples: int = NUM_RESAMPLES,
  seed: int = SEED,
  level: float = LEVEL,
) -> tuple[float, float]:
  """The percentile bootstrap interval of the mean of `differences`, resampled over tasks.

  Args:
    differences: one per task.
    num_resamples: resamples of len(differences) tasks drawn with replacement.
    seed: seeds the resampling: the same arguments give the same interval.
    level: the interval's coverage (0.95: the 2.5th to the 97.5th percentile).

  Returns:
    (low, high); (nan, nan) with no difference, or when a resample's mean is NaN (+inf and -inf
    differences drawn together).

  Raises:
    ValueError: `level` is not in (0, 1) or `num_resamples` is not positive.
  """
  if not 0 < level < 1:
    raise ValueError(f"level must be in (0, 1); got {level}.")
  if num_resamples < 1:
    raise ValueError(f"num_resamples must be positive; got {num_resamples}.")
  d = np.asarray(differences, dtype=float)
  if d.size == 0:
    return (math.nan, math.nan)
  rng = np.random.default_rng(seed)
  with np.errstate(invalid="ignore"):
    means = d[rng.integers(0, d.size, size=(num_resamples, d.size))].mean(axis=1)
  if np.isnan(means).any():
    return (math.nan, math.nan)
  tail = 100 * (1 - level) / 2
  # No interpolation between resampled means, so infinite ones stay as they are.
  low, high = np.percentile(means, [tail, 100 - tail], method="inverted_cdf")
  return (float(low), float(high))


def outcome(interval: Sequence[float]) -> str:
  """LEARNED_AHEAD if the interval is above zero, BASELINE_AHEAD if below, else NOT_RESOLVED."""
  low, high = interval
  if low > 0:
    return LEARNED_AHEAD
  if high < 0:
    return BASELINE_AHEAD
  return NOT_RESOLVED


def paired(
  differences: Sequence[float],
  num_resamples: int = NUM_RESAMPLES,
  seed: int = SEED,
  level: float = LEVEL,
) -> dict:
  """The statistics of per-task differences (baseline minus learned, inits averaged first).

  Args:
    differences: one per task; positive: the learned optimizer's loss is lower.
    num_resamples: the bootstrap's resamples.
    seed: the bootstrap's seed.
    level: the interval's coverage.

  Returns:
    {"num_tasks", "wins", "losses", "ties", "mean_difference", "ci95": [low, high] (at `level`),
     "p_value": the sign test's, "wilcoxon_p_value", "outcome": `outcome` of the interval}.
  """
  d = np.asarray(differences, dtype=float)
  wins, losses = int(np.sum(d > 0)), int(np.sum(d < 0))
  interval = bootstrap_interval(d, num_resamples, seed, level)
  with np.errstate(invalid="ignore"):
    mean = float(np.mean(d)) if d.size else math.nan
  return {
    "num_tasks": int(d.size),
    "wins": wins,
    "losses": losses,
    "ties": int(d.size) - wins - losses,
    "mean_difference": mean,
    "ci95": list(interval),
    "p_value": sign_test_p(wins, losses),
    "wilcoxon_p_value": wilcoxon_p(d),
    "outcome": outcome(interval),
  }


def format_p(p: float) -> str:
  """A p-value to two significant digits: "0.062", "1.9e-06", "1"."""
  return f"{p:.2g}"


def format_interval(interval: Sequence[float], digits: int = 3) -> str:
  """ "[0.012, 0.034]"."""
  low, high = interval
  return f"[{low:.{digits}f}, {high:.{digits}f}]"


def verdict(stats: dict, digits: int = 3) -> str:
  """The comparison in words, worded by its interval.

  Above zero: "won 17 of 20 (sign test p = 0.0026); difference 0.033 [0.018, 0.047]"; holding
  zero: "not resolved at this size: lower on 3 of 5 (sign test p = 1); difference ..."; below
  zero: "the baseline is ahead: lower on 0 of 5 (...); difference ...".

  Args:
    stats: `paired`'s result.
    digits: decimals of the difference and its interval.
  """
  count = f"{stats['wins']} of {stats['num_tasks']} (sign test p = {format_p(stats['p_value'])})"
  difference = f"difference {interval_cell(stats, digits)}"
  if stats["outcome"] == LEARNED_AHEAD:
    return f"won {count}; {difference}"
  if stats["outcome"] == BASELINE_AHEAD:
    return f"the baseline is ahead: lower on {count}; {difference}"
  return f"{NOT_RESOLVED}: lower on {count}; {difference}"


def claim(stats: dict, digits: int = 3) -> str:
  """A count with its test and interval, as the docs give it: "17 of 20 (p = 0.0026; difference
  0.033 [0.019, 0.047])", then ", not resolved at this size" or ", baseline ahead" unless the
  interval is above zero."""
  text = (
    f"{stats['wins']} of {stats['num_tasks']} (p = {format_p(stats['p_value'])}; "
    f"difference {interval_cell(stats, digits)})"
  )
  if stats["outcome"] == NOT_RESOLVED:
    return f"{text}, {NOT_RESOLVED}"
  if stats["outcome"] == BASELINE_AHEAD:
    return f"{text}, baseline ahead"
  return text


def interval_cell(stats: dict, digits: int = 3) -> str:
  """The mean difference and its interval: "0.033 [0.018, 0.047]"."""
  return f"{stats['mean_difference']:.{digits}f} {format_interval(stats['ci95'], digits)}"


def of_comparison(comparison: dict) -> dict:
  """`paired`'s statistics of a comparison (reporting.compare): those it holds, or computed from
  its "difference" when it has none (one written before they were)."""
  if all(key in comparison for key in STATISTICS_KEYS):
    return {key: comparison[key] for key in STATISTICS_KEYS}
  return paired(comparison["difference"])
