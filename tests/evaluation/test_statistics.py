"""The statistics of a comparison over tasks: bootstrap interval, sign and signed-rank tests."""

import math

import numpy as np
import pytest

from task_specific_learned_opt.evaluation import statistics


@pytest.mark.parametrize(
  "wins, losses, expected",
  [
    (20, 0, 2 / 2**20),  # 2 * C(20, 0) / 2^20
    (0, 20, 2 / 2**20),
    (17, 3, 2 * (1 + 20 + 190 + 1140) / 2**20),  # 2 * P(X <= 3), X ~ Binomial(20, 1/2)
    (18, 2, 2 * (1 + 20 + 190) / 2**20),
    (5, 0, 2 / 32),  # 0.0625: 5 of 5 is never below 0.05
    (4, 1, 2 * (1 + 5) / 32),  # 0.375
    (3, 2, 1.0),  # 2 * (1 + 5 + 10) / 32 = 1
    (1, 0, 1.0),
    (0, 0, 1.0),  # no untied task
  ],
)
def test_sign_test_p_is_the_two_sided_binomial_tail(wins, losses, expected):
  assert statistics.sign_test_p(wins, losses) == pytest.approx(expected, rel=1e-12)


def test_sign_test_refuses_negative_counts():
  with pytest.raises(ValueError, match="negative"):
    statistics.sign_test_p(-1, 3)


@pytest.mark.parametrize(
  "differences, expected",
  [
    ([1, 2, 3, 4, 5], 2 / 32),  # W- = 0: only the empty set
    ([1, -2, 3, 4, 5], 2 * 3 / 32),  # W- = 2: {}, {1}, {2}
    ([-1, -2, -3, -4, -5], 2 / 32),
    ([0.5, 0.5, 0.5, 0.5, -0.5], 2 * 6 / 32),  # all ranks 3: at most one negative of 5
    ([1, 0, 2, 0, 3], 2 / 8),  # zeros left out: 3 of 3
    ([0, 0], 1.0),
    ([], 1.0),
  ],
)
def test_wilcoxon_p_against_enumerated_values(differences, expected):
  assert statistics.wilcoxon_p(differences) == pytest.approx(expected, rel=1e-12)


def test_wilcoxon_p_matches_a_brute_force_enumeration_with_ties():
  d = np.array([0.3, -0.1, 0.2, 0.2, -0.4, 0.5, 0.1])
  ranks = statistics._ranks(np.abs(d))
  observed = ranks[d > 0].sum()
  signs = np.array(np.meshgrid(*[[0, 1]] * d.size)).reshape(d.size, -1).T
  sums = signs @ ranks
  expected = min(1.0, 2 * min(np.mean(sums <= observed + 1e-9), np.mean(sums >= observed - 1e-9)))
  assert statistics.wilcoxon_p(d) == pytest.approx(expected, rel=1e-12)


def test_the_interval_of_a_constant_difference_is_that_constant():
  assert statistics.bootstrap_interval([0.25] * 7) == (0.25, 0.25)


def test_the_interval_contains_the_mean_and_lies_within_the_differences():
  d = np.random.default_rng(3).normal(0.1, 0.2, size=20)
  low, high = statistics.bootstrap_interval(d)
  assert min(d) <= low < np.mean(d) < high <= max(d)


def test_the_interval_is_deterministic_with_its_seed():
  d = np.random.default_rng(4).normal(size=15)
  assert statistics.bootstrap_interval(d) == statistics.bootstrap_interval(d)
  assert statistics.bootstrap_interval(d, seed=1) != statistics.bootstrap_interval(d, seed=2)


def test_the_interval_narrows_with_the_level():
  d = np.random.default_rng(5).normal(size=30)
  low90, high90 = statistics.bootstrap_interval(d, level=0.9)
  low95, high95 = statistics.bootstrap_interval(d, level=0.95)
  assert low95 <= low90 < high90 <= high95


def test_the_interval_of_normal_data_is_near_the_normal_one():
  d = np.random.default_rng(6).normal(1.0, 2.0, size=400)
  low, high = statistics.bootstrap_interval(d)
  half = 1.96 * np.std(d) / np.sqrt(d.size)
  assert low == pytest.approx(np.mean(d) - half, abs=0.03)
  assert high == pytest.approx(np.mean(d) + half, abs=0.03)


