"""Shared test setup: quiet TensorFlow, two inter-op threads, a clean gin config and no stop
request per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gin  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from task_specific_learned_opt.distributed import stopping  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(2)


@pytest.fixture(autouse=True)
def clean_gin():
  gin.clear_config()
  yield
  gin.clear_config()


@pytest.fixture(autouse=True)
def no_stop_request():
  """A test that asks to stop (SIGTERM) does not stop the next one."""
  stopping.clear()
  yield
  stopping.clear()


# Tests that make network namespaces, loop devices or clusters of processes run one after the
# other in one pytest-xdist worker; the rest are spread over the workers (-n 2 --dist loadgroup).
_ONE_AT_A_TIME = ("test_partitions.py", "test_disk_faults.py", "test_cluster.py")


def pytest_collection_modifyitems(config, items):
  for item in items:
    if item.path.name in _ONE_AT_A_TIME:
      item.add_marker(pytest.mark.xdist_group("system"))
