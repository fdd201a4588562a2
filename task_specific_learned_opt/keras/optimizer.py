"""A Keras 3 optimizer that applies a trained learned optimizer (MLPLOpt, paper App. D.1).

  theta_dir = "runs/quickstart/theta"  # what bin/train_local exports (checkpoints.save_theta)
  model.compile(optimizer=LearnedOptimizer.from_directory(theta_dir), loss=..., metrics=[...])
  model.fit(...)  # with callbacks=[batch_norm.ReestimateBatchNorm(x_train)] if it has batch norm

A shipped theta loads by name: LearnedOptimizer.from_pretrained("bn_cnn_valid"); list_pretrained()
lists them with the one-line summary of each one's card (cards.py).

The update is MLPLOpt's own: `LearnedOptimizer` maps its Keras variables onto the state of
`lopt.opt_fn(theta)` (an `MLPLOptState`: the parameters, their momenta, the step count) and calls
that Optimizer's `update`, so every MLPLOpt option (feature set, the no-momentum and no-time
ablations, hidden size, step scales, decays, time scales, "fast" or "reference" implementation)
acts here as in the project's inner loop. Per trainable variable w it keeps one optimizer
variable, the momenta [num_decays, *w.shape] (decay-major, as MLPLOptState stores them); MLPLOpt
keeps no other per-parameter state. The features of w are normalised over the elements of w
alone, as for one tensor of the inner loop. The step count is `optimizer.iterations`, so the first
update uses t = 0 in the time features.

Keras's options:
  - learning_rate (default 1.0, a no-op) multiplies the learned step: w <- w - lr * step, where
    step is what MLPLOpt would subtract. Schedules and callbacks that change the learning rate
    therefore act as a multiplier on the learned step; the momenta do not depend on it.
  - weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_*, loss_scale_factor and
    gradient_accumulation_steps are the base class's and behave as for any Keras optimizer. Keras
    scales weight decay by the learning rate: with lr = 1, weight_decay is the fraction of w
    removed per step. With gradient accumulation the step count is that of applied updates.
  - Sparse gradients (tf.IndexedSlices, e.g. from an Embedding) are converted to dense tensors:
    the learned update reads every element (its features include w and the momenta), so every row
    of the table moves each step, as in the inner loop. Memory is that of a dense gradient.
  - The update is computed in float32 (theta and the momenta are float32); a variable of another
    float dtype is read as float32 and its new value cast back.

The class is registered with Keras (package "task_specific_learned_opt"), so a model saved with
`model.save("m.keras")` loads with `keras.models.load_model` once this module is imported: the
config carries theta (nested lists) and the MLPLOpt options (`lopt_options`), the saved
optimizer variables carry the momenta and step count, and training continues exactly where it
stopped. A theta whose shapes the MLPLOpt does not read is refused in one line that names the
MLPLOpt options that would read it (`checkpoints.check_theta_shapes`).

Without a tf.distribute strategy (the usual case, and `model.fit` on one device) all variables are
updated by one call of `opt.update` on the whole list, which lets the fast kernel put the small
tensors through one shared pipeline, as the inner loop does (each still normalised by its own
statistics). Under a strategy, Keras's per-variable path (`update_step`) calls the same `update`
on one variable at a time; both compute the same function.
"""

import gc
from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import cards, checkpoints
from task_specific_learned_opt.keras import batch_norm, lopt_options
from task_specific_learned_opt.learned_optimizers import mlp_lopt

KERAS_PACKAGE = "task_specific_learned_opt"
_THETA_KEYS = {"hidden": ("w", "b"), "output": ("w", "b")}


def _theta_arrays(theta: Any) -> dict:
  """theta as float32 numpy arrays {"hidden": {"w", "b"}, "output": {"w", "b"}}."""
  try:
    if set(theta) != set(_THETA_KEYS) or any(
      set(theta[layer]) != set(names) for layer, names in _THETA_KEYS.items()
    ):
      raise KeyError
    return {
      layer: {name: np.asarray(theta[layer][name], np.float32) for name in names}
      for layer, names in _THETA_KEYS.items()
    }
  except (KeyError, TypeError, ValueError) as e:
    raise ValueError(
      "theta must be the nest MLPLOpt.init returns, {'hidden': {'w', 'b'}, 'output': {'w', 'b'}} "
      f"of float arrays or tensors (or nested lists); got {type(theta).__name__} "
      f"{list(theta) if isinstance(theta, Mapping) else ''}."
    ) from e


class _Rule:
  """MLPLOpt, theta and its update rule `lopt.opt_fn(theta)`.

  A plain object, so that neither Keras's nor TensorFlow's attribute tracking wraps theta.
  """

  def __init__(self, lopt: mlp_lopt.MLPLOpt, theta: dict):
    self.lopt = lopt
    self.theta = theta
    self.opt = lopt.opt_fn(theta)


