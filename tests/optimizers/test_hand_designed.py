"""Tests for the hand-designed baselines: SGD, Momentum, RMSProp, Adam (Sec. 4.4, App. F).

Every worked-number test writes its reference update out in numpy, next to the numbers it uses.
"""

import dataclasses
import inspect

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.optimizers import adam, hand_designed, rmsprop, sgd

PARAMS = {"a": [1.0, -2.0], "b": [[0.5]]}
GRADS = [  # Gradients fed at steps 1 and 2.
  {"a": [0.1, -0.3], "b": [[2.0]]},
  {"a": [-0.2, 0.4], "b": [[-1.0]]},
]


def _tf(nest):
  return {k: tf.constant(v, tf.float32) for k, v in nest.items()}


def _np(nest):
  return {k: np.asarray(v, np.float32) for k, v in nest.items()}


def _run(opt, params, grads_list):
  state = opt.init(_tf(params))
  for grads in grads_list:
    state = opt.update(state, _tf(grads))
  return state


def _assert_close(actual, expected, rtol=1e-5, atol=1e-6):
  for key in expected:
    np.testing.assert_allclose(np.asarray(actual[key]), expected[key], rtol=rtol, atol=atol)


@pytest.fixture
def clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


# learning_rate_at and add_regularization.


@pytest.mark.parametrize(
  "iteration, linear_decay, exponential_decay, expected",
  [
    (0, 0.01, 0.1, 0.1),  # t = 0: the base rate.
    (10, 0.01, 0.0, 0.1 * (1 - 0.01 * 10)),  # 0.09
    (10, 0.0, 0.1, 0.1 * np.exp(-0.1 * 10)),  # 0.0368
    (10, 0.01, 0.1, 0.1 * (1 - 0.01 * 10) * np.exp(-0.1 * 10)),  # 0.0331
    (100, 0.01, 0.0, 0.0),  # t = 1 / linear_decay.
    (150, 0.01, 0.1, 0.0),  # Past 1 / linear_decay the linear factor stays at 0.
  ],
)
def test_learning_rate_at(iteration, linear_decay, exponential_decay, expected):
  lr_t = hand_designed.learning_rate_at(
    tf.constant(iteration, tf.int32), 0.1, linear_decay, exponential_decay
  )
  assert lr_t.dtype == tf.float32
  np.testing.assert_allclose(lr_t.numpy(), expected, rtol=1e-6, atol=1e-9)


def test_learning_rate_at_tensor_hparams():
  lr_t = hand_designed.learning_rate_at(
    tf.constant(10), tf.constant(0.1), tf.constant(0.01), tf.constant(0.1)
  )
  np.testing.assert_allclose(lr_t.numpy(), 0.1 * 0.9 * np.exp(-1.0), rtol=1e-6)


def test_add_regularization():
  params = {"a": tf.constant([1.0, -2.0, 0.0]), "b": tf.constant([[4.0]])}
  grads = {"a": tf.constant([0.5, 0.5, 0.5]), "b": tf.constant([[-1.0]])}
  out = hand_designed.add_regularization(params, grads, l1=0.1, l2=0.2)
  _assert_close(
    out,
    {
      # g + l1 * sign(w) + l2 * w
      "a": [0.5 + 0.1 * 1 + 0.2 * 1.0, 0.5 + 0.1 * -1 + 0.2 * -2.0, 0.5 + 0.1 * 0 + 0.2 * 0.0],
      "b": [[-1.0 + 0.1 * 1 + 0.2 * 4.0]],
    },
  )


def test_add_regularization_zero_coefficients_is_identity():
  params = {"a": tf.constant([1.0, -2.0])}
  grads = {"a": tf.constant([0.3, 0.7])}
  out = hand_designed.add_regularization(params, grads, l1=0.0, l2=0.0)
  _assert_close(out, {"a": [0.3, 0.7]})


# Two steps of every rule against numpy.


def _numpy_sgd(w, grads, lr):
  for g in grads:
    w = w - lr * g
  return w


def _numpy_momentum(w, grads, lr, mu, nesterov):
  m = np.zeros_like(w)
  for g in grads:
    m = mu * m + g
    w = w - lr * (g + mu * m if nesterov else m)
  return w


