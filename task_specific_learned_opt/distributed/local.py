"""Local outer-training: the chief and W workers composed in one process (paper App. C).

The workers take turns (round robin), each producing one sample from its own inner-training run
at the current theta, until the chief has a batch; the chief applies it and publishes the new
theta. One process, one thread: a run is deterministic, so a resumed run continues exactly as an
uninterrupted one would.

The train dir holds:
  checkpoints/       full state (theta, Adam slots, outer step, every worker's inner run and
                     counters), on a timer and at exit, the last few kept (CheckpointManager);
  theta/             theta alone, for evaluation (checkpoints.save_theta);
  events.*           TensorBoard summaries, one point per outer step;
  progress.jsonl     the same numbers, one JSON line per outer step;
  outer_training.png the curves (outer loss, K, variances of g_rp and g_es, ES weight);
  operative_config.gin.
"""

import io
import json
import os
import pickle
import time

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import checkpoints, plots
from task_specific_learned_opt.distributed import chief as chief_lib
from task_specific_learned_opt.distributed import in_process
from task_specific_learned_opt.distributed import worker as worker_lib
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.tasks import base as task_base

PROGRESS_FILENAME = "progress.jsonl"
PLOT_FILENAME = "outer_training.png"


class CheckpointError(RuntimeError):
  """A checkpoint in the train dir that cannot be restored into this experiment."""


class _WorkersState(tf.train.experimental.PythonState):
  """The workers' states and the round-robin counter, saved inside the TF checkpoint."""

  def __init__(self, states: list, num_samples: int = 0):
    self.states = states
    self.num_samples = num_samples

  def serialize(self) -> bytes:
    states = [
      s
      if s.inner_state is None
      else s._replace(inner_state=tf.nest.map_structure(np.asarray, s.inner_state))
      for s in self.states
    ]
    buffer = io.BytesIO()
    pickle.dump({"states": states, "num_samples": self.num_samples}, buffer)
    return buffer.getvalue()

  def deserialize(self, string_value: bytes) -> None:
    value = pickle.loads(string_value)
    if len(value["states"]) != len(self.states):
      raise CheckpointError(
        f"The checkpoint holds {len(value['states'])} workers, this run has {len(self.states)}."
      )
    self.states = value["states"]
    self.num_samples = value["num_samples"]


