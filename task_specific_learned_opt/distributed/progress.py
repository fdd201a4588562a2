"""The chief's progress records: TensorBoard scalars, progress.jsonl, the plot and the log line.

One record per outer step (paper App. C; the curves of Fig. 4 and, against inner steps, Fig. 8):
the update's statistics (chief_update.Chief.apply), the step, the sampling rate and the inner
steps taken. Non-finite numbers (an outer loss of a step whose samples were all dropped) are
written as the strings "nan", "inf", "-inf" (files.to_json) and read back as floats.
"""

import json
import os
from collections.abc import Mapping

import tensorflow as tf
from absl import logging

from task_specific_learned_opt import files, layout, plots

SUMMARY_KEYS = (
  "outer_loss",
  "loss_plus",
  "loss_minus",
  "mean_num_steps",
  "mean_inner_step",
  "rp_variance",
  "es_variance",
  "es_weight",
  "merged_variance",
  "gradient_norm",
  "num_dropped",
  "num_stale",
  "samples_per_second",
  "mean_staleness",
  "max_staleness",
  "num_lost_theta",  # Cluster mode: samples of a theta a restarted chief never had.
  "num_duplicate",
  "num_workers_in_batch",
  "num_queued",  # Samples left in the queue after the step's batch was taken.
  "inner_steps",
)


def format_seconds(seconds: float) -> str:
  """`seconds` as "1h02m03s" (whole seconds, negative counts as 0), for the log's ETA."""
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def read_records(train_dir: str) -> list[dict]:
  """The train dir's progress records (progress.jsonl), non-finite numbers as floats."""
  path = os.path.join(train_dir, layout.PROGRESS_FILENAME)
  return files.read_jsonl(path)


class Recorder:
  """Summaries, the progress file and the plot."""

  def __init__(self, train_dir: str):
    """Opens the summary writer; the progress file and plot are made on first use.

    Args:
      train_dir: where events.*, progress.jsonl and outer_training.png go.
    """
    self.train_dir = train_dir
    self.writer = tf.summary.create_file_writer(train_dir)
    self.path = os.path.join(train_dir, layout.PROGRESS_FILENAME)
    self.plot_path = os.path.join(train_dir, layout.PLOT_FILENAME)

  def record(self, stats: Mapping[str, float]) -> None:
    """Writes one outer step: SUMMARY_KEYS as TensorBoard scalars, all of it to progress.jsonl.

    Args:
      stats: the step's numbers (Chief.apply's and ChiefFiles.record's), with "outer_step".
    """
    with self.writer.as_default(step=stats["outer_step"]):
      for key in SUMMARY_KEYS:
        if key in stats:
          tf.summary.scalar(key, stats[key])
    files.append_jsonl(self.path, [stats])

  def forget_after(self, outer_step: int) -> None:
    """Drops records of steps after `outer_step` (run after a kill, before the checkpoint)."""
    if not os.path.exists(self.path):
      return
    kept = [r for r in files.read_jsonl(self.path) if r["outer_step"] <= outer_step]
    files.write_text(self.path, "".join(f"{json.dumps(files.to_json(r))}\n" for r in kept))

  def plot(self, title: str) -> None:
    """Redraws outer_training.png from progress.jsonl (nothing while it has no records)."""
    records = read_records(self.train_dir)
    if records:
      plots.plot_outer_training(records, self.plot_path, title)


def log_line(stats: Mapping, total: int, eta_seconds: float) -> None:
  """Logs one outer step's line: step, inner steps, loss, K, rate, ES weight, drops, ETA.

  Args:
    stats: the step's record (Recorder.record's).
    total: the last outer step.
    eta_seconds: the time left, estimated.
  """
  logging.info(
    "outer step %d/%d  inner steps %d  outer loss %.4f  K %.0f  %.2f samples/s  "
    "ES weight %.2f  dropped %d (stale %d)  staleness %.1f (max %d)  ETA %s",
    stats["outer_step"],
    total,
    stats["inner_steps"],
    stats["outer_loss"],
    stats["mean_num_steps"],
    stats["samples_per_second"],
    stats["es_weight"],
    stats["num_dropped"] + stats.get("num_stale", 0),
    stats.get("num_stale", 0),
    stats["mean_staleness"],
    stats["max_staleness"],
    format_seconds(eta_seconds),
  )
