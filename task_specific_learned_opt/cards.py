"""A card for every theta: what it was outer-trained on, the options it needs, how it did.

A theta export (checkpoints.save_theta) may carry `card.json` beside it:

  {"name", "summary": one line, "family": {"name", "description", "bindings"}, "objective":
   "train" | "valid", "horizon", "outer_steps", "inner_steps", "options": the MLPLOpt options it
   needs (learned_optimizers/mlp_options.py), "results": [...], "sources": {...}}

`checkpoints.load_theta` refuses a theta whose card's options differ from those of the learned
optimizer it is loaded into (one line naming the option and the fix), and `LearnedOptimizer`
and bin/eval print its summary.

Where cards come from:
  - an export of an outer-training run (the chief's <train_dir>/theta and theta_history/step_N)
    gets one at export (`export_card`): family, objective, horizon, steps and options from the
    run's gin config and learned optimizer; no results until it is evaluated;
  - a shipped theta (pretrained/<name>/) gets one from the committed files (`pretrained_card`,
    `bin/write_cards`): the run's operative_config.gin and theta/theta_info.json, and the
    evaluations that `pretrained/<name>/card_sources.json` lists, each a summary.json or
    evaluation.json of bin/eval and the label the theta has in it (see `SOURCES_FILENAME`).
    Adding a shipped theta's card is writing its card_sources.json and running bin/write_cards,
    which also renders the card into the directory's README.md.

Shipped thetas load by short name (`pretrained_theta_dir("bn_cnn_valid")`: the directory
pretrained/generated_bn_cnn_valid, "generated_" dropped), and `list_pretrained` lists them.
"""

import ast
import glob
import json
import os
import re
from collections.abc import Mapping
from typing import Any

import gin

from task_specific_learned_opt import errors, files, layout
from task_specific_learned_opt.learned_optimizers import mlp_options

CARD_FILENAME = "card.json"
# pretrained/<name>/card_sources.json: {"evaluations": [{"file": a path (or glob) from the project
# root to a bin/eval summary.json or evaluation.json, "label": the theta's name in it, "scope":
# "in_family" or "out_of_family"}, ...]}. Nothing else is typed by hand.
SOURCES_FILENAME = "card_sources.json"
README_FILENAME = "README.md"
PRETRAINED_DIRNAME = "pretrained"
# The options a loaded theta need not have as on its card: the theta's initialisation
# (output_init_scale, momentum_init), the kernel ("fast" and "reference" compute the same update)
# and changes made on purpose to how its step is applied: past its horizon (time_max_step,
# weight_decay, weight_decay_start; docs/longer_unrolls.md) or outside its family (the guards
# gate_growth, max_step_rms and max_relative_step, step_weight_decay and max_weight_rms;
# docs/evaluation.md).
# The MLP's inputs and outputs are the same.
UNPINNED_OPTIONS = (
  "implementation",
  "time_max_step",
  "weight_decay",
  "weight_decay_start",
  "output_init_scale",
  "momentum_init",
  "gate_growth",
  "max_step_rms",
  "max_relative_step",
  "step_weight_decay",
  "max_weight_rms",
)
# The options a loaded theta must have as on its card: every other one changes what theta computes.
PINNED_OPTIONS = tuple(name for name in mlp_options.NAMES if name not in UNPINNED_OPTIONS)
# The headline metric of a summary, by outer-training objective.
HEADLINE_METRIC = {"train": "mean training loss", "valid": "final test loss"}
# Defaults of the bindings a card reads, where the run's config leaves them unset (Worker's).
DEFAULTS = {"Worker.objective": "train", "Worker.horizon": 10000}


class CardMismatchError(errors.UserError, ValueError):
  """A theta loaded into a learned optimizer whose options differ from those on its card."""


class UnknownThetaError(errors.UserError, ValueError):
  """A shipped theta asked for by a name that no pretrained/ directory has."""


# Gin configs as data.


