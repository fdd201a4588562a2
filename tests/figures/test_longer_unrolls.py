"""App. H's longer unrolls at a tiny size: the recorded statistics against direct recomputations.

A 2-layer batch-normed CNN on a small generated family, a fresh theta, 4 steps recorded every 2,
a "horizon" of 2: the time features, losses, norms and steps the experiment records at step 2
are recomputed here from a plain inner_training.unroll of the same run.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import checkpoints, inner_training, random_seeds
from task_specific_learned_opt.evaluation import protocol
from task_specific_learned_opt.figures import longer_unrolls, lopt_probe, runner
from task_specific_learned_opt.learned_optimizers import features, mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import networks

SEED, HORIZON, NUM_STEPS, EVERY, EVAL_BATCHES = 1, 2, 4, 2, 2
RTOL = 2e-3  # The JSON keeps 4 significant digits.


@pytest.fixture(scope="module")
def family():
  model = networks.ConvNet(channels=(4, 4), strides=(2, 2), batch_norm=True)
  return testing_utils.small_generated_family(model=model, num_classes_per_task=4)


@pytest.fixture(scope="module")
def theta_dir(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("theta"))
  checkpoints.save_theta(directory, mlp_lopt.MLPLOpt().init(3))
  return directory


@pytest.fixture(scope="module")
def result(family, theta_dir):
  experiment = longer_unrolls.LongerUnrolls(
    family=family,
    lopts={"paper": mlp_lopt.MLPLOpt(), "held": mlp_lopt.MLPLOpt(time_max_step=HORIZON)},
    theta_dir=theta_dir,
    horizon=HORIZON,
    num_steps=NUM_STEPS,
    record_every=EVERY,
    num_tasks=1,
    seed=SEED,
    num_eval_batches=EVAL_BATCHES,
    adam_learning_rates=(0.01, 0.1),
  )
  return experiment.compute(runner.Panels("test"))


def _direct_state(task, opt, num_steps):
  """The run of the experiment's task 0, init 0, trained directly for num_steps steps."""
  seed = protocol.run_seed(SEED, 0, 0)
  state = opt.init(task.init_params(random_seeds.fold_in(seed, 0)))
  state, _ = inner_training.unroll(task, opt, state, num_steps, random_seeds.fold_in(seed, 1))
  return state, seed


def test_records_every_optimizer_at_every_step(result):
  assert list(result["record_steps"]) == [0, 2, 4]
  runs = result["tasks"][0]["runs"]
  assert set(runs) == {"paper", "held", "adam 0.01", "adam 0.1"}
  assert np.shape(runs["paper"]["train_loss"]) == (3,)
  assert np.shape(runs["paper"]["minibatch_loss"]) == (2,)
  assert np.shape(runs["paper"]["probe"]["time"]) == (3, 9)
  kinds = runs["paper"]["probe"]["kinds"]
  assert set(kinds) == {"conv/w", "conv/b", "conv/scale", "conv/offset", "linear/w", "linear/b"}
  assert np.shape(kinds["conv/w"]["normalized_rms"]) == (3, 7)
  statistics = lopt_probe.SCALAR_STATISTICS + lopt_probe.COLUMN_STATISTICS
  assert set(kinds["conv/w"]) == set(statistics)
  assert "probe" not in runs["adam 0.01"]


def test_parameters_without_a_gradient_move_by_the_drift_alone(result):
  """A batch norm removes the conv biases: their gradient is ~0, so their step is the drift."""
  biases = result["tasks"][0]["runs"]["paper"]["probe"]["kinds"]["conv/b"]
  np.testing.assert_allclose(biases["normalized_rms"][1:, 0], 0.0, atol=1e-3)  # g / sqrt(eps).
  np.testing.assert_allclose(biases["drift_fraction"][1:], 1.0, rtol=RTOL)
  np.testing.assert_allclose(biases["outward_cosine"][1:], biases["drift_outward_cosine"][1:])


