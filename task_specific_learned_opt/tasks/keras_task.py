"""Learning an optimizer for one's own Keras 3 model and data: tasks and a task family.

A module of the user's holds the model function; gin names it, the data and what varies from
task to task; every binary's --import_module imports the module before gin is parsed:

  # my_tasks.py
  import gin, keras

  @gin.configurable
  def build_model(width=32, activation="relu", num_classes=10):
    return keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Rescaling(1 / 255),
      keras.layers.Flatten(), keras.layers.Dense(width, activation=activation),
      keras.layers.Dense(num_classes)])

  # my_experiment.gin: the quickstart's outer-training, on these tasks
  include "quickstart.gin"
  outer_training.family = @KerasModelFamily()
  Evaluator.test_family = @eval/KerasModelFamily()
  compare_with_tuned_baseline.family = @eval/KerasModelFamily()
  eval/KerasModelFamily.split = "outer_test"
  KerasModelFamily.model_fn = @my_tasks.build_model
  KerasModelFamily.data = @tfds_data()      # or @my_tasks.load_data(): arrays or tf.data
  tfds_data.name = "mnist"
  KerasModelFamily.variations = {"width": [16, 32, 64], "activation": ["relu", "tanh"]}
  KerasModelFamily.classes_per_task = 3      # the outer-test split holds 3 of the 10 digits

  bin/train_local --import_module my_tasks --gin_file my_experiment.gin --train_dir runs/mine

A task (`KerasTask`) trains one model on examples held in memory (keras_data.py). Its parameters
are the model's trainable weights, drawn per init seed by the model's own initialisers; its loss
is a Keras loss (a name, with from_logits, or a function of (y_true, y_pred)) of
`model.stateless_call(..., training=True)` on a batch, averaged over the batch, plus the model's
own losses (regularisers), as a Keras training step computes it (keras_model.py); its batches
are drawn statelessly from the seed. A classification task also has an accuracy.

A family (`KerasModelFamily`) draws from each task seed one value of each hyper-parameter of
`variations` (the model function also gets num_classes if it takes that argument),
`classes_per_task` classes relabelled 0..k-1, and a `data_fraction` of the train examples.
Held-out tasks: with `split` "outer_train" or "outer_test" ("all": no split), the classes are
split as ClassSubsetFamily splits them (class_source.split_classes: a fixed permutation, the
first `outer_train_fraction` outer-train), or, without class subsets, the examples of every
split are; evaluation on outer-test tasks then uses classes or examples that no outer-training
task saw. The family checks its data, its smallest possible task and (up to 16 variants) every
variant's model when it is made, so a mistake fails in one line before any training.

Non-trainable state: batch normalisation uses the batch's statistics in every split (training
mode, as the project's own networks do); its moving statistics are not carried through the inner
loop, since the optimizer does not update them and the loop's state would depend on the model.
Inference mode would read the moving statistics the model was built with, which describe no
trained model, so valid and test losses are measured in training mode too. Dropout is
therefore active in every split's loss (its masks follow the batch's seed).

Every tensor a task reads, its examples and non-trainable values, is in `task.data`, keyed by
the task's model variant: `with_data` takes that variant's model, so a function compiled for a
family's tasks traces once per variant (the key is part of the data's structure) and never runs
one variant's data through another's model.
"""

import copy
import inspect
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gin
import keras
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import errors, random_seeds
from task_specific_learned_opt.tasks import base, class_source, keras_data, keras_model

DEFAULT_BATCH_SIZE = 128
OUTER_TRAIN_FRACTION = 0.7  # As ClassSubsetFamily: 700 of ImageNet's 1000 classes (Sec. 4.2).
MAX_CHECKED_VARIANTS = 16  # Up to this many variants are built and checked with the family.
_PROBE_EXAMPLES = 2


class KerasFamilyError(errors.UserError, ValueError):
  """A KerasModelFamily setting that does not fit the model function, the loss or the data."""


def _probe(examples: keras_data.Split) -> keras_data.Split:
  """The first few examples, to check (or build) a model on."""
  return keras_data.take(
    examples, np.arange(min(_PROBE_EXAMPLES, keras_data.num_examples(examples)))
  )


