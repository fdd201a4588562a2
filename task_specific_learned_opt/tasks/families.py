"""Task families: 10-class tasks sampled from a class split of a labelled dataset (Sec. 4.2).

A ClassSubsetFamily samples `num_classes_per_task` classes from the outer-train or outer-test
classes of a ClassSource (class_source.split_classes: 700/300 for ImageNet and the generated
family, 70/30 for CIFAR-100), and makes an ImageTask with all the images of those classes:
  - inner-train and inner-valid: the source's train images of each class, split disjointly (the
    last `valid_fraction` of each class's examples, in the source's fixed order, are inner-valid;
    L_valid is measured on them),
  - test: the source's test images of the same classes.
Labels are renumbered 0..9 in the order the classes were drawn.

A MixtureFamily draws each task from one of several families (networks, image sizes, data), for a
learned optimizer outer-trained across problems.
"""

from collections.abc import Sequence
from typing import Any

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import nests, random_seeds
from task_specific_learned_opt.tasks import base, class_source, image_task, networks

OUTER_TRAIN_FRACTION = 0.7  # Paper Sec. 4.2: 700 of ImageNet's 1000 classes.


def _split_examples(images: np.ndarray, valid_fraction: float) -> tuple[np.ndarray, np.ndarray]:
  num_valid = int(round(len(images) * valid_fraction))
  if num_valid < 1 or num_valid >= len(images):
    raise ValueError(
      f"A class with {len(images)} train images cannot give a valid_fraction of "
      f"{valid_fraction} (needs at least one inner-train and one inner-valid image)."
    )
  return images[: len(images) - num_valid], images[len(images) - num_valid :]


def _labelled(per_class: list) -> image_task.LabelledImages:
  images = np.concatenate(per_class, axis=0)
  labels = np.concatenate([np.full(len(x), i, np.int32) for i, x in enumerate(per_class)])
  return image_task.LabelledImages(images, labels)


@gin.configurable
class ClassSubsetFamily(base.TaskFamily):
  """Tasks of `num_classes_per_task` classes drawn from one class split of a ClassSource."""

  def __init__(
    self,
    source: class_source.ClassSource = gin.REQUIRED,
    model: networks.Model | None = None,
    class_split: str = "outer_train",
    num_classes_per_task: int = 10,
    outer_train_fraction: float = OUTER_TRAIN_FRACTION,
    valid_fraction: float = 0.1,
    batch_size: int = image_task.DEFAULT_BATCH_SIZE,
  ):
    """Makes the family.

    Args:
      source: where the images come from.
      model: the network each task trains; the paper's CNN by default.
      class_split: "outer_train", "outer_test", or "all" (for MNIST's single 10-class task).
      num_classes_per_task: classes per task (10 in the paper).
      outer_train_fraction: fraction of the source's classes that are outer-train.
      valid_fraction: fraction of each class's train images held out as inner-valid.
      batch_size: inner batch size.
    """
    self.source = source
    self.model = model if model is not None else networks.paper_cnn()
    self.class_split = class_split
    num_outer_train = int(round(source.num_classes * outer_train_fraction))
    self.class_ids = class_source.classes_of(source.num_classes, num_outer_train, class_split)
    if num_classes_per_task > len(self.class_ids):
      raise ValueError(
        f"Cannot draw {num_classes_per_task} classes from the {len(self.class_ids)} classes of "
        f"{source.name}'s {class_split} split."
      )
    self.num_classes_per_task = int(num_classes_per_task)
    self.valid_fraction = float(valid_fraction)
    self.batch_size = int(batch_size)
    self.name = f"{source.name}_{class_split}_{self.model.name}"

  def sample_classes(self, seed: random_seeds.SeedLike) -> np.ndarray:
    """The class ids of the task with this seed, in label order."""
    rng = np.random.default_rng(random_seeds.to_numpy_seed(seed))
    return rng.choice(self.class_ids, size=self.num_classes_per_task, replace=False)

  def task_for_classes(self, classes: Sequence[int] | np.ndarray) -> image_task.ImageTask:
    """The task made of these classes (label i is classes[i]).

    Args:
      classes: class ids of the source, e.g. sample_classes(seed).

    Returns:
      An ImageTask on all the images of `classes`: the source's train images split into
      inner-train and inner-valid, its test images as test.
    """
    train, valid, test = [], [], []
    for class_id in classes:
      class_train, class_valid = _split_examples(
        self.source.images("train", int(class_id)), self.valid_fraction
      )
      train.append(class_train)
      valid.append(class_valid)
      test.append(self.source.images("test", int(class_id)))
    return image_task.ImageTask(
      model=self.model,
      splits={"train": _labelled(train), "valid": _labelled(valid), "test": _labelled(test)},
      batch_size=self.batch_size,
      name=f"{self.name}[{','.join(str(int(c)) for c in classes)}]",
    )

  def sample(self, seed: random_seeds.SeedLike) -> image_task.ImageTask:
    """The task of the classes sample_classes(seed) draws."""
    return self.task_for_classes(self.sample_classes(seed))