@keras.saving.register_keras_serializable(package=KERAS_PACKAGE, name="LearnedOptimizer")
class LearnedOptimizer(keras.optimizers.Optimizer):
  """The learned optimizer MLPLOpt at a fixed theta, as a Keras 3 optimizer.

  See the module docstring for what it keeps per variable and how Keras's options act.
  """

  def __init__(
    self,
    theta: Any,
    lopt: mlp_lopt.MLPLOpt | Mapping | None = None,
    learning_rate: Any = 1.0,
    name: str = "learned_optimizer",
    **kwargs: Any,
  ):
    """Makes the optimizer.

    Args:
      theta: the meta-parameters, the nest `lopt.init` returns (tensors, arrays or nested lists).
      lopt: the MLPLOpt theta was trained for (its options must match theta's shapes), or a dict
        of its options (what get_config stores); None is the paper's default `MLPLOpt()`.
      learning_rate: a multiplier of the learned step (1.0: the step MLPLOpt takes): a float, a
        keras.optimizers.schedules.LearningRateSchedule or a callable, as for any optimizer.
      name: the optimizer's name (prefix of its variables).
      **kwargs: the other arguments of keras.optimizers.Optimizer (weight_decay, clipnorm,
        clipvalue, global_clipnorm, use_ema, ema_momentum, ema_overwrite_frequency,
        loss_scale_factor, gradient_accumulation_steps).

    Raises:
      checkpoints.ThetaMismatchError: theta's shapes are not those `lopt` reads.
      ValueError: theta is not a nest like MLPLOpt.init's, or an unknown option.
      TypeError: `lopt` is not an MLPLOpt.
    """
    lopt = lopt_options.as_lopt(lopt)
    arrays = _theta_arrays(theta)
    checkpoints.check_theta_shapes(
      checkpoints.theta_shapes(arrays), lopt, "theta", advice=lopt_options.advice
    )
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self._rule = _Rule(lopt, arrays)

  @classmethod
  def from_directory(
    cls, theta_dir: str, lopt: mlp_lopt.MLPLOpt | Mapping | None = None, **kwargs: Any
  ) -> "LearnedOptimizer":
    """The optimizer for the theta exported in `theta_dir` (checkpoints.save_theta).

    Prints the one-line summary of the theta's card (cards.py), if it has one.

    Args:
      theta_dir: the export, e.g. "runs/quickstart/theta" (bin/train_local writes it to
        <train_dir>/theta).
      lopt: the MLPLOpt it was trained for (or a dict of its options); None takes the options
        on the theta's card (card.json), or is `MLPLOpt()` for a theta without one.
      **kwargs: the other arguments of LearnedOptimizer (learning_rate, weight_decay, ...).

    Returns:
      A LearnedOptimizer with that theta.

    Raises:
      FileNotFoundError: no export in `theta_dir` (the message says where one is, if the
        directory is a train dir).
      cards.CardMismatchError: `lopt` differs from the options on the theta's card; one line
        naming the option and the fix.
      checkpoints.ThetaMismatchError: the export's shapes are not those `lopt` reads (another
        feature set, ablation or hidden size); one line naming both and the fix.
    """
    card = cards.read_card(checkpoints.find_theta_dir(theta_dir))
    if lopt is None and card and card.get("options"):
      lopt = card["options"]
    if card:
      print(f"Theta card: {card['summary']}", flush=True)
    lopt = lopt_options.as_lopt(lopt)
    theta = checkpoints.load_theta(theta_dir, lopt, advice=lopt_options.advice)
    return cls(theta, lopt=lopt, **kwargs)

  @classmethod
  def from_pretrained(
    cls, name: str, lopt: mlp_lopt.MLPLOpt | Mapping | None = None, **kwargs: Any
  ) -> "LearnedOptimizer":
    """The optimizer for a theta shipped in pretrained/, by short name (`list_pretrained`).

    Args:
      name: e.g. "bn_cnn_valid" (pretrained/generated_bn_cnn_valid) or the directory's name.
      lopt: None (the options on its card), or options that must match them.
      **kwargs: the other arguments of LearnedOptimizer (learning_rate, weight_decay, ...).

    Raises:
      cards.UnknownThetaError: no shipped theta of that name; the message lists the names.
    """
    return cls.from_directory(cards.pretrained_theta_dir(name), lopt=lopt, **kwargs)

  @property
  def lopt(self) -> mlp_lopt.MLPLOpt:
    """The learned optimizer whose update this applies."""
    return self._rule.lopt

  @property
  def theta(self) -> dict:
    """Its meta-parameters, float32 numpy arrays {"hidden": {"w", "b"}, "output": {"w", "b"}}."""
    return self._rule.theta

  def build(self, variables: Sequence[Any]) -> None:
    """Creates the momenta [num_decays, *shape] (float32, zeros) of every variable.

    Args:
      variables: the trainable variables the optimizer will update.
    """
    if self.built:
      return
    super().build(variables)
    self._momenta = [
      None if self._overwrite_variable_with_gradient(v) else self._add_momenta(v) for v in variables
    ]

  def _add_momenta(self, variable: Any) -> keras.Variable:
    # As add_variable_from_reference, but of shape [num_decays, *variable.shape] and float32.
    reference = variable.value if isinstance(variable, keras.Variable) else variable
    path = getattr(variable, "path", None) or str(variable.name).replace(":", "_")
    with self._distribution_strategy.extended.colocate_vars_with(reference):
      return self.add_variable(
        shape=(len(self.lopt.decays),) + tuple(variable.shape),
        initializer="zeros",
        dtype="float32",
        name=f"{path.replace('/', '_')}_momenta",
      )

  def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
    """One variable's update (Keras's per-variable path, used under a tf.distribute strategy).

    Args:
      gradient: the variable's gradient (dense or tf.IndexedSlices).
      variable: the variable.
      learning_rate: the multiplier of the learned step.
    """
    self._learned_update([gradient], [variable], learning_rate)

  def _backend_update_step(
    self, grads: Sequence[Any], trainable_variables: Sequence[Any], learning_rate: Any
  ) -> None:
    """All variables in one call of the learned update, unless a tf.distribute strategy is set.

    Args:
      grads: the gradients, after Keras's clipping.
      trainable_variables: their variables.
      learning_rate: the multiplier of the learned step.
    """
    if tf.distribute.has_strategy():
      super()._backend_update_step(grads, trainable_variables, learning_rate)
    else:
      self._learned_update(grads, trainable_variables, learning_rate)

  def _learned_update(
    self, grads: Sequence[Any], variables: Sequence[Any], learning_rate: Any
  ) -> None:
    """Maps the variables onto an MLPLOptState, applies opt_fn(theta)'s update, writes back."""
    if not getattr(self, "_batch_norm_checked", False):
      self._batch_norm_checked = True
      self._warn_about_batch_norm()
    momenta = [self._momenta[self._get_variable_index(v)] for v in variables]
    params = [tf.cast(_read(v), tf.float32) for v in variables]
    state = mlp_lopt.MLPLOptState(
      params=params,
      momenta=[_read(m) for m in momenta],
      iteration=tf.cast(self.iterations, tf.int32),
    )
    grads = [tf.cast(_dense(g), tf.float32) for g in grads]
    new_state = self._rule.opt.update(state, grads)
    new_params = self._rule.opt.get_params(new_state)
    scale = tf.cast(learning_rate, tf.float32)
    for variable, momentum, old, new, new_momentum in zip(
      variables, momenta, params, new_params, new_state.momenta, strict=True
    ):
      self.assign(momentum, new_momentum)
      # old + scale * (new - old), written so that scale = 1 gives exactly `new`.
      self.assign(variable, new - (1.0 - scale) * (new - old))

  def _warn_about_batch_norm(self) -> None:
    """One warning if it trains a BatchNormalization layer whose statistics nothing re-estimates.

    Runs once, at the first update (in model.fit: when the train step is traced, after the
    callbacks' on_train_begin). A batch_norm.ReestimateBatchNorm callback marks the optimizer it
    re-estimates for; otherwise the BatchNormalization layers that own a trained variable are
    looked up among the live objects (once per optimizer, about 0.2 s).
    """
    if getattr(self, batch_norm.REESTIMATED_ATTRIBUTE, False):
      return
    trained = {id(v) for v in getattr(self, "_trainable_variables", ())}
    names = sorted(
      layer.name
      for layer in gc.get_objects()
      if issubclass(type(layer), keras.layers.BatchNormalization)
      and layer.trainable
      and any(id(w) in trained for w in layer.trainable_weights)
    )
    if names:
      logging.warning(
        "LearnedOptimizer trains BatchNormalization layers (%s) whose moving statistics lag "
        "behind the learned steps, so inference with them is off; re-estimate them after "
        "training: model.fit(..., callbacks=[batch_norm.ReestimateBatchNorm(x_train, "
        "batch_size=...)]) or batch_norm.reestimate(model, x_train) "
        "(task_specific_learned_opt.keras.batch_norm, docs/keras.md).",
        ", ".join(names),
      )

  def get_config(self) -> dict:
    """The config: Keras's options, theta as nested lists and the MLPLOpt options.

    Returns:
      A JSON-serialisable dict; `from_config` rebuilds the optimizer (without its state).
    """
    config = super().get_config()
    config.update(
      {
        "theta": {
          layer: {name: self.theta[layer][name].tolist() for name in names}
          for layer, names in _THETA_KEYS.items()
        },
        "lopt": lopt_options.lopt_options(self.lopt),
      }
    )
    return config


def list_pretrained() -> dict[str, str]:
  """{short name: the one-line summary of its card} of every theta shipped in pretrained/.

  Each name loads with `LearnedOptimizer.from_pretrained(name)`.
  """
  return cards.list_pretrained()


def _read(variable: Any) -> tf.Tensor:
  """The value of a Keras or TensorFlow variable as a tensor."""
  if isinstance(variable, keras.Variable):
    variable = variable.value
  return tf.convert_to_tensor(variable)


def _dense(gradient: Any) -> tf.Tensor:
  """A gradient as a dense tensor (tf.IndexedSlices, e.g. from an Embedding, are densified)."""
  if isinstance(gradient, tf.IndexedSlices):
    return tf.convert_to_tensor(gradient)
  return gradient
