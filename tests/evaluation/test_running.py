"""Running candidates: the same losses as the inner-training loop, the run-averaged losses."""

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import files, inner_training, random_seeds
from task_specific_learned_opt.evaluation import (
  baseline_search,
  candidates,
  protocol,
  run_cache,
  running,
)
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import families, networks, quadratic


def test_eval_of_adam_gives_the_losses_of_the_inner_training_loop():
  family = testing_utils.small_generated_family()
  task = family.sample(3)
  opt = adam.Adam(learning_rate=3e-3)
  seed = protocol.run_seed(0, 0, 1)
  points = protocol.curve_steps(40, 6)  # Chunks of uneven lengths.
  run = running.evaluate_run(
    family, task, candidates.fixed("adam", opt), 40, seed, points, num_eval_batches=2
  )
  direct = inner_training.train(task, opt, 40, seed)
  np.testing.assert_allclose(run["losses"], direct.losses.numpy(), rtol=1e-5, atol=1e-6)
  # The final test loss is the model's loss on the test batches at the final parameters.
  # The final metrics are the model's loss and accuracy on the evaluation batches of each split
  # at the final parameters; those at point 0 are the same at the initial parameters.
  final_params = opt.get_params(direct.state)
  init_params = task.init_params(random_seeds.fold_in(seed, 0))
  eval_seed = random_seeds.fold_in(seed, 2)
  for index, split in enumerate(("train", "test")):  # The eval seed of "train" is 0, "test" 1.
    split_seed = random_seeds.fold_in(eval_seed, index)
    batches = [task.batch(split, random_seeds.fold_in(split_seed, i)) for i in range(2)]
    for point, params in ((0, init_params), (-1, final_params)):
      loss = np.mean([float(task.loss(params, b)) for b in batches])
      accuracy = np.mean([float(task.accuracy(params, b)) for b in batches])
      assert run[f"{split}_loss"][point] == pytest.approx(loss, rel=1e-4), (split, point)
      assert run[f"{split}_accuracy"][point] == pytest.approx(accuracy, abs=1e-6), (split, point)
  assert run["train_loss"][0] > run["train_loss"][-1]  # Adam trained it.
  # Accuracies are means over 2 batches of 16: multiples of 1/32, not a constant.
  accuracies = np.concatenate([run["train_accuracy"], run["test_accuracy"]])
  np.testing.assert_allclose(accuracies * 32, np.round(accuracies * 32), atol=1e-4)
  assert len(set(accuracies.tolist())) > 1


def test_run_averaged_losses_are_the_means_at_evenly_spaced_steps_as_l_valid():
  family = quadratic.QuadraticFamily(dim=4, noise_std=0.5)
  config = {"id": "adam/0", "kind": "adam", "hparams": {"learning_rate": 0.1}}
  runs = protocol.HeldOutProtocol(
    family,
    num_tasks=2,
    num_inits=2,
    num_steps=30,
    num_points=4,
    num_eval_batches=2,
    num_average_points=6,
  )
  result = running.evaluate_candidates(runs, [candidates.from_config(config)])
  steps = result["steps"]
  np.testing.assert_array_equal(result["average_steps"], [5, 10, 15, 20, 25, 30])
  # One sorted set of points: the curve's log-spaced steps and the evenly spaced ones.
  assert np.all(np.diff(steps) > 0)
  assert set(protocol.curve_steps(30, 4)) | set(result["average_steps"]) == set(steps)
  arrays = result["results"]["adam/0"]
  where = np.searchsorted(steps, result["average_steps"])
  for split in ("valid", "test"):
    assert arrays[f"{split}_loss"].shape == (2, 2, len(steps))
    np.testing.assert_allclose(
      arrays[f"mean_{split}_loss"], arrays[f"{split}_loss"][..., where].mean(axis=-1), rtol=1e-6
    )
  assert not np.allclose(arrays["mean_valid_loss"], arrays["mean_test_loss"])
  # A search's L_valid of the same runs is the evaluation's mean_valid_loss.
  setup = baseline_search.SearchSetup(family, "valid", 2, 2, 30, 6, 2, 0)
  objective = baseline_search.evaluate_config(setup, config)["objective"]
  np.testing.assert_allclose(objective, arrays["mean_valid_loss"], rtol=1e-5)


