"""An embedded, generated image dataset of 1000 classes: the default family, no download needed.

Each class is a texture: a class-specific set of oriented, coloured sinusoidal gratings. An image
of the class shows that texture through a Gaussian window at a random position, with random phases
(so the gratings shift), jittered orientations, frequencies and amplitudes, plus a grating that
belongs to no class (a distractor), a random background colour and pixel noise. So:
  - a CNN must learn local oriented, coloured filters to tell classes apart (translation and phase
    vary, so no pixel is informative alone);
  - the mean colour of an image does not identify its class: the gratings average to ~zero and the
    background colour is drawn from the same distribution for every class;
  - within-class variation is large enough that the paper's CNN needs hundreds of Adam steps to fit
    a 10-class task (docs/data.md shows the learning curve).
Everything is a deterministic function of (seed, class id, split): class c's texture comes from
numpy's Generator seeded with [seed, c] and its images from [seed, c, split code]. 1000 classes are
split 700/300 like ImageNet's (class_source.split_classes).
"""

import functools

import gin
import numpy as np

from task_specific_learned_opt.tasks import class_source

_SPLIT_CODES = {"train": 1, "test": 2}


def class_texture(seed: int, class_id: int, num_gratings: int) -> dict:
  """Parameters of class `class_id`'s texture: frequency, orientation and colour per grating."""
  rng = np.random.default_rng([seed, class_id])
  colours = rng.normal(size=(num_gratings, 3))
  return {
    # Cycles per pixel: periods of 3 to 12 pixels, visible to 3x3 kernels after stride 2.
    "frequency": rng.uniform(1 / 12, 1 / 3, size=num_gratings),
    "orientation": rng.uniform(0, np.pi, size=num_gratings),
    "colour": colours / np.linalg.norm(colours, axis=1, keepdims=True),
  }


def _gratings(
  rng: np.random.Generator,
  n: int,
  size: int,
  frequency: np.ndarray,
  orientation: np.ndarray,
  colour: np.ndarray,
  amplitude: np.ndarray,
) -> np.ndarray:
  """Sum of colour * amplitude * sin(2 pi f (x cos o + y sin o) + phase): [n, s, s, 3]."""
  coords = np.arange(size, dtype=np.float64)
  y, x = np.meshgrid(coords, coords, indexing="ij")
  phase = rng.uniform(0, 2 * np.pi, size=frequency.shape)
  # [n, g, size, size] waves, then mixed into colour channels.
  arg = (
    2
    * np.pi
    * frequency[..., None, None]
    * (x * np.cos(orientation)[..., None, None] + y * np.sin(orientation)[..., None, None])
    + phase[..., None, None]
  )
  waves = amplitude[..., None, None] * np.sin(arg)
  return np.einsum("ngyx,ngc->nyxc", waves, colour)


def generate_images(
  seed: int,
  class_id: int,
  split: str,
  num_images: int,
  image_size: int = 32,
  num_gratings: int = 3,
  noise_std: float = 0.35,
) -> np.ndarray:
  """uint8 images [num_images, image_size, image_size, 3] of one class and split."""
  texture = class_texture(seed, class_id, num_gratings)
  rng = np.random.default_rng([seed, class_id, _SPLIT_CODES[split]])
  n, g = num_images, num_gratings
  frequency = texture["frequency"] * np.exp(rng.normal(0, 0.1, size=(n, g)))
  orientation = texture["orientation"] + rng.normal(0, 0.12, size=(n, g))
  colour = np.broadcast_to(texture["colour"], (n, g, 3))
  amplitude = rng.uniform(0.4, 1.0, size=(n, g))
  pattern = _gratings(rng, n, image_size, frequency, orientation, colour, amplitude)

  distractor_colour = rng.normal(size=(n, 1, 3))
  distractor_colour /= np.linalg.norm(distractor_colour, axis=-1, keepdims=True)
  distractor = _gratings(
    rng,
    n,
    image_size,
    frequency=rng.uniform(1 / 12, 1 / 3, size=(n, 1)),
    orientation=rng.uniform(0, np.pi, size=(n, 1)),
    colour=distractor_colour,
    amplitude=rng.uniform(0.0, 0.8, size=(n, 1)),
  )

  # The class texture is seen through a Gaussian window at a random place of random width.
  coords = np.arange(image_size, dtype=np.float64)
  centre = rng.uniform(0.2 * image_size, 0.8 * image_size, size=(n, 2))
  width = rng.uniform(0.18, 0.4, size=(n, 1, 1)) * image_size
  window = np.exp(
    -(
      (coords[None, :, None] - centre[:, 0, None, None]) ** 2
      + (coords[None, None, :] - centre[:, 1, None, None]) ** 2
    )
    / (2 * width**2)
  )[..., None]

  background = rng.normal(0, 0.4, size=(n, 1, 1, 3))
  noise = rng.normal(0, noise_std, size=(n, image_size, image_size, 3))
  image = background + window * pattern + distractor + noise
  return np.clip(np.round(128 + 60 * image), 0, 255).astype(np.uint8)


@gin.configurable
class GeneratedClassSource(class_source.ClassSource):
  """1000 generated texture classes of 32x32x3 images, deterministic from `seed`."""

  def __init__(
    self,
    seed: int = 0,
    num_classes: int = 1000,
    train_images_per_class: int = 1000,
    test_images_per_class: int = 200,
    image_size: int = 32,
    num_gratings: int = 3,
    noise_std: float = 0.35,
  ):
    """Describes the dataset; images are generated when first asked for.

    Args:
      seed: the dataset's seed; every image is a function of it, the class and the split.
      num_classes: classes in the dataset.
      train_images_per_class: images of each class in the "train" split.
      test_images_per_class: images of each class in the "test" split.
      image_size: height and width in pixels.
      num_gratings: gratings in each class's texture.
      noise_std: standard deviation of the pixel noise (before the scaling to uint8).
    """
    self.seed = int(seed)
    self.num_classes = int(num_classes)
    self.counts = {"train": int(train_images_per_class), "test": int(test_images_per_class)}
    self.image_shape = (int(image_size), int(image_size), 3)
    self.num_gratings = int(num_gratings)
    self.noise_std = float(noise_std)
    self.name = "generated"

  @functools.lru_cache(maxsize=64)  # noqa: B019  (sources live as long as the process)
  def images(self, split: str, class_id: int) -> np.ndarray:
    """The class's uint8 images [n, image_size, image_size, 3], read-only (they are cached).

    Args:
      split: "train" or "test".
      class_id: an integer in [0, num_classes).

    Returns:
      The images, a deterministic function of (seed, class_id, split); the 64 most recently
      asked for are kept, so a task's classes are generated once.

    Raises:
      ValueError: an unknown split or a class id out of range.
    """
    if split not in class_source.SOURCE_SPLITS:
      raise ValueError(f"Unknown split {split!r}; expected one of {class_source.SOURCE_SPLITS}.")
    if not 0 <= class_id < self.num_classes:
      raise ValueError(f"class_id {class_id} is not in [0, {self.num_classes}).")
    images = generate_images(
      self.seed,
      class_id,
      split,
      self.counts[split],
      self.image_shape[0],
      self.num_gratings,
      self.noise_std,
    )
    images.setflags(write=False)
    return images