def test_time_features_are_those_the_optimizer_computes(result):
  scales = mlp_lopt.MLPLOpt().time_scales
  runs = result["tasks"][0]["runs"]
  for i, t in enumerate(result["record_steps"]):
    expected = features.time_features(tf.constant(t), scales).numpy()
    np.testing.assert_allclose(runs["paper"]["probe"]["time"][i], expected, rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(  # The worked formula: tanh(t / eta - 1).
      runs["paper"]["probe"]["time"][i], np.tanh(t / np.array(scales) - 1.0), rtol=RTOL
    )
    held = np.tanh(min(t, HORIZON) / np.array(scales) - 1.0)
    np.testing.assert_allclose(runs["held"]["probe"]["time"][i], held, rtol=RTOL, atol=1e-6)


def test_losses_norms_and_steps_at_step_2_match_a_direct_run(result, family, theta_dir):
  task = family.sample(protocol.task_seed(SEED, 0))
  lopt = mlp_lopt.MLPLOpt()
  opt = lopt.opt_fn(checkpoints.load_theta(theta_dir, lopt))
  state, seed = _direct_state(task, opt, EVERY)
  params = opt.get_params(state)
  eval_seed = random_seeds.fold_in(seed, 2)
  test_loss, valid_loss = (
    np.mean(
      [task.loss(params, task.batch(split, random_seeds.fold_in(split_seed, b))) for b in range(2)]
    )
    for split, split_seed in (
      ("test", random_seeds.fold_in(eval_seed, 1)),
      ("valid", random_seeds.fold_in(eval_seed, 2)),
    )
  )
  batch = task.batch("train", random_seeds.fold_in(random_seeds.fold_in(seed, 1), EVERY))
  _, grads = inner_training.loss_and_grads(task, params, batch)
  new_params = opt.get_params(opt.update(state, grads))
  w = tf.concat([tf.reshape(params[f"conv{i}"]["w"], [-1]) for i in range(2)], 0)
  w_new = tf.concat([tf.reshape(new_params[f"conv{i}"]["w"], [-1]) for i in range(2)], 0)
  run = result["tasks"][0]["runs"]["paper"]
  np.testing.assert_allclose(run["test_loss"][1], test_loss, rtol=RTOL)
  np.testing.assert_allclose(run["valid_loss"][1], valid_loss, rtol=RTOL)
  assert abs(valid_loss - test_loss) > 1e-4  # Another split's batches, not the test batches again.
  np.testing.assert_allclose(run["kinds"]["conv/w"]["param_norm"][1], tf.norm(w), rtol=RTOL)
  relative = float(tf.norm(w - w_new) / tf.norm(w))
  np.testing.assert_allclose(run["kinds"]["conv/w"]["relative_step"][1], relative, rtol=RTOL)
  # The probe's written-out step (the reference arithmetic) is the fast update's step.
  probed = run["probe"]["kinds"]["conv/w"]
  np.testing.assert_allclose(probed["relative_step"][1], relative, rtol=RTOL)
  np.testing.assert_allclose(
    probed["column_rms"][1][0],
    tf.sqrt(
      tf.reduce_mean(
        tf.square(tf.concat([tf.reshape(grads[f"conv{i}"]["w"], [-1]) for i in range(2)], 0))
      )
    ),
    rtol=RTOL,
  )


def test_adam_runs_and_the_tuned_learning_rate(result, family):
  task_result = result["tasks"][0]
  task = family.sample(protocol.task_seed(SEED, 0))
  state, _ = _direct_state(task, adam.Adam(learning_rate=0.1), NUM_STEPS)
  norm = tf.norm(tf.concat([tf.reshape(state.params[f"conv{i}"]["w"], [-1]) for i in range(2)], 0))
  run = task_result["runs"]["adam 0.1"]
  np.testing.assert_allclose(run["kinds"]["conv/w"]["param_norm"][-1], norm, rtol=RTOL)
  summary = task_result["summary"]
  means = {name: summary[name]["mean_minibatch_loss"] for name in ("adam 0.01", "adam 0.1")}
  assert task_result["adam_learning_rate"] == (
    0.01 if means["adam 0.01"] <= means["adam 0.1"] else 0.1
  )
  tuned = longer_unrolls.adam_name(task_result["adam_learning_rate"])
  assert summary[longer_unrolls.TUNED_ADAM] == summary[tuned]
  # Beside the test losses, Adam tuned as Fig. 6 tunes it: on the mean validation loss.
  valid = {name: np.mean(task_result["runs"][name]["valid_loss"][1:]) for name in means}
  assert task_result["adam_learning_rate_valid"] == (
    0.01 if valid["adam 0.01"] <= valid["adam 0.1"] else 0.1
  )
  np.testing.assert_allclose(
    summary[longer_unrolls.TUNED_ADAM_VALID]["mean_valid_loss"], min(valid.values()), rtol=1e-6
  )
  np.testing.assert_allclose(summary["adam 0.1"]["test_loss"], run["test_loss"][-1])


def test_windows_average_the_recorded_statistics(result):
  # Horizon 2, 4 steps: "before" is step 1 (no record), "after" steps 2..5 (records 2 and 4),
  # "end" steps 0..4 (all three records).
  assert result["windows"] == {"before": (1, 1), "after": (2, 5), "end": (0, 4)}
  run = result["tasks"][0]["runs"]["paper"]
  means = result["tasks"][0]["windows"]["paper"]["probe"]["conv/w"]["relative_step"]
  assert np.isnan(means["before"])
  np.testing.assert_allclose(
    means["after"], np.mean(run["probe"]["kinds"]["conv/w"]["relative_step"][1:])
  )
  np.testing.assert_allclose(
    means["end"], np.mean(run["probe"]["kinds"]["conv/w"]["relative_step"])
  )


def test_kinds_and_paths_follow_tf_nest_order():
  params = {"linear": {"w": 1.0, "b": 2.0}, "conv10": {"w": 3.0}, "conv2": {"scale": 4.0}}
  paths = lopt_probe.leaves_with_paths(params)
  assert [leaf for _, leaf in paths] == tf.nest.flatten(params)
  assert [lopt_probe.kind_of(p) for p, _ in paths] == [
    "conv/w",
    "conv/scale",
    "linear/b",
    "linear/w",
  ]


def test_bin_figure_runs_the_gin_file_at_a_tiny_size(tmp_path):
  bindings = [
    "LongerUnrolls.num_steps = 2",
    "LongerUnrolls.record_every = 1",
    "LongerUnrolls.horizon = 1",
    "LongerUnrolls.num_tasks = 1",
    "LongerUnrolls.adam_learning_rates = ()",
    'LongerUnrolls.lopts = {"both": @both/MLPLOpt()}',
    "paper_cnn.channels = 4",
    "GeneratedClassSource.train_images_per_class = 20",
    "GeneratedClassSource.test_images_per_class = 4",
  ]
  written = testing_utils.run_figure(tmp_path, "apph_longer_unrolls", bindings)
  assert written["num_steps"] == 2
  assert written["lopts"]["both"] == {
    "time_max_step": 499,
    "weight_decay": 3e-3,  # Chosen on outer-train tasks (apph_weight_decay_choice.gin).
    "weight_decay_start": 500,
    "normalizer_epsilon": 1e-5,
    "step_scale_lin": 1e-3,
    "step_scale_exp": 1e-3,
  }
  assert os.path.exists(tmp_path / "apph_longer_unrolls.png")


TINY = [
  "LongerUnrolls.num_steps = 2",
  "LongerUnrolls.record_every = 1",
  "LongerUnrolls.horizon = 1",
  "LongerUnrolls.num_tasks = 1",
  "paper_cnn.channels = 4",
  "GeneratedClassSource.train_images_per_class = 20",
  "GeneratedClassSource.test_images_per_class = 4",
]


def test_the_weight_decay_choice_runs_on_outer_train_tasks_and_names_its_choice(tmp_path):
  written = testing_utils.run_figure(tmp_path, "apph_weight_decay_choice", TINY)
  assert written["family"].startswith("generated_outer_train")
  assert written["adam_learning_rates"] == []
  decays = sorted(v["weight_decay"] for v in written["lopts"].values())
  assert decays == [0.0, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2]
  means = {name: s["mean_valid_loss"] for name, s in written["mean_summary"].items()}
  assert written["lopt_best_on_valid"] == min(means, key=means.get)


def test_seed_3_runs_both_thetas_beside_one_adam_grid(tmp_path):
  bindings = TINY + ["LongerUnrolls.adam_learning_rates = (0.01,)"]
  written = testing_utils.run_figure(tmp_path, "apph_longer_unrolls_seed3", bindings)
  assert written["seed"] == 3
  assert written["family"].startswith("generated_outer_test")
  for name, directory in written["theta_dirs"].items():
    theta = "valid" if name.startswith("L_valid") else "train"
    assert directory == f"pretrained/generated_bn_cnn_{theta}/theta", name
  runs = written["tasks"][0]["runs"]
  # The two thetas' shipped updates differ from the first step on; their variants share the
  # first steps (the options act past the horizon).
  assert runs["L_train, shipped"]["train_loss"][1] != runs["L_valid, shipped"]["train_loss"][1]
  assert set(runs) == set(written["lopts"]) | {"adam 0.01"}


def test_a_theta_dir_for_no_variant_is_refused_with_the_variants_named(family, theta_dir):
  with pytest.raises(ValueError, match=r"theta_dirs names \['typo'\].*name a variant of lopts"):
    longer_unrolls.LongerUnrolls(
      family=family,
      lopts={"paper": mlp_lopt.MLPLOpt()},
      theta_dir=theta_dir,
      theta_dirs={"typo": theta_dir},
    )