def test_runs_made_in_threads_give_the_same_numbers_in_the_same_order(tmp_path):
  """parallel_runs changes when runs are made, not what they give or where it goes: every array
  equal to the serial evaluation's, also when part of the runs come from the cache."""
  family = testing_utils.small_generated_family()
  runs = protocol.HeldOutProtocol(
    family, num_tasks=2, num_inits=2, num_steps=12, num_points=3, num_eval_batches=1
  )
  opts = [
    candidates.baseline("adam", "adam", learning_rate=3e-3),
    candidates.baseline("sgd", "sgd", learning_rate=0.1),
    candidates.baseline("rmsprop", "rmsprop", learning_rate=1e-3),
  ]
  serial = running.evaluate_candidates(runs, opts)["results"]
  threaded = running.evaluate_candidates(runs, opts, parallel_runs=3)["results"]
  cache = run_cache.RunCache(str(tmp_path), runs)
  digest = run_cache.digest(opts[1].values)
  cache.put("sgd", digest, 1, 0, {k: v[1, 0] for k, v in serial["sgd"].items()})
  resumed = running.evaluate_candidates(runs, opts, cache, parallel_runs=2)["results"]
  for name in serial:
    for key in serial[name]:
      if key != "steps_per_second":
        np.testing.assert_array_equal(threaded[name][key], serial[name][key], err_msg=key)
        np.testing.assert_array_equal(resumed[name][key], serial[name][key], err_msg=key)
  # Distinct runs (the order was kept, not just the set of numbers).
  assert len({float(v) for v in serial["adam"]["mean_loss"].ravel()}) == 4
  assert len(files.read_jsonl(cache.path)) == 1 + 2 * 2 * 3  # Header and every run, once.


def test_parallel_runs_below_one_is_refused():
  family = quadratic.QuadraticFamily(dim=2)
  runs = protocol.HeldOutProtocol(family, num_tasks=1, num_inits=1, num_steps=2, num_points=2)
  with pytest.raises(ValueError, match="parallel_runs must be at least 1, got 0"):
    running.evaluate_candidates(runs, [], parallel_runs=0)


def test_a_learned_optimizers_runs_are_not_taken_for_the_same_theta_with_another_update(tmp_path):
  """The cache finds a learned candidate's run by its theta and its options: the same theta
  evaluated with the growth gate is run again, not given the ungated run's numbers."""
  family = quadratic.QuadraticFamily(dim=2)
  runs = protocol.HeldOutProtocol(family, num_tasks=1, num_inits=1, num_steps=6, num_points=2)
  plain, gated = mlp_lopt.MLPLOpt(), mlp_lopt.MLPLOpt(gate_growth=True)
  theta = plain.init(0)
  cache = run_cache.RunCache(str(tmp_path), runs)
  first = running.evaluate_candidates(runs, [candidates.learned("L", plain, theta)], cache)
  again = running.evaluate_candidates(runs, [candidates.learned("L", gated, theta)], cache)
  assert len(cache) == 2  # Both made, neither taken for the other.
  assert not np.array_equal(
    first["results"]["L"]["train_loss"], again["results"]["L"]["train_loss"]
  )
  same = running.evaluate_candidates(runs, [candidates.learned("L", plain, theta)], cache)
  np.testing.assert_array_equal(
    same["results"]["L"]["train_loss"], first["results"]["L"]["train_loss"]
  )
  assert len(cache) == 2  # Taken from the cache this time.


def test_the_thetas_of_one_learned_optimizer_share_one_trace_and_another_optimizer_does_not():
  """An evaluator evaluates snapshot after snapshot: each is traced once per family, not once
  per snapshot (lopt.opt_fn is a new bound method each time it is read)."""
  family = quadratic.QuadraticFamily(dim=2)
  runs = protocol.HeldOutProtocol(family, num_tasks=1, num_inits=1, num_steps=4, num_points=2)
  lopt, other = mlp_lopt.MLPLOpt(), mlp_lopt.MLPLOpt()
  before = len(running._COMPILED)
  evaluated = [
    running.evaluate_candidates(runs, [candidates.learned("L", lopt, lopt.init(seed))])
    for seed in (0, 1, 2)
  ]
  assert len(running._COMPILED) == before + 1
  assert not np.array_equal(  # Three thetas, three runs: the shared trace takes theta as input.
    evaluated[0]["results"]["L"]["train_loss"], evaluated[1]["results"]["L"]["train_loss"]
  )
  running.evaluate_candidates(runs, [candidates.learned("L", other, other.init(0))])
  assert len(running._COMPILED) == before + 2  # Another instance may be configured otherwise.


def test_a_mixtures_runs_are_those_of_its_members_alone():
  # Runs share compiled functions by family and task trace key: a CNN task and an MLP task of
  # one mixture each run their own network.
  members = (
    testing_utils.small_generated_family(),
    testing_utils.small_generated_family(model=networks.MLP(hidden_sizes=(8,))),
  )
  mixture = families.MixtureFamily(members)
  opt = candidates.fixed("adam", adam.Adam(learning_rate=3e-3))
  points = protocol.curve_steps(6, 3)
  seen = set()
  for index in range(6):
    seed = random_seeds.fold_in([3, 1], index)
    member = mixture.member(seed)
    seen.add(member)
    run_seed = protocol.run_seed(0, index, 0)
    run = running.evaluate_run(mixture, mixture.sample(seed), opt, 6, run_seed, points, 1)
    alone = members[member]
    expected = running.evaluate_run(alone, alone.sample(seed), opt, 6, run_seed, points, 1)
    for key in ("losses", "train_loss", "test_loss", "test_accuracy"):
      np.testing.assert_allclose(run[key], expected[key], rtol=1e-6, err_msg=key)
  assert seen == {0, 1}
