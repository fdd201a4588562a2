"""Gin parsing, thread settings, a spawned process's gin config (imports `errors`, `files`).

Flags say where and how long; gin says what. Every binary imports `cli.common`, which imports
`cli.configurables` (it registers every @gin.configurable of the package), and calls `parse`
with its --gin_file and --gin_bindings: unknown names fail loudly (skip_unknown=False) with an
error that names the problem (GinConfigError, an errors.UserError), and the config stays
unlocked (finalize_config=False) so tests can clear it. `parse` drops gin's "Path not found" log
line for an include it then finds in gin/. `init_spawned_process` gives a process started with
multiprocessing's "spawn" its parent's gin registrations, config and threads: it imports the
parent's modules by name, the package's only import by name at run time.
"""

import importlib
import logging
import os
import sys
from collections.abc import Sequence

import gin
import tensorflow as tf

from task_specific_learned_opt import errors, files

PACKAGE = __name__.rsplit(".", 1)[0]
GIN_DIR = os.path.join(files.PROJECT_ROOT, "gin")
_search_path_added = False


class GinConfigError(errors.UserError, ValueError):
  """A gin file or binding that cannot be parsed or names something unknown."""


def _resolve(path: str) -> str:
  """`path` as given, else relative to the project root, else relative to gin/."""
  for candidate in (
    path,
    os.path.join(files.PROJECT_ROOT, path),
    os.path.join(GIN_DIR, path),
  ):
    if os.path.exists(candidate):
      return candidate
  raise GinConfigError(
    f"Gin file {path!r} does not exist (looked in the working directory, "
    f"{files.PROJECT_ROOT} and {GIN_DIR})."
  )


def parse(gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = ()) -> None:
  """Clears gin and parses `gin_files` then `gin_bindings` (later ones override earlier ones).

  Files and includes are looked up in the working directory, the project root and gin/.

  Raises:
    GinConfigError: a missing file, a syntax error, or an unknown configurable or parameter;
      the message names it and says how to fix it.
  """
  global _search_path_added
  gin.clear_config()
  if os.path.isdir(GIN_DIR) and not _search_path_added:
    gin.add_config_file_search_path(GIN_DIR)
    _search_path_added = True
  gin_files = [_resolve(path) for path in gin_files]
  quiet = _IncludeLookupFilter()
  logging.getLogger().addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(
      list(gin_files), list(gin_bindings), skip_unknown=False, finalize_config=False
    )
  except (OSError, ValueError, KeyError, SyntaxError) as e:
    message = str(e).strip().splitlines()
    raise GinConfigError(
      f"Bad gin configuration: {' '.join(message)}. Check the spelling of the configurable "
      "and parameter in --gin_file/--gin_bindings (names are the @gin.configurable classes and "
      "functions of task_specific_learned_opt)."
    ) from e
  finally:
    logging.getLogger().removeFilter(quiet)


class _IncludeLookupFilter(logging.Filter):
  """Drops gin's "Path not found" error for an include it goes on to find in gin/.

  Gin looks an include up under each search path in turn, and where a path does not exist it
  also asks its Python-package reader, which logs that error before the next search path (gin/)
  finds the file. A file found nowhere still fails, with GinConfigError.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    """False for the package reader's "Path not found" record, True for every other."""
    return not (record.module == "resource_reader" and str(record.msg).startswith("Path not found"))


@gin.configurable
def configure_threads(inter_op_threads: int = 2, intra_op_threads: int = 0) -> None:
  """Sets TensorFlow's thread pools; call before any op runs.

  Measured on a 2-core machine: graph-mode training is ~20% faster with inter-op threads = 2
  than 1. 0 means TensorFlow's default.
  """
  try:
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)
    tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
  except RuntimeError:
    # TensorFlow was already initialised in this process (tests, notebooks): keep its settings.
    pass


def registering_modules() -> list[str]:
  """The package's modules loaded in this process: those whose @gin.configurable names a config
  of this process may use."""
  return sorted(name for name in list(sys.modules) if name.split(".")[0] == PACKAGE)


def init_spawned_process(config_str: str, modules: Sequence[str]) -> None:
  """Gives a spawned process (multiprocessing "spawn") its parent's gin config and threads.

  A spawned process starts with nothing imported, so it first imports `modules` (the parent's
  `registering_modules()`: every configurable the config names is then registered), which keeps
  the package free of a module that imports everything just for such a child.

  Args:
    config_str: the parent's `gin.config_str()`.
    modules: the parent's `registering_modules()`.
  """
  for name in modules:
    importlib.import_module(name)
  gin.clear_config()
  gin.parse_config(config_str)
  configure_threads()
