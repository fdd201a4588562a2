"""Real handwritten digits for App. E's problems without a download: scikit-learn's 8x8 digits.

The paper's out-of-distribution problems (App. E, Fig. 7) train MLPs on 14x14 MNIST and convnets on
28x28 MNIST. scikit-learn ships 1,797 real handwritten digits (8x8, 16 grey levels) with the
package, so `DigitsClassSource` serves them as a 10-class ClassSource, scaled to uint8 and resized
to MNIST's sizes, with a fixed per-class train/test split. It needs the `examples` extra
(`pip install -e ".[examples]"`, which installs scikit-learn); the tests' extra has it too.

Note: these are not MNIST (1,797 images instead of 70,000, drawn at 8x8); gin/eval/digits/*.gin
say so beside every result.
"""

import functools

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import errors
from task_specific_learned_opt.tasks import class_source

PIXEL_MAX = 16  # scikit-learn's digits are integers 0..16.


class MissingExtraError(errors.UserError, ImportError):
  """scikit-learn, which the digits come with, is not installed."""


def _load_digits() -> tuple[np.ndarray, np.ndarray]:
  try:
    from sklearn import datasets
  except ImportError as error:
    raise MissingExtraError(
      "The handwritten digits come with scikit-learn, which is not installed: "
      'pip install -e ".[examples]" (or pip install scikit-learn).'
    ) from error
  digits = datasets.load_digits()
  return digits.images, digits.target


@gin.configurable
class DigitsClassSource(class_source.ClassSource):
  """scikit-learn's handwritten digits by class: uint8 [n, size, size, 1] images, 10 classes."""

  def __init__(self, image_size: int = 14, test_fraction: float = 0.2, seed: int = 0):
    """Describes the source; the digits are read when first asked for.

    Args:
      image_size: height and width after resizing the 8x8 digits (bilinear): 14 for App. E's
        MLPs, 28 for its convnets.
      test_fraction: the fraction of each class's images that are test images.
      seed: seeds the per-class draw of test images.
    """
    self.image_size = int(image_size)
    self.test_fraction = float(test_fraction)
    self.seed = int(seed)
    self.num_classes = 10
    self.image_shape = (self.image_size, self.image_size, 1)
    self.name = f"digits{self.image_size}"

  @functools.lru_cache(maxsize=2)  # noqa: B019  (sources live as long as the process)
  def _split(self) -> dict:
    images, labels = _load_digits()
    scaled = images[..., None].astype(np.float32) * (255.0 / PIXEL_MAX)
    resized = tf.image.resize(scaled, [self.image_size, self.image_size], method="bilinear")
    pixels = np.clip(np.round(resized.numpy()), 0, 255).astype(np.uint8)
    split = {"train": {}, "test": {}}
    rng = np.random.default_rng(self.seed)
    for c in range(self.num_classes):
      of_class = np.flatnonzero(labels == c)
      order = rng.permutation(of_class)
      num_test = int(round(len(order) * self.test_fraction))
      split["test"][c], split["train"][c] = pixels[order[:num_test]], pixels[order[num_test:]]
    return split

  def images(self, split: str, class_id: int) -> np.ndarray:
    """The uint8 images [n, image_size, image_size, 1] of digit `class_id` in `split`.

    Args:
      split: "train" or "test".
      class_id: the digit, 0..9.
    """
    if split not in class_source.SOURCE_SPLITS:
      raise ValueError(f"Unknown split {split!r}; expected one of {class_source.SOURCE_SPLITS}.")
    return self._split()[split][int(class_id)]
