"""keras_optimizer.LearnedOptimizer: MLPLOpt's update as a Keras 3 optimizer.

The central checks compare it with the project's own update: `apply_gradients` against
`MLPLOpt.opt_fn(theta)` on the same tensors (for every option that changes the update), and
`model.fit` / `train_on_batch` on the paper's CNN built from Keras layers against
`inner_training.unroll` on the same initial weights, batches and theta, step by step.
"""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
import testing_utils

from task_specific_learned_opt import checkpoints, inner_training, layout, random_seeds
from task_specific_learned_opt.keras import lopt_options
from task_specific_learned_opt.keras import optimizer as keras_optimizer
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import networks

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def perturbed_theta(lopt, seed=0, scale=0.3):
  """lopt.init(seed) plus noise on every entry, biases included, so that steps are not trivial."""
  rng = np.random.default_rng(seed)
  return tf.nest.map_structure(
    lambda x: x + scale * rng.normal(size=x.shape).astype(np.float32), lopt.init(seed)
  )


SHAPES = [(), (7,), (3, 5), (3, 3, 4, 8), (80, 70)]  # (80, 70): past the fast kernel's grouping.


def random_tensors(seed, shapes=SHAPES, scale=1.0):
  rng = np.random.default_rng(seed)
  return [tf.constant(scale * rng.normal(size=s), tf.float32) for s in shapes]


def reference_steps(lopt, theta, params, grads_list, iteration=0):
  """opt_fn(theta)'s updates from `params`, one per gradient list: the final state."""
  opt = lopt.opt_fn(theta)
  state = opt.init(params)._replace(iteration=tf.constant(iteration, tf.int32))
  for grads in grads_list:
    state = opt.update(state, grads)
  return state


def keras_variables(params):
  return [keras.Variable(p, name=f"v{i}") for i, p in enumerate(params)]


def max_abs_diff(a, b):
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True)
  )


OPTIONS = {
  "default": {},
  "original_code": {"feature_set": "original_code"},
  "no_momentum": {"use_momentum": False},
  "no_time": {"use_time": False},
  "hidden_8_step_scales": {"hidden_size": 8, "step_scale_lin": 3e-3, "step_scale_exp": 0.1},
  "three_decays": {"decays": (0.5, 0.9, 0.99)},
  "reference": {"implementation": "reference"},
}


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_two_apply_gradients_steps_equal_opt_fn_on_random_gradients(name):
  lopt = mlp_lopt.MLPLOpt(**OPTIONS[name])
  theta = perturbed_theta(lopt)
  params = random_tensors(1)
  grads = [random_tensors(2, scale=0.1), random_tensors(3, scale=0.1)]
  variables = keras_variables(params)
  optimizer = keras_optimizer.LearnedOptimizer(theta, lopt=lopt)
  for g in grads:
    optimizer.apply_gradients(zip(g, variables, strict=True))
  expected = reference_steps(lopt, theta, params, grads)
  assert int(optimizer.iterations) == 2
  assert max_abs_diff(variables, expected.params) < 1e-6
  momenta = [optimizer._momenta[i] for i in range(len(variables))]
  assert [tuple(m.shape) for m in momenta] == [(len(lopt.decays),) + s for s in SHAPES]
  assert max_abs_diff(momenta, expected.momenta) < 1e-7
  # The steps are not trivial: well above the tolerance.
  assert max_abs_diff(variables, params) > 1e-3


def test_the_step_count_is_optimizer_iterations():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params, grads = random_tensors(1), random_tensors(2, scale=0.1)
  variables = keras_variables(params)
  optimizer = keras_optimizer.LearnedOptimizer(theta)
  optimizer.build(variables)
  optimizer.iterations.assign(40)
  optimizer.apply_gradients(zip(grads, variables, strict=True))
  at_40 = reference_steps(lopt, theta, params, [grads], iteration=40).params
  at_0 = reference_steps(lopt, theta, params, [grads], iteration=0).params
  assert max_abs_diff(variables, at_40) < 1e-6
  assert max_abs_diff(at_40, at_0) > 1e-4  # The time features change the step.


