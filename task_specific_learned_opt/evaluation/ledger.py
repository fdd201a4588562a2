"""Which held-out tasks every choice and every reported evaluation used (pretrained/ledger.json).

A result is evidence only if the tasks it is measured on played no part in choosing what it
measures. The ledger names, for each experiment family (the outer-training family of the
experiment an entry's gin file belongs to), every *choice* (a shipped theta's snapshot, a random
search's winner, a setting picked from runs such as App. H's weight decay), every *monitoring*
(numbers shown during outer-training that choose nothing: the evaluator's outer-test tasks) and
every *reported evaluation*, each by the gin file (and bindings) it ran with and the code that
samples its tasks (`tasks_of`). `audit` parses each gin file and materialises the tasks: the
class set of every task, from the family's own sampling code (no image is generated and nothing
is trained), so the ledger cannot drift from the configs.

The rule, on the same experiment family:
- a reported evaluation may not share with a choice a seed on the same class split ("seed"), a
  task (the same set of classes, "task"), or a class, whose test images the choice then saw
  ("classes"). A choice counts as having seen every split of its tasks (conservative);
- a choice that names the shipped thetas it concerns ("concerns": a setting of one theta's update,
  say) binds only the evaluations that report one of them ("thetas");
- it may share classes with a monitoring (the evaluator's outer-test tasks, shown during
  outer-training but never used to choose: every shipped theta is chosen on outer-train tasks),
  which is recorded (`monitoring_overlaps`) but allowed.
Violations that exist and cannot be re-run now are listed in the ledger as `known_violations`,
each with its reason; tests/evaluation/test_protocol_guards.py fails if the audit finds any other
(a new one) or misses a listed one (a fixed one: the ledger must then say so).

Add an evaluation or a choice: an entry with its gin file, bindings and `tasks_of`; then
`bin/ledger` prints the audit and writes the recorded overlaps and docs/ledger.md.
"""

import inspect
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import gin

from task_specific_learned_opt import gin_config
from task_specific_learned_opt.distributed import evaluator_role
from task_specific_learned_opt.evaluation import baseline_search, held_out, protocol
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import class_source

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEDGER_PATH = os.path.join(REPO, "pretrained", "ledger.json")
DOC_PATH = os.path.join(REPO, "docs", "ledger.md")
ROLES = ("choices", "monitoring", "evaluations")
SHARES = ("seed", "task", "classes")  # What a reported evaluation may not share with a choice.


class Usage(NamedTuple):
  """The held-out tasks one ledger entry used, materialised."""

  name: str
  family: str  # The experiment family: the outer-training family's source and model ("": none).
  data: str  # The class source, whose classes' images are the same wherever drawn.
  split: str  # The class split its tasks are drawn from.
  seed: int
  tasks: tuple  # A frozenset of class ids per task, in task order.


def _parameter(configurable: str, fn: Callable, name: str) -> Any:
  """The value gin binds `configurable.name` to, else `fn`'s default."""
  bindings = gin.get_bindings(configurable)
  if name in bindings:
    return bindings[name]
  return inspect.signature(fn).parameters[name].default


def _registered(name: str) -> Callable[[], Callable]:
  """The function gin registered as `name` (a class: its __init__), found when an entry needs
  it: the caller (bin/ledger, a test) has registered the gin names, as a binary does."""

  def function() -> Callable:
    configurable = gin.get_configurable(name)
    return configurable.__init__ if inspect.isclass(configurable) else configurable

  return function


TaskSpec = tuple[task_base.TaskFamily, int, int]  # (family, seed, number of tasks)


def _evaluator(family_name: str) -> Callable[[], TaskSpec]:
  def tasks() -> TaskSpec:
    outer_train = gin.get_bindings("outer_training")["family"]
    evaluator = evaluator_role.Evaluator("", None, outer_train)
    return evaluator.families[family_name], evaluator.seed, evaluator.num_tasks

  return tasks


def _bound(configurable: str, fn: Callable[[], Callable]) -> Callable[[], TaskSpec]:
  def tasks() -> TaskSpec:
    function = fn()
    return (
      _parameter(configurable, function, "family"),
      int(_parameter(configurable, function, "seed")),
      int(_parameter(configurable, function, "num_tasks")),
    )

  return tasks


