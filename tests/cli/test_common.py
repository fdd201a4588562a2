"""What the binaries do with errors and stops: one line and the right exit status."""

import pytest

from task_specific_learned_opt.cli import common as cli
from task_specific_learned_opt.distributed import stopping, train_dir


def _run(error):
  @cli.exits_on_user_error
  def main(argv):
    del argv
    raise error

  with pytest.raises(SystemExit) as exit_:
    main(["binary"])
  return exit_.value.code


def test_a_stop_after_sigterm_exits_0_with_one_line(capsys):
  assert _run(stopping.Terminated()) == 0
  assert capsys.readouterr().err == "stopped by SIGTERM\n"


def test_a_failed_save_exits_non_zero_with_one_line():
  code = _run(train_dir.CheckpointError("Could not save outer step 3 in d: disk full.\nMore."))
  assert code == "error: Could not save outer step 3 in d: disk full. More."


def test_ctrl_c_exits_non_zero():
  assert _run(KeyboardInterrupt()) == "interrupted (state saved)"


def test_other_errors_are_not_hidden():
  with pytest.raises(ZeroDivisionError):
    _run(ZeroDivisionError())