def test_model_fit_under_a_distribution_strategy_takes_the_per_variable_path(monkeypatch):
  calls = []
  update_step = keras_optimizer.LearnedOptimizer.update_step

  def counted(self, gradient, variable, learning_rate):
    calls.append(variable.name)
    return update_step(self, gradient, variable, learning_rate)

  monkeypatch.setattr(keras_optimizer.LearnedOptimizer, "update_step", counted)
  x, y = mixed_data()
  theta = perturbed_theta(mlp_lopt.MLPLOpt())
  weights = {}
  for name, strategy in [
    ("default", tf.distribute.get_strategy()),
    ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0"])),
  ]:
    with strategy.scope():
      model = mixed_model()
      start = model.get_weights()
      model.compile(optimizer=keras_optimizer.LearnedOptimizer(theta), loss=LOSS)
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    weights[name] = model.get_weights()
    # The default path updates all variables in one call; under the strategy Keras calls
    # update_step once per variable (when the train step is traced).
    assert len(calls) == (0 if name == "default" else len(model.trainable_variables))
  assert max_abs_diff(weights["mirrored"], start) > 1e-3
  assert max_abs_diff(weights["mirrored"], weights["default"]) < 1e-5


def keras_paper_cnn(params):
  """networks.paper_cnn() from Keras layers, with the project's parameters copied in."""
  model = keras.Sequential(
    [keras.Input((32, 32, 3))]
    + [keras.layers.Conv2D(32, 3, strides=s, padding="same", activation="relu") for s in (2, 2, 1)]
    + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
  )
  model.set_weights([np.asarray(w) for w in keras_order(params)])
  return model


def keras_order(params):
  """The project's {"conv0": {"w", "b"}, ..., "linear": ...} in Keras's weight order."""
  layers = [f"conv{i}" for i in range(3)] + ["linear"]
  return [params[layer][name] for layer in layers for name in ("w", "b")]


@pytest.fixture(scope="module")
def project_run():
  """30 steps of the project's inner loop on the paper CNN, batch 8, one unroll call per step."""
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt, seed=1)
  task = testing_utils.small_generated_family(model=networks.paper_cnn(), batch_size=8).sample(0)
  params = task.init_params(3)
  data_seed = random_seeds.as_seed(5)
  num_steps = 30
  batches = [task.batch("train", random_seeds.fold_in(data_seed, i)) for i in range(num_steps)]
  opt = lopt.opt_fn(theta)

  @tf.function(autograph=False)
  def one_step(state, i):
    return inner_training.unroll(task, opt, state, 1, data_seed, first_step=i)

  state, after, losses = opt.init(params), [], []
  for i in range(num_steps):
    state, loss = one_step(state, tf.constant(i))
    after.append([np.asarray(p) for p in keras_order(state.params)])
    losses.append(float(loss[0]))
  return {
    "theta": theta,
    "params": params,
    "images": np.concatenate([np.asarray(b["image"]) for b in batches]),
    "labels": np.concatenate([np.asarray(b["label"]) for b in batches]),
    "after": after,
    "losses": np.array(losses),
  }


