"""The package's import structure: no cycles, imports at the top, gin parsing self-contained.

The import graph has an edge from module a to module b of the package when a imports b: an
`import` or `from ... import` statement anywhere in a (a function's included), or a call
`importlib.import_module(NAME)` / `__import__(NAME)` whose NAME is a string literal or a
module-level constant holding one (`CONFIGURABLES_MODULE = "task_specific_learned_opt...."`).
Such a call is a real import: a module that import_module's a module importing it is a cycle.

Not edges: imports of names known only at run time, e.g. `gin_config.init_spawned_process`,
which imports the module names it is given (a spawned process importing its parent's modules),
or a name built by an f-string. A relative `import_module("..x", package)` is not followed.
"""

import ast
import os

import testing_utils

PACKAGE = "task_specific_learned_opt"
ROOT = os.path.join(testing_utils.REPO, PACKAGE)
REGISTRY = f"{PACKAGE}.cli.configurables"
# Imports inside a function, each with its reason. Package modules are never allowed here.
IMPORTS_INSIDE_FUNCTIONS = {
  # TensorFlow loads inside the block that silences its C++ start-up notices.
  (f"{PACKAGE}.cli.quiet_start", "tensorflow"),
  # scikit-learn is an optional extra: imported when the digits are first read, so that a missing
  # extra fails with the command that installs it.
  (f"{PACKAGE}.tasks.digits_source", "sklearn"),
}


def _modules(root: str = ROOT) -> dict[str, ast.Module]:
  """{dotted name: parsed source} of every module of the package at `root` (a directory)."""
  modules = {}
  for directory, _, files in os.walk(root):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        parts = os.path.relpath(path, os.path.dirname(root))[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
          parts = parts[:-1]
        with open(path) as f:
          modules[".".join(parts)] = ast.parse(f.read(), path)
  return modules


def _string_constants(tree: ast.Module) -> dict[str, str]:
  """The module-level `NAME = "string"` assignments of a module."""
  constants = {}
  for node in tree.body:
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
      targets = node.targets if isinstance(node, ast.Assign) else [node.target]
      constants.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
  return constants


def _dynamic_import(node: ast.AST, constants: dict[str, str]) -> str | None:
  """The module an `import_module(...)` or `__import__(...)` call names, if it names one."""
  if not isinstance(node, ast.Call) or not node.args:
    return None
  function = node.func
  name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
  if name not in ("import_module", "__import__"):
    return None
  argument = node.args[0]
  if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
    return argument.value
  if isinstance(argument, ast.Name):
    return constants.get(argument.id)
  return None


def _imported(node: ast.AST, modules: dict, constants: dict[str, str]) -> set[str]:
  """The package modules a node imports (`from a import b` may name module a.b)."""
  names = set()
  if isinstance(node, ast.Import):
    names = {alias.name for alias in node.names}
  elif isinstance(node, ast.ImportFrom) and node.module:
    names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
  else:
    dynamic = _dynamic_import(node, constants)
    names = {dynamic} if dynamic else set()
  return {n for n in names if n in modules}


def _graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
  """{module: the package modules it imports}, over every node of each module."""
  graph = {}
  for name, tree in modules.items():
    constants = _string_constants(tree)
    imported = (_imported(node, modules, constants) for node in ast.walk(tree))
    graph[name] = set().union(*imported) - {name}
  return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
  state = {}

  def visit(node, path):
    state[node] = "open"
    for child in sorted(graph[node]):
      if state.get(child) == "open":
        return path[path.index(child) :] + [child]
      if child not in state:
        found = visit(child, path + [child])
        if found:
          return found
    state[node] = "done"
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node, [node])
      if found:
        return found
  return None


def import_cycle(root: str = ROOT) -> list[str] | None:
  """A cycle of the import graph of the package at `root`, e.g. [a, b, a]; None if none."""
  return _cycle(_graph(_modules(root)))


def test_the_package_has_no_import_cycles():
  assert f"{PACKAGE}.distributed" in _modules(ROOT)  # The walk found the package.
  cycle = import_cycle(ROOT)
  assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None


