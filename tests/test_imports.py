"""The package's import structure: no cycles, imports at the top, gin parsing self-contained."""

import ast
import os

import testing_utils

PACKAGE = "task_specific_learned_opt"
ROOT = os.path.join(testing_utils.REPO, PACKAGE)


def _modules() -> dict[str, ast.Module]:
  modules = {}
  for directory, _, files in os.walk(ROOT):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        parts = os.path.relpath(path, testing_utils.REPO)[: -len(".py")].split(os.sep)
        if parts[-1] == "__init__":
          parts = parts[:-1]
        with open(path) as f:
          modules[".".join(parts)] = ast.parse(f.read(), path)
  return modules


def _imported(node: ast.AST, modules: dict) -> set[str]:
  """The package modules an import statement names (`from a import b` may name module a.b)."""
  names = set()
  if isinstance(node, ast.Import):
    names = {alias.name for alias in node.names}
  elif isinstance(node, ast.ImportFrom) and node.module:
    names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
  return {n for n in names if n in modules}


def _graph(modules: dict) -> dict[str, set[str]]:
  return {
    name: set().union(*(_imported(node, modules) for node in tree.body)) - {name}
    for name, tree in modules.items()
  }


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


def test_the_package_has_no_import_cycles():
  modules = _modules()
  graph = _graph(modules)
  assert f"{PACKAGE}.distributed.loops" in graph  # The walk found the package.
  assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_imports_inside_functions():
  found = []
  for name, tree in _modules().items():
    for function in ast.walk(tree):
      if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for node in ast.walk(function):
          if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(f"{name}:{node.lineno}")
  assert not found, found


def test_gin_parsing_imports_nothing_of_the_package_and_nothing_imports_the_registry():
  modules = _modules()
  graph = _graph(modules)
  assert graph[f"{PACKAGE}.gin_config"] == set()
  registry = f"{PACKAGE}.configurables"
  assert not [name for name, imports in graph.items() if registry in imports]
  # The registry reaches every module that declares a gin configurable.
  reached, todo = set(), [registry]
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
