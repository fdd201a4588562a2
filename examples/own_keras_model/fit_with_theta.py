#!/usr/bin/env python3
"""A held-out digits task trained by Keras's model.fit: the outer-trained theta beside Adam.

  .venv/bin/python examples/own_keras_model/fit_with_theta.py --theta_dir runs/digits/theta

Once bin/train_local has outer-trained theta with digits.gin, this samples a task of that
experiment's held-out family (eval/KerasModelFamily: the 4 digits no outer-training task saw, and
one of the MLPs of digits_tasks.build_mlp the family varies) and trains a new copy of its model on
its train examples with `model.fit`: once with theta as a Keras optimizer
(task_specific_learned_opt.keras.optimizer.LearnedOptimizer), once with Keras's Adam at each of a
few learning rates. Every run starts from the same weights and sees the same batches (drawn with
replacement, as the project's tasks draw them) for the horizon theta was trained for,
Worker.horizon. It prints each optimizer's final training and test loss, and with --output writes
them to a JSON file.
"""

# ruff: noqa: E402 - TensorFlow loads after quiet_start.start(), which silences its C++ notices.
import argparse
import os
import sys
from collections.abc import Sequence

from task_specific_learned_opt.cli import quiet_start

quiet_start.start()

import gin
import keras
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import common as cli
from task_specific_learned_opt.keras import optimizer as keras_optimizer
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import keras_task

EXAMPLE_DIR = os.path.dirname(os.path.abspath(__file__))
GIN_FILE = os.path.join(EXAMPLE_DIR, "digits.gin")
USER_MODULE = os.path.join(EXAMPLE_DIR, "digits_tasks.py")
ADAM_LEARNING_RATES = (1e-3, 3e-3, 1e-2)  # Keras's default and two larger ones.
EVAL_BATCH_SIZE = 256


def held_out_task(task_seed: int) -> task_base.Task:
  """A task of the parsed experiment's held-out family (gin's eval/KerasModelFamily)."""
  with gin.config_scope("eval"):
    family = keras_task.KerasModelFamily()
  return family.sample(task_seed)


def _batches(
  x: np.ndarray, y: np.ndarray, num_steps: int, batch_size: int, seed: int
) -> tf.data.Dataset:
  """`num_steps` batches of `batch_size` examples drawn with replacement, fixed by `seed`."""
  indices = np.random.default_rng(seed).integers(0, len(y), size=(num_steps, batch_size))
  return tf.data.Dataset.from_tensor_slices((x[indices], y[indices]))


def fit(
  optimizer: keras.optimizers.Optimizer,
  template: keras.Model,
  weights: list[np.ndarray],
  batches: tf.data.Dataset,
  splits: dict[str, tuple[np.ndarray, np.ndarray]],
) -> dict[str, float]:
  """Trains a copy of `template` from `weights` on `batches` with `optimizer`; its final losses.

  Args:
    optimizer: a Keras optimizer.
    template: the model whose architecture is copied (keras.models.clone_model).
    weights: the initial weights, as model.get_weights() gives them.
    batches: the training batches, one per step.
    splits: {"train": (x, y), "test": (x, y)}, measured after training.

  Returns:
    {"train_loss", "test_loss", "test_accuracy"}: over every example of the split.
  """
  model = keras.models.clone_model(template)
  model.set_weights(weights)
  model.compile(
    optimizer=optimizer,
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
  )
  model.fit(batches, epochs=1, shuffle=False, verbose=0)
  train = model.evaluate(*splits["train"], batch_size=EVAL_BATCH_SIZE, verbose=0, return_dict=True)
  test = model.evaluate(*splits["test"], batch_size=EVAL_BATCH_SIZE, verbose=0, return_dict=True)
  return {
    "train_loss": float(train["loss"]),
    "test_loss": float(test["loss"]),
    "test_accuracy": float(test["accuracy"]),
  }


def compare(
  theta_dir: str,
  num_steps: int | None = None,
  task_seed: int = 0,
  adam_learning_rates: Sequence[float] = ADAM_LEARNING_RATES,
) -> dict[str, dict[str, float]]:
  """The learned optimizer and Keras's Adam on one held-out task, with model.fit (gin parsed).

  Args:
    theta_dir: the theta export of the run (<train_dir>/theta).
    num_steps: training steps; None: the experiment's horizon, Worker.horizon.
    task_seed: which held-out task.
    adam_learning_rates: Adam's learning rates, each a run of its own.

  Returns:
    {"learned" or "adam lr=...": fit's final losses}.
  """
  if num_steps is None:
    num_steps = gin.query_parameter("Worker.horizon")
  task = held_out_task(task_seed)
  splits = {s: tuple(np.asarray(a) for a in task.splits[s]) for s in ("train", "test")}
  batches = _batches(*splits["train"], num_steps, task.batch_size, task_seed)
  template = task.model.model  # The task's variant of build_mlp, built by the family.
  keras.utils.set_random_seed(task_seed)
  weights = keras.models.clone_model(template).get_weights()
  # MLPLOpt() as the experiment configures it (digits.gin's MLPLOpt.*), which theta was trained for.
  learned = keras_optimizer.LearnedOptimizer.from_directory(theta_dir, mlp_lopt.MLPLOpt())
  optimizers = {"learned": learned}
  optimizers.update({f"adam lr={lr:g}": keras.optimizers.Adam(lr) for lr in adam_learning_rates})
  print(
    f"{task.name}: model.fit for {num_steps} steps of batch {task.batch_size}, the same initial "
    "weights and batches for every optimizer",
    flush=True,
  )
  results = {}
  for name, optimizer in optimizers.items():
    results[name] = fit(optimizer, template, weights, batches, splits)
    losses = results[name]
    print(
      f"  {name:<14} final training loss {losses['train_loss']:.4f}  test loss "
      f"{losses['test_loss']:.4f}  test accuracy {losses['test_accuracy']:.3f}",
      flush=True,
    )
  return results


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--theta_dir", default="runs/digits/theta", help="The run's theta export.")
  parser.add_argument("--gin_file", action="append", help=f"Gin file(s); default {GIN_FILE}.")
  parser.add_argument("--gin_bindings", action="append", default=[], help="Gin bindings.")
  parser.add_argument(
    "--import_module", action="append", help=f"The user's module(s); default {USER_MODULE}."
  )
  parser.add_argument("--num_steps", type=int, default=None, help="Default: Worker.horizon.")
  parser.add_argument("--task_seed", type=int, default=0, help="Which held-out task.")
  parser.add_argument("--output", default=None, help="A JSON file for the results (optional).")
  parser.add_argument(
    "--adam_learning_rates", type=float, nargs="+", default=list(ADAM_LEARNING_RATES)
  )
  return parser.parse_args(argv)


@cli.exits_on_user_error
def main(argv: Sequence[str]) -> dict[str, dict[str, float]]:
  """Parses the experiment's gin and runs `compare`.

  Args:
    argv: the command line without the program name.

  Returns:
    What `compare` returns; also written to --output, with the task seed, if given.
  """
  args = _parse_args(argv)
  gin_config.parse(
    args.gin_file or [GIN_FILE], args.gin_bindings, args.import_module or [USER_MODULE]
  )
  gin_config.configure_threads()
  results = compare(args.theta_dir, args.num_steps, args.task_seed, args.adam_learning_rates)
  if args.output:
    files.write_json(args.output, {"task_seed": args.task_seed, "results": results})
  return results


if __name__ == "__main__":
  main(sys.argv[1:])
