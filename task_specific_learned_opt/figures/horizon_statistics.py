"""Summaries of the longer unrolls (App. H, longer_unrolls.py): before and after the horizon.

Pure functions of recorded series (numpy), each with a worked-numbers test:
  - training_range: where a statistic goes after the horizon, against its range before it;
  - time_feature_ranges: that range for every time feature, from every step (not only recorded);
  - window_means: a statistic's mean over windows of steps (before the horizon, just after it,
    at the end of the run);
  - loss_summary: a run's losses at its last step and averaged over its last `horizon` steps.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from task_specific_learned_opt.learned_optimizers import features, mlp_lopt


def training_range(steps: Sequence[int], values: Sequence[float], horizon: int) -> dict:
  """Where a statistic goes after the horizon, against the range it had before it.

  Args:
    steps: the recorded steps, increasing, some below `horizon`.
    values: the statistic at those steps.
    horizon: the training horizon: steps below it are the training range.

  Returns:
    {"low", "high": the range at steps < horizon; "first_exit": the first step >= horizon whose
    value is outside it (None if none is); "max_excursion": the largest distance outside it;
    "final": the value at the last step}.
  """
  steps, values = np.asarray(steps), np.asarray(values, np.float64)
  before = steps < horizon
  low, high = float(values[before].min()), float(values[before].max())
  after = values[~before]
  distance = np.maximum(low - after, 0.0) + np.maximum(after - high, 0.0)
  outside = np.flatnonzero(distance > 0)
  return {
    "low": low,
    "high": high,
    "first_exit": int(steps[~before][outside[0]]) if outside.size else None,
    "max_excursion": float(distance.max()) if distance.size else 0.0,
    "final": float(values[-1]),
  }


def time_feature_ranges(lopt: mlp_lopt.MLPLOpt, horizon: int, num_steps: int) -> list[dict]:
  """`training_range` of each time feature over every step of a run (as the optimizer computes it).

  Args:
    lopt: the learned optimizer (its time scales and time_max_step).
    horizon: the training horizon.
    num_steps: the run's length.
  """
  steps = np.arange(num_steps + 1)
  time = features.time_features(steps[:, None], lopt.time_scales, lopt.time_max_step).numpy()
  return [training_range(steps, time[:, i], horizon) for i in range(time.shape[1])]


def windows(horizon: int, num_steps: int) -> dict[str, tuple[int, int]]:
  """The windows [first, last] of `window_means`: before the horizon (step 0, the initial state,
  left out), the two horizons after it, and the last two horizons of the run."""
  return {
    "before": (1, horizon - 1),
    "after": (horizon, 3 * horizon - 1),
    "end": (num_steps - 2 * horizon, num_steps),
  }


def window_means(
  steps: Sequence[int], values: Sequence, spans: Mapping[str, tuple[int, int]]
) -> dict[str, object]:
  """The mean of a recorded statistic over each span of steps (both ends included).

  Args:
    steps: the recorded steps.
    values: the statistic at those steps, [len(steps), ...] (a vector statistic is averaged per
      component).
    spans: {name: (first, last)}, e.g. `windows(...)`.

  Returns:
    {name: mean}, a float or a list (NaN for a span without a recorded step).
  """
  steps, values = np.asarray(steps), np.asarray(values, np.float64)
  means = {}
  for name, (first, last) in spans.items():
    inside = (steps >= first) & (steps <= last)
    mean = values[inside].mean(axis=0) if inside.any() else np.full(values.shape[1:], np.nan)
    means[name] = mean.tolist() if np.ndim(mean) else float(mean)
  return means


def loss_summary(steps: Sequence[int], run: Mapping, horizon: int) -> dict[str, float]:
  """A run's losses at its last step and averaged over its last `horizon` steps.

  Args:
    steps: the recorded steps (the last is the run's length).
    run: a run's record: "train_loss", "test_loss" and optionally "valid_loss" [len(steps)],
      "minibatch_loss" [len(steps) - 1] (the mean between consecutive records).
    horizon: the length of the final window (the records at steps > last - horizon).

  Returns:
    {"train_loss", "test_loss": at the last step; "train_loss_end", "test_loss_end",
    "minibatch_loss_end": their means over the final window; "mean_minibatch_loss": over the run;
    with a "valid_loss" record, "valid_loss", "valid_loss_end" alike and "mean_valid_loss", its
    mean over every record but step 0}.
  """
  steps = np.asarray(steps)
  end = steps > steps[-1] - horizon
  summary = {
    "train_loss": float(run["train_loss"][-1]),
    "test_loss": float(run["test_loss"][-1]),
    "train_loss_end": float(np.mean(np.asarray(run["train_loss"])[end])),
    "test_loss_end": float(np.mean(np.asarray(run["test_loss"])[end])),
    "minibatch_loss_end": float(np.mean(np.asarray(run["minibatch_loss"])[end[1:]])),
    "mean_minibatch_loss": float(np.mean(run["minibatch_loss"])),
  }
  if "valid_loss" in run:
    valid = np.asarray(run["valid_loss"])
    summary.update(
      valid_loss=float(valid[-1]),
      valid_loss_end=float(np.mean(valid[end])),
      mean_valid_loss=float(np.mean(valid[1:])),
    )
  return summary
