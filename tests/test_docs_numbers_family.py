"""The measured numbers of docs/paper_family.md, docs/longer_unrolls.md and docs/keras.md, against
the committed files they come from.

Each test reads one paragraph or table of a page (found by a phrase of it) and recomputes its
numbers, to the precision the page prints them, from what is shipped: pretrained/paper_family/,
pretrained/generated_cnn_{train,valid}/, docs/paper_family_seeds*.json and pretrained/app_e/ for
the paper's family; pretrained/app_h/ for the longer unrolls (whose tables
tests/test_docs_app_h.py checks); benchmarks/results/keras_optimizer.json and the shipped
evaluations for the Keras page.
"""

import gzip
import json
import math
import os
import re

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import shipped, statistics

PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
FAMILY = os.path.join(PRETRAINED, "paper_family")
TRAIN = "(lr tuned per task on train loss)"
VALID = "(lr tuned per task on valid loss)"
NAMES = {
  "mean_loss": "mean training loss",
  "mean_test_loss": "mean test loss",
  "final_test_loss": "final test loss",
}


@pytest.fixture(scope="module")
def found():
  return shipped.records()


def _doc(name):
  with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
    return f.read()


def _flat(text):
  return re.sub(r"\s+", " ", text)


def _section(name, start, end=None):
  """The text of docs/<name> from `start` to `end` (or to the end), whitespace collapsed."""
  text = _doc(name).split(start, 1)[1]
  if end is not None:
    text = text.split(end, 1)[0]
  return _flat(text)


def _json(*path):
  with open(os.path.join(testing_utils.REPO, *path)) as f:
    return json.load(f)


def _evaluation(*path):
  with gzip.open(os.path.join(FAMILY, *path, "evaluation.json.gz"), "rt") as f:
    return json.load(f)


def _one(found, evaluation, learned, metric, baseline):
  (r,) = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["metric"]) == (evaluation, learned, metric)
    and r["baseline"].startswith(baseline)
  ]
  return r


def _pair(r):
  return f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"


# docs/paper_family.md


def _progress(run):
  return files.read_jsonl(os.path.join(PRETRAINED, run, "progress.jsonl"))


def _snapshots():
  return files.read_jsonl(
    os.path.join(PRETRAINED, "generated_cnn_train", "evaluation_progress.jsonl")
  )


def _reference():
  return _json("pretrained", "generated_cnn_train", "evaluation_reference.json")


def test_paper_family_plateau_paragraph_is_the_evaluators_reference_and_shipped_snapshot():
  text = _section("paper_family.md", "## The plateau", "## Getting off the plateau")
  adam = _reference()["outer_train"]["mean_train_loss"]
  (shipped_theta,) = [r for r in _snapshots() if r["outer_step"] == 200]
  assert f"ln 10 = {math.log(10):.3f} for its first steps" in text
  assert (
    f"tuned Adam's mean training loss over 500 steps is {adam:.3f} on the outer-train tasks, "
    f"where the shipped L_train theta reaches {shipped_theta['outer_train']['mean_train_loss']:.3f}"
  ) in text


def test_paper_family_getting_off_the_plateau_table_and_paragraphs_are_the_ablation_study():
  study = _json("pretrained", "paper_family", "plateau", "ablations.json")
  results = study["results"]
  assert study["num_seeds"] == 1 and all(r["seeds"] == [0] for r in results.values())
  text = _doc("paper_family.md").split("## Getting off the plateau", 1)[1].split("\n## ", 1)[0]
  flat = _flat(text)
  budget = study["max_inner_steps"]
  shipped_steps = _progress("generated_cnn_train")[-1]["inner_steps"]
  assert (
    f"at an equal budget of {budget:,} inner steps each (one theta seed; the first "
    f"{budget / shipped_steps:.0%} of the shipped run's inner steps)"
  ) in flat
  low, high = study["window"]
  assert f"| outer loss, inner steps {low:,}-{high:,} |" in text
  window = {name: f"{r['window_loss'][0]:.3f}" for name, r in results.items()}
  for name, loss in window.items():
    (row,) = [line for line in text.splitlines() if line.startswith(f"| `{name}` |")]
    assert row.endswith(f"| {loss} |"), (name, row)
  assert f"ln 10 is {math.log(10):.3f}." in flat
  k_from_10 = results["k_from_10"]
  assert (
    f"(`k_from_10` took {k_from_10['outer_steps'][0]} outer steps and stayed at "
    f"{window['k_from_10']})"
  ) in flat
  assert f"({window['merged']} against {window['unguarded']}, one seed)" in flat
  others = {r["outer_steps"][0] for name, r in results.items() if name != "k_from_10"}
  (steps,) = others
  assert (
    f"One seed and {steps} outer steps per configuration ({k_from_10['outer_steps'][0]} for "
    "`k_from_10`"
  ) in flat


def test_paper_family_l_train_run_paragraph_is_its_progress():
  records = _progress("generated_cnn_train")
  text = _section("paper_family.md", "## The L_train theta", "**Choosing the theta.**")
  last = records[-1]
  assert last["outer_step"] == 200 and len(records) == 200
  assert f"of which the run did {last['outer_step']}" in text
  assert (
    f"{last['inner_steps']:,} inner steps of truncations in all; "
    f"{last['elapsed_seconds'] / 60:.0f} minutes on 2 cores"
  ) in text

  def window(first, last, key="outer_loss"):
    return np.mean([r[key] for r in records if first <= r["outer_step"] <= last])

  assert (
    f"fell from {window(1, 10):.3f} over outer steps 1-10 to {window(41, 50):.3f} over 41-50 and "
    f"{window(91, 100):.3f} over 91-100; over 191-200 it was {window(191, 200):.3f}"
  ) in text
  k_end, k_mid = window(191, 200, "mean_num_steps"), window(91, 100, "mean_num_steps")
  assert f"(mean K {k_end:.0f} against {k_mid:.0f})" in text
  assert f"(K about {round(k_end, -1):.0f} at the end)" in text


def test_paper_family_choosing_the_l_train_theta_table_is_its_evaluator_progress():
  text = _doc("paper_family.md").split("**Choosing the theta.**", 1)[1].split("![", 1)[0]
  snapshots = _snapshots()
  adam = _reference()
  splits = ("outer_train", "outer_test")
  for r in snapshots:
    step = r["outer_step"]
    label = f"{step} (shipped)" if step == snapshots[-1]["outer_step"] else f"{step}"
    train, test = (f"{r[s]['mean_train_loss']:.3f}" for s in splits)
    if step == snapshots[-1]["outer_step"]:
      train = f"**{train}**"
    finals = " | ".join(f"{r[s]['final_test_loss']:.3f}" for s in splits)
    row = f"| {label} | {r['inner_steps']:,} | {train} | {test} | {finals} |"
    assert row in text, row
  means = " | ".join(
    f"{adam[s][m]:.3f}" for m in ("mean_train_loss", "final_test_loss") for s in splits
  )
  assert f"| LR-tuned Adam | | {means} |" in text
  # The shipped theta is the snapshot with the lowest outer-train loss: the last one.
  best = min(snapshots, key=lambda r: r["outer_train"]["mean_train_loss"])
  assert best is snapshots[-1]
  assert "the last one, outer step 200" in _flat(text)
  start = snapshots[0]["outer_train"]["mean_train_loss"]
  reference = adam["outer_train"]["mean_train_loss"]
  assert f"behind Adam ({start:.3f} against {reference:.3f})" in _flat(text)
  # "by outer step 50 the learned optimizer is ahead on both class splits, and it stays ahead".
  for r in snapshots:
    ahead = all(r[s]["mean_train_loss"] < adam[s]["mean_train_loss"] for s in splits)
    assert ahead == (r["outer_step"] >= 50), r["outer_step"]