def parse_bindings(text: str) -> dict[str, Any]:
  """The bindings of a gin config (e.g. an operative_config.gin) as {"selector.param": value}.

  Values are Python literals where they parse as one, else their text ("@MLPLOpt()").

  Args:
    text: the config's text.
  """
  bindings, key, parts = {}, None, []

  def close() -> None:
    if key is not None:
      value = " ".join(parts).strip()
      try:
        bindings[key] = ast.literal_eval(value)
      except (ValueError, SyntaxError):
        bindings[key] = value

  for line in text.splitlines():
    if line[:1].isspace() and key is not None:  # A value continued on the next line.
      parts.append(line.strip().removesuffix("\\"))
      continue
    close()
    key, parts = None, []
    if not line or line.startswith(("#", "import ", "from ", "include ")) or " = " not in line:
      continue
    key, value = line.split(" = ", 1)
    parts = [value.strip().removesuffix("\\")]
  close()
  return bindings


def _references(value: Any) -> list[str]:
  """The configurables a binding's value references: "@paper_cnn()", "@f" -> ["paper_cnn", "f"]."""
  return re.findall(r"@([\w./]+)", value) if isinstance(value, str) else []


def family_of(bindings: Mapping) -> dict:
  """The task family a run outer-trained on: its configurable and every binding it reaches.

  Args:
    bindings: parse_bindings of the run's config.

  Returns:
    {"name": e.g. "ClassSubsetFamily", "description": one line, "bindings": {...}}.
  """
  roots = _references(bindings.get("outer_training.family"))
  found, queue = {}, list(roots)
  while queue:
    selector = queue.pop(0)
    for key, value in sorted(bindings.items()):
      if key.rsplit(".", 1)[0] == selector and key not in found:
        found[key] = value
        queue += [s for s in _references(value) if not any(k.startswith(s + ".") for k in found)]

  def described(selector: str, depth: int = 0) -> str:
    arguments = []
    for key, value in found.items():
      if key.rsplit(".", 1)[0] != selector:
        continue
      name = key.rsplit(".", 1)[1]
      inner = _references(value)
      if len(inner) > 1 and depth < 3:  # A list of configurables (MixtureFamily.families).
        listed = ", ".join(described(r, depth + 1) if f"@{r}()" in value else r for r in inner)
        arguments.append(f"{name}=[{listed}]")
      elif inner and depth < 3 and f"@{inner[0]}()" in value:
        arguments.append(f"{name}={described(inner[0], depth + 1)}")
      elif inner:
        arguments.append(f"{name}={inner[0]}")
      elif name in ("batch_norm", "channels", "strides", "batch_size", "num_classes_per_task"):
        arguments.append(f"{name}={value!r}")
    return f"{selector}({', '.join(arguments)})"

  name = roots[0] if roots else None
  parts = [
    described(inner, 1) if f"@{inner}()" in value else inner
    for key, value in found.items()
    if key.rsplit(".", 1)[0] == name
    for inner in _references(value)
  ]
  return {
    "name": name,
    "description": described(name) if name else None,
    "short": " / ".join(parts) or name,
    "bindings": {k: _jsonable(v) for k, v in found.items()},
  }


def _jsonable(value: Any) -> Any:
  """Tuples as lists, everything else as it is (numbers, strings, booleans, None)."""
  if isinstance(value, (tuple, list)):
    return [_jsonable(v) for v in value]
  return value


def options_from_bindings(bindings: Mapping) -> dict:
  """The MLPLOpt options a run used: its MLPLOpt.* bindings, the defaults for the rest.

  Args:
    bindings: parse_bindings of the run's (operative) config.
  """
  given = {
    key.split(".", 1)[1]: value
    for key, value in bindings.items()
    if key.startswith("MLPLOpt.") and key.split(".", 1)[1] in mlp_options.NAMES
  }
  return mlp_options.as_dict(mlp_options.MLPLOptOptions(**given))


# Cards.


def make_card(
  name: str,
  bindings: Mapping,
  options: Mapping,
  info: Mapping,
  results: list | None = None,
  sources: Mapping | None = None,
) -> dict:
  """A card from a run's config, its learned optimizer's options and the export's theta_info.

  Args:
    name: the theta's name (a pretrained/ directory's, or the train dir's).
    bindings: parse_bindings of the run's config.
    options: the MLPLOpt options (lopt_options.lopt_options).
    info: the export's theta_info.json (outer_step, inner_steps).
    results: `results_from` of its evaluations (empty until evaluated).
    sources: the files each field was read from.
  """
  card = {
    "name": name,
    "family": family_of(bindings),
    "objective": bindings.get("Worker.objective", DEFAULTS["Worker.objective"]),
    "horizon": bindings.get("Worker.horizon", DEFAULTS["Worker.horizon"]),
    "outer_steps": info.get("outer_step"),
    "inner_steps": info.get("inner_steps"),
    "options": {k: _jsonable(v) for k, v in options.items()},
    "results": list(results or []),
    "sources": dict(sources or {}),
  }
  card["summary"] = summary(card)
  return card