def _numpy_rmsprop(w, grads, lr, decay, eps):
  v = np.zeros_like(w)
  for g in grads:
    v = decay * v + (1 - decay) * g**2
    w = w - lr * g / (np.sqrt(v) + eps)
  return w


def _numpy_adam(w, grads, lr, b1, b2, eps):
  m = np.zeros_like(w)
  v = np.zeros_like(w)
  for t, g in enumerate(grads, start=1):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g**2
    m_hat = m / (1 - b1**t)
    v_hat = v / (1 - b2**t)
    w = w - lr * m_hat / (np.sqrt(v_hat) + eps)
  return w


TWO_STEP_CASES = {
  "sgd": (lambda: sgd.SGD(learning_rate=0.1), lambda w, gs: _numpy_sgd(w, gs, 0.1)),
  "momentum": (
    lambda: sgd.Momentum(learning_rate=0.1, momentum=0.5),
    lambda w, gs: _numpy_momentum(w, gs, 0.1, 0.5, nesterov=False),
  ),
  "nesterov": (
    lambda: sgd.Momentum(learning_rate=0.1, momentum=0.5, nesterov=True),
    lambda w, gs: _numpy_momentum(w, gs, 0.1, 0.5, nesterov=True),
  ),
  "rmsprop": (
    lambda: rmsprop.RMSProp(learning_rate=0.1, decay=0.8, epsilon=1e-3),
    lambda w, gs: _numpy_rmsprop(w, gs, 0.1, 0.8, 1e-3),
  ),
  "adam": (
    lambda: adam.Adam(learning_rate=0.1, beta1=0.8, beta2=0.9, epsilon=1e-3),
    lambda w, gs: _numpy_adam(w, gs, 0.1, 0.8, 0.9, 1e-3),
  ),
}


@pytest.mark.parametrize("case", sorted(TWO_STEP_CASES))
def test_two_steps_match_numpy(case):
  make_opt, numpy_rule = TWO_STEP_CASES[case]
  opt = make_opt()
  state = _run(opt, PARAMS, GRADS)
  params, grads = _np(PARAMS), [_np(g) for g in GRADS]
  expected = {k: numpy_rule(params[k], [g[k] for g in grads]) for k in params}
  _assert_close(opt.get_params(state), expected)
  assert int(state.iteration) == 2


def test_momentum_worked_numbers():
  # w = 1, mu = 0.5, lr = 0.1, g = 0.1 then -0.2:
  #   m1 = 0.1,                 w1 = 1 - 0.1 * 0.1 = 0.99
  #   m2 = 0.5 * 0.1 - 0.2 = -0.15, w2 = 0.99 + 0.1 * 0.15 = 1.005
  state = _run(sgd.Momentum(learning_rate=0.1, momentum=0.5), PARAMS, GRADS)
  np.testing.assert_allclose(state.params["a"].numpy()[0], 1.005, rtol=1e-6)
  np.testing.assert_allclose(state.momentum["a"].numpy()[0], -0.15, rtol=1e-6)


def test_adam_first_step_is_lr_times_sign():
  # At t = 1, m_hat = g and v_hat = g^2, so the step is lr * g / (|g| + eps) ~ lr * sign(g).
  state = _run(adam.Adam(learning_rate=0.1, epsilon=0.0), PARAMS, GRADS[:1])
  _assert_close(state.params, {"a": [1.0 - 0.1, -2.0 + 0.1], "b": [[0.5 - 0.1]]})


def _numpy_adam_reg_decay(w, grad_fn, num_steps, hparams):
  """Adam+Reg+Decay in numpy float64, `num_steps` steps from `w` with gradients grad_fn(w, t)."""
  hp = {name: np.float64(value) for name, value in hparams.items()}
  w = np.asarray(w, np.float64)
  m = np.zeros_like(w)
  v = np.zeros_like(w)
  for t in range(num_steps):
    g = grad_fn(w, t) + hp["l1"] * np.sign(w) + hp["l2"] * w
    lr_t = hp["learning_rate"] * max(0.0, 1 - hp["linear_decay"] * t)
    lr_t *= np.exp(-hp["exponential_decay"] * t)
    m = hp["beta1"] * m + (1 - hp["beta1"]) * g
    v = hp["beta2"] * v + (1 - hp["beta2"]) * g**2
    m_hat = m / (1 - hp["beta1"] ** (t + 1))
    v_hat = v / (1 - hp["beta2"] ** (t + 1))
    w = w - lr_t * m_hat / (np.sqrt(v_hat) + hp["epsilon"])
  return w


