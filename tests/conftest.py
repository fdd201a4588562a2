"""Shared test setup: quiet TensorFlow, two inter-op threads, a clean gin config and no stop
request per test."""

import importlib.metadata
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
# other in one pytest-xdist worker; the rest are spread over the workers (-n 3 --dist loadgroup:
# the grouped tests mostly wait on their processes, so a third worker takes the core they leave).
_ONE_AT_A_TIME = ("test_partitions.py", "test_disk_faults.py", "test_cluster.py")
_GROUP = "system"


@pytest.hookimpl(tryfirst=True)  # Before pytest-xdist's, which reads the groups into the ids.
def pytest_collection_modifyitems(config, items):
  for item in items:
    if item.path.name in _ONE_AT_A_TIME:
      item.add_marker(pytest.mark.xdist_group(_GROUP))
  # The grouped tests, then the integration tests, then the rest, each in collection order: the
  # long tests start early and the short ones fill the end, so no worker waits alone at the end
  # for one long test.
  items.sort(
    key=lambda item: (
      0 if item.path.name in _ONE_AT_A_TIME else 1 if item.get_closest_marker("integration") else 2
    )
  )


def pytest_configure(config):
  """Refuses pytest and pytest-xdist versions whose --dist loadgroup runs grouped tests at the
  same time (pytest-xdist issue 1386): its scheduler reads a test's group from an "@group" ending
  of its id, which pytest 9.2 no longer lets it write."""
  if config.getoption("dist", "no") != "loadgroup":
    return
  xdist_version = tuple(int(p) for p in importlib.metadata.version("pytest-xdist").split(".")[:2])
  if pytest.version_tuple[:2] >= (9, 2) and xdist_version <= (3, 8):
    raise pytest.UsageError(
      "pytest 9.2 no longer lets pytest-xdist 3.8 write a test's group into its id, so the "
      f"tests of {', '.join(_ONE_AT_A_TIME)} would run at the same time (pytest "
      f"{pytest.__version__}, pytest-xdist {'.'.join(map(str, xdist_version))}). "
      "Install the versions setup.py's test extra names: .venv/bin/pip install -e '.[test]'."
    )


@pytest.hookimpl(trylast=True)  # After pytest-xdist's: the group must be in the ids it sends.
def pytest_collection_finish(session):
  """Stops a worker whose grouped tests lost their group anyway (any other version pair)."""
  if not getattr(session.config.option, "loadgroup", False):
    return  # Not an xdist worker of --dist loadgroup (-n 0, or another --dist).
  lost = [
    item.nodeid
    for item in session.items
    if item.path.name in _ONE_AT_A_TIME and not item.nodeid.endswith(f"@{_GROUP}")
  ]
  if lost:
    raise pytest.UsageError(
      f"pytest-xdist did not put {len(lost)} tests (e.g. {lost[0]}) in the group {_GROUP!r}; "
      "install the versions setup.py's test extra names: .venv/bin/pip install -e '.[test]'."
    )
