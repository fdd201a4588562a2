"""The held-out protocol as the shipped configs run it: what is held out stays held out.

Sec. 4.2 holds 300 classes out of outer-training; Sec. 4.4 evaluates on tasks of those classes
and tunes the baselines' searches on outer-train tasks. Each test here parses a shipped gin file
and runs its entry point with the inner runs replaced by a stand-in that records which tasks it
was given, so it fails if a config or the code stops: evaluating on outer-test classes only; using
tasks other than the evaluator's (whose outer-test numbers are watched during outer-training);
running a search on outer-train tasks. And each shipped theta is the snapshot its run's evaluator
measured lowest on outer-train tasks.
"""

import collections
import json
import os
import re

import gin
import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import checkpoints, files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import evaluator_role
from task_specific_learned_opt.evaluation import (
  baseline_search,
  held_out,
  ledger,
  protocol,
  running,
  wallclock,
)
from task_specific_learned_opt.tasks import families

GIN = os.path.join(testing_utils.REPO, "gin")
PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
SMALL = [
  "GeneratedClassSource.train_images_per_class = 20",
  "GeneratedClassSource.test_images_per_class = 5",
]
# Each shipped theta -> its experiment's gin file and the outer-train number its snapshot is
# chosen on (the objective it was outer-trained for: training loss, or test loss for L_valid).
SHIPPED = {
  "generated_bn_cnn_train": ("pretrained/generated_bn_cnn_train.gin", "mean_train_loss"),
  "generated_bn_cnn_valid": ("pretrained/generated_bn_cnn_valid.gin", "final_test_loss"),
  "generated_cnn_train": ("pretrained/generated_cnn_train.gin", "mean_train_loss"),
  # No snapshot chosen: the run's last theta is shipped, and nothing was evaluated to choose it.
  "generated_cnn_valid": ("pretrained/generated_cnn_valid.gin", None),
  "mixed_app_e_valid": ("pretrained/mixed_app_e_valid.gin", None),
}
# gin/eval/out_of_family/ files given after a problem's file, not problems of their own.
OVERLAYS = (
  "guarded_update.gin",
  "past_horizon_decay.gin",
  "relative_cap.gin",
  "decay_from_start.gin",
  "bounded_weights.gin",
  "bounded_weights_small_cap.gin",
)
# The held-out evaluations shipped results come from: gin file -> its entry point.
HELD_OUT = {
  "eval/pretrained.gin": "evaluate",
  "eval/pretrained_fig6.gin": "evaluate",
  "quickstart.gin": "compare_with_tuned_baseline",
}


@pytest.fixture
def recorded(monkeypatch):
  """Runs nothing: records the classes of every task sampled and stands in for the inner runs."""
  sampled = []
  sample_classes = families.ClassSubsetFamily.sample_classes

  def record(family, seed):
    classes = sample_classes(family, seed)
    sampled.append(frozenset(int(c) for c in classes))
    return classes

  def run(family, task, candidate, num_steps, seed, points, *args, **kwargs):
    zeros = np.zeros(len(points))
    splits = ("train", "valid", "test")
    measured = {f"{s}_{m}": zeros for s in splits for m in ("loss", "accuracy")}
    return {**measured, "losses": np.zeros(num_steps), "steps_per_second": 1.0}

  def time_interleaved(train_fns, *args, **kwargs):  # The timed task is sampled all the same.
    return {name: [1.0] for name in train_fns}, list(train_fns)

  monkeypatch.setattr(families.ClassSubsetFamily, "sample_classes", record)
  monkeypatch.setattr(running, "evaluate_run", run)
  monkeypatch.setattr(wallclock, "time_interleaved", time_interleaved)
  return sampled


def _outer_train_classes() -> frozenset:
  return frozenset(int(c) for c in gin.get_bindings("outer_training")["family"].class_ids)