class KerasTask(base.Task):
  """A Keras model trained on examples held in memory, by split (module docstring)."""

  def __init__(
    self,
    model: keras_model.KerasModel,
    splits: Mapping[str, keras_data.Split],
    loss: str | Callable = "sparse_categorical_crossentropy",
    from_logits: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    num_classes: int | None = None,
    name: str = "keras_task",
    variant: str = "model",
    models: Callable[[str], keras_model.KerasModel] | None = None,
  ):
    """Makes the task and checks that the model fits its data, its loss and the batch size.

    Args:
      model: the model.
      splits: {"train", "valid", "test"} -> keras_data.Split of arrays or tensors.
      loss: a Keras loss name or a function of (y_true, y_pred) (keras_model.resolve_loss).
      from_logits: passed to a named loss that takes it.
      batch_size: examples per batch.
      num_classes: the classes of a sparse classification loss (default: the largest label + 1).
      name: a readable name.
      variant: the key of `model` among its family's models.
      models: variant -> model, for `with_data` (default: only this model).

    Raises:
      keras_data.BadDataError: a split with fewer examples than `batch_size`.
      keras_model.BadModelError: outputs that do not fit the targets or the loss.
    """
    self.loss_fn, self.kind = keras_model.resolve_loss(loss, from_logits)
    self.batch_size = int(batch_size)
    for split in base.SPLITS:
      size = keras_data.num_examples(splits[split])
      if size < self.batch_size:
        raise keras_data.BadDataError(
          f"The {split} split of {name} has {size} examples, fewer than the batch size "
          f"{self.batch_size}; use a smaller batch_size or more data."
        )
    self.model, self.variant, self.name = model, variant, name
    self._models = models or {variant: model}.__getitem__
    self.splits = {s: keras_data.to_tensors(splits[s]) for s in base.SPLITS}
    self.state = model.state
    if self.kind == "sparse" and num_classes is None:
      num_classes = 1 + max(int(tf.reduce_max(self.splits[s].y)) for s in base.SPLITS)
    self.num_classes = num_classes
    if not model.checked:
      keras_model.check_model(model, self.loss_fn, self.kind, _probe(splits["train"]), num_classes)

  @property
  def data(self) -> dict:
    """{variant: {"train", "valid", "test": keras_data.Split, "state": non-trainable values}}."""
    return {self.variant: {**self.splits, "state": self.state}}

  def with_data(self, data: dict) -> "KerasTask":
    """A shallow copy of this task reading `data` (like `self.data`), with its variant's model."""
    ((variant, task_data),) = data.items()
    task = copy.copy(self)
    task.variant, task.model = variant, self._models(variant)
    task.splits = {s: keras_data.Split(*task_data[s]) for s in base.SPLITS}
    task.state = tuple(task_data["state"])
    return task

  def init_params(self, seed: random_seeds.SeedLike) -> dict:
    """The model's trainable weights, drawn by its initialisers from `seed`."""
    return self.model.init(seed)

  def batch(self, split: str, seed: random_seeds.SeedLike) -> dict:
    """`batch_size` examples of `split` drawn with replacement, the indices from `seed`.

    Returns:
      {"x": inputs, "y": targets, "seed": the int32 [2] seed of the model's random layers}.

    Raises:
      ValueError: an unknown split.
    """
    base.check_split(split)
    data = self.splits[split]
    examples = keras_data.gather(data, keras_data.sample_indices(data, self.batch_size, seed))
    return {"x": examples.x, "y": examples.y, "seed": random_seeds.as_seed(seed)}

  def outputs(self, params: dict, batch: dict) -> tuple[Any, tf.Tensor]:
    """The model's outputs on batch["x"] (training mode) and the sum of its own losses."""
    return self.model.apply(params, self.state, batch["x"], batch["seed"])

  def loss(self, params: dict, batch: dict) -> tf.Tensor:
    """The loss averaged over the batch, plus the model's own losses (regularisers)."""
    outputs, extra = self.outputs(params, batch)
    return tf.reduce_mean(tf.cast(self.loss_fn(batch["y"], outputs), tf.float32)) + extra


class KerasClassificationTask(KerasTask):
  """A KerasTask with a (sparse) categorical cross-entropy, which also has an accuracy."""

  def accuracy(self, params: dict, batch: dict) -> tf.Tensor:
    """The fraction of the batch whose largest output is at the label, float32 scalar."""
    outputs, _ = self.outputs(params, batch)
    labels = batch["y"] if self.kind == "sparse" else tf.argmax(batch["y"], axis=-1)
    predictions = tf.argmax(outputs, axis=-1, output_type=tf.int32)
    return tf.reduce_mean(tf.cast(tf.equal(predictions, tf.cast(labels, tf.int32)), tf.float32))


def make_task(
  model: keras_model.KerasModel, splits: Mapping[str, keras_data.Split], **kwargs: Any
) -> KerasTask:
  """A KerasClassificationTask for a (sparse) categorical loss, else a KerasTask (same args)."""
  loss = kwargs.get("loss", "sparse_categorical_crossentropy")
  kind = keras_model.resolve_loss(loss, kwargs.get("from_logits", True))[1]
  classifies = kind in keras_model.CLASSIFICATION
  return (KerasClassificationTask if classifies else KerasTask)(model, splits, **kwargs)


