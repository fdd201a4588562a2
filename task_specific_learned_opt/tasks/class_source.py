"""Labelled image datasets read by class, and the fixed outer-train/outer-test class splits.

A ClassSource serves the uint8 images of one class of one source split ("train" or "test"); task
families (families.py) sample classes from it. Paper Sec. 4.2: ImageNet's classes are split into
700 outer-train and 300 outer-test classes; a task uses all images of its 10 classes.

The class split rule (documented in docs/data.md): classes are permuted with numpy's legacy
`RandomState(seed)` (its stream is fixed across numpy versions) and the first `num_outer_train`
of the permutation are the outer-train classes, the rest outer-test; both lists are sorted.
"""

import abc

import numpy as np

SOURCE_SPLITS = ("train", "test")
CLASS_SPLITS = ("outer_train", "outer_test", "all")
CLASS_SPLIT_SEED = 0


class ClassSource(abc.ABC):
  """Images of a labelled dataset, served by class."""

  name: str = "source"
  num_classes: int = 0
  image_shape: tuple = (0, 0, 0)  # (height, width, channels)

  @abc.abstractmethod
  def images(self, split: str, class_id: int) -> np.ndarray:
    """All uint8 images [n, height, width, channels] of `class_id` in source split `split`.

    Args:
      split: "train" (inner-train and inner-valid examples are taken from it) or "test".
      class_id: an integer in [0, num_classes).
    """


def split_classes(
  num_classes: int, num_outer_train: int, seed: int = CLASS_SPLIT_SEED
) -> tuple[np.ndarray, np.ndarray]:
  """The fixed split of class ids into outer-train and outer-test classes.

  Args:
    num_classes: classes in the dataset (1000 for ImageNet, 100 for CIFAR-100).
    num_outer_train: how many go to outer-train (700, 70); the rest are outer-test.
    seed: the permutation seed; 0 everywhere in this project.

  Returns:
    (outer_train_ids, outer_test_ids), sorted int64 arrays that partition range(num_classes).
  """
  if not 0 < num_outer_train <= num_classes:
    raise ValueError(f"num_outer_train={num_outer_train} must be in (0, {num_classes}].")
  permutation = np.random.RandomState(seed).permutation(num_classes)
  return np.sort(permutation[:num_outer_train]), np.sort(permutation[num_outer_train:])


def classes_of(num_classes: int, num_outer_train: int, class_split: str) -> np.ndarray:
  """The class ids of `class_split` ("outer_train", "outer_test" or "all")."""
  if class_split not in CLASS_SPLITS:
    raise ValueError(f"Unknown class split {class_split!r}; expected one of {CLASS_SPLITS}.")
  if class_split == "all":
    return np.arange(num_classes)
  outer_train, outer_test = split_classes(num_classes, num_outer_train)
  return outer_train if class_split == "outer_train" else outer_test