def _evaluator_tasks(tmp_path) -> set:
  """The class sets of the outer-test tasks the experiment's evaluator watches."""
  evaluator = evaluator_role.Evaluator(
    str(tmp_path / "train_dir"), gin.get_bindings("outer_training")["lopt"], None
  )
  family = evaluator.families["outer_test"]
  return {
    frozenset(int(c) for c in family.sample_classes(protocol.task_seed(evaluator.seed, t)))
    for t in range(evaluator.num_tasks)
  }


def _run_held_out(name: str, tmp_path, lopt) -> None:
  theta_dir = str(tmp_path / "theta")
  checkpoints.save_theta(theta_dir, lopt.init(0))
  if HELD_OUT[name] == "evaluate":
    held_out.evaluate(str(tmp_path / "eval"), {"L_train": theta_dir, "L_valid": theta_dir})
  else:
    held_out.compare_with_tuned_baseline(str(tmp_path / "eval"), lopt, lopt.init(0))


@pytest.mark.parametrize("name", sorted(HELD_OUT))
def test_held_out_evaluations_use_outer_test_classes_and_tasks_nobody_watched(
  name, tmp_path, recorded
):
  gin_config.parse([os.path.join(GIN, name)], [*SMALL, "evaluate.histograms = None"])
  try:
    outer_train = _outer_train_classes()
    watched = _evaluator_tasks(tmp_path)
    recorded.clear()
    _run_held_out(name, tmp_path, gin.get_bindings("outer_training")["lopt"])
  finally:
    gin.clear_config()
  assert recorded, "no task was sampled"
  for classes in recorded:
    assert not classes & outer_train, f"{name}: a held-out task has outer-train classes"
  assert not set(recorded) & watched, f"{name}: evaluates tasks the evaluator watched"


def test_the_guard_sees_an_evaluation_on_the_evaluators_tasks(tmp_path, recorded):
  gin_config.parse([os.path.join(GIN, "eval/pretrained.gin")], [*SMALL, "evaluate.seed = 0"])
  try:
    watched = _evaluator_tasks(tmp_path)
    recorded.clear()
    _run_held_out("eval/pretrained.gin", tmp_path, gin.get_bindings("outer_training")["lopt"])
  finally:
    gin.clear_config()
  assert set(recorded) & watched


def _random_searches() -> list[str]:
  names = []
  for name in sorted(os.listdir(os.path.join(GIN, "baselines"))):
    text = open(os.path.join(GIN, "baselines", name)).read()
    if 'tune_baselines.mode = "random_search"' in text:
      names.append(f"baselines/{name}")
  return names


def test_there_are_random_searches_to_guard():
  assert "baselines/pretrained_adam_reg_decay_valid.gin" in _random_searches()


@pytest.mark.parametrize("name", _random_searches())
def test_random_searches_run_on_outer_train_tasks_only(name, tmp_path, recorded):
  gin_config.parse(
    [os.path.join(GIN, name)],
    [
      *SMALL,
      "baseline_search.num_tasks = 3",
      "baseline_search.num_steps = 2",
      "tune_baselines.num_configs = 1",
      "tune_baselines.num_processes = 1",
    ],
  )
  try:
    outer_train = _outer_train_classes()
    recorded.clear()
    baseline_search.tune_baselines(str(tmp_path / "search"))
  finally:
    gin.clear_config()
  assert recorded, "no task was sampled"
  for classes in recorded:
    assert classes <= outer_train, f"{name}: a search task has classes outside outer-train"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_theta_is_the_snapshot_lowest_on_outer_train_tasks(name):
  directory = os.path.join(PRETRAINED, name)
  if not os.path.isdir(directory):
    pytest.skip(f"pretrained/{name} is not shipped")
  _, metric = SHIPPED[name]
  if metric is None:
    assert not os.path.exists(os.path.join(directory, "evaluation_progress.jsonl"))
    info = json.load(open(os.path.join(directory, "theta", "theta_info.json")))
    progress = files.read_jsonl(os.path.join(directory, "progress.jsonl"))
    assert info["outer_step"] == progress[-1]["outer_step"]  # The last theta of the run.
    return
  records = files.read_jsonl(os.path.join(directory, "evaluation_progress.jsonl"))
  assert len(records) >= 3
  best = min(records, key=lambda r: r["outer_train"][metric])
  info = json.load(open(os.path.join(directory, "theta", "theta_info.json")))
  assert (info["outer_step"], info["snapshot_id"]) == (best["outer_step"], best["snapshot_id"])


