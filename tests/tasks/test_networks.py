"""The inner models: shapes, initialisers, init traced in a tf.function, and the paper CNN
against an independent Keras build."""

import gin
import keras
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import antithetic, truncated_unroll
from task_specific_learned_opt.tasks import image_task, networks


def _shapes(params):
  return tf.nest.map_structure(lambda x: tuple(x.shape), params)


def test_paper_cnn_shapes_and_size():
  params = networks.paper_cnn().init(0, (32, 32, 3))
  assert _shapes(params) == {
    "conv0": {"w": (3, 3, 3, 32), "b": (32,)},
    "conv1": {"w": (3, 3, 32, 32), "b": (32,)},
    "conv2": {"w": (3, 3, 32, 32), "b": (32,)},
    "linear": {"w": (32, 10), "b": (10,)},
  }
  # 3*3*3*32 + 32 + 2 * (3*3*32*32 + 32) + 32*10 + 10: the paper's "~20k parameters" (Sec. 4.2).
  assert networks.num_params(params) == 896 + 2 * 9248 + 330 == 19722


def test_paper_cnn_matches_keras_with_the_same_weights():
  model = networks.paper_cnn()
  params = model.init(3, (32, 32, 3))
  for layer in ("conv0", "conv1", "conv2"):  # Non-zero biases, so they are checked too.
    params[layer]["b"] = tf.random.stateless_normal([32], [1, 2])
  reference = keras.Sequential(
    [keras.Input((32, 32, 3))]
    + [keras.layers.Conv2D(32, 3, strides=s, padding="same", activation="relu") for s in (2, 2, 1)]
    + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
  )
  reference.set_weights(
    [params[k][w].numpy() for k in ("conv0", "conv1", "conv2", "linear") for w in ("w", "b")]
  )
  images = tf.random.stateless_uniform([4, 32, 32, 3], [0, 1], -1, 1)
  np.testing.assert_allclose(
    model.apply(params, images).numpy(), reference(images).numpy(), rtol=1e-4, atol=1e-5
  )


def test_glorot_uniform_init_and_zero_biases():
  params = networks.paper_cnn().init(0, (32, 32, 3))
  w = params["conv1"]["w"].numpy()
  limit = np.sqrt(6.0 / (9 * 32 + 9 * 32))  # fan_in = fan_out = 3*3*32.
  assert np.abs(w).max() <= limit
  assert np.var(w) == pytest.approx(limit**2 / 3, rel=0.05)  # Variance of U(-l, l).
  assert all(not np.any(params[k]["b"].numpy()) for k in params)


def test_init_is_deterministic_in_the_seed():
  model = networks.paper_cnn()
  a, b, c = model.init(1, (32, 32, 3)), model.init(1, (32, 32, 3)), model.init(2, (32, 32, 3))
  np.testing.assert_array_equal(a["conv0"]["w"], b["conv0"]["w"])
  assert not np.array_equal(a["conv0"]["w"], c["conv0"]["w"])


def test_batch_norm_normalises_each_channel():
  model = networks.ConvNet(channels=(4,), strides=(1,), batch_norm=True)
  params = model.init(0, (8, 8, 3))
  assert set(params["conv0"]) == {"w", "b", "scale", "offset"}
  x = tf.random.stateless_normal([6, 8, 8, 3], [0, 0]) * 5 + 2
  pre = tf.nn.conv2d(x, params["conv0"]["w"], 1, "SAME") + params["conv0"]["b"]
  normalised = networks.batch_norm_closed_form(
    pre, params["conv0"]["scale"], params["conv0"]["offset"]
  )
  np.testing.assert_allclose(tf.reduce_mean(normalised, [0, 1, 2]), 0, atol=1e-4)
  np.testing.assert_allclose(tf.math.reduce_std(normalised, [0, 1, 2]), 1, atol=1e-3)


