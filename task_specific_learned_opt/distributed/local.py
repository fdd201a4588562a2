"""Local outer-training: the chief and W workers composed in one process (paper App. C).

The workers take turns (round robin), each producing one sample from its own inner-training run
at the current theta, until the chief has a batch; the chief applies it and publishes the new
theta. One process, one thread: a run is deterministic, so a resumed run continues exactly as an
uninterrupted one would. What the train dir holds: outer_training.py; here the checkpoint also
holds every worker's inner run and counters.
"""

import io
import os
import pickle

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt.distributed import in_process
from task_specific_learned_opt.distributed import outer_training as outer_lib
from task_specific_learned_opt.distributed import worker as worker_lib

# Kept here too: callers and tests know them as local.*.
PROGRESS_FILENAME = outer_lib.PROGRESS_FILENAME
PLOT_FILENAME = outer_lib.PLOT_FILENAME
CheckpointError = outer_lib.CheckpointError
EVAL_DIRNAME = "eval"


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


@gin.configurable(denylist=["train_dir", "setup"])
def train_local(
  train_dir: str,
  num_workers: int = 8,
  setup: outer_lib.OuterTraining | None = None,
  final_evaluation=None,
) -> dict:
  """Outer-trains theta with a chief and `num_workers` workers in this process.

  Resumes from the train dir's latest checkpoint if there is one.

  Args:
    train_dir: where checkpoints, theta exports, summaries and plots go.
    num_workers: workers, each with its own inner-training run.
    setup: the experiment; gin's `outer_training()` if None.
    final_evaluation: called as final_evaluation(output_dir, lopt, theta) once the last outer
      step is reached (e.g. evaluation.compare_with_tuned_baseline); results go to
      <train_dir>/eval.

  Returns:
    The last outer step's statistics (empty if no step was taken).

  Raises:
    CheckpointError: the latest checkpoint cannot be read, or belongs to another experiment.
  """
  setup = setup if setup is not None else outer_lib.outer_training()
  workers = [
    worker_lib.Worker(family=setup.family, lopt=setup.lopt, worker_id=i, seed=setup.seed)
    for i in range(num_workers)
  ]
  workers_state = _WorkersState([w.initial_state() for w in workers])
  files = outer_lib.ChiefFiles(
    train_dir,
    setup,
    f"{setup.family.name}, {setup.lopt.name}, {num_workers} workers",
    workers=workers_state,
  )
  chief = files.chief
  transport = in_process.InProcessTransport()
  transport.publish_theta(chief.theta_numpy(), chief.step)
  samples_done, stats = 0, {}
  if chief.step >= setup.num_outer_steps:
    logging.info(
      "Outer step %d already reached %d; nothing to train.", chief.step, setup.num_outer_steps
    )
  try:
    while chief.step < setup.num_outer_steps:
      while transport.pending() < chief.batch_size:
        i = workers_state.num_samples % num_workers
        theta, version = transport.read_theta()
        sample, workers_state.states[i] = workers[i].step(theta, version, workers_state.states[i])
        transport.put_sample(sample)
        workers_state.num_samples += 1
        samples_done += 1
      with outer_lib.interrupts_deferred():  # Apply and record: all or nothing.
        stats = chief.apply(transport.take_samples(chief.batch_size))
        transport.publish_theta(chief.theta_numpy(), chief.step)
        stats = files.record(stats, samples_done)
      files.save_if_due()
  finally:
    if samples_done:  # Else nothing changed since the checkpoint it resumed from.
      files.save()
  if final_evaluation is not None:
    logging.info("Evaluating theta on held-out tasks (train_local.final_evaluation).")
    final_evaluation(os.path.join(train_dir, EVAL_DIRNAME), setup.lopt, chief.theta())
  return stats