def summary(card: Mapping) -> str:
  """The card in one line: name, objective, steps, family, and its headline in-family result."""
  line = (
    f"{card['name']}: L_{card['objective']}, {card['outer_steps']} outer steps at horizon "
    f"{card['horizon']} on {(card.get('family') or {}).get('short')}"
  )
  headline = _headline(card)
  return f"{line}; {headline}" if headline else f"{line}; not evaluated yet"


def _headline(card: Mapping) -> str | None:
  metric = HEADLINE_METRIC.get(card.get("objective"), "mean training loss")
  for result in card.get("results", []):
    if result.get("scope") != "in_family":
      continue
    for c in result["comparisons"]:
      if c["metric"] == metric:
        baseline = c["baseline"].split(" (")[0]
        return (
          f"in family {metric} {c['learned']:.3f} vs tuned {baseline} {c['baseline_value']:.3f} "
          f"({c['tasks_won']} of {result['tasks']} tasks won)"
        )
  return None


def results_from(path: str, label: str, scope: str) -> dict:
  """One evaluation's comparisons of the theta named `label` in a bin/eval summary or evaluation.

  Args:
    path: the summary.json or evaluation.json, relative to the project root.
    label: the theta's name in it (bin/eval --theta LABEL=...).
    scope: "in_family" or "out_of_family".

  Raises:
    ValueError: the file has no comparison of `label`.
  """
  with open(os.path.join(files.PROJECT_ROOT, path)) as f:
    evaluation = json.load(f)
  comparisons = [c for c in evaluation.get("comparisons", []) if c.get("learned") == label]
  if not comparisons:
    learned = sorted({c.get("learned") for c in evaluation.get("comparisons", [])})
    raise ValueError(f"{path} compares no theta named {label!r}; it compares {learned}.")
  tasks = len(comparisons[0]["difference"])
  return {
    "file": path,
    "scope": scope,
    "evaluation": evaluation.get("title") or os.path.basename(os.path.dirname(path)),
    "label": label,
    "tasks": tasks,
    "comparisons": [
      {
        "metric": c["metric_name"],
        "baseline": c["baseline"],
        "learned": round(float(c["learned_mean_loss"]), 4),
        "baseline_value": round(float(c["baseline_mean_loss"]), 4),
        "tasks_won": int(round(c["fraction_learned_wins"] * tasks)),
      }
      for c in comparisons
    ],
  }


def read_card(theta_dir: str) -> dict | None:
  """The card of the export in `theta_dir`; None if it has none.

  The card beside the export (pretrained/<name>/card.json, with the results) comes before the
  one an outer-training run wrote into it at export (<train_dir>/theta/card.json), which a
  shipped theta copied from a train dir may still carry.

  Args:
    theta_dir: a theta export.
  """
  for directory in (os.path.dirname(os.path.normpath(theta_dir)), theta_dir):
    path = os.path.join(directory, CARD_FILENAME)
    if os.path.exists(path):
      with open(path) as f:
        return json.load(f)
  return None


def write_card(directory: str, card: Mapping) -> str:
  """Writes `card` as directory/card.json; returns the path."""
  path = os.path.join(directory, CARD_FILENAME)
  files.write_json(path, dict(card), indent=1, sort_keys=True)
  return path


def _same(a: Any, b: Any) -> bool:
  """Options equal, floats to 1e-6 relative (a gin file's time scales are printed rounded)."""
  if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
  if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
    return a == b
  if isinstance(a, (int, float)) and isinstance(b, (int, float)):
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))
  return a == b


def mismatches(card: Mapping, lopt: Any) -> list[tuple[str, Any, Any]]:
  """The options on which `lopt` differs from the card: [(option, card's, lopt's)].

  Args:
    card: a theta's card.
    lopt: the learned optimizer it is loaded into (read with getattr).
  """
  found = []
  for option, value in sorted(card.get("options", {}).items()):
    if option not in PINNED_OPTIONS or not hasattr(lopt, option):
      continue
    mine = getattr(lopt, option)
    if option == "time_scales" and not card["options"].get("use_time", True):
      continue  # Not read without time features.
    if not _same(_jsonable(mine), value):
      found.append((option, value, _jsonable(mine)))
  return found