def test_paper_family_l_valid_run_paragraph_is_its_progress():
  records = _progress("generated_cnn_valid")
  text = _section("paper_family.md", "## The L_valid theta", "![")
  last = records[-1]
  assert (
    f"for {last['outer_step']} outer steps ({last['inner_steps']:,} inner steps; "
    f"{last['elapsed_seconds'] / 60:.0f} minutes on 2 cores"
  ) in text
  first = records[:10]
  steps = f"{first[0]['outer_step']}-{first[-1]['outer_step']}"
  late = [r["outer_loss"] for r in records if 41 <= r["outer_step"] <= 50]
  assert (
    f"averaged {np.mean([r['outer_loss'] for r in first]):.3f} over outer steps {steps} (the "
    f"first 10 in `progress.jsonl`) and {np.mean(late):.3f} over 41-50"
  ) in text
  assert f"the shipped theta is the last one (outer step {last['outer_step']})" in text


def test_paper_family_5_init_paragraph_is_the_shipped_evaluation(found):
  text = _section("paper_family.md", "Both halves of the headline hold on the paper's family", "![")

  def five(learned, metric, baseline):
    return _one(found, "paper_family_5_inits", learned, metric, baseline)

  trains = [r for r in found if r["evaluation"] == "paper_family_5_inits"]
  trains = [r for r in trains if (r["learned"], r["metric"]) == ("L_train", "mean_loss")]
  assert len(trains) == 5 and {r["wins"] for r in trains} == {20}
  assert "The L_train theta trains faster than each on 20 of 20 tasks" in text
  valid_final = {b: five("L_valid", "final_test_loss", b) for b in ("adam (lr", "rmsprop", "sgdm")}
  valid_final["search"] = five("L_valid", "final_test_loss", "adam+reg+decay")
  assert {r["wins"] for b, r in valid_final.items() if b != "rmsprop"} == {20}
  assert valid_final["rmsprop"]["wins"] == 19
  assert {r["outcome"] for r in valid_final.values()} == {statistics.LEARNED_AHEAD}
  train_final = five("L_train", "final_test_loss", "rmsprop")
  assert (
    f"the L_train theta's final test loss ({train_final['learned_mean_loss']:.3f}) is above the "
    f"L_valid theta's ({valid_final['rmsprop']['learned_mean_loss']:.3f}) and ties RMSProp's"
  ) in text
  assert train_final["outcome"] == statistics.NOT_RESOLVED
  # The 1-init results the 5 inits settle.
  one_rmsprop = _one(found, "paper_family", "L_valid", "final_test_loss", "rmsprop")
  one_search = _one(found, "paper_family_adam_reg_decay", "L_valid", "final_test_loss", "adam")
  assert (
    f"against RMSProp ({one_rmsprop['wins']} of 20 at 1 init) and against Adam+Reg+Decay "
    f"({one_search['wins']} of 20 at 1 init)"
  ) in text
  refined_train = five("L_train", "mean_loss", "adam (refined")
  refined_final = five("L_valid", "final_test_loss", "adam (refined")
  assert f"{refined_train['wins']} of 20 tasks (mean training loss {_pair(refined_train)})" in text
  interval = statistics.claim(refined_final).split("difference ", 1)[1].rstrip(")")
  assert (
    f"{_pair(refined_final)}, on {refined_final['wins']} of 20 tasks: the interval of the "
    f"difference is above zero ({interval}) but the sign test is not (p = "
    f"{statistics.format_p(refined_final['p_value'])})"
  ) in text
  refined_train_final = five("L_train", "final_test_loss", "adam (refined")
  assert (
    f"({_pair(refined_train_final)}, {refined_train_final['wins']} of 20)" in text
    and refined_train_final["outcome"] == statistics.BASELINE_AHEAD
  )


def test_paper_family_5_inits_narrow_the_intervals(found):
  """The width of each 5-init interval over the same comparison's at 1 init: the 1-init
  evaluation's for the grid's and the refined Adam, the 1,000-configuration evaluation's for its
  winner."""
  text = _section("paper_family.md", "### 20 tasks x 5 inits", "### 20 tasks x 1 init")
  ratios = []
  for r in found:
    if r["evaluation"] != "paper_family_5_inits":
      continue
    at_1 = "paper_family"
    if r["baseline"].startswith("adam+reg+decay"):
      at_1 = "paper_family_adam_reg_decay"
    (one,) = [
      o
      for o in found
      if o["evaluation"] == at_1
      and (o["learned"], o["metric"], o["baseline"]) == (r["learned"], r["metric"], r["baseline"])
    ]
    ratios.append(np.diff(r["ci95"])[0] / np.diff(one["ci95"])[0])
  assert len(ratios) == 30
  assert (
    f"the intervals are {min(ratios):.2f}-{max(ratios):.2f} of their width at 1 init (each "
    "against the same baseline's at 1 init: the 1,000-configuration search's winner's in its own "
    "evaluation)"
  ) in text


def test_paper_family_5_init_runs_repeat_the_searchs_evaluation_and_not_the_1_init_one():
  five = _evaluation("evaluation_5_inits")["results"]
  searched = _evaluation("adam_reg_decay", "evaluation")["results"]
  for name in ("L_train", "L_valid", "adam+reg+decay (L_train)", "adam+reg+decay (L_valid)"):
    for key in ("train_loss", "test_loss", "final_test_loss"):
      init_0 = [task[0] for task in five[name][key]]
      assert init_0 == [task[0] for task in searched[name][key]], (name, key)  # Bit for bit.
  one = _evaluation("evaluation")["results"]
  largest = 0.0
  for name in ("L_train", "L_valid", f"adam {TRAIN}", f"adam {VALID}"):
    a, b = (np.array([task[0] for task in r[name]["train_loss"]]) for r in (one, five))
    assert np.array_equal(a[:, 0], b[:, 0]) and not np.array_equal(a, b), name
    a, b = (np.array([task[0] for task in r[name]["final_test_loss"]]) for r in (one, five))
    largest = max(largest, float(np.max(np.abs(a - b))))
  text = _section("paper_family.md", "Init 0's runs of the thetas", "![")
  assert f"up to {largest:.2f} in one run's final test loss" in text


def _assert_theta_metric_table(text, records):
  """Each comparison of `records` is the cell "<baseline's mean>: <claim>" of the row
  "| <theta>, <metric> | <theta's mean> | ..." of the table in `text`."""
  rows = {
    line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line[:3] == "| L"
  }
  for r in records:
    row = rows[f"{r['learned']}, {NAMES[r['metric']]}"]
    assert row.split(" | ")[1] == f"{r['learned_mean_loss']:.3f}", row
    assert f"{r['baseline_mean_loss']:.3f}: {statistics.claim(r)}" in row, (r["baseline"], row)


def test_paper_family_1_init_table_and_paragraph_are_the_shipped_evaluation(found):
  text = _doc("paper_family.md").split("### 20 tasks x 1 init, with the refined Adam", 1)[1]
  text = text.split("### Against a better-tuned Adam", 1)[0]
  records = [
    r
    for r in found
    if r["evaluation"] == "paper_family"
    and "refined" not in r["baseline"]
    and (r["learned"], r["metric"]) in [(lt.split(", ")[0], m) for lt, m in _TABLE_ROWS]
  ]
  assert len(records) == len(_TABLE_ROWS) * 4
  _assert_theta_metric_table(text, records)
  flat = _flat(text)
  train = [r for r in records if (r["learned"], r["metric"]) == ("L_train", "mean_loss")]
  assert {r["wins"] for r in train} == {20}
  final = {
    r["baseline"].split(" ")[0]: r
    for r in records
    if (r["learned"], r["metric"]) == ("L_valid", "final_test_loss")
  }
  assert final["adam"]["wins"] == 19 and final["sgdm"]["wins"] == final["adam+reg+decay"]["wins"]
  rmsprop = final["rmsprop"]
  smallest = min(r["mean_difference"] for r in final.values())
  assert (
    f"than RMSProp on {rmsprop['wins']} of 20 (p = {statistics.format_p(rmsprop['p_value'])}, "
    f"interval above zero; the smallest margin, {smallest:.3f})"
  ) in flat
  assert smallest == rmsprop["mean_difference"]
  train_final = _one(found, "paper_family", "L_train", "final_test_loss", "rmsprop")
  assert (
    f"final test loss is above the L_valid theta's ({train_final['learned_mean_loss']:.3f} "
    f"against {rmsprop['learned_mean_loss']:.3f}) and not resolved against RMSProp"
  ) in flat
  assert train_final["outcome"] == statistics.NOT_RESOLVED
  searched = _one(found, "paper_family", "L_train", "mean_loss", "adam+reg+decay")
  adam = _one(found, "paper_family", "L_train", "mean_loss", "adam (lr")
  assert (
    f"held-out tasks ({searched['baseline_mean_loss']:.3f}) is far behind Adam with a tuned "
    f"learning rate ({adam['baseline_mean_loss']:.3f})"
  ) in flat
  for objective in ("train", "valid"):  # "both found the same best configuration".
    path = ("pretrained", "paper_family", f"adam_reg_decay_L_{objective}", "best.json")
    best = _json(*path)["best"]["adam"]
    assert best["num_configurations"] == 40
    if objective == "train":
      first = best["id"]
    assert best["id"] == first