def test_model_fit_on_the_paper_cnn_equals_the_projects_inner_loop(project_run):
  run = project_run
  # The inner loop differentiates min(loss, 10) (inner_training.clip_loss); Keras does not clip.
  # Below 10 the two are the same function.
  assert np.all(run["losses"] < inner_training.MAX_LOSS)
  model = keras_paper_cnn(run["params"])
  model.compile(optimizer=keras_optimizer.LearnedOptimizer(run["theta"]), loss=LOSS)
  weights, logged = [], []

  class Record(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
      weights.append(model.get_weights())
      logged.append(float(logs["loss"]))

  model.fit(
    run["images"],
    run["labels"],
    batch_size=8,
    shuffle=False,
    epochs=1,
    verbose=0,
    callbacks=[Record()],
  )
  num_steps = len(run["after"])
  assert len(weights) == num_steps
  weight_diff = max(max_abs_diff(w, a) for w, a in zip(weights, run["after"], strict=True))
  # fit logs the running mean of the batch losses.
  running_mean = np.cumsum(run["losses"]) / np.arange(1, num_steps + 1)
  loss_diff = float(np.max(np.abs(np.array(logged) - running_mean)))
  moved = max_abs_diff(weights[-1], keras_order(run["params"]))
  print(f"graph fit: max |dw| {weight_diff:.2e} (moved {moved:.3f}), max |dloss| {loss_diff:.2e}")
  assert weight_diff < 1e-5
  assert loss_diff < 1e-5
  assert moved > 1e-2


def test_eager_train_on_batch_on_the_paper_cnn_equals_the_projects_inner_loop(project_run):
  run = project_run
  model = keras_paper_cnn(run["params"])
  model.compile(
    optimizer=keras_optimizer.LearnedOptimizer(run["theta"]), loss=LOSS, run_eagerly=True
  )
  weight_diff, loss_diff = 0.0, 0.0
  for i, after in enumerate(run["after"]):
    batch = slice(8 * i, 8 * (i + 1))
    loss = model.train_on_batch(run["images"][batch], run["labels"][batch])
    loss_diff = max(loss_diff, abs(float(loss) - run["losses"][i]))
    weight_diff = max(weight_diff, max_abs_diff(model.get_weights(), after))
  print(f"eager train_on_batch: max |dw| {weight_diff:.2e}, max |dloss| {loss_diff:.2e}")
  assert weight_diff < 1e-5
  assert loss_diff < 1e-5
  assert int(model.optimizer.iterations) == len(run["after"])


def mixed_model(seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential(
    [
      keras.Input((8, 8, 3)),
      keras.layers.Conv2D(4, 3, padding="same"),
      keras.layers.BatchNormalization(),
      keras.layers.ReLU(),
      keras.layers.Flatten(),
      keras.layers.Dense(6, activation="relu"),
      keras.layers.Dense(3),
    ]
  )


def mixed_data(n=32, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, 8, 8, 3)).astype(np.float32), rng.integers(0, 3, size=n)


def test_fit_graph_and_eager_agree_on_mixed_layers_with_non_trainable_variables():
  x, y = mixed_data()
  theta = perturbed_theta(mlp_lopt.MLPLOpt())
  results = []
  for run_eagerly in (False, True):
    model = mixed_model()
    start = model.get_weights()
    optimizer = keras_optimizer.LearnedOptimizer(theta)
    model.compile(optimizer=optimizer, loss=LOSS, run_eagerly=run_eagerly)
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert int(optimizer.iterations) == 8
    # Momenta for the 8 trainable variables only (not BatchNorm's moving statistics).
    assert len(model.trainable_variables) == 8 and len(model.non_trainable_variables) == 2
    assert len(optimizer.variables) == 2 + 8  # iteration, learning_rate, momenta.
    results.append(model.get_weights())
    assert max_abs_diff(model.get_weights(), start) > 1e-3
  assert max_abs_diff(*results) < 1e-5


def test_config_round_trip_carries_theta_options_and_keras_arguments():
  lopt = mlp_lopt.MLPLOpt(hidden_size=8, use_time=False, step_scale_lin=2e-3)
  theta = perturbed_theta(lopt)
  optimizer = keras_optimizer.LearnedOptimizer(
    theta, lopt=lopt, learning_rate=0.5, clipnorm=1.0, weight_decay=1e-3
  )
  config = json.loads(json.dumps(optimizer.get_config()))
  assert isinstance(config["theta"]["hidden"]["w"], list)
  assert config["lopt"]["hidden_size"] == 8 and config["lopt"]["use_time"] is False
  restored = keras_optimizer.LearnedOptimizer.from_config(config)
  assert lopt_options.lopt_options(restored.lopt) == lopt_options.lopt_options(lopt)
  for layer in ("hidden", "output"):
    for name in ("w", "b"):
      np.testing.assert_array_equal(restored.theta[layer][name], theta[layer][name])
  assert (restored.clipnorm, restored.weight_decay) == (1.0, 1e-3)
  assert float(restored.learning_rate) == 0.5
  # Keras's own (de)serialisation finds the registered class.
  again = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
  assert type(again) is keras_optimizer.LearnedOptimizer
  params, grads = random_tensors(1), random_tensors(2, scale=0.1)
  updated = []
  for opt in (optimizer, restored, again):
    variables = keras_variables(params)
    opt.apply_gradients(zip(grads, variables, strict=True))
    updated.append([np.asarray(v) for v in variables])
  assert max_abs_diff(updated[0], updated[1]) == 0.0
  assert max_abs_diff(updated[0], updated[2]) == 0.0


def test_save_and_load_model_continues_training_identically(tmp_path):
  x, y = mixed_data()
  model = mixed_model()
  model.compile(
    optimizer=keras_optimizer.LearnedOptimizer(perturbed_theta(mlp_lopt.MLPLOpt())), loss=LOSS
  )
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  path = os.path.join(tmp_path, "m.keras")
  model.save(path)
  loaded = keras.models.load_model(path)  # No custom_objects: the class is registered.
  assert type(loaded.optimizer) is keras_optimizer.LearnedOptimizer
  assert int(loaded.optimizer.iterations) == 4
  assert len(loaded.optimizer.variables) == len(model.optimizer.variables)
  assert max_abs_diff(loaded.optimizer.variables, model.optimizer.variables) == 0.0
  before = model.get_weights()
  for m in (model, loaded):
    m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  assert max_abs_diff(model.get_weights(), before) > 1e-3
  assert max_abs_diff(loaded.get_weights(), model.get_weights()) < 1e-6
  assert max_abs_diff(loaded.optimizer.variables, model.optimizer.variables) < 1e-6


def test_learning_rate_multiplies_the_step_and_callbacks_can_change_it():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params, grads = random_tensors(1), random_tensors(2, scale=0.1)
  variables = keras_variables(params)
  optimizer = keras_optimizer.LearnedOptimizer(theta, learning_rate=0.25)
  optimizer.apply_gradients(zip(grads, variables, strict=True))
  full = reference_steps(lopt, theta, params, [grads])
  expected = [p + 0.25 * (n - p) for p, n in zip(params, full.params, strict=True)]
  assert max_abs_diff(variables, expected) < 1e-6
  assert max_abs_diff(optimizer._momenta, full.momenta) < 1e-7  # Momenta do not see the rate.

  x, y = mixed_data()
  model = mixed_model()
  model.compile(optimizer=keras_optimizer.LearnedOptimizer(theta), loss=LOSS)
  trainable = [np.asarray(v) for v in model.trainable_variables]
  zero = keras.callbacks.LearningRateScheduler(lambda epoch: 0.0)
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[zero])
  assert max_abs_diff(model.trainable_variables, trainable) == 0.0
  assert int(model.optimizer.iterations) == 4
  assert max(float(np.max(np.abs(m))) for m in model.optimizer._momenta) > 0.0


