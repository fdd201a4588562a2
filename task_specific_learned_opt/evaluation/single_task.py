"""One inner-training run per optimizer on one sampled task: losses, a JSON file and a PNG plot.

The project's first runnable job: it samples a task from a family (the generated family by
default), trains it with each optimizer (hand-designed ones, and learned ones at a theta drawn
from their init or loaded by the caller) in graph-mode chunks of `log_every` steps, logs progress,
and evaluates train and test loss and accuracy at the end.
"""

import os
import time
from collections.abc import Mapping

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import files, inner_training, nests, plots, random_seeds
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import base as opt_base
from task_specific_learned_opt.tasks import base as task_base

RESULTS_FILENAME = "inner_comparison.json"
PLOT_FILENAME = "inner_comparison.png"


def _as_optimizer(
  optimizer: opt_base.Optimizer | lopt_base.LearnedOptimizer, seed: int
) -> opt_base.Optimizer:
  if isinstance(optimizer, lopt_base.LearnedOptimizer):
    return optimizer.opt_fn(optimizer.init(seed))
  return optimizer


def _split_metrics(
  task: task_base.Task,
  params: nests.Params,
  split: str,
  num_batches: int,
  seed: random_seeds.SeedLike,
) -> dict[str, float]:
  """Mean loss (and accuracy where the task has one) over `num_batches` batches of `split`."""
  losses, accuracies = [], []
  for i in range(num_batches):
    batch = task.batch(split, random_seeds.fold_in(seed, i))
    losses.append(float(task.loss(params, batch)))
    if hasattr(task, "accuracy"):
      accuracies.append(float(task.accuracy(params, batch)))
  metrics = {"loss": float(np.mean(losses))}
  if accuracies:
    metrics["accuracy"] = float(np.mean(accuracies))
  return metrics


def train_with_progress(
  task: task_base.Task,
  opt: opt_base.Optimizer,
  num_steps: int,
  seed: random_seeds.SeedLike,
  log_every: int,
  label: str = "",
) -> tuple[opt_base.OptState, np.ndarray, float]:
  """inner_training.train, run as graph-mode chunks of `log_every` steps with progress logs.

  Gives the same result as inner_training.train (the same init, and step i's data is
  fold_in(stream(seed, "run_data"), i) whichever chunk it falls in).

  Args:
    task: the inner problem.
    opt: the inner update rule.
    num_steps: inner steps in all.
    seed: the run's seed (random_seeds.STREAMS "run_params" and "run_data").
    log_every: steps per graph-mode chunk, and per progress line.
    label: what the progress lines start with (the optimizer's name).

  Returns:
    (final optimizer state, numpy array of the num_steps clipped training losses, steps/s).
  """
  init_seed, data_seed, _ = random_seeds.run_seeds(seed)
  run_chunk = tf.function(
    lambda state, first, n: inner_training.unroll(task, opt, state, n, data_seed, first),
    autograph=False,
  )
  state = opt.init(task.init_params(init_seed))
  losses, start, done = [], time.time(), 0
  while done < num_steps:
    n = min(log_every, num_steps - done)
    state, chunk = run_chunk(state, tf.constant(done), tf.constant(n))
    losses.append(chunk.numpy())
    done += n
    rate = done / (time.time() - start)
    logging.info(
      "%s step %d/%d  loss %.4f  %.1f steps/s  ETA %.0fs",
      label,
      done,
      num_steps,
      float(np.mean(losses[-1])),
      rate,
      (num_steps - done) / rate,
    )
  return state, np.concatenate(losses), num_steps / (time.time() - start)


@gin.configurable(module="inner_comparison")  # The gin name is inner_comparison.run.
def run(
  output_dir: str,
  family: task_base.TaskFamily = gin.REQUIRED,
  optimizers: Mapping[str, opt_base.Optimizer | lopt_base.LearnedOptimizer] = gin.REQUIRED,
  num_steps: int = 1000,
  task_seed: int = 0,
  run_seed: int = 0,
  log_every: int = 250,
  num_eval_batches: int = 10,
) -> dict:
  """Trains one task of `family` with each optimizer and writes results and a plot.

  Args:
    output_dir: where inner_comparison.json and inner_comparison.png go.
    family: the task family to sample from.
    optimizers: {name: Optimizer or LearnedOptimizer}; a learned one runs at init(run_seed).
    num_steps: inner steps per run.
    task_seed: seed of the sampled task.
    run_seed: seed of the parameter init and the data order (the same for every optimizer).
    log_every: steps per graph-mode chunk, and per progress line.
    num_eval_batches: batches of train and test data averaged for the final metrics.

  Returns:
    {name: {"train_losses", "steps_per_second", "final": {"train": ..., "test": ...}}}.
  """
  task = family.sample(task_seed)
  logging.info("Task %s: %s", task_seed, task.name)
  results = {}
  for name, optimizer in optimizers.items():
    opt = _as_optimizer(optimizer, run_seed)
    state, losses, rate = train_with_progress(task, opt, num_steps, run_seed, log_every, name)
    params = opt.get_params(state)
    final = {
      split: _split_metrics(task, params, split, num_eval_batches, random_seeds.as_seed([7, i]))
      for i, split in enumerate(("train", "test"))
    }
    results[name] = {
      "train_losses": losses.tolist(),
      "steps_per_second": rate,
      "final": final,
    }
    test = final["test"]
    print(
      f"{name:>10}: mean train loss over the last 100 steps {np.mean(losses[-100:]):.3f}; "
      f"after {num_steps} steps train loss {final['train']['loss']:.3f}, test loss "
      f"{test['loss']:.3f}, test accuracy {test.get('accuracy', float('nan')):.3f} "
      f"({rate:.0f} steps/s)",
      flush=True,
    )
  files.write_json(
    os.path.join(output_dir, RESULTS_FILENAME),
    {"task": task.name, "num_steps": num_steps, "results": results},
    indent=None,
  )
  plot_path = os.path.join(output_dir, PLOT_FILENAME)
  plots.plot_losses(results, plot_path, f"{task.name} ({num_steps} steps)")
  print(f"Results: {os.path.join(output_dir, RESULTS_FILENAME)}; plot: {plot_path}", flush=True)
  return results