def _second_order(batch_norm, x, scale, offset):
  """z = <dL/dx, v> + |dL/dscale|^2 + <dL/doffset, dL/dscale> of L = sum(w * sin(BN(x))), and
  dz/d(x, scale, offset): second derivatives of BN along every path the outer gradient takes."""
  w, v = (tf.cast(tf.random.stateless_normal(x.shape, [s, 1]), x.dtype) for s in (7, 9))

  @tf.function(autograph=False)
  def run(x, scale, offset):
    with tf.GradientTape() as outer:
      outer.watch([x, scale, offset])
      with tf.GradientTape() as inner:
        inner.watch([x, scale, offset])
        loss = tf.reduce_sum(w * tf.sin(batch_norm(x, scale, offset)))
      gx, gs, go = inner.gradient(loss, [x, scale, offset])
      z = tf.reduce_sum(gx * v) + tf.reduce_sum(gs**2) + tf.reduce_sum(go * gs)
    return [loss, gx, gs, go, *outer.gradient(z, [x, scale, offset])], z

  return run(x, scale, offset)


def _bn_inputs(dtype):
  x = tf.random.stateless_normal([4, 3, 3, 5], [1, 2], dtype=dtype) * 3 + 1
  scale, offset = (tf.random.stateless_normal([5], [s, 4], dtype=dtype) for s in (3, 5))
  return x, scale, offset


