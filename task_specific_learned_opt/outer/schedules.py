"""Truncation lengths: the unroll-length curriculum of paper Sec. 4.3 and App. D.3.

The number K of inner steps in one truncation grows linearly with the outer step, is jittered, and
is capped at the steps left before the inner-training horizon:

  K = cap(jitter(linear_length(outer_step, 50, 10000, 5000), u, 0.2), steps_left),

i.e. "linearly increase the number of unrolled steps from 50 to 10,000 over the course of 5,000
outer-training weight updates ... jittered by a small percentage (sampled uniformly up to 20%)"
(Sec. 4.3). The Fig. 8 ablations use fixed lengths (10, 100, 1000) instead.

Everything here is Python numbers in and out: the worker computes K in Python from the outer step
it read and a uniform drawn from its truncation seed (`truncation_uniform`), and feeds K to the
compiled unroll as a tensor, so nothing retraces.

Note: the authors' code ramps from 10 to 10,000 over 20,000 outer steps; the paper's numbers are
the defaults here and either can be bound in gin.
"""

import abc

import gin
import numpy as np

from task_specific_learned_opt import random_seeds

MIN_LENGTH = 50  # Sec. 4.3: the first truncations unroll 50 steps.
MAX_LENGTH = 10000  # Sec. 4.3: the last ones 10,000, the whole inner-training horizon.
RAMP_STEPS = 5000  # Sec. 4.3: reached after 5,000 outer updates.
JITTER_FRACTION = 0.2  # Sec. 4.3: "jittered ... sampled uniformly up to 20%".


def linear_length(outer_step: int, min_length: float, max_length: float, ramp_steps: int) -> float:
  """The un-jittered truncation length at `outer_step` (Sec. 4.3).

  length = min_length + (max_length - min_length) * min(1, outer_step / ramp_steps),

  and max_length from the start when ramp_steps = 0. With the paper's (50, 10000, 5000): 50 at
  step 0, 5025 at step 2500, 10000 from step 5000 on.

  Args:
    outer_step: the number of outer updates applied so far, >= 0.
    min_length: the length at outer step 0.
    max_length: the length from `ramp_steps` on.
    ramp_steps: the number of outer steps over which the length grows, >= 0.

  Returns:
    The length, a float (rounded later by `cap`).

  Raises:
    ValueError: if `outer_step` or `ramp_steps` is negative.
  """
  if outer_step < 0:
    raise ValueError(f"outer_step must be >= 0, got {outer_step}.")
  if ramp_steps < 0:
    raise ValueError(f"ramp_steps must be >= 0, got {ramp_steps}.")
  fraction = 1.0 if ramp_steps == 0 else min(1.0, outer_step / ramp_steps)
  return min_length + (max_length - min_length) * fraction


def jitter(length: float, u: float, fraction: float = JITTER_FRACTION) -> float:
  """Multiplies `length` by a factor uniform in (1 - fraction, 1 + fraction) (Sec. 4.3).

  jittered = length * (1 - fraction + 2 * fraction * u),

  so with fraction = 0.2, u = 0 gives x0.8, u = 0.5 gives x1.0 and u -> 1 gives x1.2. Jitter keeps
  the truncation boundaries of the asynchronous workers from lining up.

  Args:
    length: the length before jitter.
    u: a uniform draw in [0, 1), e.g. from `truncation_uniform`.
    fraction: the largest relative change, in [0, 1).

  Returns:
    The jittered length, a float.

  Raises:
    ValueError: if `u` is outside [0, 1] or `fraction` outside [0, 1).
  """
  if not 0.0 <= u <= 1.0:
    raise ValueError(f"u must be a uniform draw in [0, 1), got {u}.")
  if not 0.0 <= fraction < 1.0:
    raise ValueError(f"fraction must be in [0, 1), got {fraction}.")
  return length * (1.0 - fraction + 2.0 * fraction * u)


