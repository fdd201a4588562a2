"""A Keras 3 model as a pure (init, apply) pair over a dict of tensors, for keras_task.py.

  model = KerasModel(build_model, {"width": 32})  # calls build_model(width=32) once
  params = model.init(seed)                        # {"dense/kernel": ..., ...}, float32
  outputs, extra_loss = model.apply(params, model.state, x, seed)

Parameters are the model's trainable weights, keyed by their Keras path without the model's own
name. `init(seed)` draws them with the model's own initialisers, each given a stateless seed
folded from `seed` and the weight's index (an initialiser's own seed is replaced), so the same seed
gives the same parameters, inside a tf.function or not. To find each weight's initialiser the
model is built inside a `keras.StatelessScope`, where Keras defers initialisation and keeps the
initialiser with the variable (`Variable._initializer`, a private attribute of Keras 3); the scope
initialises the variables when it closes, so the model is an ordinary one afterwards. An
initialiser that is a plain function (no `seed`) draws what it draws; a weight made before the
model function ran (a layer shared with another model) starts from its value every time.

`apply` runs `model.stateless_call(trainable, non_trainable, x, training=True)`: no tf.Variable
is read or written, so the inner loop and the outer-training differentiate through it.
Non-trainable weights (batch norm's moving statistics) are `state`, the values the model was built
with, and are not carried from step to step; the random-number state of layers such as Dropout is
set from the batch's seed instead, so each step draws its own mask and the two unrolls of an
antithetic pair draw the same ones. `extra_loss` is the sum of the model's own losses
(regularisers, `add_loss`), which a Keras training step adds to the compiled loss.

`resolve_loss` turns a Keras loss name (or a function) into the loss of a task, and
`check_model` runs a model once on a few examples, so that outputs that do not fit the targets
or a loss that is not one value per batch or per example fail before any training.
"""

import copy
import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf

from task_specific_learned_opt import errors, nests, random_seeds

_SEED_STATE_NAME = "seed_generator_state"  # keras.random.SeedGenerator's variable.


class BadModelError(errors.UserError, ValueError):
  """A model or loss the inner loop cannot train: no or non-float32 trainable weights, outputs
  that do not fit the targets, a loss that is not one value per batch or per example."""


def _keys(model: keras.Model) -> list[str]:
  """Readable, unique keys of the trainable weights: their paths without the model's name."""
  keys = []
  for variable in model.trainable_variables:
    path = variable.path
    key = path[len(model.name) + 1 :] if path.startswith(model.name + "/") else path
    keys.append(key if key not in keys else f"{key}_{len(keys)}")
  return keys


def _check_weights(model: keras.Model, name: str) -> None:
  """Raises BadModelError for a model with no trainable weights or with weights not float32."""
  if not model.trainable_variables:
    raise BadModelError(
      f"The model {name} has no trainable weights; the learned optimizer needs some (are its "
      "layers frozen with trainable=False?)."
    )
  for variable in model.trainable_variables:
    if variable.dtype != "float32":
      raise BadModelError(
        f"The model {name} has a trainable weight {variable.path} of dtype {variable.dtype}; "
        "trainable weights must be float32 (make it non-trainable or float32)."
      )