def test_closed_form_batch_norm_has_the_derivatives_of_the_plain_ops():
  # float64: loss, first and second derivatives equal the plain ops' to rounding.
  x, scale, offset = _bn_inputs(tf.float64)
  closed, _ = _second_order(networks.batch_norm_closed_form, x, scale, offset)
  plain, _ = _second_order(networks.batch_norm_autodiff, x, scale, offset)
  for a, b in zip(closed, plain, strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
  # ...and a central difference of z along a direction d agrees with dz/dx . d.
  d, h = tf.random.stateless_normal(x.shape, [11, 8], dtype=tf.float64), 1e-5
  z = [
    _second_order(networks.batch_norm_autodiff, x + s * h * d, scale, offset)[1] for s in (1, -1)
  ]
  assert float(tf.reduce_sum(closed[4] * d)) == pytest.approx(
    float(z[0] - z[1]) / (2 * h), rel=1e-8
  )


def test_moments_batch_norm_differs_only_in_second_derivatives():
  # tf.nn.moments stops the mean's gradient inside the variance: the same loss and gradient,
  # second derivatives with respect to x off by the Hessian term it drops.
  x, scale, offset = _bn_inputs(tf.float64)
  moments, _ = _second_order(networks.batch_norm_moments, x, scale, offset)
  plain, _ = _second_order(networks.batch_norm_autodiff, x, scale, offset)
  for a, b in zip(moments[:4], plain[:4], strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
  assert np.abs(moments[4] - plain[4]).max() > 1e-3


def _bn_cnn_sample(batch_norm_gradient):
  """g_rp, g_es, L+ and L- of one antithetic truncation (K = 4) of a small batch-normed CNN."""
  model = networks.ConvNet(
    channels=(4, 4), strides=(2, 1), batch_norm=True, batch_norm_gradient=batch_norm_gradient
  )
  images = tf.random.stateless_uniform([16, 8, 8, 3], [5, 6], maxval=256, dtype=tf.int32)
  labels = tf.random.stateless_uniform([16], [7, 8], maxval=10, dtype=tf.int32)
  split = (tf.cast(images, tf.uint8), labels)
  task = image_task.ImageTask(model, dict.fromkeys(("train", "valid", "test"), split), 8)
  lopt = mlp_lopt.MLPLOpt()
  theta = lopt.init(0)
  state = lopt.opt_fn(theta).init(task.init_params(1))
  unroll = truncated_unroll.Unroll(task, lopt, recompute=False)
  sample = tf.function(antithetic.truncation_sample, autograph=False)
  return sample(unroll, theta, state, tf.constant(4), [2, 3], [4, 5], 0.1)[:4]


def test_a_truncation_sample_is_the_same_with_each_batch_norm_gradient():
  # The worker's sample through the closed-form derivatives against TensorFlow's own.
  closed, plain = _bn_cnn_sample("closed_form"), _bn_cnn_sample("autodiff")
  for a, b in zip(tf.nest.flatten(closed), tf.nest.flatten(plain), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7 * np.abs(b).max())
  assert np.abs(tf.nest.flatten(closed[0])[0]).max() > 0  # g_rp is not trivially zero.


@pytest.mark.parametrize("batch_norm", [True, False])
def test_grouped_networks_are_each_network_alone_with_their_derivatives(batch_norm):
  model = networks.paper_cnn(channels=4, batch_norm=batch_norm)
  num = 3
  params = [model.init([b, 1], [8, 8, 3]) for b in range(num)]
  # Batch norm's scale and offset away from 1 and 0, so that their derivatives matter.
  params = [
    tf.nest.map_structure(lambda x, b=b: x + 0.1 * (b + 1), p) for b, p in enumerate(params)
  ]
  inputs = [tf.random.stateless_normal([5, 8, 8, 3], [b, 2]) for b in range(num)]
  labels = tf.constant([[0, 1, 2, 3, 4]] * num) % model.num_classes

  def derivatives(loss_fn):
    """The losses, their gradients, and the gradient of the gradients' squared norm (g_rp's
    path through an inner gradient)."""
    with tf.GradientTape() as outer:
      outer.watch(params)
      with tf.GradientTape() as inner:
        inner.watch(params)
        losses = loss_fn()
      grads = inner.gradient(
        tf.reduce_sum(losses), params, unconnected_gradients=tf.UnconnectedGradients.ZERO
      )
      norm = tf.add_n([tf.reduce_sum(tf.square(g)) for g in tf.nest.flatten(grads)])
    zero = tf.UnconnectedGradients.ZERO
    return losses, grads, outer.gradient(norm, params, unconnected_gradients=zero)

  def alone():
    return tf.stack(
      [
        tf.reduce_mean(
          tf.nn.sparse_softmax_cross_entropy_with_logits(labels[b], model.apply(params[b], x))
        )
        for b, x in enumerate(inputs)
      ]
    )

  def grouped():
    logits = model.apply_grouped(params, inputs)
    assert logits.shape == [num, 5, model.num_classes]
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), axis=1)

  for x, y in zip(
    tf.nest.flatten(derivatives(grouped)), tf.nest.flatten(derivatives(alone)), strict=True
  ):
    scale = max(float(np.max(np.abs(y))), 1e-6)
    np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=0, atol=1e-6 * scale)
  # The networks differ, so a grouped network that mixed them would fail above.
  losses = alone().numpy()
  assert len(set(np.round(losses, 4))) == num


def test_an_unknown_batch_norm_gradient_raises():
  with pytest.raises(ValueError, match="batch_norm_gradient"):
    networks.ConvNet(batch_norm=True, batch_norm_gradient="fused")


@pytest.mark.parametrize(
  "make, input_shape, expected",
  [
    (networks.mnist_mlp_2x32, (14, 14, 1), [(196, 32), (32, 32), (32, 10)]),
    (networks.mnist_mlp_3x128, (14, 14, 1), [(196, 128), (128, 128), (128, 128), (128, 10)]),
  ],
)
def test_out_of_distribution_mlps(make, input_shape, expected):
  params = make().init(0, input_shape)
  assert [tuple(params[f"layer{i}"]["w"].shape) for i in range(len(expected))] == expected
  inputs = np.random.default_rng(0).normal(size=(5,) + input_shape).astype(np.float32)
  logits = make().apply(params, tf.constant(inputs)).numpy()
  assert logits.shape == (5, 10)
  # App. E's MLP: the image flattened, ReLU hidden layers, linear logits; written out in numpy.
  x = inputs.reshape(5, -1)
  for i in range(len(expected)):
    x = x @ params[f"layer{i}"]["w"].numpy() + params[f"layer{i}"]["b"].numpy()
    x = np.maximum(x, 0.0) if i < len(expected) - 1 else x
  np.testing.assert_allclose(logits, x, rtol=1e-4, atol=1e-5)