# `tasks_of`: the code whose tasks an entry uses -> (family, seed, number of tasks), read from the
# parsed gin config. Each samples task t of a family as family.sample(protocol.task_seed(seed, t)).
TASKS_OF = {
  "evaluate": _bound("evaluate", lambda: held_out.evaluate),
  "compare_with_tuned_baseline": _bound(
    "compare_with_tuned_baseline", lambda: held_out.compare_with_tuned_baseline
  ),
  "baseline_search": _bound("baseline_search", lambda: baseline_search.baseline_search),
  "longer_unrolls": _bound("LongerUnrolls", _registered("LongerUnrolls")),
  "evaluator_outer_train": _evaluator("outer_train"),
  "evaluator_outer_test": _evaluator("outer_test"),
}


def _source_key(source: class_source.ClassSource) -> str:
  return f"{source.name}(seed {getattr(source, 'seed', 0)})"


def _experiment_key(family: Any) -> str:
  """The experiment family of an outer-training family: source and network, or a mixture's."""
  if hasattr(family, "families"):  # tasks/families.MixtureFamily
    return "mixture(" + ", ".join(_experiment_key(f) for f in family.families) + ")"
  return f"{_source_key(family.source)}/{family.model.name}"


def materialise(entry: Mapping) -> Usage:
  """The tasks of one ledger entry: its gin file parsed with its bindings, its tasks sampled."""
  gin_config.parse([os.path.join(REPO, entry["gin"])], list(entry.get("bindings", ())))
  try:
    outer = gin.get_bindings("outer_training").get("family")
    family, seed, num_tasks = TASKS_OF[entry["tasks_of"]]()
    tasks = tuple(
      frozenset(int(c) for c in family.sample_classes(protocol.task_seed(seed, t)))
      for t in range(num_tasks)
    )
    return Usage(
      entry["name"],
      _experiment_key(outer) if outer else "",
      _source_key(family.source),
      family.class_split,
      seed,
      tasks,
    )
  finally:
    gin.clear_config()


def concerned(evaluation: Mapping, choice: Mapping) -> bool:
  """Whether a choice bears on an evaluation: always, unless the choice names the shipped thetas
  it concerns ("concerns", e.g. a setting of one theta's update) and the evaluation reports none
  of them ("thetas": the shipped thetas it reports; absent, none of those a choice concerns)."""
  concerns = choice.get("concerns")
  return concerns is None or bool(set(concerns) & set(evaluation.get("thetas", ())))


def shared(evaluation: Usage, choice: Usage) -> list[str]:
  """What of SHARES `evaluation` shares with `choice` (none across experiment families)."""
  if evaluation.family != choice.family:
    return []
  shares = []
  if (evaluation.split, evaluation.seed) == (choice.split, choice.seed):
    shares.append("seed")
  if set(evaluation.tasks) & set(choice.tasks):
    shares.append("task")
  if evaluation.data == choice.data and _classes(evaluation) & _classes(choice):
    shares.append("classes")
  return shares


def _classes(usage: Usage) -> frozenset:
  return frozenset().union(*usage.tasks)


def monitoring_overlap(evaluation: Usage, monitoring: Usage) -> dict | None:
  """The classes (hence test images) an evaluation shares with a monitoring; None if none."""
  if evaluation.family != monitoring.family or evaluation.data != monitoring.data:
    return None
  common = _classes(evaluation) & _classes(monitoring)
  if not common:
    return None
  return {
    "evaluation": evaluation.name,
    "monitoring": monitoring.name,
    "classes": len(common),
    "of_monitored_classes": len(_classes(monitoring)),
    "tasks": sum(1 for task in evaluation.tasks if task & common),
    "of_tasks": len(evaluation.tasks),
    "same_task": bool(set(evaluation.tasks) & set(monitoring.tasks)),
  }


def read(path: str = LEDGER_PATH) -> dict:
  """The ledger, as written."""
  with open(path) as f:
    return json.load(f)