def cap(length: float, steps_left: int) -> int:
  """Rounds `length` and caps it at the inner steps left before the horizon (App. C).

  K = max(1, min(round(length), steps_left)),

  with Python's round (halves go to the even integer).

  A truncation never crosses the end of inner training: the worker resets the inner problem once
  `steps_left` reaches 0, so the last truncation of an inner run is shortened instead.

  Args:
    length: the (jittered) length.
    steps_left: inner steps left before the horizon, >= 1.

  Returns:
    The number of inner steps to unroll, an int in [1, steps_left].

  Raises:
    ValueError: if `steps_left` < 1.
  """
  if steps_left < 1:
    raise ValueError(f"steps_left must be >= 1, got {steps_left}.")
  return max(1, min(int(round(length)), int(steps_left)))


def truncation_uniform(seed: random_seeds.SeedLike) -> float:
  """A uniform draw in [0, 1) that is a pure function of `seed`.

  The worker draws its jitter from the truncation's seed, so the truncation length K is
  reproducible from the seeds alone.

  Args:
    seed: a stateless seed (an int or an int32 tensor of shape [2]).

  Returns:
    A Python float in [0, 1).
  """
  return float(np.random.default_rng(random_seeds.to_numpy_seed(seed)).random())


class TruncationSchedule(abc.ABC):
  """How many inner steps the next truncation unrolls.

  Call sequence, once per truncation on a worker:

    u = truncation_uniform(truncation_seed)
    k = schedule.length(outer_step, u, steps_left)   # then run the unroll for k steps
  """

  @abc.abstractmethod
  def length(self, outer_step: int, u: float, steps_left: int) -> int:
    """The truncation length K.

    Args:
      outer_step: the outer step of the theta the worker read.
      u: a uniform draw in [0, 1) for the jitter.
      steps_left: inner steps left before the horizon, >= 1.

    Returns:
      K, an int in [1, steps_left].
    """


@gin.configurable
class LinearCurriculum(TruncationSchedule):
  """The paper's curriculum: a jittered linear ramp, capped at the horizon (Sec. 4.3).

  K = cap(jitter(linear_length(outer_step, min_length, max_length, ramp_steps), u,
                 jitter_fraction), steps_left).
  """

  def __init__(
    self,
    min_length: float = MIN_LENGTH,
    max_length: float = MAX_LENGTH,
    ramp_steps: int = RAMP_STEPS,
    jitter_fraction: float = JITTER_FRACTION,
  ):
    """Stores the curriculum.

    Args:
      min_length: the length at outer step 0 (50).
      max_length: the length from `ramp_steps` on (10,000).
      ramp_steps: outer steps over which the length grows (5,000); 0 means max_length at once.
      jitter_fraction: the largest relative jitter (0.2); 0 disables it.

    Raises:
      ValueError: if the lengths are not >= 1 and ordered, or `ramp_steps` < 0.
    """
    if not 1 <= min_length <= max_length:
      raise ValueError(f"Need 1 <= min_length <= max_length, got {min_length}, {max_length}.")
    if ramp_steps < 0:
      raise ValueError(f"ramp_steps must be >= 0, got {ramp_steps}.")
    self.min_length = min_length
    self.max_length = max_length
    self.ramp_steps = ramp_steps
    self.jitter_fraction = jitter_fraction

  def length(self, outer_step: int, u: float, steps_left: int) -> int:
    """The jittered, capped length at `outer_step`; see `TruncationSchedule.length`."""
    length = linear_length(outer_step, self.min_length, self.max_length, self.ramp_steps)
    return cap(jitter(length, u, self.jitter_fraction), steps_left)


@gin.configurable
class FixedLength(TruncationSchedule):
  """A fixed truncation length, capped at the horizon: the Fig. 8 ablations (10, 100, 1000).

  K = cap(length, steps_left); no ramp and no jitter.
  """

  def __init__(self, length: int):
    """Stores the length.

    Args:
      length: inner steps per truncation, >= 1.

    Raises:
      ValueError: if `length` < 1.
    """
    if length < 1:
      raise ValueError(f"length must be >= 1, got {length}.")
    self.fixed_length = int(length)

  def length(self, outer_step: int, u: float, steps_left: int) -> int:
    """`length` capped at `steps_left`; see `TruncationSchedule.length`."""
    del outer_step, u
    return cap(self.fixed_length, steps_left)