_TABLE_ROWS = [
  ("L_train, mean training loss", "mean_loss"),
  ("L_valid, mean training loss", "mean_loss"),
  ("L_train, mean test loss", "mean_test_loss"),
  ("L_train, final test loss", "final_test_loss"),
  ("L_valid, mean test loss", "mean_test_loss"),
  ("L_valid, final test loss", "final_test_loss"),
]


def test_paper_family_refined_adam_paragraph_is_the_shipped_evaluation(found):
  text = _section("paper_family.md", "The refined search closes most of the gap", "###")

  def one(learned, metric, baseline):
    return _one(found, "paper_family", learned, metric, baseline)

  adam, refined = (
    one("L_train", "mean_loss", "adam (lr"),
    one("L_train", "mean_loss", "adam (refined"),
  )
  assert (
    f"mean training loss falls from {adam['baseline_mean_loss']:.3f} to "
    f"{refined['baseline_mean_loss']:.3f}"
  ) in text
  adam_final = one("L_valid", "final_test_loss", "adam (lr")
  refined_final = one("L_valid", "final_test_loss", "adam (refined")
  assert (
    f"final test loss from {adam_final['baseline_mean_loss']:.3f} to "
    f"{refined_final['baseline_mean_loss']:.3f}"
  ) in text
  assert (
    f"faster on {refined['wins']} of 20 tasks ({refined['mean_difference']:.3f} lower, interval "
    "above zero)"
  ) in text
  assert refined["outcome"] == statistics.LEARNED_AHEAD
  assert (
    f"lower than the L_valid theta's on {refined_final['losses']} of 20 tasks, by "
    f"{-refined_final['mean_difference']:.3f} on average, with an interval that holds zero"
  ) in text
  assert refined_final["outcome"] == statistics.NOT_RESOLVED


def test_paper_family_search_at_1000_winner_time_table_and_paragraph_are_its_results(found):
  text = _doc("paper_family.md").split("### Against Adam+Reg+Decay searched at 1,000", 1)[1]
  text = text.split("![", 1)[0]
  flat = _flat(text)
  path = os.path.join(FAMILY, "adam_reg_decay")
  records = files.read_jsonl(os.path.join(path, "results.jsonl"))[1:]
  assert f"({sum(r['seconds'] for r in records) / 60:.0f} minutes of process time" in flat
  best = _json("pretrained", "paper_family", "adam_reg_decay", "L_train", "best.json")["best"]
  h = best["adam"]["hparams"]
  assert h["linear_decay"] == 0 and h["exponential_decay"] == 0
  assert (
    f"`{best['adam']['id']}`: lr {h['learning_rate']:.1g}, beta1 {h['beta1']:.2f}, beta2 "
    f"{h['beta2']:.2f}, epsilon {testing_utils.sci(h['epsilon'])}, l1 "
    f"{testing_utils.sci(h['l1'])}, l2 {testing_utils.sci(h['l2'])}, no decay |"
  ) in text
  evaluation = _evaluation("adam_reg_decay", "evaluation")["results"]
  runs = sum(len(tasks) * len(tasks[0]) for tasks in (r["mean_loss"] for r in evaluation.values()))
  assert f"{runs} runs)" in flat
  table = [r for r in found if r["evaluation"] == "paper_family_adam_reg_decay"]
  table = [r for r in table if (r["learned"], r["metric"]) != ("L_train", "mean_test_loss")]
  assert len(table) == 5
  _assert_theta_metric_table(text, table)

  def one(evaluation, learned, metric, baseline):
    return _one(found, evaluation, learned, metric, baseline)

  here = one("paper_family_adam_reg_decay", "L_train", "mean_loss", "adam+reg+decay")
  forty = one("paper_family", "L_train", "mean_loss", "adam+reg+decay")
  adam = one("paper_family", "L_train", "mean_loss", "adam (lr")
  refined = one("paper_family", "L_train", "mean_loss", "adam (refined")
  assert (
    f"from {forty['baseline_mean_loss']:.3f} to {here['baseline_mean_loss']:.3f}, better than the "
    f"grid's Adam ({adam['baseline_mean_loss']:.3f}) and still behind the refined Adam "
    f"({refined['baseline_mean_loss']:.3f})"
  ) in flat
  final = one("paper_family_adam_reg_decay", "L_valid", "final_test_loss", "adam+reg+decay")
  assert (
    f"the L_train theta trains faster on {here['wins']} of 20 tasks, and the L_valid theta's "
    f"final test loss is lower by {final['mean_difference']:.3f} on average with an interval "
    f"above zero ({final['wins']} of 20 tasks; the sign test alone gives p = "
    f"{statistics.format_p(final['p_value'])})"
  ) in flat
  train_final = one("paper_family_adam_reg_decay", "L_train", "final_test_loss", "adam+reg+decay")
  there_final = {
    learned: one("paper_family", learned, "final_test_loss", "adam (lr")["learned_mean_loss"]
    for learned in ("L_train", "L_valid")
  }
  assert (
    f"(mean training loss {here['learned_mean_loss']:.3f} against "
    f"{forty['learned_mean_loss']:.3f}; final test loss {train_final['learned_mean_loss']:.3f} "
    f"against {there_final['L_train']:.3f} and {final['learned_mean_loss']:.3f} against "
    f"{there_final['L_valid']:.3f})"
  ) in flat


def _seeds(name, key):
  return _json("docs", name)[key]


def test_paper_family_fig5_columns_at_160_and_paragraph_are_its_seed_study():
  study = _seeds("paper_family_seeds.json", "paper_family")
  reference = study["reference"]
  text = _doc("paper_family.md").split("## Fig. 5 on the paper's family", 1)[1]
  text = text.split("### For L_valid", 1)[0]
  flat = _flat(text)
  adam_train = reference["outer_train"]["mean_train_loss"]
  adam_test = reference["outer_test"]["mean_train_loss"]
  adam_final = reference["outer_test"]["final_test_loss"]
  assert (
    f"mean training loss {adam_train:.3f} and {adam_test:.3f}, final test loss {adam_final:.3f} "
    "on the outer-test tasks"
  ) in flat
  assert f"outer-train at 160 (Adam {adam_train:.3f})" in text
  assert f"final test loss at 160 (Adam {adam_final:.3f})" in text
  below = []
  for seed, run in sorted(study["seeds"].items()):
    last = run["records"][-1]
    assert last["outer_step"] == 160
    row = [line for line in text.splitlines() if line.startswith(f"| {seed} | ")][0]
    assert row.endswith(
      f"| {last['outer_train']['mean_train_loss']:.3f} | "
      f"{last['outer_test']['final_test_loss']:.3f} |"
    ), row
    at = {r["outer_step"]: r["outer_test"]["mean_train_loss"] for r in run["records"]}
    assert at[0] < math.log(10) and f"{at[10]:.2f}" == "2.30", seed
    if last["outer_test"]["mean_train_loss"] < adam_test:
      below.append(1 - last["outer_test"]["mean_train_loss"] / adam_test)
      assert last["outer_test"]["final_test_loss"] < adam_final
  assert (
    f"ending {min(below):.0%}-{max(below):.0%} below it on outer-test tasks".replace("%-", "-")
    in flat
  )
  assert "is on the plateau (2.30) by outer step 10" in flat


