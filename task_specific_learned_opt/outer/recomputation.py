"""Recomputing chunks of an unroll in the backward pass, and the chunk lengths (App. C memory).

Backpropagating through K inner steps stores every step (measured: ~26 MiB per inner step of both
unrolls for the paper's CNN at batch 128; docs/outer_training.md). `recomputed` wraps a chunk of
the unroll in a tf.custom_gradient whose forward pass keeps only the chunk's inputs and whose
backward pass reruns the chunk under a tape. truncated_unroll runs a truncation as a loop of such
chunks, each of which can itself be a loop of smaller recomputed chunks: with two levels (the
default) the backward pass holds ~2 K^(1/3) stored states and a few steps' activations
(`segment_lengths_for`), for two extra forward passes.
"""

from collections.abc import Callable, Sequence
from typing import Any

import gin
import tensorflow as tf

from task_specific_learned_opt import nests

SEGMENT_SCALE = 0.2
LEVELS = 2


def _is_float(x: tf.Tensor) -> bool:
  return x.dtype.is_floating


def recomputed(
  segment_fn: Callable[..., Any],
  output_structure: nests.Nest,
  differentiable: nests.Nest,
  constants: nests.Nest,
) -> nests.Nest:
  """segment_fn(*differentiable, constants), with a gradient that reruns the segment.

  The forward pass keeps only the segment's inputs; the backward pass reruns the segment under
  a tape and backpropagates the upstream gradients through it. Gradients flow to the float
  leaves of `differentiable`; `constants` get none. Everything the segment reads must come in
  through `differentiable` or `constants`, never be captured, so the recomputing gradient graph
  holds no captured constants.

  Args:
    segment_fn: fn(*differentiable, constants) -> a nest like `output_structure`.
    output_structure: a nest of the structure of segment_fn's result.
    differentiable: a tuple of nests the segment is differentiated with respect to.
    constants: a nest of tensors the segment reads but is not differentiated with respect to.

  Returns:
    segment_fn's result, a nest like `output_structure`.
  """
  flat_diff = tf.nest.flatten(differentiable)
  flat_const = tf.nest.flatten(constants)
  float_index = [i for i, x in enumerate(flat_diff) if _is_float(x)]
  num_float = len(float_index)

  def call(float_values: Sequence[tf.Tensor], const_values: Sequence[tf.Tensor]) -> Any:
    values = list(flat_diff)
    for i, value in zip(float_index, float_values, strict=True):
      values[i] = value
    return segment_fn(
      *tf.nest.pack_sequence_as(differentiable, values),
      tf.nest.pack_sequence_as(constants, list(const_values)),
    )

  @tf.custom_gradient
  def forward(*args: tf.Tensor) -> tuple[list[tf.Tensor], Callable[..., list[tf.Tensor | None]]]:
    float_values, const_values = args[:num_float], args[num_float:]
    flat_outputs = tf.nest.flatten(call(float_values, const_values))

    def grad_fn(*upstream: tf.Tensor | None) -> list[tf.Tensor | None]:
      with tf.GradientTape() as tape:
        tape.watch(float_values)
        rerun = tf.nest.flatten(call(float_values, const_values))
      targets, output_grads = [], []
      for out, grad in zip(rerun, upstream, strict=True):
        if _is_float(out):
          targets.append(out)
          output_grads.append(tf.zeros_like(out) if grad is None else grad)
      grads = tape.gradient(
        targets,
        list(float_values),
        output_gradients=output_grads,
        unconnected_gradients=tf.UnconnectedGradients.ZERO,
      )
      return list(grads) + [None] * len(const_values)

    return flat_outputs, grad_fn

  flat_outputs = forward(*[flat_diff[i] for i in float_index], *flat_const)
  return tf.nest.pack_sequence_as(output_structure, flat_outputs)


@gin.configurable
def segment_lengths_for(
  num_steps: int | tf.Tensor, scale: float = SEGMENT_SCALE, levels: int = LEVELS
) -> tf.Tensor:
  """Steps per recomputed chunk at each of `levels` levels of recomputation: int32 [levels].

  The innermost chunks are S_L = ceil(scale * K^(1 / (levels + 1))) steps and each level's chunk
  is r = (K / S_L)^(1 / levels) of the next one's, so every level stores about r states. Memory
  is ~ levels * r stored states plus S_L steps being rerun: O(sqrt(K)) for one level,
  O(K^(1/3)) for two, each level costing one more forward pass.

  Measured for one sample of the paper's CNN at batch 128 at K = 10,000 (docs/outer_training.md):
  one level peaks at 4.4 GiB, two levels at 2.2 GiB; plain backpropagation would hold ~26 MiB per
  step (~260 GiB).

  Args:
    num_steps: K, the truncation's steps, int or int32 tensor.
    scale: the innermost chunk's length in units of K^(1 / (levels + 1)).
    levels: levels of recomputation.

  Returns:
    int32 [levels], the outermost level's chunk length first.
  """
  k = tf.cast(num_steps, tf.float32)
  innermost = tf.maximum(tf.math.ceil(scale * k ** (1.0 / (levels + 1))), 1.0)
  ratio = tf.maximum(k / innermost, 1.0) ** (1.0 / levels)
  lengths = [tf.math.ceil(innermost * ratio ** (levels - level)) for level in range(1, levels + 1)]
  return tf.cast(tf.stack(lengths), tf.int32)
