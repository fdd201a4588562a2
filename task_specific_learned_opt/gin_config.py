"""Gin parsing, thread settings, a spawned process's gin config (imports `errors`, `files`).

Flags say where and how long; gin says what. Every binary imports `cli.common`, which imports
`cli.configurables` (it registers every @gin.configurable of the package), and calls `parse`
with its --gin_file and --gin_bindings: unknown names fail loudly (skip_unknown=False) with an
error that names the problem (GinConfigError, an errors.UserError), and the config stays
unlocked (finalize_config=False) so tests can clear it. `parse` drops gin's include lookup log
lines ("system_path_file_exists:...", "Path not found") for an include it then finds in gin/.
`takes_fields_of` lets a configurable take a record's fields as keywords, so that the fields,
their defaults and their docs are written once, on the record. `init_spawned_process` gives a
process started with multiprocessing's "spawn" its parent's gin
registrations, config and threads: it imports the parent's modules by name.

A user's own configurables (a Keras model function for tasks/keras_task.py) live in the user's
modules: `import_modules` imports them (every binary's --import_module, a dotted name or a .py
file; the working directory is searched too) before the gin files are parsed, and remembers
them, so that spawned processes import them (`registering_modules`) and processes started as
commands are given them again (`import_module_flags`).
"""

import dataclasses
import importlib
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence

import gin
import tensorflow as tf

from task_specific_learned_opt import errors, files

PACKAGE = __name__.rsplit(".", 1)[0]
GIN_DIR = os.path.join(files.PROJECT_ROOT, "gin")
_search_path_added = False


class GinConfigError(errors.UserError, ValueError):
  """A gin file or binding that cannot be parsed or names something unknown."""


class ImportModuleError(GinConfigError):
  """A module of --import_module that cannot be found."""


_imported_modules: list[str] = []  # --import_module values imported in this process, in order.


def _module_name(module: str) -> str:
  """The name `module` (a dotted name, or the path of a .py file) is imported by."""
  return os.path.basename(module)[: -len(".py")] if module.endswith(".py") else module


def _make_importable(module: str) -> None:
  """Puts the directory of a .py file, or else the working directory, on sys.path."""
  if module.endswith(".py"):
    if not os.path.isfile(module):
      raise ImportModuleError(f"--import_module {module}: no such file.")
    directory = os.path.dirname(os.path.abspath(module))
    if directory not in sys.path:
      sys.path.insert(0, directory)
  elif os.getcwd() not in sys.path and "" not in sys.path:
    sys.path.append(os.getcwd())  # Binaries run as scripts do not search the working directory.


def import_modules(modules: Sequence[str]) -> None:
  """Imports the user's modules, whose @gin.configurable names the gin files may then use.

  Args:
    modules: dotted module names (searched on sys.path and in the working directory) or paths
      of .py files.

  Raises:
    ImportModuleError: a module, or a module it imports, is not found; the message names it.
  """
  for module in modules:
    _make_importable(module)
    name = _module_name(module)
    try:
      importlib.import_module(name)
    except ModuleNotFoundError as e:
      if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
        raise ImportModuleError(
          f"--import_module {module}: no module {e.name!r} on the Python path or in the working "
          f"directory {os.getcwd()}; run from the directory that holds it, add that directory to "
          "PYTHONPATH, or give the path of its .py file."
        ) from e
      raise ImportModuleError(
        f"--import_module {module}: it imports {e.name!r}, which is not installed; install it."
      ) from e
    if module not in _imported_modules:
      _imported_modules.append(module)


def import_module_flags() -> list[str]:
  """The --import_module flags of the modules imported so far, for a process started here."""
  return [f"--import_module={module}" for module in _imported_modules]


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


def _tolerant(exists: Callable[[str], bool]) -> Callable[[str], bool]:
  """`exists` that answers False where it would raise TypeError."""

  def check(path: str) -> bool:
    try:
      return exists(path)
    except TypeError:
      return False

  check.tolerant = True
  return check


def _tolerate_namespace_packages() -> None:
  """Lets an include such as 'pretrained/x.gin' be found in gin/ when the working directory,
  on sys.path (python -m, --import_module), has a directory of that name without __init__.py.

  gin looks an include up first as a file of a Python package (gin.resource_reader): a directory
  without __init__.py is a namespace package with no file of its own, and that check raises
  TypeError before the search path (gin/) is tried. Such a directory holds no package's gin file.
  """
  readers = gin.config._FILE_READERS  # noqa: SLF001 - gin has no public way to wrap a reader.
  for i, (reader, exists) in enumerate(readers):
    if not getattr(exists, "tolerant", False):
      readers[i] = (reader, _tolerant(exists))


