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


BATCH_NORM_GRADIENTS = ("closed_form", "autodiff", "moments")
_AXES = [0, 1, 2]  # Batch and spatial axes: one mean and variance per channel.


def batch_norm_autodiff(x: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
  """Batch norm in plain ops, x_hat * scale + offset, differentiated by TensorFlow.

  x_hat = (x - mean) / sqrt(var + eps), with the mean and variance of each channel over the
  batch and spatial axes: batch statistics in every split, since the inner loop has no running
  averages to carry.

  Args:
    x: activations [B, H, W, C].
    scale: gamma [C].
    offset: beta [C].

  Returns:
    The normalised activations, [B, H, W, C].
  """
  centred = x - tf.reduce_mean(x, _AXES)
  inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), _AXES) + BATCH_NORM_EPSILON)
  return centred * inv_std * scale + offset


def batch_norm_moments(x: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
  """`batch_norm_autodiff` with the statistics of tf.nn.moments, as the shipped runs used.

  Note: the values and first derivatives are those of `batch_norm_autodiff`, but tf.nn.moments
  stops the gradient of the mean inside the variance, so its second derivatives lose the term
  -(2 / n^2) * dL/dvar * sum(v) of the variance's Hessian (n elements per channel, v the
  direction). That changes the outer gradient g_rp (by 0.5% in norm on a quickstart sample);
  the shipped batch-norm thetas were outer-trained with it. Kept to reproduce those runs.
  """
  mean, variance = tf.nn.moments(x, axes=_AXES)
  return (x - mean) * tf.math.rsqrt(variance + BATCH_NORM_EPSILON) * scale + offset


def _backward(
  dy: tf.Tensor, scale: tf.Tensor, x_hat: tf.Tensor, inv_std: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tuple]:
  """(dx, d_scale, d_offset) of batch norm, and the means its own derivative reuses."""
  m1 = tf.reduce_mean(dy, _AXES)
  m2 = tf.reduce_mean(dy * x_hat, _AXES)
  a = scale * inv_std
  n = tf.cast(tf.size(dy) // tf.shape(dy)[-1], dy.dtype)
  dx = dy * a + (x_hat * (-a * m2) - a * m1)
  return dx, n * m2, n * m1, (m1, m2, a, n)


def _backward_vjp(
  u: tf.Tensor,
  c_scale: tf.Tensor,
  c_offset: tf.Tensor,
  dy: tf.Tensor,
  scale: tf.Tensor,
  x_hat: tf.Tensor,
  inv_std: tf.Tensor,
  means: tuple,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """(d_dy, d_x, d_scale): the derivative of `_backward` along the cotangents (u, c_scale,
  c_offset) of its outputs (dx, d_scale, d_offset); see batch_norm_closed_form."""
  m1, m2, a, n = means
  mu, mux, mudy = (tf.reduce_mean(t, _AXES) for t in (u, u * x_hat, u * dy))
  ur = mudy - m1 * mu - m2 * mux  # mean(u * r), r = dy - m1 - x_hat * m2, dx = a * r.
  alpha, beta = c_scale - a * mux, -a * m2  # c_x_hat = alpha * dy + beta * u.
  mean_c, mean_cx = alpha * m1 + beta * mu, alpha * m2 + beta * mux
  d_dy = u * a + (x_hat * alpha + (c_offset - a * mu))
  d_x = (dy * (inv_std * alpha) + u * (inv_std * beta)) + (
    x_hat * (-inv_std * mean_cx - scale * ur * inv_std**2) - inv_std * mean_c
  )
  return d_dy, d_x, n * inv_std * ur


def batch_norm_closed_form(x: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tf.Tensor:
  """`batch_norm_autodiff` with its first and second derivatives written out.

  Per channel, over its n elements (means over the batch and spatial axes), y = scale * x_hat
  + offset and, for a cotangent dy,

    d_offset = n mean(dy),  d_scale = n mean(dy x_hat),
    dx = a (dy - mean(dy) - x_hat mean(dy x_hat)),  a = scale * inv_std.

  The outer gradient differentiates that backward pass again (g_rp goes through the inner
  gradient). For cotangents (u, c_scale, c_offset) of (dx, d_scale, d_offset), with
  r = dy - mean(dy) - x_hat mean(dy x_hat):

    d_dy = a (u - mean(u) - x_hat mean(u x_hat)) + c_scale x_hat + c_offset,
    d_scale = n inv_std mean(u r),
    d_x = inv_std (c - mean(c) - x_hat mean(c x_hat)) - scale inv_std^2 mean(u r) x_hat,
    c = c_scale dy - a (mean(dy x_hat) u + mean(u x_hat) dy),

  c being the cotangent of x_hat at fixed inv_std and the last term the path through inv_std.
  Each is a few elementwise passes and three means, where TensorFlow's derivative of its own
  gradient graph takes about twice as many passes (docs/performance.md). Values and both
  derivatives equal `batch_norm_autodiff`'s to float rounding (tests/tasks/test_networks.py).

  Args:
    x: activations [B, H, W, C].
    scale: gamma [C].
    offset: beta [C].

  Returns:
    The normalised activations, [B, H, W, C].
  """

  @tf.custom_gradient
  def normalise(x: tf.Tensor, scale: tf.Tensor, offset: tf.Tensor) -> tuple:
    centred = x - tf.reduce_mean(x, _AXES)
    inv_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), _AXES) + BATCH_NORM_EPSILON)
    x_hat = centred * inv_std

    @tf.custom_gradient
    def backward(dy: tf.Tensor, x: tf.Tensor, scale: tf.Tensor) -> tuple:
      dx, d_scale, d_offset, means = _backward(dy, scale, x_hat, inv_std)

      def vjp(u: tf.Tensor, c_scale: tf.Tensor, c_offset: tf.Tensor) -> tuple:
        return _backward_vjp(u, c_scale, c_offset, dy, scale, x_hat, inv_std, means)

      return (dx, d_scale, d_offset), vjp

    return x_hat * scale + offset, lambda dy: backward(dy, x, scale)

  return normalise(x, scale, offset)


_BATCH_NORMS = {
  "closed_form": batch_norm_closed_form,
  "autodiff": batch_norm_autodiff,
  "moments": batch_norm_moments,
}


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
    batch_norm_gradient: str = "closed_form",
  ):
    """Describes the network; `init` makes its parameters.

    Args:
      channels: output channels of each conv layer.
      strides: stride of each conv layer (the same length as `channels`).
      kernel_size: k of the k x k kernels.
      batch_norm: batch normalisation after each conv layer (App. H).
      num_classes: outputs of the linear layer.
      batch_norm_gradient: how batch norm is differentiated, one of BATCH_NORM_GRADIENTS:
        "closed_form" (`batch_norm_closed_form`), "autodiff" (the same function in plain ops)
        or "moments" (`batch_norm_moments`, whose second derivatives miss a term).

    Raises:
      ValueError: `channels` and `strides` differ in length, or an unknown
        `batch_norm_gradient`.
    """
    if len(channels) != len(strides):
      raise ValueError(f"channels {channels} and strides {strides} must have the same length.")
    if batch_norm_gradient not in BATCH_NORM_GRADIENTS:
      raise ValueError(
        f"batch_norm_gradient {batch_norm_gradient!r} is not one of {BATCH_NORM_GRADIENTS}."
      )
    self.batch_norm_gradient = batch_norm_gradient
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
        x = _BATCH_NORMS[self.batch_norm_gradient](x, layer["scale"], layer["offset"])
      x = tf.nn.relu(x)
    x = tf.reduce_mean(x, axis=[1, 2])
    return tf.matmul(x, params["linear"]["w"]) + params["linear"]["b"]

  def apply_grouped(self, params: Sequence[dict], inputs: Sequence[tf.Tensor]) -> tf.Tensor:
    """The logits [M, B, num_classes] of M networks of this shape, each on its own inputs.

    One op per layer for all M: network m's images and channels are group m of a grouped
    convolution (inputs concatenated on the channel axis, kernels on their output axis, so that
    TensorFlow infers M groups from the input depth over the kernel's), its biases and
    batch-norm parameters are the m-th block of the concatenated ones, and batch norm's
    per-channel statistics are per network. Network m's logits, and their first and second
    derivatives, are those of `apply(params[m], inputs[m])` to float rounding
    (tests/tasks/test_networks.py).

    Args:
      params: M parameter nests of this network.
      inputs: M image batches [B, H, W, C] of one shape.

    Returns:
      [M, B, num_classes].
    """
    num = len(params)
    x = tf.concat(list(inputs), axis=-1)
    for i, stride in enumerate(self.strides):
      layers = [p[f"conv{i}"] for p in params]
      kernel = tf.concat([layer["w"] for layer in layers], axis=-1)
      x = tf.nn.conv2d(x, kernel, strides=stride, padding="SAME")
      x += tf.concat([layer["b"] for layer in layers], axis=0)
      if self.batch_norm:
        scale = tf.concat([layer["scale"] for layer in layers], axis=0)
        offset = tf.concat([layer["offset"] for layer in layers], axis=0)
        x = _BATCH_NORMS[self.batch_norm_gradient](x, scale, offset)
      x = tf.nn.relu(x)
    x = tf.reshape(tf.reduce_mean(x, axis=[1, 2]), [-1, num, self.channels[-1]])
    kernel = tf.stack([p["linear"]["w"] for p in params])
    bias = tf.stack([p["linear"]["b"] for p in params])
    return tf.einsum("bmc,mck->mbk", x, kernel) + bias[:, None, :]


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
  channels: int = 32,
  strides: Sequence[int] = (2, 2, 1),
  batch_norm: bool = False,
  batch_norm_gradient: str = "closed_form",
) -> ConvNet:
  """The paper's inner CNN (Sec. 4.2, App. D.2); depth is len(strides), App. H adds batch norm.

  `batch_norm_gradient` as in ConvNet.
  """
  return ConvNet(
    channels=(channels,) * len(strides),
    strides=strides,
    batch_norm=batch_norm,
    batch_norm_gradient=batch_norm_gradient,
  )


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