def _write_package(root, sources: dict[str, str]) -> str:
  package = os.path.join(root, "pkg")
  os.makedirs(package)
  for name, source in {"__init__": "", **sources}.items():
    with open(os.path.join(package, f"{name}.py"), "w") as f:
      f.write(source)
  return package


def test_import_module_of_a_module_that_imports_back_is_a_cycle(tmp_path):
  # The shape of the old hidden cycle: a registry imports a module that, inside a function,
  # imports the registry by a constant's name.
  package = _write_package(
    tmp_path,
    {
      "registry": "from pkg import search\n",
      "search": (
        'import importlib\n\nREGISTRY = "pkg.registry"\n\n\n'
        "def child_init():\n  importlib.import_module(REGISTRY)\n"
      ),
    },
  )
  assert import_cycle(package) == ["pkg.registry", "pkg.search", "pkg.registry"]
  with open(os.path.join(package, "search.py"), "w") as f:
    f.write('def child_init():\n  __import__("pkg.registry")\n')
  assert import_cycle(package) == ["pkg.registry", "pkg.search", "pkg.registry"]


def test_run_time_module_names_are_not_edges(tmp_path):
  package = _write_package(
    tmp_path,
    {
      "registry": "from pkg import spawn\n",
      "spawn": (
        "import importlib\n\n\ndef init(modules):\n  for name in modules:\n"
        "    importlib.import_module(name)\n  importlib.import_module(f'pkg.{modules[0]}')\n"
      ),
    },
  )
  assert import_cycle(package) is None


def test_no_imports_inside_functions():
  found = []
  for name, tree in _modules().items():
    for function in ast.walk(tree):
      if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(function):
          if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
          elif isinstance(node, ast.ImportFrom):
            imported = [node.module]
          else:
            continue
          found += [
            f"{name}:{node.lineno} {i}"
            for i in imported
            if (name, i) not in IMPORTS_INSIDE_FUNCTIONS
          ]
  assert not found, found


def test_gin_parsing_imports_only_leaf_modules_and_only_the_binaries_import_the_registry():
  modules = _modules()
  graph = _graph(modules)
  # The package's __init__ (a docstring), errors.py (a leaf) and files.py (which imports only
  # errors.py, for its disk errors) are all gin_config loads.
  assert graph[f"{PACKAGE}.gin_config"] <= {PACKAGE, f"{PACKAGE}.errors", f"{PACKAGE}.files"}
  assert graph[f"{PACKAGE}.errors"] <= {PACKAGE}
  assert graph[f"{PACKAGE}.files"] <= {PACKAGE, f"{PACKAGE}.errors"}
  # The registry is for the binaries: only the command-line layer imports it, and no library
  # module imports the command-line layer.
  importers = sorted(name for name, imports in graph.items() if REGISTRY in imports)
  assert importers == [f"{PACKAGE}.cli.common"], importers
  cli = f"{PACKAGE}.cli"
  library = {name: imports for name, imports in graph.items() if not name.startswith(cli)}
  upward = sorted(
    name for name, imports in library.items() if any(i.startswith(cli) for i in imports)
  )
  assert not upward, upward
  # The registry reaches every module that declares a gin configurable.
  reached, todo = set(), [REGISTRY]
  while todo:
    name = todo.pop()
    if name not in reached:
      reached.add(name)
      todo.extend(graph[name])
  configurable = {
    name
    for name, tree in modules.items()
    if any(
      isinstance(node, ast.Attribute) and node.attr in ("configurable", "external_configurable")
      for node in ast.walk(tree)
    )
  }
  assert configurable and configurable <= reached, sorted(configurable - reached)


def test_the_package_does_not_import_the_test_rigs():
  """harness/ (netns, hosts) serves the tests and benchmarks; the library never imports it."""
  modules = _modules()
  found = []
  for name, tree in modules.items():
    for node in ast.walk(tree):
      names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
      names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
      found += [f"{name} {n}" for n in names if n.split(".")[0] == "harness"]
  assert not found, found
  assert not [name for name in modules if name.endswith((".netns", ".hosts"))]
  assert _modules(os.path.join(testing_utils.REPO, "harness"))  # The rigs are where they moved.
