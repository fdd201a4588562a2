"""The estimators by name: each one's combination of a batch, worked in numpy, and the registry."""

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt.outer.estimators import base, persistent_es, registry

SHAPES = {"w": (3, 2), "b": (2,), "scale": ()}  # Leaves of a small theta, per sample.


def _random_nest(rng, n, scale):
  return {k: (scale * rng.normal(size=(n, *s))).astype(np.float32) for k, s in SHAPES.items()}


def _numpy_merge(rp, es):
  """Eq. 1 in its original form, with float64 numpy statistics (v = var(ddof=1) + 1e-8)."""
  rp, es = np.asarray(rp, np.float64), np.asarray(es, np.float64)
  v_rp = np.var(rp, axis=0, ddof=1) + 1e-8
  v_es = np.var(es, axis=0, ddof=1) + 1e-8
  return (rp.mean(axis=0) / v_rp + es.mean(axis=0) / v_es) / (1 / v_rp + 1 / v_es)


EXPECTED = {
  "merged": _numpy_merge,
  "rp": lambda rp, es: rp.mean(axis=0),
  "es": lambda rp, es: es.mean(axis=0),
  # PES's samples carry g_pes as their ES estimate.
  "pes": lambda rp, es: es.mean(axis=0),
  "pes_merged": _numpy_merge,
  # Truncated backpropagation's samples carry no ES estimate (zeros).
  "backprop": lambda rp, es: rp.mean(axis=0),
}


def test_every_registered_estimator_is_checked_here():
  assert set(registry.names()) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_combine(name):
  rng = np.random.default_rng(3)
  rp, es = _random_nest(rng, 6, 0.2), _random_nest(rng, 6, 3.0)
  gradient = registry.get(name).combine(
    *(tf.nest.map_structure(tf.constant, nest) for nest in (rp, es))
  )
  for key in SHAPES:
    expected = EXPECTED[name](rp[key], es[key])
    np.testing.assert_allclose(gradient[key], expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_combine_in_a_tf_function_with_a_dynamic_batch(name):
  spec = {k: tf.TensorSpec([None, *s], tf.float32) for k, s in SHAPES.items()}
  combine = tf.function(registry.get(name).combine, input_signature=[spec, spec])
  rng = np.random.default_rng(4)
  for n in (2, 5):
    rp, es = _random_nest(rng, n, 1.0), _random_nest(rng, n, 1.0)
    gradient = combine(rp, es)
    np.testing.assert_allclose(gradient["w"], EXPECTED[name](rp["w"], es["w"]), rtol=1e-4)
  assert combine.experimental_get_tracing_count() == 1


def test_only_the_pes_estimators_carry_two_unrolls():
  two = [n for n in registry.names() if registry.get(n).state_type is persistent_es.PESState]
  assert two == ["pes", "pes_merged"]
  one = ("merged", "rp", "es", "backprop")
  assert all(registry.get(n).state_type is base.UnrollState for n in one)


def test_an_unknown_name_is_refused_with_the_known_ones():
  with pytest.raises(ValueError, match="merged"):
    registry.get("persistent")


def test_register(monkeypatch):
  monkeypatch.setattr(registry, "ESTIMATORS", dict(registry.ESTIMATORS))

  class Zero(base.TruncatedAntithetic):
    def combine(self, rp, es):
      return tf.nest.map_structure(lambda x: tf.zeros_like(x[0]), rp)

  registry.register("zero", Zero)
  assert type(registry.get("zero")) is Zero and "zero" in registry.names()
  with pytest.raises(ValueError, match="already"):
    registry.register("zero", Zero)
  with pytest.raises(ValueError, match="subclass"):
    registry.register("other", object)