def parse(
  gin_files: Sequence[str] = (), gin_bindings: Sequence[str] = (), modules: Sequence[str] = ()
) -> None:
  """Imports `modules`, clears gin and parses `gin_files` then `gin_bindings` (later ones win).

  Files and includes are looked up in the working directory, the project root and gin/.

  Args:
    gin_files: gin files.
    gin_bindings: gin bindings.
    modules: the user's modules to import first (`import_modules`; --import_module).

  Raises:
    GinConfigError: a missing file, a syntax error, or an unknown configurable or parameter;
      the message names it and says how to fix it.
    ImportModuleError: a module of `modules` is not found.
  """
  global _search_path_added
  import_modules(modules)
  gin.clear_config()
  if os.path.isdir(GIN_DIR) and not _search_path_added:
    gin.add_config_file_search_path(GIN_DIR)
    _search_path_added = True
  _tolerate_namespace_packages()
  gin_files = [_resolve(path) for path in gin_files]
  quiet = _IncludeLookupFilter()
  logging.getLogger().addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(
      list(gin_files), list(gin_bindings), skip_unknown=False, finalize_config=False
    )
  except (OSError, ValueError, KeyError, SyntaxError) as e:
    message = " ".join(str(e).strip().splitlines())
    raise GinConfigError(
      f"Bad gin configuration: {message}. Check the spelling of the configurable "
      "and parameter in --gin_file/--gin_bindings (names are the @gin.configurable classes and "
      f"functions of task_specific_learned_opt){_import_hint(message)}."
    ) from e
  finally:
    logging.getLogger().removeFilter(quiet)


def _import_hint(message: str) -> str:
  """For an unknown configurable of a module of the user's: the --import_module that fixes it."""
  match = re.search(r"No configurable matching (?:reference )?'@?([\w.]+)", message)
  if not match or "." not in match.group(1):
    return ""
  module = match.group(1).rsplit(".", 1)[0]
  if module in map(_module_name, _imported_modules):
    return f"; {module} is imported, but registers no configurable {match.group(1)!r}"
  return f", or, if {module} is a module of yours that defines it, pass --import_module {module}"


class _IncludeLookupFilter(logging.Filter):
  """Drops gin's include lookup lines for an include it goes on to find in gin/.

  Gin looks an include up under each search path in turn, and where a path does not exist it
  also asks its Python-package reader (gin/resource_reader.py), which logs
  "system_path_file_exists:<include>" at INFO and, where the include's folder is no package,
  "Path not found" at ERROR, before the next search path (gin/) finds the file. A file found
  nowhere still fails, with GinConfigError.
  """

  def filter(self, record: logging.LogRecord) -> bool:
    """False for the package reader's lookup records, True for every other."""
    return not (
      record.module == "resource_reader"
      and str(record.msg).startswith(("Path not found", "system_path_file_exists"))
    )


def takes_fields_of(record: type) -> Callable[[Callable], Callable]:
  """Gives a function `f(..., **fields)` the signature of a dataclass' fields, for gin to check.

  Apply it below `@gin.configurable` (gin reads the signature when it decorates): the function
  then shows its own parameters before `**`, followed by each field of `record` as a keyword-only
  parameter with the field's default and type (gin.REQUIRED where the field has none), so that a
  binding naming no field fails when the gin file is parsed.

  Args:
    record: a dataclass whose fields are the keywords.

  Returns:
    A decorator that sets the function's `__signature__` and returns it.
  """

  def decorate(function: Callable) -> Callable:
    own = [
      p
      for p in inspect.signature(function).parameters.values()
      if p.kind != inspect.Parameter.VAR_KEYWORD
    ]
    fields = [
      inspect.Parameter(
        field.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=gin.REQUIRED if field.default is dataclasses.MISSING else field.default,
        annotation=field.type,
      )
      for field in dataclasses.fields(record)
    ]
    function.__signature__ = inspect.Signature([*own, *fields], return_annotation=record)
    return function

  return decorate


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
  """The modules loaded in this process whose @gin.configurable names a config of this process
  may use: the package's, then the user's (`import_modules`)."""
  package = sorted(name for name in list(sys.modules) if name.split(".")[0] == PACKAGE)
  return package + [_module_name(module) for module in _imported_modules]


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
