"""The inner models as pure (init, apply) pairs over nests (paper Sec. 4.2, App. D.2, E, H).

- The paper's CNN: 3 conv layers, 3x3 kernels, 32 channels, strides (2, 2, 1), SAME padding, ReLU,
  Glorot-uniform weights and zero biases, global average pool, linear layer to 10 classes.
  Channels, strides (and so depth) and batch normalisation are gin parameters (App. H).
- The out-of-distribution problems of App. E: MLPs with 2x32 and 3x128 ReLU units on 14x14 MNIST,
  and 6-layer (strides 2,1,2,1,1,1) and 3-layer (strides 2,2,1) 32-channel convnets on 28x28 MNIST.

Parameters are nested dicts such as {"conv0": {"w": ..., "b": ...}, ..., "linear": {...}}.
"""

import math
from collections.abc import Sequence

import gin
import tensorflow as tf

from task_specific_learned_opt import random_seeds

BATCH_NORM_EPSILON = 1e-5


def glorot_uniform(seed: tf.Tensor, shape: Sequence[int], fan_in: int, fan_out: int) -> tf.Tensor:
  """Glorot (Xavier) uniform: U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out))."""
  limit = (6.0 / (fan_in + fan_out)) ** 0.5
  return tf.random.stateless_uniform(shape, seed, minval=-limit, maxval=limit, dtype=tf.float32)


def _linear_params(seed: tf.Tensor, fan_in: int, fan_out: int) -> dict:
  return {
    "w": glorot_uniform(seed, [fan_in, fan_out], fan_in, fan_out),
    "b": tf.zeros([fan_out], tf.float32),
  }


def static_shape(input_shape: Sequence[int] | tf.TensorShape | tf.Tensor) -> tuple[int, ...]:
  """`input_shape` as Python ints, read without running an op.

  A network's parameter shapes are fixed when it is built, and `init` is also called while a
  tf.function traces (evaluation compiles init), where an op such as tf.reduce_prod gives a
  symbolic tensor that has no Python value. So sizes come from the static shape.

  Args:
    input_shape: ints, a tf.TensorShape, or a tensor whose value is known while tracing.

  Returns:
    The dimensions, e.g. (14, 14, 1).

  Raises:
    ValueError: a dimension (or the rank) is only known when the graph runs.
  """
  value = tf.get_static_value(input_shape) if isinstance(input_shape, tf.Tensor) else input_shape
  try:
    shape = tf.TensorShape(value)
  except TypeError:  # A dimension is a symbolic tensor.
    shape = tf.TensorShape(None)
  if not shape.is_fully_defined():
    raise ValueError(
      f"The input shape {input_shape!r} must be fully static (Python ints or a fully defined "
      "tf.TensorShape): the network's parameter shapes depend on it."
    )
  return tuple(shape.as_list())


def _batch_norm(x: tf.Tensor, params: dict) -> tf.Tensor:
  # Batch statistics in every split: the inner loop has no running averages to carry.
  mean, variance = tf.nn.moments(x, axes=[0, 1, 2], keepdims=True)
  x = (x - mean) * tf.math.rsqrt(variance + BATCH_NORM_EPSILON)
  return x * params["scale"] + params["offset"]


class Model:
  """A network: `init(seed, input_shape) -> params`, `apply(params, inputs) -> logits`."""

  name = "model"

  def init(self, seed: random_seeds.SeedLike, input_shape: Sequence[int]) -> dict:
    """The initial parameters, a nest of float32 tensors, drawn statelessly from `seed`.

    Args:
      seed: a stateless seed.
      input_shape: one example's shape, e.g. [H, W, C] (no batch axis), static (see
        `static_shape`): init is also traced inside tf.functions.

    Raises:
      ValueError: `input_shape` is not fully static.
    """
    raise NotImplementedError

  def apply(self, params: dict, inputs: tf.Tensor) -> tf.Tensor:
    """The logits [B, num_classes] of `inputs` [B, *input_shape] under `params`."""
    raise NotImplementedError