def audit(ledger: Mapping) -> dict:
  """Every entry materialised; the violations and monitoring overlaps found.

  Returns:
    {"usages": {name: Usage}, "violations": [{"evaluation", "choice", "shares"}],
     "monitoring_overlaps": [monitoring_overlap records]}, in the ledger's order.
  """
  usages = {e["name"]: materialise(e) for role in ROLES for e in ledger[role]}
  violations, overlaps = [], []
  for evaluation in ledger["evaluations"]:
    used = usages[evaluation["name"]]
    for choice in ledger["choices"]:
      shares = shared(used, usages[choice["name"]]) if concerned(evaluation, choice) else []
      if shares:
        violations.append(
          {"evaluation": evaluation["name"], "choice": choice["name"], "shares": shares}
        )
    for monitoring in ledger["monitoring"]:
      overlap = monitoring_overlap(used, usages[monitoring["name"]])
      if overlap:
        overlaps.append(overlap)
  return {"usages": usages, "violations": violations, "monitoring_overlaps": overlaps}


def keys(violations: Sequence[Mapping]) -> set[tuple]:
  """Violations as comparable (evaluation, choice, shares) tuples."""
  return {(v["evaluation"], v["choice"], tuple(v["shares"])) for v in violations}


def _tasks_text(usage: Usage) -> str:
  return f"{usage.split}, seed {usage.seed}, tasks 0-{len(usage.tasks) - 1}"


def render(ledger: Mapping, audited: Mapping) -> str:
  """docs/ledger.md: every entry's tasks, the known violations and the monitoring overlaps."""
  usages = audited["usages"]
  lines = [
    "# The held-out ledger",
    "",
    "Generated by `bin/ledger` from `pretrained/ledger.json` (the rule:",
    "`task_specific_learned_opt/evaluation/ledger.py`; checked",
    "by `tests/evaluation/test_protocol_guards.py`). Each entry's tasks are sampled from its gin",
    "file as the code that ran it samples them; families are the experiments' outer-training",
    "families. Do not edit by hand.",
    "",
  ]
  titles = {
    "choices": "Choices",
    "monitoring": "Monitoring (shown, never used to choose)",
    "evaluations": "Reported evaluations",
  }
  for role in ROLES:
    lines += [
      f"## {titles[role]}",
      "",
      "| name | what | gin | family | tasks | classes |",
      "|---|---|---|---|---|---|",
    ]
    for entry in ledger[role]:
      usage = usages[entry["name"]]
      gin_text = " ".join([f"`{entry['gin']}`", *(f"`{b}`" for b in entry.get("bindings", ()))])
      lines.append(
        f"| {entry['name']} | {entry['what']} | {gin_text} | {usage.family} | "
        f"{_tasks_text(usage)} | {len(_classes(usage))} |"
      )
    lines.append("")
  lines += [
    "## Known violations",
    "",
    "A reported evaluation that shares a seed, a task or a class's test images with a choice on",
    "its family; each is a reason its numbers are weaker evidence than they look.",
    "",
    "| evaluation | choice | shares | reason |",
    "|---|---|---|---|",
  ]
  for v in ledger["known_violations"]:
    lines.append(
      f"| {v['evaluation']} | {v['choice']} | {', '.join(v['shares'])} | {v['reason']} |"
    )
  lines += [
    "",
    "## Overlaps with monitoring (allowed)",
    "",
    "| evaluation | monitoring | shared classes | evaluation tasks with one |",
    "|---|---|---|---|",
  ]
  for o in audited["monitoring_overlaps"]:
    lines.append(
      f"| {o['evaluation']} | {o['monitoring']} | {o['classes']} of {o['of_monitored_classes']} "
      f"| {o['tasks']} of {o['of_tasks']} |"
    )
  return "\n".join(lines) + "\n"


def main() -> int:
  """Prints the audit; writes the recorded overlaps into the ledger and docs/ledger.md (bin/ledger).

  Returns:
    0 when the violations found are the listed ones, else 1.
  """
  ledger = read()
  audited = audit(ledger)
  found, listed = keys(audited["violations"]), keys(ledger["known_violations"])
  for evaluation, choice, shares in sorted(found):
    mark = "known" if (evaluation, choice, shares) in listed else "NEW"
    print(f"{mark}: {evaluation} shares {', '.join(shares)} with {choice}")
  for violation in sorted(listed - found):
    print(f"not found (update known_violations): {violation}")
  ledger["monitoring_overlaps"] = audited["monitoring_overlaps"]
  with open(LEDGER_PATH, "w") as f:
    json.dump(ledger, f, indent=2)
    f.write("\n")
  with open(DOC_PATH, "w") as f:
    f.write(render(ledger, audited))
  return 0 if found == listed else 1