def check_options(theta_dir: str, lopt: Any, card: Mapping | None = None) -> None:
  """Refuses a theta whose card names other learned-optimizer options than `lopt`'s.

  Args:
    theta_dir: the export.
    lopt: the learned optimizer it is loaded into.
    card: its card (read from theta_dir if None); no card, no check.

  Raises:
    CardMismatchError: one line naming the first differing option, both values and the fix.
  """
  card = read_card(theta_dir) if card is None else card
  if not card:
    return
  differ = mismatches(card, lopt)
  if differ:
    option, theirs, mine = differ[0]
    more = f" (and {', '.join(d[0] for d in differ[1:])})" if differ[1:] else ""
    raise CardMismatchError(
      f"The theta in {theta_dir} was outer-trained with MLPLOpt {option}={theirs!r}{more}, but "
      f"is loaded with {option}={mine!r}: pass lopt=MLPLOpt({option}={theirs!r}, ...) with the "
      f"options on its card ({CARD_FILENAME}), or lopt=None in LearnedOptimizer.from_directory, "
      "which takes them from the card."
    )


# Exported thetas.


def export_card(name: str, lopt: Any, info: Mapping) -> dict:
  """The card of a theta an outer-training run exports now, from the live gin config.

  Args:
    name: the run's name (its train dir's base name).
    lopt: the run's learned optimizer.
    info: what the export records (outer_step, inner_steps).
  """
  bindings = parse_bindings(gin.operative_config_str())
  bindings.update(parse_bindings(gin.config_str()))  # Bound but not yet called: the workers'.
  # Another learned optimizer (LearnedHyperparameters) has no MLPLOpt options to pin.
  options = getattr(lopt, "options", None)
  options = mlp_options.as_dict(options) if isinstance(options, mlp_options.MLPLOptOptions) else {}
  card = make_card(name, bindings, options, info, results=[])
  card["learned_optimizer"] = type(lopt).__name__
  return card


# Shipped thetas.


def pretrained_root() -> str:
  """The project's pretrained/ directory."""
  return os.path.join(files.PROJECT_ROOT, PRETRAINED_DIRNAME)


def pretrained_names() -> dict[str, str]:
  """{short name: directory name} of every shipped theta (a pretrained/<name>/theta export).

  The short name drops a leading "generated_" (pretrained/generated_bn_cnn_valid:
  "bn_cnn_valid"); the directory name is accepted too.
  """
  root = pretrained_root()
  names = {}
  for name in sorted(os.listdir(root)):
    if os.path.isdir(os.path.join(root, name, layout.THETA_DIRNAME)):
      names[name.removeprefix("generated_")] = name
  return names


def pretrained_theta_dir(name: str) -> str:
  """The theta export of the shipped theta `name` (short or directory name).

  Raises:
    UnknownThetaError: no shipped theta has that name; the message lists those there are.
  """
  names = pretrained_names()
  directory = names.get(name) or (name if name in names.values() else None)
  if directory is None:
    raise UnknownThetaError(
      f"No shipped theta named {name!r}; the shipped thetas are {', '.join(names)} "
      f"(directories {PRETRAINED_DIRNAME}/{', '.join(names.values())})."
    )
  return os.path.join(pretrained_root(), directory, layout.THETA_DIRNAME)


def list_pretrained() -> dict[str, str]:
  """{short name: its card's one-line summary} of every shipped theta."""
  listed = {}
  for short, directory in pretrained_names().items():
    card = read_card(os.path.join(pretrained_root(), directory, layout.THETA_DIRNAME))
    listed[short] = card["summary"] if card else f"{directory}: no card"
  return listed


