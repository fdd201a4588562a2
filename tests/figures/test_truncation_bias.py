"""Fig. 3 / App. G truncation bias: truncated gradients, carried state, PES, rolling average."""

import glob
import math
import os

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import gin_config, inner_training
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.figures import hyperparameter_training, hyperparameter_truncations
from task_specific_learned_opt.figures import truncation_bias as tb
from task_specific_learned_opt.learned_optimizers import hyperparameters
from task_specific_learned_opt.optimizers import adam, sgd
from task_specific_learned_opt.outer import antithetic, truncated_unroll
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import families, generated, networks, quadratic

APP_G = sorted(glob.glob(os.path.join(testing_utils.REPO, "gin", "figures", "appg_*.gin")))


def _lopt(optimizer=adam.Adam, lr=1e-3):
  return hyperparameters.LearnedHyperparameters(
    optimizer, {"learning_rate": "log"}, {"learning_rate": lr}
  )


def _theta(lr):
  return {"learning_rate": tf.constant(math.log(lr), tf.float32)}


def _mlp_task():
  source = generated.GeneratedClassSource(
    num_classes=10, train_images_per_class=20, test_images_per_class=2, image_size=4
  )
  family = families.ClassSubsetFamily(source, networks.MLP((8, 8)), class_split="all", batch_size=8)
  return family.sample(0)


def _trainer(task, lopt, horizon, num_runs=1, outer=None):
  outer = outer or sgd.SGD(learning_rate=0.1)
  return hyperparameter_training.OuterTrainer(task, lopt, outer, horizon, num_runs, seed=3)


def test_truncation_gradient_matches_the_closed_form_of_sgd_on_a_quadratic():
  # SGD on 1/2 sum a (w - c)^2 without noise: from the truncation's (fixed) start w0,
  # w_j - c = (1 - lr a)^j (w0 - c), so the mean pre-update loss over L steps and its derivative
  # with respect to log lr have closed forms (float64 here).
  task = quadratic.QuadraticTask(dim=5, min_curvature=0.5, max_curvature=2.0)
  lopt = _lopt(sgd.SGD, lr=0.1)
  lr, length = 0.1, 6
  trainer = _trainer(task, lopt, horizon=2 * length)
  theta = _theta(lr)
  state, data_seed = trainer.fresh_state(theta, 0)
  fn = trainer.truncation_fn(length)
  first = fn(theta, state, data_seed)
  second = fn(theta, first.state, data_seed)  # Starts from the carried state.

  a = task.curvatures.numpy().astype(np.float64)
  c = task.center.numpy().astype(np.float64)
  for out, start in ((first, state), (second, first.state)):
    d0 = start.params["w"].numpy().astype(np.float64) - c
    j = np.arange(length)[:, None]
    loss = np.mean(np.sum(0.5 * a * (1 - lr * a) ** (2 * j) * d0**2, axis=1))
    # d/d log lr of (1 - lr a)^(2j) = 2j (1 - lr a)^(2j - 1) * (-a lr).
    dloss = np.mean(np.sum(0.5 * a * d0**2 * 2 * j * (1 - lr * a) ** (2 * j - 1) * (-a * lr), 1))
    assert float(out.loss) == pytest.approx(loss, rel=1e-5)
    assert float(out.gradient["learning_rate"]) == pytest.approx(dloss, rel=1e-4)
  # The second truncation's gradient ignores how theta shaped its start state: it is not the
  # gradient of the second half of one 12-step unroll (which would include that effect).
  assert float(second.gradient["learning_rate"]) < 0


