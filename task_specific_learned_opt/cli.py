"""What the binaries share: one-line errors for mistakes a user can fix.

A wrong gin binding or an unprepared dataset is the user's to fix, so the binary prints one line
that names the problem and the fix, and exits with status 1, instead of a traceback.
"""

import functools
import sys

from task_specific_learned_opt import gin_config
from task_specific_learned_opt.tasks import tfds_source

USER_ERRORS = (gin_config.GinConfigError, tfds_source.DatasetNotPreparedError)


def exits_on_user_error(main):
  """Wraps an absl `main(argv)`: a USER_ERRORS exception becomes `sys.exit("error: ...")`."""

  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except USER_ERRORS as e:
      # Gin appends where the error was raised; the message alone names the problem and the fix.
      message = str(e).split("In call to configurable")[0]
      sys.exit(f"error: {' '.join(message.split())}")

  return wrapped
