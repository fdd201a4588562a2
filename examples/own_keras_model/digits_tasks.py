"""A user's own tasks: small MLPs on scikit-learn's 8x8 handwritten digits (no download).

The module that `--import_module examples/own_keras_model/digits_tasks.py` imports before gin is
parsed, so that digits.gin can name its two configurables:

  KerasModelFamily.model_fn = @digits_tasks.build_mlp
  KerasModelFamily.data = @digits_tasks.load_digits_data()

`load_digits_data` returns the 1,797 digits bundled with scikit-learn as numpy arrays, split once
into train and test examples (KerasModelFamily carves its inner-valid examples off the train
ones). `build_mlp` returns a new Keras model; the family calls it with one value of each of its
`variations` (width, depth, activation) and with the task's number of classes.
"""

import gin
import keras
import numpy as np
from sklearn import datasets

PIXEL_MAX = 16.0  # The digits' pixels are integers 0..16.


@gin.configurable
def load_digits_data(test_fraction: float = 0.2, seed: int = 0) -> dict:
  """The 8x8 digits as {"train": (x, y), "test": (x, y)} numpy arrays.

  Args:
    test_fraction: the fraction of the examples, drawn at random, that are test examples.
    seed: seeds the draw.

  Returns:
    x float32 [n, 8, 8] in [0, 1], y int32 [n] digit labels 0..9.
  """
  digits = datasets.load_digits()
  x = (digits.images / PIXEL_MAX).astype(np.float32)
  y = digits.target.astype(np.int32)
  order = np.random.default_rng(seed).permutation(len(y))
  num_test = int(round(len(y) * test_fraction))
  test, train = order[:num_test], order[num_test:]
  return {"train": (x[train], y[train]), "test": (x[test], y[test])}


@gin.configurable
def build_mlp(
  width: int = 32, depth: int = 2, activation: str = "relu", num_classes: int = 10
) -> keras.Model:
  """An MLP on the flattened 8x8 image: `depth` hidden layers of `width` units, then logits.

  Args:
    width: units of each hidden layer.
    depth: hidden layers.
    activation: the hidden layers' activation, a Keras name.
    num_classes: outputs (the family passes its tasks' number of classes).

  Returns:
    A new, built keras.Model from [batch, 8, 8] images to [batch, num_classes] logits.
  """
  layers = [keras.Input((8, 8)), keras.layers.Flatten()]
  layers += [keras.layers.Dense(width, activation=activation) for _ in range(depth)]
  return keras.Sequential([*layers, keras.layers.Dense(num_classes)])
