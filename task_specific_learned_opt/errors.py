"""The one base class of the mistakes a user can fix (a leaf module: it imports nothing).

A wrong gin binding, an unprepared dataset, a malformed cluster spec, a train dir of another
experiment: each is raised as a subclass of `UserError` where it is found, and every binary turns
it into one line that names the problem and the fix (cli/common.py), instead of a traceback.
Each subclass also derives from the built-in exception it refines (ValueError, OSError, ...), so
library callers can catch either.
"""


class UserError(Exception):
  """A mistake the user can fix; its message names the problem and the fix in one sentence."""