def test_every_shipped_theta_has_its_choice_guarded():
  shipped = [
    n for n in os.listdir(PRETRAINED) if os.path.isdir(os.path.join(PRETRAINED, n, "theta"))
  ]
  assert len(shipped) >= 2 and set(shipped) <= set(SHIPPED)


# The ledger (pretrained/ledger.json): every choice, monitoring and reported evaluation, its tasks
# materialised from its gin file (evaluation/ledger.py).


@pytest.fixture(scope="module")
def audited():
  return ledger.audit(ledger.read())


def test_the_ledger_lists_every_held_out_evaluation_and_search_guarded_here():
  entries = ledger.read()
  gins = {e["gin"] for role in ledger.ROLES for e in entries[role]}
  run_here = [n for n in _random_searches() if "pretrained" in n or "paper_family" in n]
  assert len(run_here) == 7  # The paper-scale searches (gin/paper/*) have not been run.
  for name in [*HELD_OUT, *run_here, *(v for v, _ in SHIPPED.values())]:
    assert f"gin/{name}" in gins, f"gin/{name} is not in pretrained/ledger.json"
  for name in os.listdir(os.path.join(GIN, "eval", "out_of_family")):
    if name not in OVERLAYS:  # Given after a problem's file: its tasks are the problem's.
      assert f"gin/eval/out_of_family/{name}" in gins


def test_the_reported_evaluations_share_with_choices_exactly_the_known_violations(audited):
  found = ledger.keys(audited["violations"])
  listed = ledger.keys(ledger.read()["known_violations"])
  assert not found - listed, f"new: a reported evaluation uses a choice's tasks: {found - listed}"
  assert not listed - found, f"no longer found; update known_violations: {listed - found}"
  assert all(v["reason"] for v in ledger.read()["known_violations"])


def test_every_re_run_a_known_violation_names_shares_no_seed_or_task_with_any_choice(audited):
  # A violation's reason may name the evaluation that re-ran it on tasks no choice used; that
  # re-run must be in the ledger, evaluate the same kind of tasks (the same experiment family),
  # and share at most classes with every choice that concerns it.
  usages = audited["usages"]
  shares = collections.defaultdict(set)
  for found in audited["violations"]:
    shares[found["evaluation"]].update(found["shares"])
  twins = 0
  for violation in ledger.read()["known_violations"]:
    if (
      "re-run on tasks no choice used" not in violation["reason"]
      and 'is in "' not in (violation["reason"])
    ):
      continue
    for name in re.findall(r'"([^"]+)"', violation["reason"]):
      assert name in usages, (violation["evaluation"], name)
      twin = usages[name]
      assert twin.family == usages[violation["evaluation"]].family, name
      assert shares[name] <= {"classes"}, (name, shares[name])
      twins += 1
  assert twins >= 10


def test_the_paper_family_evaluation_shares_nothing_with_any_choice(audited):
  usages = audited["usages"]
  paper = usages["paper family"]
  assert paper.family == usages["paper-family L_train snapshot"].family
  assert paper.seed == 3 and len(paper.tasks) == 20
  choices = [usages[c["name"]] for c in ledger.read()["choices"]]
  assert sum(c.family == paper.family for c in choices) == 5
  searched = usages["paper family, Adam+Reg+Decay at 1,000"]
  assert searched.tasks == paper.tasks  # The same held-out tasks as Fig. 6's other baselines.
  for choice in choices:
    assert not ledger.shared(paper, choice), choice.name
  # On the other family the same seed's classes would count: families are kept apart on purpose.
  assert paper.data == usages["App. H weight decay"].data