def test_the_interval_refuses_bad_arguments():
  with pytest.raises(ValueError, match="level"):
    statistics.bootstrap_interval([1.0], level=1.0)
  with pytest.raises(ValueError, match="num_resamples"):
    statistics.bootstrap_interval([1.0], num_resamples=0)


def test_no_difference_gives_a_nan_interval():
  assert all(math.isnan(x) for x in statistics.bootstrap_interval([]))


def test_infinite_differences():
  stats = statistics.paired([1.0, np.inf, 2.0])  # a diverged baseline: a task won
  assert stats["mean_difference"] == np.inf and stats["ci95"][1] == np.inf
  assert stats["outcome"] == statistics.LEARNED_AHEAD
  stats = statistics.paired([np.inf, -np.inf])  # both diverged somewhere: nothing to say
  assert all(math.isnan(x) for x in stats["ci95"])
  assert stats["outcome"] == statistics.NOT_RESOLVED


@pytest.mark.parametrize(
  "interval, expected",
  [
    ((0.01, 0.2), statistics.LEARNED_AHEAD),
    ((-0.2, -0.01), statistics.BASELINE_AHEAD),
    ((-0.01, 0.2), statistics.NOT_RESOLVED),
    ((0.0, 0.2), statistics.NOT_RESOLVED),
    ((math.nan, math.nan), statistics.NOT_RESOLVED),
  ],
)
def test_outcome_depends_on_the_interval(interval, expected):
  assert statistics.outcome(interval) == expected


def test_paired_counts_tests_and_interval():
  stats = statistics.paired([0.3, 0.1, 0.0, -0.2, 0.4])
  assert (stats["num_tasks"], stats["wins"], stats["losses"], stats["ties"]) == (5, 3, 1, 1)
  assert stats["mean_difference"] == pytest.approx(0.12)
  assert stats["p_value"] == pytest.approx(statistics.sign_test_p(3, 1))
  assert stats["wilcoxon_p_value"] == pytest.approx(statistics.wilcoxon_p([0.3, 0.1, -0.2, 0.4]))
  low, high = stats["ci95"]
  assert low < stats["mean_difference"] < high


def test_a_win_count_whose_interval_crosses_zero_is_not_resolved():
  stats = statistics.paired([0.01, 0.02, 0.01, -0.5, 0.01])  # 4 of 5 won, one large loss
  assert stats["wins"] == 4 and stats["ci95"][0] < 0 < stats["ci95"][1]
  text = statistics.verdict(stats)
  assert text.startswith(
    "not resolved at this size: lower on 4 of 5 (sign test p = 0.38); difference -0.090 ["
  )
  assert "won" not in text


def test_verdict_words_follow_the_interval():
  ahead = statistics.verdict(statistics.paired([0.2, 0.3, 0.25, 0.3]))
  assert ahead == "won 4 of 4 (sign test p = 0.12); difference 0.263 [0.225, 0.300]"
  behind = statistics.verdict(statistics.paired([-0.2, -0.3, -0.25, -0.3]))
  assert behind.startswith("the baseline is ahead: lower on 0 of 4 (sign test p = 0.12)")


def test_of_comparison_reads_the_statistics_or_computes_them():
  stats = statistics.paired([0.2, -0.1, 0.3])
  assert set(stats) == set(statistics.STATISTICS_KEYS)
  assert statistics.of_comparison({"difference": [0.2, -0.1, 0.3]}) == stats
  written = {"difference": [0.2, -0.1, 0.3], **stats, "p_value": 0.5}
  assert statistics.of_comparison(written)["p_value"] == 0.5


def test_format_p():
  assert statistics.format_p(2 / 2**20) == "1.9e-06"
  assert statistics.format_p(0.0625) == "0.062"
  assert statistics.format_p(1.0) == "1"


def test_claim_words_follow_the_interval():
  assert statistics.claim(statistics.paired([0.2, 0.3, 0.25, 0.3])) == (
    "4 of 4 (p = 0.12; difference 0.263 [0.225, 0.300])"
  )
  unresolved = statistics.claim(statistics.paired([0.01, 0.02, 0.01, -0.5, 0.01]))
  assert unresolved.startswith("4 of 5 (p = 0.38; difference -0.090 [")
  assert unresolved.endswith("]), not resolved at this size")
  behind = statistics.claim(statistics.paired([-0.2, -0.3, -0.25, -0.3]))
  assert behind.endswith(", baseline ahead")