def test_truncation_gradient_matches_a_finite_difference_for_adam_on_an_mlp():
  task = _mlp_task()
  lopt = _lopt(adam.Adam, lr=1e-2)
  length = 5
  trainer = _trainer(task, lopt, horizon=4 * length)
  theta = _theta(1e-2)
  state, data_seed = trainer.fresh_state(theta, 0)
  fn = trainer.truncation_fn(length)
  start = fn(theta, state, data_seed).state  # Test the second truncation, from a carried state.
  gradient = float(fn(theta, start, data_seed).gradient["learning_rate"])
  # Central difference in float32: the loss is ~2.3 (resolution ~2e-7) and moves by ~1e-2 over
  # +-0.05 in log lr; the O(eps^2) curvature error is below the tolerance.
  eps = 0.05
  losses = [float(fn(_theta(1e-2 * math.exp(s * eps)), start, data_seed).loss) for s in (1, -1)]
  finite_difference = (losses[0] - losses[1]) / (2 * eps)
  assert abs(gradient) > 1e-3
  assert gradient == pytest.approx(finite_difference, rel=0.03)


def test_state_is_carried_across_truncations():
  task = _mlp_task()
  lopt = _lopt()
  length, count = 4, 3
  trainer = _trainer(task, lopt, horizon=length * count)
  theta = _theta(1e-2)
  record = trainer.gradients_over_run(length, theta)
  state, data_seed = trainer.fresh_state(theta, 0)
  train_seed, _ = truncated_unroll.data_seeds(data_seed)
  _, losses = inner_training.unroll(task, lopt.opt_fn(theta), state, length * count, train_seed)
  expected = losses.numpy().reshape(count, length).mean(axis=1)
  np.testing.assert_allclose(record["outer_loss"], expected, rtol=1e-5)
  assert record["start_step"] == [0, 4, 8]
  assert record["sum"] == pytest.approx(sum(record["gradient"]))
  # A truncation restarted from the fresh state (same batches) would give other losses.
  fresh_at_step = state._replace(iteration=state.iteration + length)
  restarted = trainer.truncation_fn(length)(theta, fresh_at_step, data_seed)
  assert abs(float(restarted.loss) - record["outer_loss"][1]) > 1e-3


def test_outer_step_applies_the_outer_optimizer_to_theta():
  task = quadratic.QuadraticTask(dim=3)
  trainer = _trainer(task, _lopt(sgd.SGD, lr=0.1), horizon=6, num_runs=2)
  record = trainer.train("backprop", 2)
  assert record["inner_step"] == [2, 4, 6, 8, 10, 12]
  log_lr = np.log([0.1] + record["learning_rate"])
  # SGD with lr 0.1 on theta = log lr: theta_k = theta_{k-1} - 0.1 g_k.
  np.testing.assert_allclose(np.diff(log_lr), -0.1 * np.array(record["gradient"]), atol=1e-5)
  assert record["skipped"] == 0
  with pytest.raises(ValueError, match="divide"):
    trainer.train("backprop", 4)


def _perturbations(seeds, sigma):
  """The e_n of each worker state's PES sample, drawn from its perturbation seed as PES does."""
  return [
    float(antithetic.perturbation(_theta(1.0), seed, sigma)["learning_rate"]) for seed in seeds
  ]


def test_pes_accumulators_sum_the_perturbations_and_reset_with_the_run():
  task = quadratic.QuadraticTask(dim=3)
  trainer = _trainer(task, _lopt(sgd.SGD, lr=0.1), horizon=6, num_runs=2)
  seen = []

  def hook(run, k, states, samples, seeds):
    seen.append((run, k, states.accumulator, _perturbations(seeds, 0.1)))

  record = trainer.train("pes", 2, num_samples=2, sigma=0.1, hook=hook)
  assert [(run, k) for run, k, *_ in seen] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
  for run in range(2):
    steps = [s for s in seen if s[0] == run]
    for pair in range(2):
      running = 0.0
      for _, k, accumulator, perturbation in steps:
        running += perturbation[pair]
        assert int(accumulator.num_truncations[pair]) == k + 1
        assert float(accumulator.perturbation_sum["learning_rate"][pair]) == pytest.approx(
          running, abs=1e-6
        )
  # The pairs draw their own perturbations, new at every truncation.
  firsts = [s[3] for s in seen]
  assert len({round(e, 7) for pair in firsts for e in pair}) == 12
  assert len(record["outer_loss"]) == 6 and all(np.isfinite(record["gradient"]))
  assert record["skipped"] == record["dropped"] == 0