class MemberTask(base.Task):
  """A task of a MixtureFamily: one of its families' tasks, keyed by that family's index."""

  def __init__(self, task: base.Task, member: int):
    """Wraps `task`, drawn from the mixture's family `member`."""
    self.task = task
    self.member = int(member)
    self.name = task.name
    self.trace_key = (self.member, task.trace_key)

  def init_params(self, seed: random_seeds.SeedLike) -> nests.Params:
    """The member task's initial params."""
    return self.task.init_params(seed)

  def loss(self, params: nests.Params, batch: nests.Batch) -> tf.Tensor:
    """The member task's loss."""
    return self.task.loss(params, batch)

  def batch(self, split: str, seed: random_seeds.SeedLike) -> nests.Batch:
    """The member task's batch."""
    return self.task.batch(split, seed)

  @property
  def data(self) -> Any:
    """The member task's data."""
    return self.task.data

  def with_data(self, data: Any) -> "MemberTask":
    """The member task reading `data`, still keyed by its member."""
    return MemberTask(self.task.with_data(data), self.member)

  def __getattr__(self, name: str) -> Any:
    # What else the member task offers (an ImageTask's accuracy, its model) reads through.
    if name == "task":
      raise AttributeError(name)
    return getattr(self.task, name)


@gin.configurable
class MixtureFamily(base.TaskFamily):
  """Tasks of several families: each task's seed draws which family samples it.

  Outer-training on a mixture of problems (networks, image sizes, data) is the paper's stated
  future work (Sec. 6) and what a learned optimizer meant to work outside one family is trained
  on. A task of seed s is family i's task of the same seed s, where i is drawn with the
  probabilities `weights` from the "mixture_member" stream of s: the mixture's tasks of family i
  are the tasks family i alone would give. Tasks of different families trace separately
  (`Task.trace_key`), so a worker compiles one sample function per family it meets.
  """

  def __init__(
    self,
    families: Sequence[base.TaskFamily] = gin.REQUIRED,
    weights: Sequence[float] | None = None,
  ):
    """Makes the mixture.

    Args:
      families: the families, at least one.
      weights: the probability of each family (normalised); None: equal.

    Raises:
      ValueError: no families, or weights that do not match them or are not positive.
    """
    self.families = tuple(families)
    if not self.families:
      raise ValueError("MixtureFamily.families is empty; give at least one family.")
    weights = np.ones(len(self.families)) if weights is None else np.asarray(weights, float)
    if weights.shape != (len(self.families),) or not np.all(weights > 0):
      raise ValueError(
        f"MixtureFamily.weights must be {len(self.families)} positive numbers, one per family; "
        f"got {list(weights.ravel())}."
      )
    self.probabilities = weights / weights.sum()
    self.name = "mixture(" + ", ".join(f.name for f in self.families) + ")"

  def member(self, seed: random_seeds.SeedLike) -> int:
    """The index of the family that samples the task of `seed`."""
    stream = random_seeds.stream(seed, "mixture_member")
    rng = np.random.default_rng(random_seeds.to_numpy_seed(stream))
    return int(rng.choice(len(self.families), p=self.probabilities))

  def sample(self, seed: random_seeds.SeedLike) -> MemberTask:
    """Family member(seed)'s task of `seed`."""
    index = self.member(seed)
    return MemberTask(self.families[index].sample(seed), index)
