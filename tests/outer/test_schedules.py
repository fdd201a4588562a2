"""Tests for the truncation-length curriculum (Sec. 4.3, App. D.3), with worked numbers."""

import gin
import numpy as np
import pytest

from task_specific_learned_opt.outer import schedules


@pytest.mark.parametrize(
  "outer_step, expected",
  [
    (0, 50.0),
    (2500, 5025.0),  # 50 + (10000 - 50) * 2500 / 5000 = 50 + 4975.
    (5000, 10000.0),
    (9999, 10000.0),  # Past the ramp the length stays at the maximum.
  ],
)
def test_linear_length_paper_ramp(outer_step, expected):
  assert schedules.linear_length(outer_step, 50, 10000, 5000) == pytest.approx(expected)


def test_linear_length_zero_ramp_is_max_at_once():
  assert schedules.linear_length(0, 50, 10000, 0) == 10000


def test_linear_length_rejects_negative_steps():
  with pytest.raises(ValueError, match="outer_step"):
    schedules.linear_length(-1, 50, 10000, 5000)
  with pytest.raises(ValueError, match="ramp_steps"):
    schedules.linear_length(0, 50, 10000, -1)


@pytest.mark.parametrize(
  "u, multiplier",
  [
    (0.0, 0.8),  # 1 - 0.2 + 2 * 0.2 * 0.
    (0.5, 1.0),  # 1 - 0.2 + 2 * 0.2 * 0.5.
    (0.999, 1.1996),  # 1 - 0.2 + 2 * 0.2 * 0.999.
  ],
)
def test_jitter(u, multiplier):
  assert schedules.jitter(1000.0, u) == pytest.approx(1000.0 * multiplier)


def test_jitter_fraction_zero_is_identity():
  assert schedules.jitter(123.0, 0.9, fraction=0.0) == pytest.approx(123.0)


def test_jitter_rejects_bad_arguments():
  with pytest.raises(ValueError, match="u must"):
    schedules.jitter(10.0, 1.5)
  with pytest.raises(ValueError, match="fraction"):
    schedules.jitter(10.0, 0.5, fraction=1.0)


@pytest.mark.parametrize(
  "length, steps_left, expected",
  [
    (40.2, 10000, 40),  # Rounded.
    (40.7, 10000, 41),
    (5025.0, 300, 300),  # Capped at the steps left before the horizon.
    (0.3, 10, 1),  # At least one step.
    (7.0, 1, 1),
  ],
)
def test_cap(length, steps_left, expected):
  got = schedules.cap(length, steps_left)
  assert got == expected
  assert isinstance(got, int)


def test_cap_rejects_no_steps_left():
  with pytest.raises(ValueError, match="steps_left"):
    schedules.cap(10.0, 0)


@pytest.mark.parametrize(
  "outer_step, u, steps_left, expected",
  [
    (0, 0.5, 10000, 50),  # 50 * 1.0.
    (0, 0.0, 10000, 40),  # 50 * 0.8.
    (2500, 0.0, 10000, 4020),  # 5025 * 0.8.
    (2500, 0.625, 10000, 5276),  # 5025 * 1.05 = 5276.25.
    (2500, 0.5, 3000, 3000),  # 5025 capped at the 3000 steps left.
    (6000, 0.25, 10000, 9000),  # 10000 * 0.9.
    (6000, 0.999, 10000, 10000),  # 10000 * 1.1996 capped at the horizon.
  ],
)
def test_linear_curriculum(outer_step, u, steps_left, expected):
  curriculum = schedules.LinearCurriculum()
  assert curriculum.length(outer_step, u, steps_left) == expected


def test_linear_curriculum_validates():
  with pytest.raises(ValueError, match="min_length"):
    schedules.LinearCurriculum(min_length=100, max_length=10)


@pytest.mark.parametrize("length", [10, 100, 1000])  # The Fig. 8 ablations.
def test_fixed_length(length):
  schedule = schedules.FixedLength(length)
  for outer_step, u in [(0, 0.0), (7000, 0.999)]:  # No ramp, no jitter.
    assert schedule.length(outer_step, u, 10000) == length
  assert schedule.length(0, 0.5, 5) == 5  # Capped at the steps left.


def test_fixed_length_rejects_zero():
  with pytest.raises(ValueError, match="length"):
    schedules.FixedLength(0)


def test_schedules_are_gin_configurable():
  gin.parse_config(
    """
    LinearCurriculum.min_length = 10
    LinearCurriculum.ramp_steps = 20000
    FixedLength.length = 100
    """
  )
  assert schedules.LinearCurriculum().length(10000, 0.5, 10000) == 5005  # 10 + 9990 / 2.
  assert schedules.FixedLength().length(0, 0.5, 10000) == 100


def test_truncation_uniform_deterministic_and_in_range():
  a = schedules.truncation_uniform([3, 4])
  assert a == schedules.truncation_uniform([3, 4])
  assert a != schedules.truncation_uniform([3, 5])
  assert isinstance(a, float)
  draws = [schedules.truncation_uniform(s) for s in range(50)]
  assert all(0.0 <= d < 1.0 for d in draws)
  assert len(set(draws)) == len(draws)


def test_jitter_multiplier_is_uniform_over_seeds():
  multipliers = np.array(
    [schedules.jitter(1.0, schedules.truncation_uniform([7, s])) for s in range(2000)]
  )
  assert multipliers.min() >= 0.8
  assert multipliers.max() < 1.2
  # Uniform on (0.8, 1.2): mean 1.0, standard deviation 0.4 / sqrt(12) = 0.115; the standard error
  # of the mean of 2000 draws is 0.0026, so 0.015 is over 5 standard errors.
  assert multipliers.mean() == pytest.approx(1.0, abs=0.015)
  # Each of four equal bins holds 500 +- 19 (binomial); 420 and 580 are over 4 sd away.
  counts, _ = np.histogram(multipliers, bins=4, range=(0.8, 1.2))
  assert counts.min() > 420 and counts.max() < 580