def test_pes_gradient_is_the_mean_over_pairs_of_the_accumulated_formula():
  # One truncation of one run: xi = e, so g = mean_p (L+ - L-) / (2 sigma^2) e_p. With a small
  # sigma on a smooth problem L+ - L- = 2 e_p g_bp + O(sigma^3), g_bp the backprop gradient
  # (one truncation from the fresh state is the whole run), so g = g_bp mean_p(e_p^2) / sigma^2.
  task = quadratic.QuadraticTask(dim=3)
  lopt = _lopt(sgd.SGD, lr=0.1)
  trainer = _trainer(task, lopt, horizon=4)
  seen = []
  record = trainer.train(
    "pes", 4, num_samples=3, sigma=1e-2, hook=lambda *args: seen.append(args[4])
  )
  backprop = trainer.gradients_over_run(4, _theta(0.1))["gradient"][0]
  expected = backprop * np.mean(np.square(_perturbations(seen[0], 1e-2))) / 1e-4
  assert record["gradient"][0] == pytest.approx(expected, rel=0.02)


@pytest.mark.parametrize("name", ["pes", "backprop", "merged"])
def test_each_worker_states_sample_in_one_call_equals_the_estimators_sample_alone(name):
  # The trainer computes N worker states' samples in one compiled call; each must be the
  # estimator's own `sample` of that state, as a worker would compute it alone.
  task = _mlp_task()
  lopt = _lopt(adam.Adam, lr=1e-2)
  trainer = _trainer(task, lopt, horizon=6)
  theta = _theta(1e-2)
  state, data_seed = trainer.fresh_state(theta, 0)
  estimator = registry.get(name)
  states = hyperparameter_truncations.stack_states(estimator.init_state(state, theta), 3)
  seeds = tf.constant([[0, 5], [0, 6], [0, 7]], tf.int32)
  fn = trainer.sample_fn(name, 3, sigma=0.3)
  samples, _ = fn(theta, states, data_seed, seeds)
  samples, ends = fn(theta, _, data_seed, seeds + 10)  # The second truncation, carried states.
  unroll = truncated_unroll.Unroll(task, lopt, truncated_unroll.STEP_LOSSES, recompute=False)
  for n in range(3):
    alone = estimator.init_state(state, theta)
    alone = estimator.sample(unroll, theta, alone, 3, data_seed, seeds[n], 0.3)[1]
    sample, end = estimator.sample(unroll, theta, alone, 3, data_seed, seeds[n] + 10, 0.3)
    for got, want in (
      (samples.loss_plus[n], sample.loss_plus),
      (samples.loss_minus[n], sample.loss_minus),
    ):
      assert float(got) == pytest.approx(float(want), rel=1e-5)
    for field in ("rp", "es"):
      np.testing.assert_allclose(
        getattr(samples, field)["learning_rate"][n],
        getattr(sample, field)["learning_rate"],
        rtol=1e-4,
        atol=1e-6,
      )
    np.testing.assert_allclose(
      tf.nest.flatten(ends)[1][n], tf.nest.flatten(end)[1], rtol=1e-5, atol=1e-6
    )
  # The states draw different perturbations (PES, merged), so their samples differ.
  if name != "backprop":
    assert len({round(float(x), 6) for x in samples.loss_plus}) == 3


def test_rolling_average_is_bias_corrected_and_skips_non_finite_values():
  values = [1.0, 2.0, float("nan"), 3.0]
  # r_3 = (0.125 * 1 + 0.25 * 2 + 1 * 3) / (0.125 + 0.25 + 1): the NaN adds no term, only decay.
  expected = [1.0, 2.5 / 1.5, 2.5 / 1.5, 3.625 / 1.375]
  np.testing.assert_allclose(tb.rolling_average(values, 0.5), expected, rtol=1e-12)
  assert tb.rolling_average([2.0, 4.0], 0.0).tolist() == [2.0, 4.0]
  assert np.isnan(tb.rolling_average([float("nan"), 1.0], 0.5)[0])
  assert tb.run_means([1, 2, 3, 4, 5, 6], 3) == [2.0, 5.0]