class KerasModel:
  """One Keras model built by a model function, as (init, apply) over a dict of tensors."""

  def __init__(
    self,
    model_fn: Callable[..., keras.Model],
    kwargs: Mapping[str, Any],
    example_x: nests.Nest | None = None,
    name: str = "",
  ):
    """Builds the model with model_fn(**kwargs) and records each weight's initialiser.

    Args:
      model_fn: returns a keras.Model (built, or built here by a call on `example_x`).
      kwargs: the keyword arguments of model_fn.
      example_x: a few inputs, to build a model that model_fn returns unbuilt.
      name: how errors name the model (e.g. its function and arguments).

    Raises:
      BadModelError: model_fn does not return a keras.Model, or returns one with no trainable
        weights or with trainable weights that are not float32.
    """
    self.name = name or getattr(model_fn, "__name__", "model")
    with keras.StatelessScope():
      model = model_fn(**kwargs)
      if not isinstance(model, keras.Model):
        raise BadModelError(f"{self.name} must return a keras.Model, got {type(model).__name__}.")
      if not model.built and example_x is not None:
        model(example_x)
      # Read before the scope closes: closing it initialises the variables and drops these.
      initializers = {id(v): getattr(v, "_initializer", None) for v in model.variables}
    _check_weights(model, self.name)
    self.model = model
    self.keys = _keys(model)
    self._initializers = [initializers[id(v)] for v in model.trainable_variables]
    # A weight made before model_fn ran (a layer shared with another model) keeps its value.
    self._fixed = {
      i: v.numpy() for i, v in enumerate(model.trainable_variables) if self._initializers[i] is None
    }
    self._seed_generator = keras.random.SeedGenerator(0)
    # The built values, as plain tensors (a tf.Variable must not be read in the inner loop).
    self.state = tuple(tf.convert_to_tensor(v.value) for v in model.non_trainable_variables)
    self._is_seed_state = [v.name == _SEED_STATE_NAME for v in model.non_trainable_variables]
    self.checked = False  # Set by check_model.

  def init(self, seed: random_seeds.SeedLike) -> dict[str, tf.Tensor]:
    """The trainable weights as the model's initialisers draw them from `seed` (stateless)."""
    seed = random_seeds.as_seed(seed)
    variables = self.model.trainable_variables
    return {
      key: self._initial_value(i, variable, random_seeds.fold_in(seed, i))
      for i, (key, variable) in enumerate(zip(self.keys, variables, strict=True))
    }

  def _initial_value(self, index: int, variable: keras.Variable, seed: tf.Tensor) -> tf.Tensor:
    """Weight `index` drawn by its initialiser from `seed`."""
    if index in self._fixed:
      return tf.constant(self._fixed[index])
    initializer = self._initializers[index]
    if hasattr(initializer, "seed"):
      # Keras's random initialisers draw from `seed`, a SeedGenerator, whose state the scope
      # maps to this weight's stateless seed.
      initializer = copy.copy(initializer)
      initializer.seed = self._seed_generator
    state = self._seed_generator.state
    mapping = [(state, tf.cast(seed, state.dtype))]
    with keras.StatelessScope(state_mapping=mapping):
      value = initializer(tuple(variable.shape), dtype=variable.dtype)
    return tf.convert_to_tensor(value, tf.float32)

  def apply(
    self,
    params: Mapping[str, tf.Tensor],
    state: tuple[tf.Tensor, ...],
    x: nests.Nest,
    seed: random_seeds.SeedLike,
  ) -> tuple[nests.Nest, tf.Tensor]:
    """The model's outputs on `x` in training mode, and the sum of its own losses.

    Args:
      params: the trainable weights, as `init` gives them.
      state: the non-trainable weights (`self.state`, or a nest like it read as task data).
      x: a batch of inputs.
      seed: the seed of the layers' random draws (Dropout masks).

    Returns:
      (outputs, extra_loss): extra_loss is the float32 sum of the model's regularisation and
      added losses, 0 if it has none.
    """
    non_trainable = list(state)
    seed_index = 0
    for i, is_seed in enumerate(self._is_seed_state):
      if is_seed:
        drawn = random_seeds.fold_in(seed, seed_index)
        non_trainable[i] = tf.cast(drawn, non_trainable[i].dtype)
        seed_index += 1
    outputs, _, losses = self.model.stateless_call(
      [params[k] for k in self.keys], non_trainable, x, training=True, return_losses=True
    )
    extra = [tf.reduce_sum(tf.cast(loss, tf.float32)) for loss in losses]
    return outputs, tf.add_n(extra) if extra else tf.constant(0.0)


CLASSIFICATION = ("sparse", "categorical")  # The kinds of loss whose tasks have an accuracy.