def test_clipnorm_clips_each_gradient_before_the_learned_update():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params, grads = random_tensors(1), random_tensors(2)
  variables = keras_variables(params)
  keras_optimizer.LearnedOptimizer(theta, clipnorm=0.5).apply_gradients(
    zip(grads, variables, strict=True)
  )
  clipped = [tf.clip_by_norm(g, 0.5) for g in grads]
  expected = reference_steps(lopt, theta, params, [clipped]).params
  unclipped = reference_steps(lopt, theta, params, [grads]).params
  assert max_abs_diff(variables, expected) < 1e-6
  assert max_abs_diff(expected, unclipped) > 1e-5  # Clipping changes the step.


def test_weight_decay_shrinks_the_weights_before_the_learned_update():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params, grads = random_tensors(1), random_tensors(2, scale=0.1)
  variables = keras_variables(params)
  keras_optimizer.LearnedOptimizer(theta, weight_decay=0.1).apply_gradients(
    zip(grads, variables, strict=True)
  )
  # Keras: w <- w - w * weight_decay * learning_rate, then the update (lr = 1).
  decayed = [p * 0.9 for p in params]
  expected = reference_steps(lopt, theta, decayed, [grads]).params
  assert max_abs_diff(variables, expected) < 1e-6


def test_gradient_accumulation_applies_the_mean_gradient_at_the_first_step():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params = random_tensors(1)
  g1, g2 = random_tensors(2, scale=0.1), random_tensors(3, scale=0.1)
  variables = keras_variables(params)
  optimizer = keras_optimizer.LearnedOptimizer(theta, gradient_accumulation_steps=2)
  optimizer.apply_gradients(zip(g1, variables, strict=True))
  assert max_abs_diff(variables, params) == 0.0
  optimizer.apply_gradients(zip(g2, variables, strict=True))
  mean = [(a + b) / 2 for a, b in zip(g1, g2, strict=True)]
  assert max_abs_diff(variables, reference_steps(lopt, theta, params, [mean]).params) < 1e-6
  assert int(optimizer.iterations) == 1


def hand_ema(weights_after_each_step, momentum):
  """Keras' EMA of the weights, by hand: a_1 = w_1, a_k = m a_{k-1} + (1 - m) w_k."""
  averages = [np.asarray(w, np.float64) for w in weights_after_each_step[0]]
  for weights in weights_after_each_step[1:]:
    averages = [
      momentum * a + (1 - momentum) * np.asarray(w) for a, w in zip(averages, weights, strict=True)
    ]
  return averages