def test_adam_reg_decay_matches_numpy():
  hparams = {
    "learning_rate": 0.1,
    "beta1": 0.8,
    "beta2": 0.9,
    "epsilon": 1e-3,
    "linear_decay": 0.2,
    "exponential_decay": 0.3,
    "l1": 0.05,
    "l2": 0.1,
  }
  opt = adam.Adam(**hparams)
  grads = GRADS + [{"a": [0.3, 0.3], "b": [[0.0]]}]
  state = _run(opt, PARAMS, grads)
  expected = {
    key: _numpy_adam_reg_decay(
      w, lambda w, t, key=key: np.asarray(grads[t][key], np.float32), len(grads), hparams
    )
    for key, w in _np(PARAMS).items()
  }
  _assert_close(state.params, expected)


# Structure, graph mode and gradients.

ALL_OPTIMIZERS = {
  "sgd": lambda: sgd.SGD(learning_rate=0.1, l1=0.01, l2=0.01),
  "momentum": lambda: sgd.Momentum(learning_rate=0.1, linear_decay=0.01),
  "nesterov": lambda: sgd.Momentum(learning_rate=0.1, nesterov=True),
  "rmsprop": lambda: rmsprop.RMSProp(learning_rate=0.01, exponential_decay=0.01),
  "adam": lambda: adam.Adam(learning_rate=0.01, l2=0.1),
}


def _quadratic_grads(params):
  # The gradient of sum((w - 1)^2): it depends on params, so steps compound.
  return tf.nest.map_structure(lambda w: 2.0 * (w - 1.0), params)


@pytest.mark.parametrize("case", sorted(ALL_OPTIMIZERS))
def test_update_keeps_structure_dtypes_and_shapes(case):
  opt = ALL_OPTIMIZERS[case]()
  state = opt.init(_tf(PARAMS))
  new_state = opt.update(state, _tf(GRADS[0]))
  assert type(new_state) is type(state)
  tf.nest.assert_same_structure(state, new_state)
  for old, new in zip(tf.nest.flatten(state), tf.nest.flatten(new_state), strict=True):
    assert old.dtype == new.dtype
    assert old.shape == new.shape
  assert state.iteration.dtype == tf.int32
  assert int(state.iteration) == 0 and int(new_state.iteration) == 1


@pytest.mark.parametrize("case", sorted(ALL_OPTIMIZERS))
def test_while_loop_matches_eager(case):
  opt = ALL_OPTIMIZERS[case]()

  eager_state = opt.init(_tf(PARAMS))
  for _ in range(5):
    eager_state = opt.update(eager_state, _quadratic_grads(opt.get_params(eager_state)))

  @tf.function
  def train(params):
    state = opt.init(params)
    state = tf.while_loop(
      lambda s: s.iteration < 5,
      lambda s: (opt.update(s, _quadratic_grads(opt.get_params(s))),),
      (state,),
    )[0]
    return state

  graph_state = train(_tf(PARAMS))
  assert int(graph_state.iteration) == 5
  _assert_close(graph_state.params, {k: v.numpy() for k, v in eager_state.params.items()})


def _adam_final_loss(learning_rate):
  opt = adam.Adam(learning_rate=learning_rate)
  state = opt.init(_tf(PARAMS))
  for _ in range(3):
    state = opt.update(state, _quadratic_grads(opt.get_params(state)))
  return tf.add_n([tf.reduce_sum(tf.square(w - 1.0)) for w in tf.nest.flatten(state.params)])


def test_gradient_wrt_learning_rate_matches_finite_difference():
  lr = tf.constant(0.1)
  with tf.GradientTape() as tape:
    tape.watch(lr)
    loss = _adam_final_loss(lr)
  grad = tape.gradient(loss, lr).numpy()
  h = 1e-3
  finite_difference = (_adam_final_loss(0.1 + h) - _adam_final_loss(0.1 - h)).numpy() / (2 * h)
  assert abs(finite_difference) > 1.0  # About -17.3: a zero gradient cannot match it.
  np.testing.assert_allclose(grad, finite_difference, rtol=1e-3)