def test_the_recorded_monitoring_overlaps_are_the_materialised_ones(audited):
  assert audited["monitoring_overlaps"] == ledger.read()["monitoring_overlaps"]
  fig6 = {o["monitoring"]: o for o in audited["monitoring_overlaps"] if o["evaluation"] == "Fig. 6"}
  assert fig6["bn L_train outer-test"]["classes"] == 23
  assert fig6["bn L_train outer-test"]["of_monitored_classes"] == 38
  assert fig6["bn L_train outer-test"]["tasks"] == 15
  assert not any(o["same_task"] for o in audited["monitoring_overlaps"])


def test_monitoring_chooses_nothing():  # The snapshots are chosen on outer-train tasks only.
  entries = ledger.read()
  assert {c["tasks_of"] for c in entries["choices"]} >= {"evaluator_outer_train"}
  assert all(c["tasks_of"] != "evaluator_outer_test" for c in entries["choices"])
  assert all(m["tasks_of"] == "evaluator_outer_test" for m in entries["monitoring"])


def test_the_ledgers_tasks_are_those_the_shipped_runs_ran_with(audited):
  for entry in [e for role in ledger.ROLES for e in ledger.read()[role]]:
    if "operative_config" in entry:
      ran = ledger.materialise({**entry, "gin": entry["operative_config"], "bindings": []})
      assert ran.tasks == audited["usages"][entry["name"]].tasks, entry["name"]


def test_the_ledger_doc_is_rendered_from_the_ledger(audited):
  with open(ledger.DOC_PATH) as f:
    assert f.read() == ledger.render(ledger.read(), audited)


def test_the_rule_finds_a_shared_task_seed_and_classes():
  def usage(name, split, seed, tasks, family="f"):
    return ledger.Usage(name, family, "data", split, seed, tuple(map(frozenset, tasks)))

  choice = usage("choice", "outer_test", 1, [{1, 2}, {3, 4}])
  assert ledger.shared(usage("e", "outer_test", 1, [{1, 2}]), choice) == ["seed", "task", "classes"]
  assert ledger.shared(usage("e", "outer_test", 2, [{2, 5}]), choice) == ["classes"]
  assert ledger.shared(usage("e", "outer_test", 2, [{5, 6}]), choice) == []
  assert ledger.shared(usage("e", "outer_test", 1, [{1, 2}], family="g"), choice) == []
  overlap = ledger.monitoring_overlap(usage("e", "outer_test", 2, [{2, 5}, {6, 7}]), choice)
  assert (overlap["classes"], overlap["tasks"], overlap["same_task"]) == (1, 1, False)


def test_a_choice_that_concerns_one_theta_binds_only_the_evaluations_reporting_it(audited):
  entries = ledger.read()
  cap = next(c for c in entries["choices"] if c.get("concerns"))
  assert cap["concerns"][0] == "mixed_app_e_valid"  # Then the four thetas it is given to.
  reporting = next(e for e in entries["evaluations"] if e.get("thetas") == cap["concerns"])
  other = next(e for e in entries["evaluations"] if e["name"] == "App. E, seed 4: mlp_2x32")
  assert ledger.concerned(reporting, cap) and not ledger.concerned(other, cap)
  assert ledger.concerned(other, {"name": "a setting of everything"})
  # The seed-4 rows share the cap's very tasks; only the mixed theta's rows would count them.
  usages = audited["usages"]
  assert "task" in ledger.shared(usages[other["name"]], usages[cap["name"]])
  assert not [
    v
    for v in audited["violations"]
    if v["evaluation"] == other["name"] and v["choice"] == cap["name"]
  ]
  mixed = [v for v in audited["violations"] if v["choice"] == cap["name"]]
  assert mixed and all(v["shares"] == ["classes"] for v in mixed)