@gin.configurable
class ConvNet(Model):
  """Conv layers (kxk, SAME, ReLU, optional batch norm) -> global average pool -> linear."""

  def __init__(
    self,
    channels: Sequence[int] = (32, 32, 32),
    strides: Sequence[int] = (2, 2, 1),
    kernel_size: int = 3,
    batch_norm: bool = False,
    num_classes: int = 10,
  ):
    """Describes the network; `init` makes its parameters.

    Args:
      channels: output channels of each conv layer.
      strides: stride of each conv layer (the same length as `channels`).
      kernel_size: k of the k x k kernels.
      batch_norm: batch normalisation after each conv layer (App. H).
      num_classes: outputs of the linear layer.

    Raises:
      ValueError: `channels` and `strides` differ in length.
    """
    if len(channels) != len(strides):
      raise ValueError(f"channels {channels} and strides {strides} must have the same length.")
    self.channels = tuple(int(c) for c in channels)
    self.strides = tuple(int(s) for s in strides)
    self.kernel_size = int(kernel_size)
    self.batch_norm = bool(batch_norm)
    self.num_classes = int(num_classes)
    self.name = f"conv{len(self.channels)}x{self.channels[0]}" + ("_bn" if batch_norm else "")

  def init(self, seed: random_seeds.SeedLike, input_shape: Sequence[int]) -> dict:
    """Glorot-uniform kernels and zero biases (batch norm: scale 1, offset 0) per layer."""
    layer_seeds = random_seeds.split(seed, len(self.channels) + 1)
    params = {}
    in_channels = static_shape(input_shape)[-1]
    k = self.kernel_size
    for i, out_channels in enumerate(self.channels):
      fan_in, fan_out = k * k * in_channels, k * k * out_channels
      layer = {
        "w": glorot_uniform(layer_seeds[i], [k, k, in_channels, out_channels], fan_in, fan_out),
        "b": tf.zeros([out_channels], tf.float32),
      }
      if self.batch_norm:
        layer["scale"] = tf.ones([out_channels], tf.float32)
        layer["offset"] = tf.zeros([out_channels], tf.float32)
      params[f"conv{i}"] = layer
      in_channels = out_channels
    params["linear"] = _linear_params(layer_seeds[-1], in_channels, self.num_classes)
    return params

  def apply(self, params: dict, inputs: tf.Tensor) -> tf.Tensor:
    """The logits [B, num_classes]: conv layers, global average pool, linear layer."""
    x = inputs
    for i, stride in enumerate(self.strides):
      layer = params[f"conv{i}"]
      x = tf.nn.conv2d(x, layer["w"], strides=stride, padding="SAME") + layer["b"]
      if self.batch_norm:
        x = _batch_norm(x, layer)
      x = tf.nn.relu(x)
    x = tf.reduce_mean(x, axis=[1, 2])
    return tf.matmul(x, params["linear"]["w"]) + params["linear"]["b"]


@gin.configurable
class MLP(Model):
  """Flatten -> hidden ReLU layers -> linear to the classes."""

  def __init__(self, hidden_sizes: Sequence[int] = (32, 32), num_classes: int = 10):
    """Describes the network; `init` makes its parameters.

    Args:
      hidden_sizes: ReLU units of each hidden layer.
      num_classes: outputs of the last layer.
    """
    self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
    self.num_classes = int(num_classes)
    self.name = "mlp" + "x".join(str(h) for h in self.hidden_sizes)

  def init(self, seed: random_seeds.SeedLike, input_shape: Sequence[int]) -> dict:
    """Glorot-uniform weights and zero biases per layer; the first reads the flattened input."""
    sizes = [math.prod(static_shape(input_shape)), *self.hidden_sizes, self.num_classes]
    layer_seeds = random_seeds.split(seed, len(sizes) - 1)
    return {
      f"layer{i}": _linear_params(layer_seeds[i], sizes[i], sizes[i + 1])
      for i in range(len(sizes) - 1)
    }

  def apply(self, params: dict, inputs: tf.Tensor) -> tf.Tensor:
    """The logits [B, num_classes] of `inputs` flattened to [B, prod(input_shape)]."""
    x = tf.reshape(inputs, [tf.shape(inputs)[0], -1])
    num_layers = len(self.hidden_sizes) + 1
    for i in range(num_layers):
      x = tf.matmul(x, params[f"layer{i}"]["w"]) + params[f"layer{i}"]["b"]
      if i < num_layers - 1:
        x = tf.nn.relu(x)
    return x


@gin.configurable
def paper_cnn(
  channels: int = 32, strides: Sequence[int] = (2, 2, 1), batch_norm: bool = False
) -> ConvNet:
  """The paper's inner CNN (Sec. 4.2, App. D.2); depth is len(strides), App. H adds batch norm."""
  return ConvNet(channels=(channels,) * len(strides), strides=strides, batch_norm=batch_norm)


@gin.configurable
def mnist_conv6() -> ConvNet:
  """App. E: 6 conv layers, 32 channels, strides (2, 1, 2, 1, 1, 1), on 28x28 MNIST."""
  return ConvNet(channels=(32,) * 6, strides=(2, 1, 2, 1, 1, 1))


@gin.configurable
def mnist_conv3() -> ConvNet:
  """App. E: 3 conv layers, 32 channels, strides (2, 2, 1), on 28x28 MNIST."""
  return ConvNet(channels=(32,) * 3, strides=(2, 2, 1))


@gin.configurable
def mnist_mlp_2x32() -> MLP:
  """App. E: 2 hidden layers of 32 ReLU units, on 14x14 MNIST."""
  return MLP(hidden_sizes=(32, 32))


@gin.configurable
def mnist_mlp_3x128() -> MLP:
  """App. E: 3 hidden layers of 128 ReLU units, on 14x14 MNIST."""
  return MLP(hidden_sizes=(128, 128, 128))


def num_params(params: dict) -> int:
  """Total number of scalars in a params nest, from the static shapes (also while tracing)."""
  return sum(math.prod(static_shape(p.shape)) for p in tf.nest.flatten(params))