def test_out_of_distribution_convnets():
  conv6, conv3 = networks.mnist_conv6(), networks.mnist_conv3()
  assert conv6.strides == (2, 1, 2, 1, 1, 1) and conv6.channels == (32,) * 6
  assert conv3.strides == (2, 2, 1) and conv3.channels == (32,) * 3
  params = conv6.init(0, (28, 28, 1))
  assert conv6.apply(params, tf.zeros([2, 28, 28, 1])).shape == (2, 10)


def test_cnn_is_configurable_through_gin():
  gin.parse_config(
    "paper_cnn.channels = 16\npaper_cnn.strides = (2, 2, 1, 1)\npaper_cnn.batch_norm = True",
    skip_unknown=False,
  )
  model = networks.paper_cnn()
  assert model.channels == (16,) * 4 and model.strides == (2, 2, 1, 1) and model.batch_norm
  params = model.init(0, (32, 32, 3))
  assert params["conv3"]["w"].shape == (3, 3, 16, 16) and "scale" in params["conv3"]


def test_mismatched_channels_and_strides_raise():
  with pytest.raises(ValueError, match="same length"):
    networks.ConvNet(channels=(32, 32), strides=(2,))


def _image_task(model, image_shape):
  """An ImageTask of `model` on 4 zero images per split of `image_shape`."""
  images, labels = np.zeros((4, *image_shape), np.uint8), np.zeros([4], np.int32)
  splits = {split: (images, labels) for split in ("train", "valid", "test")}
  return image_task.ImageTask(model, splits, batch_size=2)


@pytest.mark.parametrize(
  "model, image_shape",
  [
    (networks.mnist_mlp_2x32(), (14, 14, 1)),
    (networks.mnist_mlp_3x128(), (14, 14, 1)),
    (networks.mnist_conv3(), (28, 28, 1)),
    (networks.paper_cnn(batch_norm=True), (8, 8, 3)),
  ],
  ids=lambda x: getattr(x, "name", None),
)
def test_init_traces_inside_a_tf_function_as_evaluation_compiles_it(model, image_shape):
  # As evaluation/running.py compiles init: the task's data and the seed are arguments and the
  # task is rebuilt around them while tracing, so the model sees the task's static image shape.
  template = _image_task(model, image_shape)

  @tf.function(autograph=False, reduce_retracing=True)
  def init(task_data, seed):
    return template.with_data(task_data).init_params(seed)

  seed = tf.constant([3, 4])
  compiled, eager = init(template.data, seed), template.init_params(seed)
  assert _shapes(compiled) == _shapes(eager)
  tf.nest.map_structure(np.testing.assert_array_equal, compiled, eager)
  assert networks.num_params(compiled) == networks.num_params(eager) > 0


@pytest.mark.parametrize(
  "input_shape",
  [
    (14, 14, 1),
    [14, 14, 1],
    tf.TensorShape([14, 14, 1]),
    np.array([14, 14, 1]),
    tf.constant([14, 14, 1]),
  ],
  ids=["tuple", "list", "TensorShape", "ndarray", "tensor"],
)
def test_static_shape_reads_python_ints(input_shape):
  shape = networks.static_shape(input_shape)
  assert shape == (14, 14, 1) and all(type(d) is int for d in shape)


def test_init_names_a_shape_that_is_not_static():
  with pytest.raises(ValueError, match="must be fully static"):
    networks.mnist_mlp_2x32().init(0, (14, None, 1))

  @tf.function(input_signature=[tf.TensorSpec([None, None, None, 1])])
  def init_from_runtime_shape(images):
    return networks.mnist_conv3().init(0, tf.shape(images)[1:])

  with pytest.raises(ValueError, match="must be fully static"):
    init_from_runtime_shape.get_concrete_function()
