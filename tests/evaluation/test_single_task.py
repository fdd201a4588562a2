"""inner_comparison: its chunked runs are inner_training.train's, and its metrics the task's.

Both run the same step (inner_training.train_step) on the same data, fold_in(fold_in(seed, 1), i)
for step i; chunking only changes which while loop a step is in, not the ops of the step or their
inputs. So the losses and the final state are compared exactly (bit for bit), not to a tolerance.
"""

import json

import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import inner_training, random_seeds
from task_specific_learned_opt.evaluation import single_task
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam, sgd
from task_specific_learned_opt.tasks import quadratic


def _assert_same_nest(got, expected):
  tf.nest.assert_same_structure(got, expected)
  for g, e in zip(tf.nest.flatten(got), tf.nest.flatten(expected), strict=True):
    np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


@pytest.mark.parametrize(
  "num_steps, log_every",
  [
    (23, 10),  # Chunks of 10, 10 and 3 steps.
    (7, 1),  # One step per chunk.
    (5, 50),  # One chunk shorter than log_every.
  ],
)
def test_chunked_training_is_inner_training_train(num_steps, log_every):
  task = quadratic.QuadraticTask(dim=6, noise_std=0.5)  # Noise: every step's batch matters.
  opt = adam.Adam(learning_rate=0.1)
  state, losses, rate = single_task.train_with_progress(
    task, opt, num_steps, seed=[3, 4], log_every=log_every
  )
  direct = inner_training.train(task, opt, num_steps, seed=[3, 4])
  assert losses.shape == (num_steps,) and rate > 0
  np.testing.assert_array_equal(losses, direct.losses.numpy())
  _assert_same_nest(state, direct.state)  # Params, Adam's moments and the step count.
  assert int(state.iteration) == num_steps


def test_chunked_training_of_a_learned_optimizer_on_a_cnn_is_inner_training_train():
  task = testing_utils.small_generated_family().sample(1)
  lopt = mlp_lopt.MLPLOpt()
  opt = lopt.opt_fn(lopt.init(2))
  state, losses, _ = single_task.train_with_progress(task, opt, 9, seed=5, log_every=4)
  direct = inner_training.train(task, opt, 9, seed=5)
  np.testing.assert_array_equal(losses, direct.losses.numpy())
  _assert_same_nest(opt.get_params(state), opt.get_params(direct.state))
  _assert_same_nest(state, direct.state)


def test_a_different_seed_gives_a_different_run():
  # The equality above is not vacuous: the losses depend on the seed (data and init).
  task = quadratic.QuadraticTask(dim=6, noise_std=0.5)
  opt = sgd.SGD(learning_rate=0.1)
  _, a, _ = single_task.train_with_progress(task, opt, 5, seed=1, log_every=2)
  _, b, _ = single_task.train_with_progress(task, opt, 5, seed=2, log_every=2)
  assert not np.array_equal(a, b)


def _metrics(task, params, split, num_batches, seed):
  """The mean loss and accuracy of `params` over the evaluation batches, computed here."""
  batches = [task.batch(split, random_seeds.fold_in(seed, i)) for i in range(num_batches)]
  return (
    np.mean([float(task.loss(params, b)) for b in batches]),
    np.mean([float(task.accuracy(params, b)) for b in batches]),
  )


def test_run_records_the_runs_of_inner_training_train_and_the_tasks_metrics(tmp_path):
  family = testing_utils.small_generated_family()
  lopt = mlp_lopt.MLPLOpt()
  optimizers = {"adam": adam.Adam(learning_rate=3e-3), "mlp_lopt": lopt}
  results = single_task.run(
    str(tmp_path),
    family=family,
    optimizers=optimizers,
    num_steps=12,
    task_seed=3,
    run_seed=4,
    log_every=5,
    num_eval_batches=2,
  )
  saved = json.load(open(tmp_path / single_task.RESULTS_FILENAME))
  assert saved["results"] == results and saved["num_steps"] == 12
  task = family.sample(3)
  assert saved["task"] == task.name
  # The learned optimizer runs at init(run_seed).
  expected_opts = {"adam": optimizers["adam"], "mlp_lopt": lopt.opt_fn(lopt.init(4))}
  for name, opt in expected_opts.items():
    direct = inner_training.train(task, opt, 12, seed=4)
    assert results[name]["train_losses"] == direct.losses.numpy().tolist(), name
    params = opt.get_params(direct.state)
    for i, split in enumerate(("train", "test")):
      loss, accuracy = _metrics(task, params, split, 2, random_seeds.as_seed([7, i]))
      final = results[name]["final"][split]
      # The same params (bit-equal, see above) on the same batches: the same numbers.
      assert (final["loss"], final["accuracy"]) == (loss, accuracy), (name, split)
  # Adam and the untrained learned optimizer are different rules: different losses.
  assert results["adam"]["train_losses"] != results["mlp_lopt"]["train_losses"]