def test_paper_family_fig5_for_l_valid_paragraph_is_its_seed_study():
  study = _seeds("paper_family_seeds_valid.json", "paper_family_valid")
  flat = _section("paper_family.md", "No L_valid seed leaves the plateau", "![")
  # Off the plateau (below 2.25) after step 0: seed 0 at outer step 20, once.
  off = [
    (seed, r["outer_step"])
    for seed, run in sorted(study["seeds"].items())
    for r in run["records"]
    if r["outer_step"] > 0 and r["outer_test"]["final_test_loss"] < 2.25
  ]
  assert off == [("0", 20)]
  assert "seed 0 moves off it once (outer step 20) and falls back" in flat
  for run in study["seeds"].values():
    at = {r["outer_step"]: r["outer_test"]["final_test_loss"] for r in run["records"]}
    assert at[0] < math.log(10) and f"{at[10]:.2f}" == "2.30"


def _training_check(problem):
  return _json("pretrained", "app_e", problem, "cnn", "summary.json")["candidates"]


def test_paper_family_not_done_yet_is_the_app_e_cnn_evaluations(found):
  flat = _section("paper_family.md", "## Not done yet")
  generated = (
    "cnn_batch_norm",
    "cnn_8_channels",
    "cnn_32_channels",
    "cnn_6_layers",
    "mlp_2x32",
    "mlp_3x128",
    "images_16x16",
  )
  counts, failed = {}, {}
  for problem in generated:
    for theta, check in _training_check(problem).items():
      check = check["training_check"]
      trained, runs = counts.get(theta, (0, 0))
      counts[theta] = (trained + check["trained"], runs + check["runs"])
      if check["trained"] < check["runs"]:
        failed.setdefault(theta, []).append(problem)
  train, valid = counts["cnn_train"], counts["cnn_valid"]
  assert (
    f"({train[0]} of {train[1]} runs for the L_train theta, {valid[0]} of {valid[1]} for the "
    "L_valid one, whose run that did not is on the MLP 3x128)"
  ) in flat
  assert "cnn_train" not in failed and failed["cnn_valid"] == ["mlp_3x128"]
  wide = {
    theta: _one(found, "app_e/cnn_32_channels/cnn", theta, "mean_loss", "adam")
    for theta in ("cnn_train", "cnn_valid")
  }
  assert {(r["wins"], r["num_tasks"], r["outcome"]) for r in wide.values()} == {
    (5, 5, statistics.LEARNED_AHEAD)
  }
  (adam,) = {f"{r['baseline_mean_loss']:.3f}" for r in wide.values()}
  assert (
    f"(5 of 5 tasks each, mean training loss {wide['cnn_train']['learned_mean_loss']:.3f} and "
    f"{wide['cnn_valid']['learned_mean_loss']:.3f} against {adam})"
  ) in flat
  for theta in ("cnn_train", "cnn_valid"):
    r = _one(found, "app_e/cnn_32_channels/cnn", theta, "final_test_loss", "adam")
    assert r["outcome"] == statistics.BASELINE_AHEAD
    narrow = [r for r in found if r["evaluation"] == "app_e/cnn_8_channels/cnn"]
    assert {r["wins"] for r in narrow if r["learned"] == theta} == {0}
    check = _json("pretrained", "app_e", "digits_mlp_2x32", "cnn", "summary.json")["candidates"]
    assert check[theta]["training_check"]["trained"] == 0
  runs = check["cnn_train"]["training_check"]["runs"]
  assert f"(0 of {runs} runs each)" in flat


# docs/keras.md


def _keras():
  return _json("benchmarks", "results", "keras_optimizer.json")


def _cell(stats):
  return f"{stats['median']:.3f} [{stats['q25']:.3f}, {stats['q75']:.3f}]"


def test_keras_speed_table_and_parts_are_the_committed_benchmark():
  measured = _keras()
  text = _doc("keras.md").split("## Speed", 1)[1]
  flat = _flat(text)
  assert measured["steps_per_round"] == 100 and measured["rounds"] == 9
  assert f"a run of {measured['steps_per_round']} steps per round" in flat
  assert f"{measured['warmup_rounds']} warm-up rounds, then {measured['rounds']} rounds" in flat
  wall, cpu = measured["ratios"], measured["cpu_time_ratios"]
  rows = {
    "`LearnedOptimizer` (fast kernel, all variables in one call)": ("learned", "adam", True),
    "the same through Keras's per-variable path (what a `tf.distribute` strategy uses)": (
      "learned_per_variable",
      "adam",
      False,
    ),
    '`MLPLOpt(implementation="reference")`': ("learned_reference", "adam", False),
    "all with `jit_compile=True` (XLA): learned/Adam": ("learned_xla", "adam_xla", False),
  }
  for label, (learned, adam, bold) in rows.items():
    key = f"{learned}/{adam}"
    first = _cell(wall[key])
    if bold:
      first = first.replace(first.split(" ")[0], f"**{first.split(' ')[0]}**", 1)
    row = f"| {label} | {first} | {_cell(cpu[key])} |"
    assert row in text, row
  assert f"learned/SGD is {_cell(wall['learned/sgd'])} (wall-clock)" in flat
  parts = {k: v["median"] for k, v in measured["parts_ms_per_call"].items()}
  assert (
    f"forward and backward pass {parts['forward_backward']:.1f}; `apply` of Adam "
    f"{parts['apply_adam']:.2f}, SGD {parts['apply_sgd']:.2f}, `LearnedOptimizer` "
    f"{parts['apply_learned']:.2f}, its per-variable path "
    f"{parts['apply_learned_per_variable']:.2f}, "
    f"the reference implementation {parts['apply_learned_reference']:.2f}"
  ) in flat
  fb, adam_ms, learned_ms = (
    round(parts[k], 2) for k in ("forward_backward", "apply_adam", "apply_learned")
  )
  fb = round(parts["forward_backward"], 1)
  assert (
    f"so ({fb} + {adam_ms}) / ({fb} + {learned_ms}) = {(fb + adam_ms) / (fb + learned_ms):.2f}"
  ) in flat
  extra = parts["apply_learned"] - parts["apply_adam"]
  assert (
    f"costs {extra:.1f} ms per step more than Adam's, {extra / parts['forward_backward']:.0%} of "
    "the forward and backward pass"
  ) in flat


def test_keras_what_was_tried_is_the_committed_benchmark():
  measured = _keras()
  flat = _section("keras.md", "What was tried:")
  cpu = measured["cpu_time_ratios"]
  fast = cpu["learned/adam"]["median"]
  reference = cpu["learned_reference/adam"]["median"]
  per_variable = cpu["learned_per_variable/adam"]["median"]
  assert (
    f"the fast kernel rather than the reference implementation: about {1 - reference / fast:.0%} "
    "of the step here (CPU time)"
  ) in flat
  assert f"as in the inner loop, about {1 - per_variable / fast:.0%} of the step (CPU time)" in flat
  rates = measured["steps_per_cpu_second"]
  slower = [rates[k]["median"] / rates[f"{k}_xla"]["median"] for k in ("adam", "sgd", "learned")]
  assert (
    f"makes every optimizer's step {min(slower):.1f}-{max(slower):.1f} times slower in CPU time "
    f"(Adam: {rates['adam']['median']:.0f} down to {rates['adam_xla']['median']:.0f} steps per "
    "CPU-second)"
  ) in flat


def test_keras_inner_loop_ratio_is_the_performance_benchmarks():
  runs = [f"paper_cnn_cpu_fused_run{i}.json" for i in range(1, 6)]
  runs.append("paper_cnn_cpu_fused_with_reference.json")
  ratios = [_json("benchmarks", "results", r)["ratios"]["mlp_lopt/adam"]["median"] for r in runs]
  flat = _section("keras.md", "## Speed")
  assert (
    f"close to the project's own inner loop ({np.median(ratios):.3f} learned/Adam, the median of "
    f"{len(runs)} runs"
  ) in flat