def test_use_ema_keeps_the_moving_average_of_the_weights():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  variables = keras_variables(random_tensors(1))
  optimizer = keras_optimizer.LearnedOptimizer(theta, use_ema=True, ema_momentum=0.6)
  weights = []
  for seed in (2, 3, 4, 5):
    optimizer.apply_gradients(zip(random_tensors(seed, scale=0.1), variables, strict=True))
    weights.append([np.asarray(v) for v in variables])
  # e.g. 4 steps with m = 0.6: a_4 = 0.216 w_1 + 0.144 w_2 + 0.24 w_3 + 0.4 w_4.
  averages = optimizer._model_variables_moving_average
  assert max_abs_diff(averages, hand_ema(weights, 0.6)) < 1e-6
  assert max_abs_diff(averages, variables) > 1e-3  # An average, not a copy of the weights.


def test_fit_with_use_ema_ends_with_the_moving_average_of_the_weights():
  x, y = mixed_data()
  model = mixed_model()
  optimizer = keras_optimizer.LearnedOptimizer(
    perturbed_theta(mlp_lopt.MLPLOpt()), use_ema=True, ema_momentum=0.6
  )
  model.compile(optimizer=optimizer, loss=LOSS)
  weights = []  # The trainable weights after each of the 4 steps.
  record = keras.callbacks.LambdaCallback(
    on_train_batch_end=lambda batch, logs: weights.append(
      [np.asarray(v) for v in model.trainable_variables]
    )
  )
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[record])
  assert len(weights) == 4
  expected = hand_ema(weights, 0.6)
  # finalize_variable_values: fit ends with the averages in the model.
  assert max_abs_diff(model.trainable_variables, expected) < 1e-6
  assert max_abs_diff(optimizer._model_variables_moving_average, expected) < 1e-6
  assert max_abs_diff(weights[-1], expected) > 1e-3  # Not the last step's weights.


def test_sparse_embedding_gradients_are_applied_densely():
  keras.utils.set_random_seed(0)
  embedding = keras.layers.Embedding(20, 4)
  embedding.build((None,))
  ids = tf.constant([[1, 3, 3, 7]])
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(tf.square(embedding(ids)))
  (grad,) = tape.gradient(loss, embedding.trainable_variables)
  assert isinstance(grad, tf.IndexedSlices)
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  start = tf.convert_to_tensor(embedding.embeddings)
  keras_optimizer.LearnedOptimizer(theta).apply_gradients([(grad, embedding.embeddings)])
  expected = reference_steps(lopt, theta, [start], [[tf.convert_to_tensor(grad)]]).params
  assert max_abs_diff([embedding.embeddings], expected) < 1e-6
  # Every row moves, not only the looked-up ones: the update reads w and the momenta too.
  assert np.all(np.any(np.asarray(embedding.embeddings) != np.asarray(start), axis=1))

  model = keras.Sequential(
    [
      keras.Input((4,), dtype="int32"),
      keras.layers.Embedding(20, 4),
      keras.layers.Flatten(),
      keras.layers.Dense(2),
    ]
  )
  model.compile(optimizer=keras_optimizer.LearnedOptimizer(theta), loss=LOSS)
  history = model.fit(
    np.random.default_rng(0).integers(0, 20, size=(16, 4)), np.zeros(16), verbose=0
  )
  assert np.isfinite(history.history["loss"][0])


def test_a_float64_variable_is_updated_in_float32():
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  params, grads = random_tensors(1, [(4, 5)]), random_tensors(2, [(4, 5)], scale=0.1)
  variable = keras.Variable(tf.cast(params[0], tf.float64), dtype="float64")
  optimizer = keras_optimizer.LearnedOptimizer(theta)
  optimizer.apply_gradients([(tf.cast(grads[0], tf.float64), variable)])
  assert variable.dtype == "float64" and optimizer._momenta[0].dtype == "float32"
  expected = reference_steps(lopt, theta, params, [grads]).params
  assert max_abs_diff([variable], expected) < 1e-6


