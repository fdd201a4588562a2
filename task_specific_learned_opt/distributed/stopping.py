"""Stopping on signals: what each role does with SIGTERM and Ctrl-C (the cluster's App. C roles).

chief (bin/train_local, bin/chief): `request_stop_on_sigterm`. The first SIGTERM asks the chief
  loop to stop at its next safe point, between outer steps (in local mode: once the sample a
  worker is computing is done; TensorFlow runs a graph to its end before Python sees a
  signal). It saves a checkpoint, says so in one line and exits 0, so a supervisor (systemd,
  Kubernetes, a job scheduler) sees a clean stop; a save that fails exits 1. A second SIGTERM,
  or Ctrl-C, interrupts at once (the checkpoint is still written).
worker (bin/worker): `leave_at_once_on_signals`. SIGTERM or Ctrl-C leaves at once with one line
  and status 0, even while the worker waits on the chief inside TensorFlow: a worker keeps
  nothing that needs saving, and the chief never waits for its sample in flight.
others (bin/eval, ...): `interrupt_on_sigterm`. SIGTERM interrupts at once.
What must not be cut short (a checkpoint, an applied and published update) runs inside
`interrupts_deferred`.
"""

import contextlib
import os
import signal
import sys
import threading
import types
from collections.abc import Iterator

from absl import logging

_requested = threading.Event()


class Terminated(KeyboardInterrupt):  # noqa: N818 - it interrupts, like KeyboardInterrupt.
  """SIGTERM arrived: raised at a safe point (or at once), so `finally` blocks save."""


def _ask_to_stop(signum: int, frame: types.FrameType | None) -> None:
  del signum, frame
  if _requested.is_set():
    raise Terminated
  _requested.set()
  logging.warning("SIGTERM: stopping after the current step (send it again to stop at once).")


def _interrupt(signum: int, frame: types.FrameType | None) -> None:
  del signum, frame
  _requested.set()
  raise Terminated


def request_stop_on_sigterm() -> None:
  """The chief's SIGTERM: ask the loop to stop at its next safe point (a second one: at once)."""
  signal.signal(signal.SIGTERM, _ask_to_stop)


def interrupt_on_sigterm() -> None:
  """SIGTERM raises Terminated at once, so `finally` blocks run."""
  signal.signal(signal.SIGTERM, _interrupt)


def requested() -> bool:
  """Whether a stop was asked for."""
  return _requested.is_set()


def check() -> None:
  """Raises Terminated if a stop was asked for (called where stopping is safe).

  Raises:
    Terminated: a SIGTERM came.
  """
  if _requested.is_set():
    raise Terminated


def clear() -> None:
  """Forgets a stop request (tests, and a process that runs the loop again)."""
  _requested.clear()


def leave_at_once_on_signals(message: str) -> None:
  """SIGTERM or SIGINT writes `message` to stderr and exits 0 at once, whatever is running.

  Python runs signal handlers only between bytecodes, so a handler cannot end a process that is
  blocked in TensorFlow; the wakeup fd is written by the C-level handler at once, and a thread
  waiting on it ends the process.

  Args:
    message: the one line to print.
  """
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, lambda signum, frame: None)  # The wakeup fd needs a Python handler.
  signal.set_wakeup_fd(write_fd)

  def leave() -> None:
    while True:
      received = os.read(read_fd, 1)
      if received and received[0] in (signal.SIGTERM, signal.SIGINT):
        name = signal.Signals(received[0]).name
        sys.stderr.write(f"{message} ({name})\n")
        sys.stderr.flush()
        os._exit(0)

  threading.Thread(target=leave, name="leave_on_signals", daemon=True).start()


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
  """Holds SIGINT/SIGTERM until the block is done (a checkpoint is never cut short).

  A signal that came meanwhile then goes to the handler that was in place: Ctrl-C raises
  KeyboardInterrupt, the chief's SIGTERM asks it to stop (`request_stop_on_sigterm`).
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []
  previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
  for sig in previous:
    signal.signal(sig, lambda signum, frame: received.append(signum))
  try:
    yield
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)
  for signum in received:
    handler = previous[signum]
    if callable(handler):
      handler(signum, None)
    elif handler == signal.SIG_DFL:
      signal.raise_signal(signum)