def test_keras_quickstart_theta_against_tuned_adam_is_the_main_jobs_evaluation(found):
  flat = _section("keras.md", "## What to expect outside the training family", "## Speed")
  train = _one(found, "main_job", "learned", "mean_loss", "adam")
  final = _one(found, "main_job", "learned", "final_test_loss", "adam")
  assert train["wins"] == train["num_tasks"] and train["outcome"] == statistics.LEARNED_AHEAD
  assert final["outcome"] == statistics.NOT_RESOLVED
  assert (
    f"trains faster than learning-rate-tuned Adam on its held-out tasks, but its final test loss "
    f"is lower on only {final['wins']} of {final['num_tasks']} of them, not resolved"
  ) in flat


def test_keras_tolerances_and_thresholds_are_the_tests():
  """The page's "within the tests' tolerance of 1e-5", "more than 1e-2", "more than 3 times" and
  "no more than 10%" are what tests/keras/ assert."""
  flat = _flat(_doc("keras.md"))
  with open(os.path.join(testing_utils.REPO, "tests", "keras", "test_optimizer.py")) as f:
    optimizer_tests = f.read()
  assert "assert weight_diff < 1e-5" in optimizer_tests
  assert "assert loss_diff < 1e-5" in optimizer_tests
  assert "assert moved > 1e-2" in optimizer_tests
  assert "num_steps = 30" in optimizer_tests
  assert (
    "over 30 steps the weights and the losses agree to within the tests' tolerance of 1e-5, while "
    "the weights move by more than 1e-2"
  ) in flat
  with open(os.path.join(testing_utils.REPO, "tests", "keras", "test_batch_norm.py")) as f:
    batch_norm_tests = f.read()
  assert "assert stale > 3 * stale_batch_stats" in batch_norm_tests
  assert "assert evaluated <= 1.1 * batch_stats" in batch_norm_tests
  assert "more than 3 times the batch-statistics test loss without re-estimation" in flat
  assert "no more than 10% above it with the callback" in flat


# docs/longer_unrolls.md (its tables: tests/test_docs_app_h.py)

APP_H = os.path.join(PRETRAINED, "app_h")
KINDS = ("conv/w", "linear/w", "conv/scale", "conv/offset", "conv/b", "linear/b")
SHIPPED = "shipped"
DECAY = "weight decay 3e-3 from 500"
HELD = "time held at 499"
ADAM = "adam 0.01"


def _app_h(name):
  """(the run's result, the size of its JSON in bytes)."""
  directory = os.path.join(APP_H, name)
  (path,) = [f for f in os.listdir(directory) if f.endswith(".json.gz")]
  with gzip.open(os.path.join(directory, path), "rb") as f:
    raw = f.read()
  return json.loads(raw), len(raw)


@pytest.fixture(scope="module")
def seed_1():
  return _app_h("seed_1")[0]


def _unrolls(start, end=None):
  return _section("longer_unrolls.md", start, end)


def _both(result, value, fmt=".3f", sep="/"):
  return sep.join(format(value(t), fmt) for t in result["tasks"])


def _norm(task, run, kind, step):
  return task["runs"][run]["kinds"][kind]["param_norm"][step]


def _probe(task, run, kind):
  return task["windows"][run]["probe"][kind]


def _percent_range(values):
  return f"{min(values):.0%}-{max(values):.0%}".replace("%-", "-")


def test_longer_unrolls_intro_and_in_short_are_the_seed_1_run(seed_1):
  tasks = seed_1["tasks"]
  task = tasks[0]
  i500 = seed_1["record_steps"].index(500)
  intro = _unrolls("App. H.1 applies", "**In short.**")
  climbed = [t["summary"][SHIPPED]["test_loss_end"] for t in tasks]
  start = np.mean([t["runs"][SHIPPED]["test_loss"][i500] for t in tasks])
  adam = np.mean([t["summary"][ADAM]["test_loss_end"] for t in tasks])
  assert (
    f"its test loss climbs from about {start:.1f} to {min(climbed):.1f}-{max(climbed):.1f} while "
    f"LR-tuned Adam's stays near {adam:.1f}"
  ) in intro
  flat = _unrolls("**In short.**", "![")
  cosines = [
    _probe(t, SHIPPED, k)["drift_outward_cosine"][w]
    for t in tasks
    for k in KINDS
    for w in ("before", "after", "end")
  ]
  assert f"(cos(-drift, w) = {min(cosines):.2f}-{max(cosines):.1f} on every kind of tensor)" in flat
  fractions = [
    _probe(t, SHIPPED, k)["drift_fraction"]["before"] for t in tasks for k in KINDS if k != "conv/b"
  ]
  assert f"It is {_percent_range(fractions)} of the step's norm within the horizon" in flat

  def growth(kind, run=SHIPPED):
    return _norm(task, run, kind, -1) / _norm(task, run, kind, i500)

  assert (
    f"grow {growth('linear/w'):.0f}x and {growth('conv/scale'):.0f}x (Adam: "
    f"{growth('linear/w', ADAM):.0f}x, {growth('conv/scale', ADAM):.1f}x)"
  ) in flat
  test_end = _both(seed_1, lambda t: t["summary"][SHIPPED]["test_loss_end"], ".1f", " and ")
  adam_end = _both(seed_1, lambda t: t["summary"][ADAM]["test_loss_end"], ".1f", " and ")
  assert f"**test loss climbs** ({test_end} against Adam's {adam_end})" in flat
  kernels = [_norm(task, r, "conv/w", s) for r in (SHIPPED, ADAM) for s in (i500, -1)]
  assert (
    f"grow {growth('conv/w'):.0f}x ({kernels[0]:.0f} to {kernels[1]:.0f}; Adam: {kernels[2]:.0f} "
    f"to {kernels[3]:.0f})"
  ) in flat
  relative = task["runs"][SHIPPED]["kinds"]["conv/w"]["relative_step"]
  adam_end = task["windows"][ADAM]["kinds"]["conv/w"]["relative_step"]["end"]
  end = _probe(task, SHIPPED, "conv/w")["relative_step"]["end"]
  assert relative[i500] / end > 10 and f"{end / adam_end:.1f}" == "0.1"
  assert "falls more than 10x, to a tenth of Adam's" in flat
  assert (
    f"sqrt(epsilon) = {math.sqrt(seed_1['normalizer_epsilon']):.1e}".replace("e-03", "e-3") in flat
  )
  g = _probe(task, SHIPPED, "conv/w")["normalized_rms"]
  drift = _probe(task, SHIPPED, "conv/w")["drift_fraction"]["end"]
  assert (
    f"(normalised RMS {g['before'][0]:.1f} to {g['end'][0]:.2f}) and the drift becomes "
    f"{drift:.0%} of the step"
  ) in flat
  decay = _both(seed_1, lambda t: t["summary"][DECAY]["test_loss_end"], ".2f", "-")
  adam_valid = sorted(t["summary"]["adam (tuned on valid)"]["test_loss_end"] for t in tasks)
  assert (
    f"(kernels {_norm(task, SHIPPED, 'conv/w', i500):.0f} to "
    f"{_norm(task, DECAY, 'conv/w', -1):.0f}), the test loss stays at {decay} over the last 500 "
    "steps (Adam, its learning rate tuned on "
    f"validation loss as Fig. 6 tunes it: {adam_valid[0]:.2f}-{adam_valid[1]:.2f})"
  ) in flat
  decay_train = sorted(t["summary"][DECAY]["minibatch_loss_end"] for t in tasks)
  adam_train = sorted(t["summary"]["adam (tuned on valid)"]["minibatch_loss_end"] for t in tasks)
  assert (
    f"({decay_train[0]:.2f}-{decay_train[1]:.2f} against {adam_train[0]:.2f}-{adam_train[1]:.2f})"
  ) in flat


