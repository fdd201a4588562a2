"""Keras models as tasks: one inner step is Keras's own training step; seeds, variants, splits."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import inner_training, random_seeds
from task_specific_learned_opt.optimizers import sgd
from task_specific_learned_opt.tasks import keras_data, keras_model, keras_task

LEARNING_RATE = 0.1


def build_mlp(width=8, activation="relu", num_classes=3, batch_norm=False):
  # Without batch norm, a regulariser: Keras's training step adds its loss too.
  regularizer = None if batch_norm else keras.regularizers.L2(0.01)
  layers = [
    keras.Input((5,)),
    keras.layers.Dense(width, activation, kernel_regularizer=regularizer),
  ]
  if batch_norm:
    layers.append(keras.layers.BatchNormalization())
  return keras.Sequential([*layers, keras.layers.Dense(num_classes)])


def arrays(n, num_classes=3, seed=0):
  rng = np.random.default_rng(seed)
  return rng.normal(size=(n, 5)).astype(np.float32), rng.integers(0, num_classes, n)


def splits(n=40, num_classes=3):
  return {
    s: keras_data.Split(*arrays(n, num_classes, i))
    for i, s in enumerate(("train", "valid", "test"))
  }


def mlp_task(batch_size=8, **kwargs):
  model = keras_model.KerasModel(build_mlp, kwargs)
  return keras_task.make_task(model, splits(), batch_size=batch_size)


@pytest.mark.parametrize("batch_norm", [True, False], ids=["batch_norm", "regularised"])
def test_one_inner_sgd_step_is_keras_training_step(batch_norm):
  task = mlp_task(batch_norm=batch_norm)
  params = task.init_params(3)
  opt = sgd.SGD(learning_rate=LEARNING_RATE)
  run = inner_training.make_train_fn(task, lambda _: opt)  # The graph-mode inner loop.
  state, losses = run(opt.init(params), 1, 7)
  batch = task.batch("train", random_seeds.fold_in(7, 0))  # What step 0 of the loop trained on.

  reference = build_mlp(batch_norm=batch_norm)
  for variable, key in zip(reference.trainable_variables, task.model.keys, strict=True):
    variable.assign(params[key])
  reference.compile(
    optimizer=keras.optimizers.SGD(LEARNING_RATE),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    jit_compile=False,
  )
  keras_loss = reference.train_on_batch(batch["x"], batch["y"])

  np.testing.assert_allclose(losses[0], keras_loss, rtol=1e-5)
  steps = []
  for variable, key in zip(reference.trainable_variables, task.model.keys, strict=True):
    steps.append(np.abs(variable.numpy() - params[key].numpy()).max())
    np.testing.assert_allclose(state.params[key], variable.numpy(), atol=1e-6, rtol=1e-5)
  assert max(steps) > 0.01  # A real step (measured: equal to the last bit on CPU).


def test_params_are_the_model_weights_drawn_from_the_seed():
  task = mlp_task(batch_norm=True)
  first, again, other = task.init_params(1), task.init_params(1), task.init_params(2)
  graph = tf.function(task.init_params, autograph=False)(random_seeds.as_seed(1))
  assert sorted(first) == sorted(task.model.keys)
  assert all(v.dtype == tf.float32 for v in first.values())
  for key in first:
    np.testing.assert_array_equal(first[key], again[key])
    np.testing.assert_array_equal(first[key], graph[key])
  kernels = [k for k in first if k.endswith("kernel")]
  assert all(np.abs(first[k] - other[k]).max() > 0 for k in kernels)
  gammas = [k for k in first if k.endswith("gamma")]
  assert gammas and all(np.all(first[k] == 1.0) for k in gammas)  # BatchNorm's own initialiser.
  bound = np.sqrt(6.0 / (5 + 8))  # Glorot uniform, the Dense layer's initialiser.
  assert np.abs(first[kernels[0]]).max() <= bound


def test_batches_and_dropout_masks_are_pure_functions_of_the_seed():
  def build(rate=0.5):
    return keras.Sequential([keras.Input((5,)), keras.layers.Dropout(rate), keras.layers.Dense(3)])

  task = keras_task.make_task(keras_model.KerasModel(build, {}), splits(), batch_size=8)
  params = task.init_params(0)
  a, b, c = task.batch("train", 4), task.batch("train", 4), task.batch("train", 5)
  np.testing.assert_array_equal(a["x"], b["x"])
  assert not np.array_equal(a["x"], c["x"])
  assert float(task.loss(params, a)) == float(task.loss(params, b))
  masked = {**a, "seed": c["seed"]}  # Same examples, the mask of another seed.
  assert float(task.loss(params, masked)) != float(task.loss(params, a))


def _family(**kwargs):
  data = {s: (split.x, split.y) for s, split in splits(60, num_classes=6).items()}
  kwargs.setdefault("batch_size", 4)
  return keras_task.KerasModelFamily(model_fn=build_mlp, data=data, **kwargs)


def test_family_draws_variations_per_task_seed_and_passes_num_classes():
  family = _family(variations={"width": [4, 6], "activation": ["relu", "tanh"]}, classes_per_task=2)
  tasks = [family.sample(seed) for seed in range(8)]
  widths = {t.init_params(0)[t.model.keys[0]].shape[1] for t in tasks}
  assert widths == {4, 6}
  assert all(t.init_params(0)[t.model.keys[-1]].shape == (2,) for t in tasks)  # num_classes=2
  assert family.sample(3).name == tasks[3].name
  np.testing.assert_array_equal(family.sample(3).splits["train"].x, tasks[3].splits["train"].x)
  assert len(family._models) == 4  # One model per variant, built with the family.


def test_with_data_runs_each_variant_through_its_own_model():
  family = _family(variations={"activation": ["relu", "tanh"]}, split="all")
  relu, tanh = family.sample(0), family.sample(1)
  if relu.variant == tanh.variant:
    tanh = next(t for t in map(family.sample, range(2, 20)) if t.variant != relu.variant)

  @tf.function(autograph=False, reduce_retracing=True)
  def loss(data, params, seed):
    task = relu.with_data(data)  # One template for the family, as compiled code uses it.
    return task.loss(params, task.batch("valid", seed))

  for task in (relu, tanh):
    params = task.init_params(0)
    seed = random_seeds.as_seed(2)
    np.testing.assert_allclose(
      loss(task.data, params, seed), task.loss(params, task.batch("valid", seed))
    )
  assert loss.experimental_get_tracing_count() == 2  # One trace per variant.


@pytest.mark.parametrize("what", ["classes", "examples"])
def test_outer_train_and_outer_test_tasks_share_no_data(what):
  kwargs = {"classes_per_task": 2} if what == "classes" else {}
  train, test = (_family(split=split, **kwargs) for split in ("outer_train", "outer_test"))
  if what == "classes":
    assert not set(train.class_ids) & set(test.class_ids)
    assert set(train.class_ids) | set(test.class_ids) == set(range(6))
  for split in ("train", "valid", "test"):
    seen = {tuple(x) for seed in range(3) for x in train.sample(seed).splits[split].x.numpy()}
    held_out = {tuple(x) for seed in range(3) for x in test.sample(seed).splits[split].x.numpy()}
    assert seen and held_out and not seen & held_out


def test_data_fraction_draws_a_subset_of_the_train_examples_per_task():
  family = _family(split="all", data_fraction=0.5)
  a, b = family.sample(0), family.sample(1)
  assert keras_data.num_examples(a.splits["train"]) == 30
  assert not np.array_equal(a.splits["train"].x, b.splits["train"].x)
  assert keras_data.num_examples(a.splits["test"]) == 60


def test_a_regression_task_has_no_accuracy_and_valid_comes_from_train():
  def build(num_outputs=1):
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(num_outputs)])

  (x, _), (x_test, _) = arrays(40), arrays(10, seed=1)
  data = {"train": (x, 2.0 * x[:, :1]), "test": (x_test, 2.0 * x_test[:, :1])}
  family = keras_task.KerasModelFamily(
    model_fn=build, data=data, loss="mse", batch_size=4, split="all"
  )
  task = family.sample(0)
  assert not hasattr(task, "accuracy")
  assert task.loss(task.init_params(0), task.batch("train", 0)).shape == ()
  np.testing.assert_array_equal(task.splits["valid"].x, x[36:])  # The last 10% of train.
  np.testing.assert_array_equal(task.splits["train"].x, x[:36])
