"""Shared test setup: quiet TensorFlow, two inter-op threads, a clean gin config per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(2)


@pytest.fixture(autouse=True)
def clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()