def test_longer_unrolls_what_was_run_is_the_seed_1_run(seed_1):
  flat = _unrolls("## What was run", "## Results at 5,000 steps")
  assert "9 minutes on the 2 cores" in flat and f"{seed_1['seconds'] / 60:.0f}" == "9"
  assert seed_1["num_steps"] == 5000 and seed_1["horizon"] == 500
  i500 = seed_1["record_steps"].index(500)

  def at_500(run):
    return " and ".join(
      f"{t['runs'][run]['train_loss'][i500]:.3f}/{t['runs'][run]['test_loss'][i500]:.3f}"
      for t in seed_1["tasks"]
    )

  assert f"(train/test loss {at_500(SHIPPED)} on tasks 0 and 1; Adam 0.01 {at_500(ADAM)})" in flat


def test_longer_unrolls_results_paragraphs_are_the_seed_1_run(seed_1):
  flat = _unrolls("Adam's other rates do not train", "## Diagnosis")
  tasks = seed_1["tasks"]
  slowest = [t["summary"]["adam 0.0001"]["minibatch_loss_end"] for t in tasks]
  assert f"1e-4 is still at {min(slowest):.1f}-{max(slowest):.1f}" in flat
  for t in tasks:
    for lr in ("0.1", "0.316", "1"):  # At ln 10.
      assert f"{t['summary'][f'adam {lr}']['minibatch_loss_end']:.1f}" in ("2.3", "2.4")
    for lr in ("3.16", "10"):  # Blown up: the inner loop's loss cap.
      assert t["summary"][f"adam {lr}"]["minibatch_loss_end"] >= 10
  ratio = [
    t["summary"][SHIPPED]["minibatch_loss_end"] / t["summary"][ADAM]["minibatch_loss_end"]
    for t in tasks
  ]
  assert f"its minibatch loss is {min(ratio):.1f}-{max(ratio):.1f}x Adam's" in flat
  steps = seed_1["record_steps"]
  task, i1500 = tasks[0], steps.index(1500)
  train = task["runs"][SHIPPED]["train_loss"][i1500:]
  adam = task["runs"][ADAM]["train_loss"]
  assert (
    f"stays between {min(train):.2f} and {max(train):.2f} from step 1,500 on, while Adam's falls "
    f"from {adam[i1500]:.2f} to {adam[-1]:.2f}"
  ) in flat
  lowest = [int(np.argmin(t["runs"][SHIPPED]["test_loss"])) for t in tasks]
  assert (
    f"It is lowest at step {min(steps[i] for i in lowest)}-{max(steps[i] for i in lowest)} ("
    + ", ".join(
      f"{t['runs'][SHIPPED]['test_loss'][i]:.2f}" for t, i in zip(tasks, lowest, strict=True)
    )
    + ")"
  ) in flat
  rates = ("0.000316", "0.001", "0.00316", "0.01", "0.0316")
  ends = [t["summary"][f"adam {lr}"]["test_loss_end"] for t in tasks for lr in rates]
  assert (
    f"every Adam rate from 3e-4 to 3e-2 has a test loss of {min(ends):.2f}-{max(ends):.2f}" in flat
  )


def test_longer_unrolls_inputs_table_is_the_seed_1_runs_windows(seed_1):
  text = _doc("longer_unrolls.md").split("**Inputs that leave their training range.**", 1)[1]
  text = text.split("**Steps.**", 1)[0]
  ranges = seed_1["time_ranges"][SHIPPED]
  scales = seed_1["time_scales"]
  rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line[:2] == "| "}
  assert [r["first_exit"] for r in ranges] == [None] * 3 + [500] * 6
  r = ranges[3]
  assert f"| {r['low']:.2f} .. {r['high']:.2f} |" in rows[f"time feature, eta = {scales[3]:.0f}"]
  r = ranges[4]
  assert (
    f"| {r['low']:.2f} .. {r['high']:.2f} | crosses 0 at step 950, {r['final']:.1f} by 5,000 "
    f"({r['max_excursion']:.2f} outside) |"
  ) in rows[f"time feature, eta = {scales[4]:.0f}"]
  r = ranges[5]
  assert (
    f"| {r['low']:.2f} .. {r['high']:.2f} | {r['final']:.2f} at 5,000 ({r['max_excursion']:.2f} "
    "outside) |"
  ) in rows[f"time feature, eta = {scales[5]:,.0f}"]
  last = ranges[6:]
  label = "time feature, eta = " + " / ".join(f"{s:,.0f}" for s in scales[6:])
  width = max(r["high"] - r["low"] for r in last)
  assert f"| within {width:.3f} of {last[0]['low']:.2f} |" in rows[label]
  assert (
    f"| {last[0]['final']:.2f} / {last[1]['final']:.2f} / {last[2]['final']:.3f} | step 500 "
    f"({last[0]['max_excursion']:.2f} / {last[1]['max_excursion']:.2f} / "
    f"{last[2]['max_excursion']:.3f} outside) |"
  ) in rows[label]
  task, other = seed_1["tasks"]

  def rms(t, kind, column, window):
    return _probe(t, SHIPPED, kind)["normalized_rms"][window][column]

  row = rows["normalised gradient RMS, conv kernels"]
  assert row.split(" | ")[1].startswith(f"{rms(task, 'conv/w', 0, 'before'):.2f} (")
  assert (
    f"| {rms(task, 'conv/w', 0, 'after'):.2f}, then {rms(task, 'conv/w', 0, 'end'):.2f} (task 1: "
    f"{rms(other, 'conv/w', 0, 'after'):.2f}, {rms(other, 'conv/w', 0, 'end'):.2f}) |"
  ) in row
  row = rows["normalised gradient RMS, last layer / batch-norm gains"]
  cells = [
    " / ".join(f"{rms(task, k, 0, w):.2f}" for k in ("linear/w", "conv/scale"))
    for w in ("before", "after", "end")
  ]
  assert f"| {cells[0]} | {cells[1]}, then {cells[2]} |" in row
  row = rows["normalised m_0.5 RMS, conv kernels"]
  m = [rms(task, "conv/w", 2, w) for w in ("before", "after", "end")]
  assert f"| {m[0]:.2f} | {m[1]:.2f}, then {m[2]:.2f} |" in row
  steps = seed_1["record_steps"]
  series = task["runs"][SHIPPED]["probe"]["kinds"]["conv/w"]
  within = [v[0] for s, v in zip(steps, series["normalized_rms"], strict=True) if s < 500]
  row = rows["normalised gradient RMS, conv kernels"]
  assert f"| {rms(task, 'conv/w', 0, 'before'):.2f} ({min(within):.2f}-{max(within):.2f}) |" in row
  row = rows["normalised m_0.99 .. m_0.9999, conv kernels"]
  slow = [[rms(task, "conv/w", c, w) for c in (4, 5, 6)] for w in ("before", "after", "end")]
  during, past = slow[0], slow[1] + slow[2]
  assert (
    f"| {min(during):.1f}-{max(during):.1f} | {min(past):.1f}-{max(past):.1f} | stay small" in row
  )
  epsilon = math.sqrt(seed_1["normalizer_epsilon"])
  assert max(max(v[4:]) for v in series["column_rms"]) < epsilon  # "below sqrt(eps) throughout".

  def leaves(t, kind):
    """The first recorded step past 500 with the gradient input below its outer-training range."""
    rows_ = t["runs"][SHIPPED]["probe"]["kinds"][kind]["normalized_rms"]
    low = min(v[0] for s, v in zip(steps, rows_, strict=True) if s < 500)
    return next(s for s, v in zip(steps, rows_, strict=True) if s >= 500 and v[0] < low)

  assert (
    f"| from step {leaves(task, 'conv/w')} (task 1: {leaves(other, 'conv/w')}) |"
    in rows["normalised gradient RMS, conv kernels"]
  )
  assert (
    f"| from step {leaves(task, 'linear/w')} / {leaves(task, 'conv/scale'):,} |"
    in rows["normalised gradient RMS, last layer / batch-norm gains"]
  )
  time_225 = task["runs"][SHIPPED]["probe"]["time"][steps.index(1000)][3]
  assert f"{time_225:.1f}" == "1.0" and "1.0 from step ~1,000" in rows["time feature, eta = 225"]


