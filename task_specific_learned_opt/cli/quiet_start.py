"""A binary's start without TensorFlow's C++ start-up notices (imports nothing of TensorFlow).

On a CPU machine TensorFlow prints, before any of the project's output, lines such as
"oneDNN custom operations are on", "Could not find cuda drivers", "failed call to cuInit" and,
while graphs are optimised, "Error in PredictCost()": none is about the run. They come from C++
code, partly before its log settings are read, so the binaries call `start()` first, before
anything imports TensorFlow: it sets TF_CPP_MIN_LOG_LEVEL to 3 and loads TensorFlow and its
devices with the process's stderr pointed at /dev/null, then restores stderr, and drops the
informational lines TensorFlow's own Python code logs through absl (e.g. "Sharding callback
duration" at every checkpoint). Python errors, warnings and the project's own logging are
untouched. A user who sets TF_CPP_MIN_LOG_LEVEL gets exactly what they asked for: `start()` then
changes nothing.
"""

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

from absl import logging as absl_logging

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LOG_LEVEL = "3"  # TensorFlow's C++ logging: fatal messages only.


class TensorFlowInfoFilter(logging.Filter):
  """Drops records below WARNING logged from TensorFlow's own Python files."""

  def filter(self, record: logging.LogRecord) -> bool:
    """False for an INFO or DEBUG record of a file inside the tensorflow package."""
    inside = f"{os.sep}tensorflow{os.sep}" in record.pathname
    return not (inside and record.levelno < logging.WARNING)


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
  """Points file descriptor 2 (C and C++ writes included) at /dev/null inside the block."""
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    with open(os.devnull, "w") as devnull:
      os.dup2(devnull.fileno(), 2)
    yield
  finally:
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)


def start() -> bool:
  """Loads TensorFlow quietly, unless the user set TF_CPP_MIN_LOG_LEVEL; True if it did.

  Call it before anything imports TensorFlow. An import error is raised after stderr is back,
  so its traceback is shown.
  """
  if LOG_LEVEL_VARIABLE in os.environ:
    return False
  os.environ[LOG_LEVEL_VARIABLE] = QUIET_LOG_LEVEL
  with stderr_silenced():
    import tensorflow as tf  # noqa: PLC0415 - the point: TensorFlow loads inside the block.

    tf.config.list_physical_devices()  # Initialises the platforms (the cuInit notice).
  absl_logging.get_absl_logger().addFilter(TensorFlowInfoFilter())
  return True
