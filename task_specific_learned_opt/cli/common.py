"""What the binaries share: their common flags, and one-line errors for mistakes a user can fix.

A wrong gin binding or an unprepared dataset is the user's to fix, so the binary prints one line
that names the problem and the fix, and exits with status 1, instead of a traceback. So is a
full or read-only disk, wherever a write meets it: the line names the path and the free space.
"""

import functools
import sys
from collections.abc import Callable, Sequence

import tensorflow as tf
from absl import flags

from task_specific_learned_opt import errors, files
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import stopping


def define_gin_flags(default_gin_file: str) -> None:
  """Defines --gin_file, --gin_bindings and --import_module, which every binary takes (once per
  process); the binary passes --import_module to gin_config.parse."""
  if "gin_file" not in flags.FLAGS:
    flags.DEFINE_multi_string("gin_file", [default_gin_file], "Gin experiment file(s).")
    flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings that override the files.")
    flags.DEFINE_multi_string(
      "import_module",
      [],
      "A Python module of yours (a dotted name, found on the Python path or in the working "
      "directory, or a .py file) imported before the gin files are parsed, so that the gin "
      "files can name its @gin.configurable functions, e.g. a Keras model function for "
      "KerasModelFamily.model_fn. Repeatable; processes this one starts get it too.",
    )


def define_train_dir_flags(default_train_dir: str) -> None:
  """Defines --train_dir and --resume_changed_experiment (bin/train_local, bin/chief)."""
  flags.DEFINE_string("train_dir", default_train_dir, "Checkpoints, theta, summaries and plots.")
  flags.DEFINE_bool(
    "resume_changed_experiment",
    False,
    "Resume a train dir that holds another experiment (other gin bindings, the same theta "
    "shapes) on purpose; without it such a train dir is refused.",
  )


DEVICES = ("auto", "cpu", "gpu")


class DeviceError(errors.UserError):
  """--device asks for a device this machine does not have."""


def define_device_flag() -> None:
  """Defines --device (bin/train_local, bin/worker): where the inner and outer computations run."""
  flags.DEFINE_enum(
    "device",
    "auto",
    DEVICES,
    "cpu: the CPU only, with any GPU hidden from TensorFlow; gpu: TensorFlow's first GPU, and an "
    "error if it sees none; auto: TensorFlow's own placement (a GPU where it sees one).",
  )


def use_device(device: str) -> None:
  """Makes TensorFlow run this process on `device` (one of DEVICES); call before any op runs.

  Raises:
    DeviceError: "gpu" on a machine where TensorFlow sees no GPU; the message says what to check.
  """
  gpus = tf.config.list_physical_devices("GPU")
  if device == "cpu":
    tf.config.set_visible_devices([], "GPU")
  elif device == "gpu" and not gpus:
    raise DeviceError(
      "--device gpu: TensorFlow sees no GPU on this machine (tf.config.list_physical_devices"
      "('GPU') is empty). Install a CUDA build (pip install 'tensorflow[and-cuda]'), check "
      "nvidia-smi and CUDA_VISIBLE_DEVICES, or pass --device cpu."
    )
  elif device == "gpu":
    tf.config.set_visible_devices(gpus[:1], "GPU")
  elif device != "auto":
    raise DeviceError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}.")


def define_cluster_flags() -> None:
  """Defines the flags bin/chief and bin/worker share."""
  flags.DEFINE_string(
    "cluster",
    None,
    'The cluster as JSON: {"chief": ["host:port"], "worker": ["host:port", ...]}. '
    "Default: the TF_CONFIG environment variable.",
  )
  flags.DEFINE_integer("task_index", None, "This task's index in its job (default: TF_CONFIG's).")
  flags.DEFINE_bool(
    "allow_public_addresses",
    False,
    "Allow addresses outside loopback and the private ranges. TensorFlow's server has no "
    "authentication: only on a network nobody else reaches.",
  )


def exits_on_user_error(main: Callable[[Sequence[str]], None]) -> Callable[[Sequence[str]], None]:
  """Wraps an absl `main(argv)`: an errors.UserError becomes `sys.exit("error: ...")`.

  Args:
    main: the binary's main function, called with the arguments absl leaves after parsing flags.

  Returns:
    `main`, except that an errors.UserError, or a write that failed on a full or read-only
    disk, exits with status 1 and a one-line message;
    stopping.Terminated (SIGTERM, after `finally` blocks saved what they save) exits 0 with
    "stopped by SIGTERM"; KeyboardInterrupt (Ctrl-C) exits 1 with "interrupted".
  """

  @functools.wraps(main)
  def wrapped(argv: Sequence[str]) -> None:
    try:
      return main(argv)
    except stopping.Terminated:
      print("stopped by SIGTERM", file=sys.stderr, flush=True)
      sys.exit(0)
    except KeyboardInterrupt:
      sys.exit("interrupted (state saved)")
    except errors.UserError as e:
      # Gin appends where the error was raised; the message alone names the problem and the fix.
      message = str(e).split("In call to configurable")[0]
      sys.exit(f"error: {' '.join(message.split())}")
    except (OSError, tf.errors.OpError) as e:
      if files.disk_problem(e) is None:
        raise
      # Every file is written whole or appended whole (files.py), so what is there is intact.
      kept = "What was written before is intact"
      sys.exit(f"error: {files.disk_error(e, None, kept)}")

  return wrapped