def test_longer_unrolls_steps_paragraph_is_the_seed_1_runs_windows(seed_1):
  flat = _unrolls("The gradient inputs fade because", "**Norms, and why they grow.**")
  tasks = seed_1["tasks"]
  task = tasks[0]
  kernels = _probe(task, SHIPPED, "conv/w")
  windows = ("before", "after", "end")

  def chain(values, fmt):
    return " to ".join(fmt(v) for v in values)

  raw = chain([kernels["column_rms"][w][0] for w in windows], testing_utils.sci)
  assert f"kernels falls from {raw}, below sqrt(epsilon)" in flat
  step = chain([kernels["step_rms"][w] for w in windows], testing_utils.sci)
  assert f"On the conv kernels their RMS falls from {step} (panel i)" in flat
  probes = [t["runs"][SHIPPED]["probe"]["kinds"][k] for t in tasks for k in KINDS]
  largest = max(max(p["o_mag_max"]) for p in probes)
  means = [v for p in probes for v in p["o_mag_mean"]]
  assert math.exp(1e-3 * largest) - 1 < 0.04
  assert (
    f"exp(1e-3·o_mag) stays within 4% of 1 (o_mag averages {min(means):.0f}-{max(means):.0f}, at "
    f"most {largest:.0f})"
  ) in flat
  relative = chain([kernels["relative_step"][w] for w in windows], testing_utils.sci)
  adam = task["windows"][ADAM]["kinds"]["conv/w"]["relative_step"]
  adam = chain([adam[w] for w in windows], testing_utils.sci)
  i500 = seed_1["record_steps"].index(500)
  at_500 = task["runs"][SHIPPED]["kinds"]["conv/w"]["relative_step"][i500]
  assert (
    f"|Δw|/|w| falls from {relative}, against Adam's {adam} (panel f): a tenth of Adam's at the "
    f"end ({testing_utils.sci(at_500)} at step 500 itself, so more than 10x down"
  ) in flat
  assert at_500 / kernels["relative_step"]["end"] > 10
  cosines = ", ".join(f"{kernels['step_grad_cosine'][w]:.2f}" for w in windows)
  assert f"cos(step, g) goes {cosines} (panel l)" in flat


NORM_ROWS = {
  "conv kernels": "conv/w",
  "last layer weights": "linear/w",
  "batch-norm gains": "conv/scale",
  "batch-norm offsets": "conv/offset",
  "conv biases (no gradient: the batch norm removes them)": "conv/b",
}


def _short(x):
  return "0" if round(x, 1) == 0 else f"{x:.1f}"


def test_longer_unrolls_norms_table_and_paragraphs_are_the_seed_1_runs(seed_1):
  text = _doc("longer_unrolls.md").split("**Norms, and why they grow.**", 1)[1]
  text = text.split("## What each cheap fix gave", 1)[0]
  flat = _flat(text)
  steps = seed_1["record_steps"]
  tasks = seed_1["tasks"]
  task = tasks[0]
  at = [steps.index(s) for s in (0, 500, 1000, 5000)]
  for label, kind in NORM_ROWS.items():
    cells = " | ".join(_short(_norm(task, SHIPPED, kind, i)) for i in at)
    adam = f"{_norm(task, ADAM, kind, at[1]):.1f} / {_norm(task, ADAM, kind, at[3]):.1f}"
    row = f"| {label} | {cells} | {adam} |"
    assert row in text, row
  growth = [
    (_norm(t, SHIPPED, k, at[2]) - _norm(t, SHIPPED, k, at[1])) / 500 / _norm(t, SHIPPED, k, at[1])
    for t in tasks
    for k in KINDS
  ]
  assert f"grows by {min(growth) * 1e3:.1f}-{max(growth) * 1e3:.1f}e-3 of its norm per step" in flat
  kernels_last = [
    _probe(t, SHIPPED, k)["drift_outward_cosine"][w]
    for t in tasks
    for k in ("conv/w", "linear/w")
    for w in ("before", "after", "end")
  ]
  others = [
    _probe(t, SHIPPED, k)["drift_outward_cosine"][w]
    for t in tasks
    for k in KINDS[2:]
    for w in ("before", "after", "end")
  ]
  assert (
    f"cos(−drift, w) = {min(kernels_last):.2f}-{max(kernels_last):.2f} on the kernels and the last "
    f"layer, {min(others):.2f}-{max(others):.1f} on the other kinds, at every stage and on both "
    "tasks"
  ) in flat
  fractions = [
    _probe(t, SHIPPED, k)["drift_fraction"]["before"] for t in tasks for k in KINDS if k != "conv/b"
  ]

  def before(kind):
    return f"{_probe(task, SHIPPED, kind)['drift_fraction']['before']:.2f}"

  assert (
    f"Its size is {_percent_range(fractions)} of the full step before the horizon (kernels "
    f"{before('conv/w')}, last layer {before('linear/w')}, gains {before('conv/scale')}), growing "
    f"to {_probe(task, SHIPPED, 'conv/w')['drift_fraction']['end']:.2f} on the kernels at the end"
  ) in flat
  assert {
    _probe(t, SHIPPED, "conv/b")["drift_fraction"][w] for t in tasks for w in ("before", "end")
  } == {1.0}
  assert f"their norm goes from 0 to {_norm(task, SHIPPED, 'conv/b', -1):.0f}" in flat
  relative = task["runs"][SHIPPED]["kinds"]["conv/w"]["relative_step"]
  assert f"|Δw|/|w| falls {relative[0] / relative[at[1]]:.0f}x over the horizon" in flat

  def scale(run):
    return np.prod(
      [_norm(task, run, k, at[3]) / _norm(task, run, k, at[1]) for k in ("linear/w", "conv/scale")]
    )

  assert (
    f"grow ~{scale(SHIPPED):.0f}x from step 500 to 5,000 under shipped; with the weight decay they "
    f"shrink to ~{scale(DECAY):.1f}x"
  ) in flat
  # "The time features are not the cause": how many leave their range at step 500, and by most.
  ranges = seed_1["time_ranges"][SHIPPED]
  leaving = [r for r in ranges if r["first_exit"] == 500]
  words = {5: "Five", 6: "Six"}
  assert (
    f"{words[len(leaving)]} of them leave their range at step 500, one by "
    f"{max(r['max_excursion'] for r in leaving):.2f}"
  ) in flat
  held = _probe(task, HELD, "conv/w")["step_rms"]["end"]
  shipped_end = _probe(task, SHIPPED, "conv/w")["step_rms"]["end"]
  assert (
    f"(step RMS {testing_utils.sci(held)} at the end instead of {testing_utils.sci(shipped_end)})"
  ) in flat
  assert (
    f"(kernels {_norm(task, HELD, 'conv/w', -1):.0f} instead of "
    f"{_norm(task, SHIPPED, 'conv/w', -1):.0f})"
  ) in flat
  summary = [t["summary"][HELD] for t in tasks]
  assert (
    f"training {summary[0]['minibatch_loss_end']:.3f}/{summary[1]['minibatch_loss_end']:.3f}, test "
    f"{summary[0]['test_loss_end']:.2f}/{summary[1]['test_loss_end']:.2f}"
  ) in flat