def pretrained_card(directory: str) -> dict:
  """The card of a shipped theta from its committed files (see the module docstring).

  Args:
    directory: pretrained/<name>, absolute or from the project root.
  """
  directory = os.path.join(files.PROJECT_ROOT, directory)
  name = os.path.basename(os.path.normpath(directory))
  relative = os.path.relpath(directory, files.PROJECT_ROOT)
  config_path = os.path.join(directory, layout.OPERATIVE_CONFIG_FILENAME)
  info_path = os.path.join(directory, layout.THETA_DIRNAME, layout.THETA_INFO_FILENAME)
  with open(config_path) as f:
    bindings = parse_bindings(f.read())
  with open(info_path) as f:
    info = json.load(f)
  sources_path = os.path.join(directory, SOURCES_FILENAME)
  evaluations = []
  if os.path.exists(sources_path):
    with open(sources_path) as f:
      evaluations = json.load(f).get("evaluations", [])
  results = []
  for entry in evaluations:
    paths = sorted(glob.glob(os.path.join(files.PROJECT_ROOT, entry["file"])))
    if not paths:
      raise FileNotFoundError(f"{sources_path}: no file matches {entry['file']}.")
    for path in paths:
      results.append(
        results_from(os.path.relpath(path, files.PROJECT_ROOT), entry["label"], entry["scope"])
      )
  sources = {
    "family, objective, horizon, options": os.path.join(relative, layout.OPERATIVE_CONFIG_FILENAME),
    "outer_steps, inner_steps": os.path.join(
      relative, layout.THETA_DIRNAME, layout.THETA_INFO_FILENAME
    ),
    "results": os.path.join(relative, SOURCES_FILENAME),
  }
  return make_card(name, bindings, options_from_bindings(bindings), info, results, sources)


def render_markdown(card: Mapping) -> str:
  """The card as a Markdown section (for the directory's README.md)."""
  lines = [
    f"# {card['name']}",
    "",
    f"{card['summary']}.",
    "",
    "Generated from the committed files by `bin/write_cards`",
    f"(`task_specific_learned_opt/cards.py`); the same data is in `{CARD_FILENAME}`.",
    "",
    "| | |",
    "|---|---|",
    f"| family | `{(card.get('family') or {}).get('description')}` |",
    f"| objective | L_{card['objective']} |",
    f"| horizon | {card['horizon']} inner steps |",
    f"| outer steps | {card['outer_steps']} ({card['inner_steps']} inner steps of truncations) |",
    f"| learned-optimizer options | `{_describe_options(card['options'])}` |",
    "",
  ]
  for scope, title in (("in_family", "In family"), ("out_of_family", "Out of family")):
    results = [r for r in card.get("results", []) if r["scope"] == scope]
    if not results:
      continue
    lines += [
      f"## {title}",
      "",
      "| evaluation | metric | baseline | theta | baseline | tasks won |",
      "|---|---|---|---|---|---|",
    ]
    for result in results:
      for c in result["comparisons"]:
        lines.append(
          f"| `{result['file']}` ({result['label']}) | {c['metric']} | {c['baseline']} | "
          f"{c['learned']:.3f} | {c['baseline_value']:.3f} | {c['tasks_won']} of "
          f"{result['tasks']} |"
        )
    lines.append("")
  if not card.get("results"):
    lines += ["No evaluation yet.", ""]
  return "\n".join(lines)


def _describe_options(options: Mapping) -> str:
  """MLPLOpt(...) with the options that differ from the defaults."""
  return mlp_options.describe(mlp_options.MLPLOptOptions(**options))


CARD_BEGIN = "<!-- card: generated by bin/write_cards; edits between these lines are lost -->"
CARD_END = "<!-- end of card -->"


def write_pretrained_card(directory: str) -> dict:
  """Writes pretrained/<name>/card.json and the card's section of its README.md.

  Text of README.md outside the generated section is kept.

  Args:
    directory: pretrained/<name>, absolute or from the project root.
  """
  directory = os.path.join(files.PROJECT_ROOT, directory)
  card = pretrained_card(directory)
  write_card(directory, card)
  readme = os.path.join(directory, README_FILENAME)
  section = f"{CARD_BEGIN}\n{render_markdown(card)}{CARD_END}\n"
  text = open(readme).read() if os.path.exists(readme) else ""
  if CARD_BEGIN in text and CARD_END in text:
    before, rest = text.split(CARD_BEGIN, 1)
    after = rest.split(CARD_END, 1)[1].lstrip("\n")
    text = f"{before}{section}{after}"
  else:
    text = section + ("\n" + text if text else "")
  with open(readme, "w") as f:
    f.write(text)
  return card
