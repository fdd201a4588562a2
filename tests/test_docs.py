"""The docs cannot drift from the code: design.md's map names every module, and no doc names a
module that is not there; only plots.py and the figures draw with matplotlib."""

import ast
import glob
import os
import re
import subprocess

import testing_utils

PACKAGE = "task_specific_learned_opt"
ROOT = os.path.join(testing_utils.REPO, PACKAGE)
DESIGN = os.path.join(testing_utils.REPO, "docs", "design.md")
ROOT_FLOOR = "the package root"
# Where matplotlib may be imported: the one module of the training and evaluation curves, and the
# pathology figures, each of which draws its own (docs/design.md).
MATPLOTLIB_IMPORTERS = ("plots.py", "figures/")
# .py paths that name no module of this project, each with its reason.
NOT_OURS = {
  "my_tasks.py": "a user's own module, in the examples of docs/own_tasks.md",
  "my_lopts.py": "a user's own module, in the examples of docs/own_tasks.md",
  "gin/resource_reader.py": "gin-config's module, named where its log lines are dropped",
}
# A module path in a doc: a word of letters, digits, _ and / ending in .py.
PY_PATH = re.compile(r"(?<![\w./-])([\w/.-]*\w\.py)\b")


def _package_modules() -> dict[str, set[str]]:
  """{folder relative to the package ("" for the root): its modules' names}, __init__ aside."""
  found = {}
  for directory, _, names in os.walk(ROOT):
    folder = os.path.relpath(directory, ROOT)
    modules = {n[: -len(".py")] for n in names if n.endswith(".py") and n != "__init__.py"}
    if modules:
      found["" if folder == "." else folder] = modules
  return found


def _drawn_floors() -> dict[str, set[str]]:
  """{folder: module names} of design.md's drawing of the floors ("7  bin/   a b c")."""
  with open(DESIGN) as f:
    text = f.read()
  drawing = text.split("## Components", 1)[1].split("```", 2)[1]
  floors, folder = {}, None
  for line in drawing.splitlines():
    match = re.match(r"^(\d)\s+(\S+/|the package root)\s+(.*)$", line)
    if match:
      folder = "" if match.group(2) == ROOT_FLOOR else match.group(2).rstrip("/")
      words = match.group(3)
    elif line.strip() and folder is not None:
      words = line
    else:
      continue
    floors.setdefault(folder, set()).update(re.sub(r"\(.*?\)", "", words).split())
  return floors


def test_design_md_draws_every_module_of_the_package_on_its_folder():
  drawn = _drawn_floors()
  for folder, modules in _package_modules().items():
    assert folder in drawn, f"docs/design.md draws no floor for {folder or ROOT_FLOOR}"
    assert drawn[folder] == modules, (
      folder,
      f"missing: {sorted(modules - drawn[folder])}",
      f"not there: {sorted(drawn[folder] - modules)}",
    )


def test_design_md_describes_every_module():
  with open(DESIGN) as f:
    text = f.read()
  for folder, modules in _package_modules().items():
    for module in modules:
      assert f"{module}.py" in text, f"docs/design.md does not describe {folder}/{module}.py"


def _tracked_files() -> list[str]:
  out = subprocess.run(
    ["git", "ls-files"], cwd=testing_utils.REPO, capture_output=True, text=True, check=True
  )
  return out.stdout.split()


def _exists(path: str, doc: str, tracked: list[str]) -> bool:
  if path in NOT_OURS:
    return True
  if "/" not in path:
    return any(os.path.basename(t) == path for t in tracked)
  path = path.lstrip("./")
  here = os.path.relpath(os.path.dirname(doc), testing_utils.REPO)
  prefixes = ("", f"{PACKAGE}/", "tests/", f"{here}/")
  return any(t == prefix + path or t.endswith("/" + path) for prefix in prefixes for t in tracked)


def _missing_modules(path, tracked, relative_to):
  """ "<path>:<line> <module>" for each .py path that `path` names and that does not exist."""
  missing = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      for named in PY_PATH.findall(line):
        if not _exists(named, path, tracked):
          missing.append(f"{os.path.relpath(path, relative_to)}:{number} {named}")
  return missing


def test_no_doc_names_a_module_that_is_not_there():
  tracked = _tracked_files()
  docs = glob.glob(os.path.join(testing_utils.REPO, "docs", "*.md"))
  docs += [os.path.join(testing_utils.REPO, "README.md")]
  missing = [m for doc in sorted(docs) for m in _missing_modules(doc, tracked, testing_utils.REPO)]
  assert not missing, missing


def test_no_module_names_a_module_that_is_not_there():
  tracked = _tracked_files()
  missing = [
    m
    for directory, _, names in os.walk(ROOT)
    for name in names
    if name.endswith(".py")
    for m in _missing_modules(os.path.join(directory, name), tracked, ROOT)
  ]
  assert not missing, missing


def test_only_plots_and_the_figures_import_matplotlib():
  found = []
  for directory, _, names in os.walk(ROOT):
    for name in names:
      if not name.endswith(".py"):
        continue
      path = os.path.join(directory, name)
      relative = os.path.relpath(path, ROOT)
      with open(path) as f:
        tree = ast.parse(f.read())
      for node in ast.walk(tree):
        names_ = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names_ += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(n.split(".")[0] == "matplotlib" for n in names_) and not relative.startswith(
          MATPLOTLIB_IMPORTERS
        ):
          found.append(relative)
  assert not found, found