def test_longer_unrolls_cheap_fixes_list_is_the_seed_1_runs(seed_1):
  flat = _unrolls(
    "- **Decoupled weight decay from the horizon**", "### The weight decay's strength"
  )
  tasks = seed_1["tasks"]
  task = tasks[0]
  i500 = seed_1["record_steps"].index(500)
  pulled = ", ".join(
    f"{name} {_norm(task, SHIPPED, k, i500):.0f} to {_norm(task, DECAY, k, -1):.0f}"
    for name, k in (("kernels", "conv/w"), ("last layer", "linear/w"), ("gains", "conv/scale"))
  )
  assert f"below its step-500 value ({pulled})" in flat
  relative = task["windows"][DECAY]["kinds"]["conv/w"]["relative_step"]["end"]
  adam = task["windows"][ADAM]["kinds"]["conv/w"]["relative_step"]["end"]
  assert (
    f"({testing_utils.sci(relative)} over the last 1,000 steps, against Adam's "
    f"{testing_utils.sci(adam)})"
  ) in flat
  decay, shipped_probe = _probe(task, DECAY, "conv/w"), _probe(task, SHIPPED, "conv/w")
  assert (
    f"(normalised RMS {decay['normalized_rms']['end'][0]:.2f} against "
    f"{shipped_probe['normalized_rms']['end'][0]:.2f} at the end; cos(step, g) "
    f"{decay['step_grad_cosine']['end']:.2f} against "
    f"{shipped_probe['step_grad_cosine']['end']:.2f})"
  ) in flat

  def pair(run, key, fmt=".2f"):
    return _both(seed_1, lambda t: t["summary"][run][key], fmt)

  lowest = _both(seed_1, lambda t: min(t["runs"][DECAY]["test_loss"]), ".2f")
  assert (
    f"{pair(DECAY, 'test_loss_end')} over the last 500 steps, against Adam's "
    f"{pair(ADAM, 'test_loss_end')}, with a minimum of {lowest}"
  ) in flat
  assert (
    f"The price is the training loss: {pair(DECAY, 'minibatch_loss_end', '.3f')} over the last 500 "
    f"steps, against Adam's {pair(ADAM, 'minibatch_loss_end', '.3f')}"
  ) in flat
  assert (
    f"(kernels {_norm(task, 'both', 'conv/w', -1):.0f}), and both losses come out close to the "
    f"decay alone's (test {pair('both', 'test_loss_end')}, training "
    f"{pair('both', 'minibatch_loss_end')})"
  ) in flat


def test_longer_unrolls_weight_decay_choice_paragraph_is_its_run():
  result, _ = _app_h("weight_decay_choice")
  means = result["mean_summary"]
  ranked = sorted(means, key=lambda name: means[name]["mean_valid_loss"])
  assert ranked[0] == result["lopt_best_on_valid"] and ranked[1].split()[2] == "1e-3"
  flat = _unrolls("The choice lies inside the range tried.", "## On tasks nobody chose")
  assert (
    "1e-3, the norms' growth per step at the horizon (the diagnosis above), comes second" in flat
  )
  assert (
    f"costs training loss ({means[ranked[0]]['minibatch_loss_end']:.3f} against "
    f"{means[ranked[1]]['minibatch_loss_end']:.3f} over the last 500 steps)"
  ) in flat
  for key in ("valid_loss_end", "test_loss_end"):  # "better on validation and test loss".
    assert means[ranked[0]][key] < means[ranked[1]][key]


def test_longer_unrolls_seed_3_paragraphs_are_its_run():
  result, _ = _app_h("seed_3")
  tasks = result["tasks"]
  flat = _unrolls("Adam tuned on validation loss picks", "![")
  tuned = "adam (tuned on valid)"

  def end(run, sep=" and ", fmt=".2f"):
    return _both(result, lambda t: t["summary"][run]["test_loss_end"], fmt, sep)

  valid_picks = [t["adam_learning_rate_valid"] for t in tasks]
  task_1 = tasks[1]["summary"]
  assert valid_picks[0] == tasks[0]["adam_learning_rate"]
  assert f"{testing_utils.sci(valid_picks[1], 2)} on task 1, where it ends" in flat
  assert (
    f"({task_1[tuned]['test_loss_end']:.3f} against {task_1['adam (tuned)']['test_loss_end']:.3f} "
    "over the last 500 steps)"
  ) in flat
  assert f"({end('L_train, shipped')} over the last 500 steps against Adam's {end(tuned)})" in flat
  assert f"holds it at {end('L_train, weight decay from 500')}, below Adam's" in flat
  assert all(
    t["summary"]["L_train, weight decay from 500"]["test_loss_end"]
    < t["summary"][tuned]["test_loss_end"]
    for t in tasks
  )
  assert f"both together are lower still here ({end('L_train, both', ', ')})" in flat
  assert (
    f"its test loss stays flat ({end('L_valid, shipped')} over the last 500 steps, below Adam's "
    f"{end(tuned)})"
  ) in flat
  fixes = [
    t["summary"][f"L_valid, {v}"]["test_loss_end"]
    for t in tasks
    for v in ("time held at 499", "weight decay from 500", "both")
  ]
  assert f"(both raise its test loss, to {min(fixes):.2f}-{max(fixes):.2f})" in flat
  assert min(fixes) > max(t["summary"]["L_valid, shipped"]["test_loss_end"] for t in tasks)
  task = tasks[0]

  def grew(run, kind):
    norms = task["windows"][run]["kinds"][kind]["param_norm"]
    return f"{norms['after']:.0f} to {norms['end']:.0f}"

  assert (
    f"conv kernels grow from {grew('L_valid, shipped', 'conv/w')} between the horizon window and "
    f"the end (L_train: {grew('L_train, shipped', 'conv/w')}; Adam: {grew(ADAM, 'conv/w')}) and "
    f"its last layer from {grew('L_valid, shipped', 'linear/w')} (L_train: "
    f"{grew('L_train, shipped', 'linear/w')})"
  ) in flat
  assert (
    f"on task 1 ({tasks[1]['runs']['L_train, shipped']['train_loss'][-1]:.3f} at step 5,000)"
    in flat
  )


def test_longer_unrolls_reproduce_times_and_sizes_are_the_shipped_runs():
  runs = [_app_h(name) for name in ("weight_decay_choice", "seed_1", "seed_3")]
  flat = _unrolls("## Reproduce")
  minutes = ", ".join(f"{r['seconds'] / 60:.0f}" for r, _ in runs[:2])
  assert f"About {minutes} and {runs[2][0]['seconds'] / 60:.0f} minutes on the 2 cores" in flat
  sizes = [size / 1e6 for _, size in runs]
  assert f"every recorded series, {min(sizes):.1f}-{max(sizes):.1f} MB" in flat


def test_keras_batch_norm_table_and_cost_are_the_committed_benchmark():
  text = _section("keras.md", "## Batch norm: re-estimate", "**The warning.**")
  found = _json("benchmarks", "results", "keras_batch_norm.json")
  assert found["settings"]["steps"] == 500 and found["settings"]["batch_size"] == 32
  assert "batch 32, 500 steps of `model.fit`, 397 test images" in text
  labels = {
    "bn_cnn_valid": '`from_pretrained("bn_cnn_valid")`',
    "bn_cnn_train": '`from_pretrained("bn_cnn_train")`',
    "adam": f"Keras Adam, learning rate {found['settings']['adam_learning_rate']:.0e}".replace(
      "e-02", "e-2"
    ),
  }
  for name, label in labels.items():
    row = found["digits"][name]
    assert row["reestimate_batches"] == 43
    cells = [f"{row[k]['loss']:.3f} ({row[k]['accuracy']:.3f})" for k in ("moving", "batch")]
    cells.append(f"{row['reestimated']['loss']:.3f} ({row['reestimated']['accuracy']:.3f})")
    assert f"| {label} | {' | '.join(cells)} |" in text
    # The learned optimizer's moving averages lag, Adam's do not; re-estimation mends both.
    lags = row["moving"]["loss"] > 3 * row["batch"]["loss"]
    assert lags == (name != "adam")
    assert row["reestimated"]["loss"] <= row["batch"]["loss"]
  cost = found["cost"]
  for n in (50, 100):
    digits = cost["digits_8x8"][str(n)]["ratio_to_training_steps"]
    images = cost["images_32x32x3"][str(n)]["ratio_to_training_steps"]
    assert f"{digits:.2f} x {n}" in text and f"{images:.2f} x {n}" in text
  assert f"median of {found['settings']['rounds']} interleaved rounds" in text