ADAM_REG_DECAY_HPARAMS = {
  "learning_rate": 0.1,
  "beta1": 0.8,
  "beta2": 0.9,
  "epsilon": 1e-3,
  "linear_decay": 0.1,
  "exponential_decay": 0.1,
  "l1": 0.01,
  "l2": 0.01,
}


def _numpy_final_loss(hparams):
  """sum(w^2) after 3 float64 steps on sum((w - 1)^2) from PARAMS, to differentiate."""
  final = [
    _numpy_adam_reg_decay(w, lambda w, t: 2.0 * (w - 1.0), 3, hparams) for w in _np(PARAMS).values()
  ]
  return sum(float(np.sum(w**2)) for w in final)


@pytest.mark.parametrize("name", list(ADAM_REG_DECAY_HPARAMS))
def test_gradient_wrt_every_adam_hparam_matches_finite_differences(name):
  hparams = {n: tf.constant(v) for n, v in ADAM_REG_DECAY_HPARAMS.items()}
  with tf.GradientTape() as tape:
    tape.watch(hparams[name])
    opt = adam.Adam(**hparams)
    state = opt.init(_tf(PARAMS))
    for _ in range(3):
      state = opt.update(state, _quadratic_grads(opt.get_params(state)))
    loss = tf.add_n([tf.reduce_sum(tf.square(w)) for w in tf.nest.flatten(state.params)])
  grad = tape.gradient(loss, hparams[name])
  assert grad is not None, name
  # Central differences of the float64 numpy rule, h a millionth of the value: from -4.73
  # (learning_rate) to 0.006 (beta2), none near 0, so a gradient that does not flow fails.
  value = ADAM_REG_DECAY_HPARAMS[name]
  h = 1e-6 * value
  finite_difference = (
    _numpy_final_loss({**ADAM_REG_DECAY_HPARAMS, name: value + h})
    - _numpy_final_loss({**ADAM_REG_DECAY_HPARAMS, name: value - h})
  ) / (2 * h)
  assert abs(finite_difference) > 1e-3, name
  np.testing.assert_allclose(grad.numpy(), finite_difference, rtol=1e-4, err_msg=name)


def test_tensor_hparams_do_not_retrace():
  @tf.function
  def step(learning_rate):
    opt = adam.Adam(learning_rate=learning_rate)
    return opt.update(opt.init(_tf(PARAMS)), _tf(GRADS[0])).params

  step(tf.constant(0.1))
  step(tf.constant(0.2))
  assert step.experimental_get_tracing_count() == 1


# Registry and gin.


def test_gin_binds_adam(clean_gin):
  gin.parse_config("Adam.learning_rate = 0.5", skip_unknown=False)
  assert adam.Adam().learning_rate == 0.5


def test_gin_binds_nesterov(clean_gin):
  gin.parse_config(["Momentum.learning_rate = 0.1", "Momentum.nesterov = True"], skip_unknown=False)
  opt = sgd.Momentum()
  assert opt.nesterov is True
  assert opt.learning_rate == 0.1


@pytest.mark.parametrize("rule", [sgd.SGD, sgd.Momentum, rmsprop.RMSProp, adam.Adam])
def test_every_rule_takes_the_reg_decay_fields_as_its_last_keywords(rule):
  parameters = list(inspect.signature(rule).parameters.values())
  fields = dataclasses.fields(hand_designed.RegDecay)
  tail = parameters[-len(fields) :]
  assert [(p.name, p.default, p.kind) for p in tail] == [
    (field.name, field.default, inspect.Parameter.KEYWORD_ONLY) for field in fields
  ]
  opt = rule(learning_rate=0.1, l2=0.5, exponential_decay=0.01)
  assert opt.reg_decay == hand_designed.RegDecay(exponential_decay=0.01, l2=0.5)
  assert (opt.l1, opt.l2, opt.linear_decay, opt.exponential_decay) == (0.0, 0.5, 0.0, 0.01)
  with pytest.raises(TypeError):
    rule(learning_rate=0.1, l3=0.5)
  gin.parse_config(f"{rule.__name__}.l1 = 0.25")
  assert rule(learning_rate=0.1).l1 == 0.25
  with pytest.raises(ValueError, match="l3"):
    gin.parse_config(f"{rule.__name__}.l3 = 0.25")