def resolve_loss(loss: str | Callable, from_logits: bool = True) -> tuple[Callable, str]:
  """A loss function of (y_true, y_pred) and its kind.

  The kind is "sparse" (integer labels, one output per class) or "categorical" (one-hot targets)
  for those cross-entropies, "other" for Keras's other losses (outputs shaped like the targets),
  "custom" for a function of the user's (any outputs).

  Args:
    loss: a Keras loss name ("sparse_categorical_crossentropy", "mse", ...) or a function.
    from_logits: passed to a named loss that takes it.

  Raises:
    BadModelError: a name Keras does not know.
  """
  if not isinstance(loss, str):
    return loss, "custom"
  try:
    fn = keras.losses.get(loss)
  except ValueError as e:
    raise BadModelError(f"Keras has no loss named {loss!r}; use a keras.losses name.") from e
  if inspect.isfunction(fn) and "from_logits" in inspect.signature(fn).parameters:
    fn = functools.partial(fn, from_logits=from_logits)
  name = loss.lower().replace("_", "")
  if "sparsecategorical" in name:
    return fn, "sparse"
  return fn, "categorical" if "categorical" in name else "other"


def _shape(x: Any) -> str:
  return str([None if d is None else int(d) for d in x.shape])


def _output_problem(outputs: Any, y: tf.Tensor, kind: str, num_classes: int | None) -> str | None:
  """What is wrong with outputs for targets y under a loss of `kind`, or None."""
  if kind == "custom" or not isinstance(outputs, tf.Tensor):
    return None  # Only the loss function can tell.
  out_shape, y_shape = list(outputs.shape[1:]), list(y.shape[1:])
  if kind == "sparse":
    if out_shape != [num_classes]:
      return f"the task's {num_classes} classes need outputs [batch, {num_classes}]"
  elif [d for d in out_shape if d != 1] != [d for d in y_shape if d != 1]:
    return f"the targets are {_shape(y)}"
  return None


def check_model(
  model: KerasModel,
  loss_fn: Callable,
  kind: str,
  examples: tuple[nests.Nest, nests.Nest],
  num_classes: int | None,
) -> None:
  """Raises BadModelError unless `model`'s outputs fit the targets and the loss.

  Runs the model once, eagerly, on a few examples: a sparse classification loss needs outputs
  [batch, num_classes], Keras's other losses outputs shaped like the targets (up to axes of size
  1), and every loss must give a scalar or one value per example. Marks the model `checked`.

  Args:
    model: the model.
    loss_fn: the loss, a function of (y_true, y_pred) (`resolve_loss`).
    kind: the loss's kind (`resolve_loss`).
    examples: (x, y) of a few examples.
    num_classes: the classes of a sparse classification loss.

  Raises:
    BadModelError: outputs that do not fit the targets; a loss that fails on them, or that gives
      neither a scalar nor one value per example.
  """
  x, y = examples
  outputs, _ = model.apply(model.init(0), model.state, x, 0)
  first_y = tf.convert_to_tensor(tf.nest.flatten(y)[0])
  problem = _output_problem(outputs, first_y, kind, num_classes)
  if problem:
    raise BadModelError(
      f"The model {model.name} gives outputs {_shape(outputs)} but {problem}; change its output "
      "layer (a model function with a num_classes argument is given the task's)."
    )
  try:
    value = tf.convert_to_tensor(loss_fn(y, outputs))
  except (ValueError, TypeError, tf.errors.InvalidArgumentError) as e:
    raise BadModelError(
      f"The loss fails on the outputs of {model.name} and the targets {_shape(first_y)}: "
      f"{' '.join(str(e).split())[:300]}"
    ) from e
  n = first_y.shape[0]
  if value.shape.rank > 1 or (value.shape.rank == 1 and value.shape[0] != n):
    raise BadModelError(
      f"The loss gives a value of shape {_shape(value)} for a batch of {n}; it must give a "
      f"scalar or one value per example ([{n}]): reduce it over the other axes."
    )
  model.checked = True