@pytest.mark.parametrize("path", APP_G)
def test_app_g_gin_files_parse(path):
  gin_config.parse([path])
  assert gin.query_parameter("run_figure.experiment").configurable.wrapped is tb.TruncationBias


def test_app_g_gin_files_bind_six_different_outer_optimizers():
  settings = []
  for path in APP_G:
    gin_config.parse([path])
    outer = tb.TruncationBias().outer_optimizer
    beta1 = getattr(outer, "beta1", None)
    settings.append((type(outer).__name__, float(outer.learning_rate), beta1))
  gin.clear_config()
  assert len(set(settings)) == len(settings) == 6
  adams = [s for s in settings if s[0] == "Adam"]
  sgds = [s for s in settings if s[0] == "SGD"]
  assert len(adams) == 4 and len(sgds) == 2
  assert {s[2] for s in adams} == {0.0, 0.9} and len({s[1] for s in adams}) == 2
  assert len({s[1] for s in sgds}) == 2


TINY = [
  "GeneratedClassSource.image_size = 4",
  "GeneratedClassSource.train_images_per_class = 20",
  "MLP.hidden_sizes = (8, 8)",
  "ClassSubsetFamily.batch_size = 8",
  "TruncationBias.horizon = 40",
  "TruncationBias.truncation_lengths = (2, 4, 40)",
  "TruncationBias.num_runs = 2",
]


def _run_figure(tmp_path, gin_file, extra=()):
  result = testing_utils.run_figure(tmp_path, gin_file, TINY + list(extra))
  assert os.path.getsize(tmp_path / f"{os.path.splitext(gin_file)[0]}.png") > 1000
  return result


def _check_curve(curve, length, horizon=40, runs=2):
  n = horizon * runs // length
  assert curve["inner_step"] == [length * (k + 1) for k in range(n)]
  for key in ("outer_loss", "rolling_loss", "learning_rate", "gradient"):
    assert len(curve[key]) == n and all(np.isfinite(curve[key]))
  assert len(curve["run_mean_loss"]) == runs
  assert curve["final_learning_rate"] == curve["learning_rate"][-1]
  assert np.isfinite(curve["eval_loss"])


@pytest.mark.integration
def test_fig3_gin_runs_through_bin_figure(tmp_path):
  result = _run_figure(
    tmp_path,
    "fig3_truncation_bias.gin",
    ["TruncationBias.gradient_truncations = (2, 40)", "TruncationBias.pes_truncation = 2"],
  )
  assert set(result["curves"]) == {"2", "4", "40", "pes_2"}
  for key, length in (("2", 2), ("4", 4), ("40", 40), ("pes_2", 2)):
    _check_curve(result["curves"][key], length)
  assert all(c["skipped"] == c["dropped"] == 0 for c in result["curves"].values())
  gradients = result["gradients_over_run"]
  assert gradients["2"]["start_step"] == list(range(0, 40, 2))
  assert gradients["2"]["sum"] == pytest.approx(sum(gradients["2"]["gradient"]), rel=1e-6)
  # At theta0 with run 0's seeds, panel (c)'s first truncation is each curve's first outer step.
  assert gradients["2"]["gradient"][0] == pytest.approx(result["curves"]["2"]["gradient"][0])
  assert gradients["40"]["gradient"] == result["curves"]["40"]["gradient"][:1]
  assert result["settings"]["theta"].startswith("log(learning_rate)")
  assert result["settings"]["total_inner_steps"] == 80
  assert np.isfinite(result["evaluation"]["initial"])


@pytest.mark.integration
def test_an_app_g_gin_runs_through_bin_figure(tmp_path):
  gin_file = os.path.basename(APP_G[0])
  result = _run_figure(tmp_path, gin_file)
  assert set(result["curves"]) == {"2", "4", "40"}
  for key, length in (("2", 2), ("4", 4), ("40", 40)):
    _check_curve(result["curves"][key], length)
  assert result["gradients_over_run"] == {}