def _parameters(fn: Callable) -> tuple[set[str], bool]:
  """The keyword parameters of `fn` and whether it takes **kwargs."""
  parameters = inspect.signature(fn).parameters.values()
  names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
  return names, any(p.kind == p.VAR_KEYWORD for p in parameters)


def _check_variations(
  model_fn: Callable, variations: Mapping[str, Sequence], fn_name: str
) -> dict[str, list]:
  """`variations` as {name: list of values}, each name a parameter of `model_fn`."""
  names, any_keyword = _parameters(model_fn)
  checked = {}
  for name, values in variations.items():
    if not any_keyword and name not in names:
      raise KerasFamilyError(
        f"KerasModelFamily.variations names {name!r}, which {fn_name} does not take (it takes "
        f"{', '.join(sorted(names)) or 'no arguments'})."
      )
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
      raise KerasFamilyError(
        f"KerasModelFamily.variations[{name!r}] must be a non-empty list of values, got {values!r}."
      )
    checked[name] = list(values)
  return checked


@gin.configurable
class KerasModelFamily(base.TaskFamily):
  """Tasks of a user's Keras model function and data (module docstring)."""

  def __init__(
    self,
    model_fn: Callable[..., keras.Model] = gin.REQUIRED,
    data: Any = gin.REQUIRED,
    loss: str | Callable = "sparse_categorical_crossentropy",
    from_logits: bool = True,
    batch_size: int = DEFAULT_BATCH_SIZE,
    variations: Mapping[str, Sequence] | None = None,
    split: str = "outer_train",
    classes_per_task: int | None = None,
    data_fraction: float = 1.0,
    outer_train_fraction: float = OUTER_TRAIN_FRACTION,
    valid_fraction: float = keras_data.DEFAULT_VALID_FRACTION,
    num_classes: int | None = None,
    max_data_bytes: int = keras_data.MAX_DATA_BYTES,
    name: str | None = None,
  ):
    """Reads and checks the data, and builds and checks the model of every variant (up to 16).

    Args:
      model_fn: returns a new keras.Model; called with one value of each of `variations`, and
        with num_classes if it takes that argument and the loss classifies.
      data: {"train", "test"[, "valid"]} -> (x, y) arrays or tf.data.Dataset, or a function
        returning it (keras_data.in_memory; tfds_data for a TFDS dataset).
      loss: a Keras loss name or a function of (y_true, y_pred).
      from_logits: passed to a named loss that takes it.
      batch_size: examples per inner batch.
      variations: {model_fn argument: values}; each task draws one value of each.
      split: "outer_train", "outer_test" or "all": which classes (with classes_per_task) or which
        examples of every split the tasks use.
      classes_per_task: classes each task draws from its split's classes (None: every class).
      data_fraction: the fraction of the train examples each task draws.
      outer_train_fraction: the fraction of the classes (or examples) that are outer-train.
      valid_fraction: the train examples that become inner-valid when `data` has no "valid".
      num_classes: the classes of a sparse loss (default: the largest label + 1).
      max_data_bytes: the most bytes the data may hold (2 GiB).
      name: the family's name (default from model_fn and split).

    Raises:
      KerasFamilyError, keras_data.BadDataError, keras_data.DataTooLargeError,
      keras_model.BadModelError: a setting, the data or the model that cannot make tasks.
    """
    if split not in class_source.CLASS_SPLITS:
      raise KerasFamilyError(f"KerasModelFamily.split must be one of {class_source.CLASS_SPLITS}.")
    if not 0.0 < data_fraction <= 1.0:
      raise KerasFamilyError(
        f"KerasModelFamily.data_fraction must be in (0, 1], not {data_fraction}."
      )
    self.model_fn, self.loss, self.from_logits = model_fn, loss, bool(from_logits)
    self.kind = keras_model.resolve_loss(loss, from_logits)[1]
    fn_name = getattr(model_fn, "__name__", "model_fn")
    self.variations = _check_variations(model_fn, variations or {}, fn_name)
    self.batch_size, self.data_fraction = int(batch_size), float(data_fraction)
    self.split, self.classes_per_task = split, classes_per_task
    splits = keras_data.in_memory(data, valid_fraction, max_data_bytes)
    self.num_classes = keras_data.num_classes(splits, self.kind, num_classes)
    if classes_per_task is None:
      self._pool = keras_data.outer_split(splits, split, outer_train_fraction)
    else:
      if self.kind != "sparse":
        raise KerasFamilyError(
          "KerasModelFamily.classes_per_task needs integer labels and a sparse categorical loss."
        )
      num_outer_train = max(1, round(self.num_classes * outer_train_fraction))
      self.class_ids = class_source.classes_of(self.num_classes, num_outer_train, split)
      if not 0 < classes_per_task <= len(self.class_ids):
        raise KerasFamilyError(
          f"Cannot draw {classes_per_task} classes from the {len(self.class_ids)} classes of the "
          f"{split} split."
        )
      self._pool = splits
    self._tensors = None
    self._models = {}
    self.name = name or f"keras_{fn_name}_{split}"
    self._check_task_sizes()
    self._check_variants()

  def _check_task_sizes(self) -> None:
    """Raises BadDataError if a task could get fewer examples of a split than a batch."""
    for split, examples in self._pool.items():
      size = keras_data.num_examples(examples)
      if self.classes_per_task is not None:  # The task of the smallest classes.
        counts = np.bincount(np.asarray(examples.y), minlength=self.num_classes)[self.class_ids]
        size = int(np.sort(counts)[: self.classes_per_task].sum())
      if split == "train" and self.data_fraction < 1.0:
        size = max(1, round(size * self.data_fraction))
      if size < self.batch_size:
        raise keras_data.BadDataError(
          f"A task of {self.name} can get as few as {size} {split} examples, fewer than the "
          f"batch size {self.batch_size}; use a smaller batch_size or more data."
        )

  def _task_classes(self) -> int | None:
    """The classes of each task's classification loss (None for another loss)."""
    return self.classes_per_task or self.num_classes

  def _check_variants(self) -> None:
    """Builds and checks every variant's model, if there are at most MAX_CHECKED_VARIANTS."""
    combinations = list(itertools.product(*(range(len(v)) for v in self.variations.values())))
    if len(combinations) > MAX_CHECKED_VARIANTS:
      return  # Each is checked by the first task that uses it.
    train = _probe(self._pool["train"])
    if self.classes_per_task is not None:  # Any labels of the task's range do for a check.
      train = keras_data.Split(train.x, np.zeros_like(np.asarray(train.y)))
    for indices in combinations:
      model = self._model(dict(zip(self.variations, indices, strict=True)))[1]
      if not model.checked:
        loss_fn = keras_model.resolve_loss(self.loss, self.from_logits)[0]
        keras_model.check_model(model, loss_fn, self.kind, train, self._task_classes())

  def _model(self, indices: Mapping[str, int]) -> tuple[str, keras_model.KerasModel]:
    """The variant key and model of the chosen values (indices into `variations`)."""
    kwargs = {name: self.variations[name][i] for name, i in indices.items()}
    key = (
      ",".join(
        f"{name}={kwargs[name]!r}"
        if isinstance(kwargs[name], (str, int, float, bool))
        else f"{name}#{i}"
        for name, i in sorted(indices.items())
      )
      or "model"
    )
    if "num_classes" in _parameters(self.model_fn)[0] and self.kind in keras_model.CLASSIFICATION:
      kwargs["num_classes"] = self._task_classes()
    if key not in self._models:
      fn_name = getattr(self.model_fn, "__name__", "model_fn")
      described = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
      with tf.init_scope():  # Built eagerly even if asked for inside a trace.
        self._models[key] = keras_model.KerasModel(
          self.model_fn,
          kwargs,
          _probe(self._pool["train"]).x,
          name=f"{fn_name}({described})",
        )
    return key, self._models[key]

  def sample(self, seed: random_seeds.SeedLike) -> KerasTask:
    """The task of `seed`: its model variant, classes and train examples (module docstring)."""
    rng = np.random.default_rng(random_seeds.to_numpy_seed(seed))
    indices = {
      name: int(rng.integers(len(self.variations[name]))) for name in sorted(self.variations)
    }
    splits, details = self._pool, []
    if self.classes_per_task is not None:
      classes = rng.choice(self.class_ids, size=self.classes_per_task, replace=False)
      splits = {s: keras_data.with_classes(examples, classes) for s, examples in splits.items()}
      details.append("classes " + ",".join(str(int(c)) for c in classes))
    if self.data_fraction < 1.0:
      n = keras_data.num_examples(splits["train"])
      keep = np.sort(rng.choice(n, size=max(1, round(n * self.data_fraction)), replace=False))
      splits = {**splits, "train": keras_data.take(splits["train"], keep)}
      details.append(f"{len(keep)} train examples")
    if splits is self._pool:  # Every task reads the same examples: made tensors once.
      self._tensors = self._tensors or {s: keras_data.to_tensors(e) for s, e in splits.items()}
      splits = self._tensors
    key, model = self._model(indices)
    return make_task(
      model,
      splits,
      loss=self.loss,
      from_logits=self.from_logits,
      batch_size=self.batch_size,
      num_classes=self._task_classes(),
      name=f"{self.name}[{'; '.join([key, *details])}]",
      variant=key,
      models=self._models.__getitem__,
    )