def test_from_directory_loads_an_exported_theta(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  theta = perturbed_theta(lopt)
  train_dir = os.path.join(tmp_path, "run")
  theta_dir = os.path.join(train_dir, layout.THETA_DIRNAME)
  checkpoints.save_theta(theta_dir, theta, info={"outer_step": 3})
  optimizer = keras_optimizer.LearnedOptimizer.from_directory(theta_dir, clipnorm=2.0)
  np.testing.assert_array_equal(optimizer.theta["hidden"]["w"], theta["hidden"]["w"])
  assert optimizer.clipnorm == 2.0
  with pytest.raises(FileNotFoundError, match=f"pass {theta_dir}"):
    keras_optimizer.LearnedOptimizer.from_directory(train_dir)
  with pytest.raises(FileNotFoundError, match="No theta export"):
    keras_optimizer.LearnedOptimizer.from_directory(os.path.join(tmp_path, "nothing"))


@pytest.mark.parametrize(
  "trained_with, fix",
  [
    ({"feature_set": "original_code"}, "lopt=MLPLOpt(feature_set='original_code')"),
    ({"use_time": False}, "lopt=MLPLOpt(use_time=False)"),
    ({"hidden_size": 8, "use_momentum": False}, "lopt=MLPLOpt(hidden_size=8, use_momentum=False)"),
  ],
)
def test_a_theta_of_the_wrong_shape_is_refused_with_one_line_naming_the_fix(
  tmp_path, trained_with, fix
):
  theta = mlp_lopt.MLPLOpt(**trained_with).init(0)
  checkpoints.save_theta(str(tmp_path), theta)
  # Without theta_info.json too: the shapes are read from the checkpoint itself.
  os.remove(os.path.join(tmp_path, layout.THETA_INFO_FILENAME))
  for make in (
    lambda: keras_optimizer.LearnedOptimizer.from_directory(str(tmp_path)),
    lambda: keras_optimizer.LearnedOptimizer(theta),
  ):
    with pytest.raises(checkpoints.ThetaMismatchError) as raised:
      make()
    message = str(raised.value)
    assert "\n" not in message
    assert "MLPLOpt() reads hidden/w [16, 32]" in message and fix in message
  loaded = keras_optimizer.LearnedOptimizer.from_directory(
    str(tmp_path), lopt=mlp_lopt.MLPLOpt(**trained_with)
  )
  np.testing.assert_array_equal(loaded.theta["output"]["w"], theta["output"]["w"])


def test_bad_arguments_are_refused_clearly():
  theta = mlp_lopt.MLPLOpt().init(0)
  with pytest.raises(ValueError, match="theta must be the nest MLPLOpt.init returns"):
    keras_optimizer.LearnedOptimizer({"hidden": theta["hidden"]})
  with pytest.raises(TypeError, match="applies an MLPLOpt"):
    keras_optimizer.LearnedOptimizer(theta, lopt="mlp")
  with pytest.raises(ValueError, match="Unknown MLPLOpt options"):
    keras_optimizer.LearnedOptimizer(theta, lopt={"hidden": 32})


BOUNDED_UPDATE = {  # gin/eval/out_of_family/guarded_update.gin + bounded_weights_small_cap.gin.
  "gate_growth": True,
  "max_step_rms": 3e-3,
  "max_relative_step": 1e-2,
  "max_weight_rms": 1.5,
}


@pytest.mark.parametrize("name", ["bn_cnn_train", "mixed_app_e_valid"])
def test_a_shipped_theta_with_the_bounded_update_keeps_every_kernel_under_its_bound(name):
  # The use-time update of docs/evaluation.md ("A bound on the weights"), given to a shipped theta
  # in model.fit; a bound of 0.5 / sqrt(fan_in), below the kernels' initial scale, must hold
  # from the first step on, and the biases and batch norm's vectors are not bound.
  x, y = mixed_data()
  model = mixed_model()
  optimizer = keras_optimizer.LearnedOptimizer.from_pretrained(
    name, lopt={**BOUNDED_UPDATE, "max_weight_rms": 0.5}
  )
  assert optimizer._rule.lopt.max_weight_rms == 0.5
  model.compile(optimizer=optimizer, loss=LOSS)
  kernels = [v for v in model.trainable_variables if len(v.shape) >= 2]
  bounds = [0.5 / np.sqrt(np.prod(v.shape[:-1])) for v in kernels]
  rms = lambda v: float(np.sqrt(np.mean(np.square(np.asarray(v)))))  # noqa: E731
  assert any(rms(v) > b for v, b in zip(kernels, bounds, strict=True))  # Glorot starts above.
  model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
  for v, b in zip(kernels, bounds, strict=True):
    assert rms(v) <= b * (1 + 1e-5), v.name
  assert np.all(np.isfinite(model.predict(x, verbose=0)))