def _format_seconds(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


class _Recorder:
  """Summaries, the progress file and the plot."""

  def __init__(self, train_dir: str):
    self.writer = tf.summary.create_file_writer(train_dir)
    self.path = os.path.join(train_dir, PROGRESS_FILENAME)
    self.plot_path = os.path.join(train_dir, PLOT_FILENAME)

  def record(self, stats: dict) -> None:
    with self.writer.as_default(step=stats["outer_step"]):
      for key in (
        "outer_loss",
        "loss_plus",
        "loss_minus",
        "mean_num_steps",
        "mean_inner_step",
        "rp_variance",
        "es_variance",
        "es_weight",
        "gradient_norm",
        "num_dropped",
        "samples_per_second",
        "mean_staleness",
      ):
        tf.summary.scalar(key, stats[key])
    with open(self.path, "a") as f:
      f.write(json.dumps(stats) + "\n")

  def forget_after(self, outer_step: int) -> None:
    """Drops records of steps after `outer_step` (run after a kill, before the checkpoint)."""
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      lines = [line for line in f if line.strip() and json.loads(line)["outer_step"] <= outer_step]
    with open(self.path + ".tmp", "w") as f:
      f.writelines(lines)
    os.replace(self.path + ".tmp", self.path)

  def plot(self, title: str) -> None:
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      records = [json.loads(line) for line in f if line.strip()]
    if records:
      plots.plot_outer_training(records, self.plot_path, title)


@gin.configurable(denylist=["train_dir"])
def train_local(
  train_dir: str,
  family: task_base.TaskFamily = gin.REQUIRED,
  lopt: lopt_base.LearnedOptimizer = gin.REQUIRED,
  num_workers: int = 8,
  num_outer_steps: int = 10000,
  seed: int = 0,
  checkpoint_every_secs: float = 600.0,
  keep_checkpoints: int = 3,
  log_every: int = 1,
) -> dict:
  """Outer-trains theta with a chief and `num_workers` workers in this process.

  Resumes from the train dir's latest checkpoint if there is one.

  Args:
    train_dir: where checkpoints, theta exports, summaries and plots go.
    family: the task family (outer-train classes).
    lopt: the learned optimizer.
    num_workers: workers, each with its own inner-training run.
    num_outer_steps: stop when the outer step reaches this.
    seed: seeds theta's initialisation and every worker.
    checkpoint_every_secs: seconds between checkpoints (one is also written at exit).
    keep_checkpoints: checkpoints kept.
    log_every: outer steps between progress lines.

  Returns:
    The last outer step's statistics (empty if no step was taken).

  Raises:
    CheckpointError: the latest checkpoint cannot be read, or belongs to another experiment.
  """
  tf.io.gfile.makedirs(train_dir)
  chief = chief_lib.Chief(lopt=lopt, seed=seed)
  workers = [
    worker_lib.Worker(family=family, lopt=lopt, worker_id=i, seed=seed) for i in range(num_workers)
  ]
  workers_state = _WorkersState([w.initial_state() for w in workers])
  checkpoint = tf.train.Checkpoint(**chief.checkpoint_items(), workers=workers_state)
  manager = tf.train.CheckpointManager(
    checkpoint, os.path.join(train_dir, checkpoints.CHECKPOINT_DIRNAME), keep_checkpoints
  )
  _restore(checkpoint, manager)
  transport = in_process.InProcessTransport()
  transport.publish_theta(chief.theta_numpy(), chief.step)
  recorder = _Recorder(train_dir)
  recorder.forget_after(chief.step)
  title = f"{family.name}, {lopt.name}, {num_workers} workers, batch {chief.batch_size}"

  def save():
    manager.save(checkpoint_number=chief.step)
    checkpoints.save_theta(
      os.path.join(train_dir, checkpoints.THETA_DIRNAME),
      chief.theta(),
      info={"outer_step": chief.step},
    )
    checkpoints.write_operative_config(train_dir)
    recorder.plot(title)
    logging.info("Saved checkpoint and theta at outer step %d in %s.", chief.step, train_dir)

  start, start_step, last_save, samples_done, stats = time.time(), chief.step, time.time(), 0, {}
  if start_step >= num_outer_steps:
    logging.info("Outer step %d already reached %d; nothing to do.", start_step, num_outer_steps)
    return stats
  try:
    while chief.step < num_outer_steps:
      while transport.pending() < chief.batch_size:
        i = workers_state.num_samples % num_workers
        theta, version = transport.read_theta()
        sample, workers_state.states[i] = workers[i].step(theta, version, workers_state.states[i])
        transport.put_sample(sample)
        workers_state.num_samples += 1
        samples_done += 1
      stats = chief.apply(transport.take_samples(chief.batch_size))
      transport.publish_theta(chief.theta_numpy(), chief.step)
      elapsed = time.time() - start
      steps_per_second = (chief.step - start_step) / elapsed
      stats.update(
        outer_step=chief.step,
        samples_per_second=samples_done / elapsed,
        elapsed_seconds=elapsed,
      )
      recorder.record(stats)
      if chief.step % log_every == 0 or chief.step == num_outer_steps:
        logging.info(
          "outer step %d/%d  outer loss %.4f  K %.0f  %.2f samples/s  ES weight %.2f  "
          "dropped %d  ETA %s",
          chief.step,
          num_outer_steps,
          stats["outer_loss"],
          stats["mean_num_steps"],
          stats["samples_per_second"],
          stats["es_weight"],
          stats["num_dropped"],
          _format_seconds((num_outer_steps - chief.step) / max(steps_per_second, 1e-9)),
        )
      if time.time() - last_save >= checkpoint_every_secs:
        save()
        last_save = time.time()
  finally:
    save()
    recorder.writer.flush()
  return stats


def _restore(checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager) -> None:
  path = manager.latest_checkpoint
  if path is None:
    return
  try:
    checkpoint.restore(path).assert_existing_objects_matched()
  except Exception as e:  # noqa: BLE001 - damaged files fail in many ways; all are reported.
    others = [p for p in manager.checkpoints if p != path]
    raise CheckpointError(
      f"Cannot restore the checkpoint {path} into this experiment: "
      f"{' '.join(str(e).split())[:300]}. If it belongs to another experiment, use a new "
      "--train_dir or the gin config it was written with; if it is damaged, move its files "
      f"away to resume from an older one ({', '.join(others) if others else 'none kept'}). "
      "Nothing was overwritten."
    ) from e
  logging.info("Resumed from %s.", path)
