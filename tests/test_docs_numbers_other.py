"""The measured numbers of docs/cluster.md, pes.md, ablations.md and deviations.md and of the own
model example's README, against the files they come from.

Each paragraph or table is found by a phrase of its own and every number it reports is recomputed,
to the precision it is printed, from the committed file it names: benchmarks/results/ (the fault
injection, the soak run, the cluster's speed), docs/ablations_small/ (the ablation study),
docs/paper_family_seeds*.json and pretrained/ (the shipped runs and searches) and
examples/own_keras_model/results/ (the example's evaluations and times). The PES variance
sentence is recomputed from the unbiasedness test's own runs (tests/outer/test_pes.py).
"""

import json
import os
import re

import numpy as np
import pytest
import testing_utils

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import statistics

DOCS = os.path.join(testing_utils.REPO, "docs")
RESULTS = os.path.join(testing_utils.REPO, "benchmarks", "results")
MAIN_JOB = os.path.join(testing_utils.REPO, "pretrained", "main_job")
EXAMPLE = os.path.join(testing_utils.REPO, "examples", "own_keras_model")


def _flat(text):
  return re.sub(r"\s+", " ", text)


def _doc(name):
  with open(os.path.join(DOCS, name)) as f:
    return f.read()


def _json(*path):
  with open(os.path.join(*path)) as f:
    return json.load(f)


def _between(text, start, end):
  """The part of `text` from the phrase `start` up to the phrase `end`."""
  begin = text.index(start)
  return text[begin : text.index(end, begin)]


# docs/cluster.md


def test_cluster_fault_injection_paragraph_is_its_results():
  run = _json(RESULTS, "fault_injection.json")
  text = _flat(_between(_doc("cluster.md"), "**Fault injection**", "```bash"))
  workers = run["num_workers"]
  assert f"a chief and {workers} workers with `gin/quickstart.gin`" in text
  assert "outer_training.checkpoint_every_secs = 10" in run["bindings"]
  assert "(a checkpoint every 10 s)" in text
  assert f"for {run['duration_secs'] // 60} minutes" in text
  chief = run["faults_by_process"]["chief"]
  of_workers = sum(n for p, n in run["faults_by_process"].items() if p != "chief")
  assert chief + of_workers == run["faults"]
  assert (
    f"Measured on this {run['cpu_count']}-core machine (load average "
    f"~{run['load_average'][0]:.0f} with {workers + 1} processes): {run['faults']} faults "
    f"({chief} of the chief, {of_workers} of workers; {run['faults_killed_again_before_back']} "
    "restarts were killed again before they were back), all survived."
  ) in text
  down = run["chief_downtime_secs"]
  assert (
    f"{min(down):.0f}-{max(down):.0f} s after a kill (median {np.median(down):.1f} s)"
  ) in text
  resume = run["worker_time_to_resume_secs"]
  assert (
    f"its first sample {min(resume):.0f}-{max(resume):.0f} s after starting "
    f"(median {np.median(resume):.0f} s:"
  ) in text
  # Every restarted chief resumed from the latest checkpoint there was when it was killed.
  assert all(r["resumed_from"] == r["latest_checkpoint_at_kill"] for r in run["chief_resumes"])
  assert run["never_back_past_a_checkpoint"]
  assert run["steps_each_once_in_order"] and run["no_sample_applied_twice"]
  assert (
    f"`progress.jsonl` holds outer steps 1-{run['final_outer_step']}, each once; none of the "
    f"{run['samples_applied']} applied samples was applied twice"
  ) in text
  assert run["theta_finite"] and run["theta_export_equals_last_checkpoint"]
  assert set(run["exit_statuses_after_sigterm"].values()) == {0}
  assert len(run["exit_statuses_after_sigterm"]) == workers + 1
  assert "SIGTERM ended all four processes with status 0" in text


def test_cluster_soak_run_paragraph_is_its_results():
  run = _json(RESULTS, "soak.json")
  text = _flat(_between(_doc("cluster.md"), "**Soak run**", "```bash"))
  kinds = ", ".join(f"{n} {kind}" for kind, n in run["faults_by_kind"].items())
  assert sum(run["faults_by_kind"].values()) == run["faults"] == len(run["fault_log"])
  assert (
    f"a chief and {run['num_workers']} workers, each on its own host of the test network"
  ) in text
  assert f"for {run['duration_secs'] // 60} minutes with a fault every 15-45 s: " in text
  assert f"{run['faults']} faults ({kinds})." in text
  recovery = "; ".join(
    f"{kind} {min(secs):.1f}-{max(secs):.1f} s (median {np.median(secs):.1f})"
    for kind, secs in run["recovery_secs_by_kind"].items()
  )
  assert f"worker: restart or heal to its first sample applied): {recovery}." in text
  # The recovery times are the fault log's, rounded as the doc prints them.
  for kind, secs in run["recovery_secs_by_kind"].items():
    logged = [f["recovered_secs"] for f in run["fault_log"] if f["kind"] == kind]
    assert secs == [round(s, 1) for s in sorted(logged)], kind
  with open(os.path.join(testing_utils.REPO, "benchmarks", "soak.py")) as f:
    (timeout,) = re.findall(r"^RECOVERY_TIMEOUT_SECS = (\d+)", f.read(), re.M)
  assert (
    f"Not recovered within {timeout} s: {len(run['not_recovered'])}; processes that exited on "
    f"their own: {len(run['processes_that_exited_on_their_own'])}."
  ) in text
  assert run["steps_each_once_in_order"] and run["no_sample_applied_twice"]
  assert (
    f"At the end: {run['final_outer_step']:,} outer steps, every one once and in order; "
    f"{run['samples_applied']:,} samples applied, none twice;"
  ) in text
  assert run["theta_finite"] and run["theta_export_equals_last_checkpoint"]
  assert set(run["exit_statuses"].values()) == {0} and len(run["exit_statuses"]) == 4
  assert "all four processes exited 0 on SIGTERM; no log holds a traceback" in text
  assert not run["logs_with_a_traceback"]


def test_cluster_speed_table_is_its_benchmarks():
  capacity = _json(RESULTS, "cluster_capacity.json")
  overhead = _json(RESULTS, "cluster_worker_overhead.json")
  real = _json(RESULTS, "cluster_real_workers.json")
  section = _doc("cluster.md").split("## Speed", 1)[1]
  text = _flat(section)

  def row(phrase):
    (found,) = [r for r in section.splitlines() if r.startswith("| ") and phrase in r]
    return found

  assert capacity["num_meta_parameters"] == overhead["num_meta_parameters"]
  assert capacity["batch_size"] == overhead["batch_size"]
  assert (
    f"theta of the paper's size ({capacity['num_meta_parameters']} meta-parameters), batches of "
    f"{capacity['batch_size']}."
  ) in text
  samples = round(capacity["chief_samples_per_second"], -1)
  assert f"fed by {capacity['num_pushers']} stand-in workers pushing random samples" in text
  assert (
    f"| {samples:,.0f} samples/s ({capacity['chief_steps_per_second']:.0f} steps/s; "
    f"{capacity['apply_ms_median']:.1f} ms per apply, median) |"
  ) in row("the chief's capacity")
  probe = overhead["probe_worker"]
  assert (
    f"| {probe['read_ms'] + probe['enqueue_ms']:.1f} ms: read {probe['read_ms']:.1f} + enqueue "
    f"{probe['enqueue_ms']:.1f} (p90: {probe['read_p90_ms']:.1f} + {probe['enqueue_p90_ms']:.1f}) |"
  ) in row("a worker's overhead per sample")
  probe = capacity["probe_worker"]
  assert (
    f"| {probe['read_ms'] + probe['enqueue_ms']:.0f} ms: read {probe['read_ms']:.1f} + enqueue "
    f"{probe['enqueue_ms']:.0f} | `cluster_capacity.json` |"
  ) in row("saturate both cores")
  assert (
    f"| 1 worker: {real['1_workers']['steady_samples_per_second']:.1f} samples/s; 2 workers: "
    f"{real['2_workers']['steady_samples_per_second']:.1f} samples/s |"
  ) in row("real workers")
  assert real["1_workers"]["outer_steps"] == real["2_workers"]["outer_steps"] == 8
  assert "between outer steps 2 and 8" in row("real workers")
  assert {capacity["cpu_count"], overhead["cpu_count"]} == {2}
  assert "Measured with `benchmarks/cluster.py` on this 2-core machine" in text


# docs/pes.md


def test_pes_variance_sentence_is_the_unbiasedness_tests_runs():
  from outer import test_pes as pes_test  # The test's own problem and runs.

  task, lopt, theta = pes_test._setup()
  pes = pes_test._full_run_estimates(task, lopt, theta, True).std(ddof=1)
  es = pes_test._full_run_estimates(task, lopt, theta, False).std(ddof=1)
  text = _flat(_doc("pes.md"))
  assert (
    f"In the unbiasedness test below ({pes_test.NUM_TRUNCATIONS} truncations of "
    f"{pes_test.LENGTH} steps), the per-run sum of g_pes has a standard deviation "
    f"{pes / es:.1f} times that of truncated ES ({pes:.3f} against {es:.3f}; variance "
    f"x{(pes / es) ** 2:.1f})."
  ) in text


def test_pes_quickstart_paragraph_is_the_merged_quickstart_run():
  """The merged estimator's side of the PES comparison is the shipped quickstart run."""
  records = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  with open(os.path.join(MAIN_JOB, "operative_config.gin")) as f:
    config = f.read()
  with open(os.path.join(testing_utils.REPO, "gin", "pes_quickstart.gin")) as f:
    pes_config = f.read()
  assert "include 'quickstart.gin'" in pes_config
  for binding in ("train_local.num_workers = 8", "outer_training.batch_size = 8"):
    assert binding in config
  (steps,) = re.findall(r"^outer_training\.num_outer_steps = (\d+)", pes_config, re.M)
  first = next(r for r in records if round(r["outer_loss"], 1) <= 1.0)
  text = _flat(_doc("pes.md"))
  assert (
    f"Run at the quickstart's size (`gin/pes_quickstart.gin`, which includes `gin/quickstart.gin`:"
    f" 8 workers, batch 8, {steps} outer steps;"
  ) in text
  assert (
    f"reaches about {first['outer_loss']:.1f} by outer step {first['outer_step']} on the same "
    "settings (`pretrained/main_job/progress.jsonl`)"
  ) in text


# docs/ablations.md

LABELS = {
  "merged": "merged (baseline)",
  "estimator_rp": "estimator_rp (g_rp only)",
  "estimator_es": "estimator_es (ES only)",
  "fixed_10": "fixed_10",
  "fixed_100": "fixed_100",
  "fixed_500": "fixed_500",
  "no_momentum": "no_momentum",
  "no_time": "no_time",
}


@pytest.fixture(scope="module")
def ablations():
  """(the study at 40,000 inner steps, the same runs at 20,000, docs/ablations.md)."""
  return (
    _json(DOCS, "ablations_small", "ablations.json"),
    _json(DOCS, "ablations_small", "ablations_at_20k.json"),
    _doc("ablations.md"),
  )


def _quartiles(r, bold=False):
  median = f"**{r['median']:.3f}**" if bold else f"{r['median']:.3f}"
  return f"{median} [{r['q25']:.3f}, {r['q75']:.3f}]"


def test_ablations_window_table_is_the_studys_results(ablations):
  study, at_20k, doc = ablations
  assert list(study["results"]) == list(LABELS) == list(at_20k["results"])
  for name, label in LABELS.items():
    r, r20 = study["results"][name], at_20k["results"][name]
    assert r["seeds"] == [0, 1, 2]
    q25, median, q75 = np.percentile(r["window_loss"], [25, 50, 75])
    assert (q25, median, q75) == pytest.approx((r["q25"], r["median"], r["q75"]))
    seeds = ", ".join(f"{x:.3f}" for x in r["window_loss"])
    row = f"| {label} | {seeds} | {_quartiles(r, name == 'merged')} | {_quartiles(r20)} |"
    assert row in doc, row
  text = _flat(doc)
  assert study["num_seeds"] == 3 and "3 theta seeds each" in text
  low, high = study["window"]
  assert f"a budget of {study['max_inner_steps']:,} inner steps per run" in text
  assert f"window ({low:,}, {high:,}]" in text
  low, high = at_20k["window"]
  assert f"20,000, window ({low:,}, {high:,}]" in text and at_20k["max_inner_steps"] == 20000


def test_ablations_claims_table_is_the_studys_claims(ablations):
  study, at_20k, doc = ablations
  results = study["results"]
  claims = {c["claim"]: c for c in study["claims"]}
  claims_20k = {c["claim"]: c for c in at_20k["claims"]}
  merged = results["merged"]["median"]

  def iqr(name):
    return results[name]["q75"] - results[name]["q25"]

  def resolved(claim, digits):
    c = claims[claim]
    return f"{'yes' if c['resolved'] else 'no'} (+{c['margin']:.{digits}f}"

  def at_20k_cell(claim):
    c = claims_20k[claim]
    return "holds, resolved" if c["holds"] and c["resolved"] else None

  assert all(c["holds"] for c in study["claims"])
  rp = "merged beats g_rp only"
  rows = [
    (
      "| merged beats g_rp only | holds barely: "
      f"{merged:.3f} vs {claims[rp]['medians']['estimator_rp']:.3f} | {resolved(rp, 3)} within "
      f"spreads of {iqr('merged'):.2f} and {iqr('estimator_rp'):.2f}) | holds barely, not "
      "resolved |"
    ),
  ]
  assert claims_20k[rp]["holds"] and not claims_20k[rp]["resolved"]
  for claim, words, name, digits in (
    ("merged beats ES only", "merged beats ES only", "estimator_es", 2),
    (
      "a fixed truncation of 100 converges poorly",
      "fixed truncations of 100 converge poorly",
      "fixed_100",
      2,
    ),
    ("no momentum features fails", "no momentum features fails", "no_momentum", 2),
  ):
    left, right = (merged, results[name]["median"])
    if name != "estimator_es":
      left, right = right, left
    chance = ", at chance" if name == "no_momentum" else ""
    rows.append(
      f"| {words} | holds: {left:.3f} vs {right:.3f}{chance} | {resolved(claim, digits)}) | "
      f"{at_20k_cell(claim)} |"
    )
  ten = "a fixed truncation of 10 converges poorly"
  c20 = claims_20k[ten]
  assert not c20["holds"] and not c20["resolved"]
  rows.append(
    f"| fixed truncations of 10 converge poorly | holds barely: "
    f"{results['fixed_10']['median']:.3f} vs {merged:.3f} | {resolved(ten, 3)}) | does **not** "
    f"hold: {c20['medians']['fixed_10']:.3f} vs {c20['medians']['merged']:.3f} (fixed 10 ahead, "
    "not resolved) |"
  )
  assert iqr("fixed_500") > iqr("merged")
  assert all(claims_20k[c]["holds"] for c in claims_20k if c != ten)
  rows.append(
    "| the longest fixed truncation has high variance over seeds | holds: interquartile range "
    f"{iqr('fixed_500'):.2f} vs {iqr('merged'):.2f} | ({study['num_seeds']} seeds) | holds |"
  )
  allowed = max(iqr("merged"), 0.02 * merged)
  assert f"= {allowed:.4f} above" in claims["no time features is nearly as good"]["rule"]
  rows.append(
    f"| no time features is nearly as good | holds: {results['no_time']['median']:.3f} vs "
    f"{merged:.3f} | (within {allowed:.2f}) | holds |"
  )
  for row in rows:
    assert row in doc, row


def test_ablations_outer_steps_times_and_seeds_in_the_prose_are_the_studys(ablations):
  study, at_20k, doc = ablations
  results = study["results"]
  text = _flat(doc)
  steps = {}
  for name, r in results.items():
    (steps[name],) = set(r["outer_steps"])
  assert steps["merged"] == steps["estimator_rp"] == steps["no_time"]
  assert (
    f"For the same budget the merged estimator takes {steps['merged']} outer steps, fixed "
    f"truncations of 10, 100 and 500 take {steps['fixed_10']}, {steps['fixed_100']} and "
    f"{steps['fixed_500']}."
  ) in text
  assert (
    f"fixed truncations of 100 and 500 take too few outer steps for the budget "
    f"({steps['fixed_100']} and {steps['fixed_500']})"
  ) in text
  ratio = steps["fixed_10"] / steps["merged"]
  assert f"Truncations of 10 take {ratio:.0f} times more outer steps" in text
  # They led at 20,000 inner steps and fell just behind by 40,000.
  assert at_20k["results"]["fixed_10"]["median"] < at_20k["results"]["merged"]["median"]
  assert results["fixed_10"]["median"] > results["merged"]["median"]
  # Seed 0 is where g_rp only is worst.
  rp = results["estimator_rp"]["window_loss"]
  assert int(np.argmax(rp)) == 0
  assert (
    f"g_rp only is worst ({rp[0]:.3f} against merged's {results['merged']['window_loss'][0]:.3f})"
  ) in text
  # `seconds` is each run's last process: the halves resumed from 20,000 to 40,000.
  minutes = [s / 60 for r in results.values() for s in r["seconds"]]
  assert len(minutes) == 24
  assert (
    f"The resumed halves took {min(minutes):.1f}-{max(minutes):.1f} minutes per run (`seconds` in "
    f"`ablations.json`), {sum(minutes) / 2:.0f} minutes for the {len(minutes)} runs two at a time"
  ) in text


# docs/deviations.md


def _deviation(what):
  (row,) = [r for r in _doc("deviations.md").splitlines() if r.startswith(f"| {what} |")]
  return row


def _seeds_below_adam(name, key, metric):
  study = _json(DOCS, name)[key]
  adam = study["reference"]["outer_test"][metric]
  runs = study["seeds"].values()
  last = {run["records"][-1]["outer_step"] for run in runs}
  passed = sum(any(r["outer_test"][metric] < adam for r in run["records"]) for run in runs)
  return passed, len(study["seeds"]), last


def test_deviations_rows_with_measurements_are_their_files():
  # The L_valid theta on the paper's family: the two seed studies.
  valid, n_valid, (last,) = _seeds_below_adam(
    "paper_family_seeds_valid.json", "paper_family_valid", "final_test_loss"
  )
  train, n_train, _ = _seeds_below_adam(
    "paper_family_seeds.json", "paper_family", "mean_train_loss"
  )
  assert (
    f"at the quickstart's scale {valid} of {n_valid} L_valid seeds leave the ln 10 plateau in "
    f"{last} outer steps, where {train} of {n_train} L_train seeds do"
  ) in _deviation("L_valid theta on the paper's family")
  # The quickstart's time: the shipped main job's timeline.
  with open(os.path.join(MAIN_JOB, "timeline.json")) as f:
    timeline = json.load(f)
  assert timeline["exit_status"] == 0
  assert (
    f"| {round(timeline['seconds'] / 60)} minutes on 2 cores (`pretrained/main_job/timeline.json`)"
  ) in _deviation("Quickstart scale")
  # App. F's searches: 50 configurations per rule, run by two processes in about an hour.
  path = os.path.join(testing_utils.REPO, "pretrained", "app_f", "results.jsonl")
  signature, *runs = files.read_jsonl(path)
  assert signature["signature"]["num_tasks"] == 8 and signature["signature"]["num_steps"] == 500
  kinds = [r["kind"] for r in runs]
  assert {k: kinds.count(k) for k in set(kinds)} == {"rmsprop": 50, "sgdm": 50}
  row = _deviation("App. F's searches (`gin/baselines/pretrained_app_f.gin`)")
  assert "| 50 configurations per rule on 8 outer-train tasks x 500 steps" in row
  hours = sum(r["seconds"] for r in runs) / 2 / 3600
  assert round(hours) == 1 and "| about an hour on 2 cores;" in row


# examples/own_keras_model/README.md


@pytest.fixture(scope="module")
def example():
  with open(os.path.join(EXAMPLE, "README.md")) as f:
    return _flat(f.read())


def _example_results(*name):
  return _json(EXAMPLE, "results", *name)


def _comparisons(*name):
  return {c["metric"]: c for c in _example_results(*name)["comparisons"]}


def test_example_idle_run_paragraph_is_its_results(example):
  seconds = _example_results("idle_run", "wall_clock.json")
  assert (
    seconds["total_seconds"] == seconds["train_local_seconds"] + seconds["fit_with_theta_seconds"]
  )
  assert (
    f"**On 2 idle cores: {seconds['total_seconds'] / 60:.1f} minutes** "
    "(`results/idle_run/wall_clock.json`, the same command from a fresh clone with nothing else "
    f"running): {seconds['train_local_seconds']} s `bin/train_local`, "
    f"{seconds['fit_with_theta_seconds']} s `fit_with_theta.py`, {seconds['cpu_seconds']} s of "
    "CPU time."
  ) in example
  c = _comparisons("idle_run", "summary.json")
  assert c["mean_test_loss"]["outcome"] == statistics.LEARNED_AHEAD
  low, high = c["mean_test_loss"]["ci95"]
  parts = [
    f"mean test loss {c['mean_test_loss']['learned_mean_loss']:.4f} against tuned Adam's "
    f"{c['mean_test_loss']['baseline_mean_loss']:.4f}, {c['mean_test_loss']['wins']} of "
    f"{c['mean_test_loss']['num_tasks']}, difference {c['mean_test_loss']['mean_difference']:.4f} "
    f"[{low:.4f}, {high:.4f}]"
  ]
  for metric, name in (("final_test_loss", "final test loss"), ("mean_loss", "mean training loss")):
    assert c[metric]["outcome"] == statistics.NOT_RESOLVED
    parts.append(
      f"{name} {c[metric]['learned_mean_loss']:.4f} against {c[metric]['baseline_mean_loss']:.4f}, "
      f"{c[metric]['wins']} of {c[metric]['num_tasks']}, not resolved"
    )
  assert "(`results/idle_run/summary.json`, same tasks: " + "; ".join(parts) + ")" in example


def test_example_results_prose_is_its_evaluations(example):
  # The 10 held-out tasks.
  c = _comparisons("summary.json")
  test, final = c["mean_test_loss"], c["final_test_loss"]
  assert test["wins"] == final["wins"]
  assert (
    f"lower test loss than tuned Adam on {final['wins']} of the {final['num_tasks']} held-out "
    f"tasks, at the end of training and averaged over it; but one task it loses by much (final "
    f"test loss {-min(final['difference']):.2f} above Adam's)"
  ) in example
  (p,) = {statistics.format_p(test["p_value"]), statistics.format_p(final["p_value"])}
  assert f"neither the count (sign test p = {p})" in example
  assert f"On training loss the two are level ({c['mean_loss']['wins']} of 10)." in example
  # The 30 held-out tasks.
  c = _comparisons("held_out_30_tasks", "summary.json")
  test, final = c["mean_test_loss"], c["final_test_loss"]
  assert test["wins"] == final["wins"]
  wins = f"{final['wins']} of {final['num_tasks']}"
  assert f"the learned optimizer thus has the lower test loss on {wins} tasks" in example
  assert c["mean_loss"]["outcome"] == statistics.BASELINE_AHEAD
  assert f"(Adam ahead by {-c['mean_loss']['mean_difference']:.3f})" in example
  assert f"So the held-out lead ({wins} tasks)" in example
  # The outer-train tasks: the two the learned optimizer overfits.
  candidates = _example_results("outer_train_tasks", "summary.json")["candidates"]
  learned = np.array(candidates["learned"]["per_task"]["final_test_loss"])
  adam = np.array(
    candidates["adam (lr tuned per task on valid loss)"]["per_task"]["final_test_loss"]
  )
  worst = sorted(np.argsort(learned)[-2:])
  assert (
    f"(final test loss {learned[worst[0]]:.2f} and {learned[worst[1]]:.2f} against Adam's "
    f"{adam[worst[0]]:.2f} and {adam[worst[1]]:.2f})"
  ) in example
  # The step-capped selection run: Adam's tuned learning rates.
  rates = [
    r
    for v in _example_results("selection_step_cap", "summary.json")["tuned_learning_rates"].values()
    for r in v
  ]
  assert f"Adam's tuned learning rate here is {min(rates):.2f}-{max(rates):.2f}" in example
  # The run's wall clock on the shared cores.
  total = _example_results("wall_clock.json")["total_seconds"]
  assert 0.75 <= total / 1800 <= 1.25
  assert "(a run took about half an hour of wall clock there, `results/wall_clock.json`)" in example


def test_data_train_inner_table_is_its_two_runs():
  text = _flat(_doc("data.md"))
  for seed in (0, 1):
    found = _json(DOCS, f"train_inner_seed_{seed}.json")
    assert found["num_steps"] == 2000
    adam = found["results"]["adam"]
    losses = adam["train_losses"]
    means = [np.mean(losses[step - 20 : step]) for step in (20, 100, 300, 500, 1000, 2000)]
    test = adam["final"]["test"]
    row = " | ".join([str(seed)] + [f"{m:.2f}" for m in means])
    assert f"| {row} | {test['loss']:.3f} / {test['accuracy']:.3f} |" in text
    random_theta = found["results"]["mlp_lopt"]["final"]["train"]["loss"]
    assert f"final training loss {random_theta:.2f} in the same files" in text


def test_pes_quickstart_paragraph_is_its_committed_run():
  text = _flat(_doc("pes.md"))
  run = os.path.join(testing_utils.REPO, "pretrained", "pes_quickstart")
  progress = files.read_jsonl(os.path.join(run, "progress.jsonl"))
  assert [r["outer_step"] for r in progress] == list(range(1, 121))

  def mean(key, first, last):
    return np.mean([r[key] for r in progress if first <= r["outer_step"] <= last])

  windows = [(1, 16), (33, 48), (65, 80), (105, 120)]
  losses = [f"{mean('outer_loss', a, b):.2f}" for a, b in windows]
  assert (
    f"the outer loss went from {losses[0]} (steps 1-16) to {losses[1]} (33-48), {losses[2]} "
    f"(65-80) and {losses[3]} (105-120), never off the ln 10 = 2.30 plateau"
  ) in text
  assert all(mean("outer_loss", a, b) > 2.30 for a, b in windows)
  assert f"{round(progress[-1]['elapsed_seconds'] / 60)} minutes of outer-training" in text
  summary = _json(run, "eval", "summary.json")
  (train,) = [
    c for c in summary["comparisons"] if c["learned"] == "learned" and c["metric"] == "mean_loss"
  ]
  assert (
    f"mean training loss {train['learned_mean_loss']:.2f} against tuned Adam's "
    f"{train['baseline_mean_loss']:.2f} on the {train['num_tasks']} held-out tasks, "
    f"lower on {statistics.claim(train)}"
  ) in text
  es = np.array([r["es_variance"] for r in progress])
  rp = np.array([r["rp_variance"] for r in progress])
  assert (
    f"g_pes was {testing_utils.sci(es.min(), 0)} to {es.max():.1f} (median {np.median(es):.2f})"
    in text
  )
  assert (rp < es).all()
  assert f"below g_pes's at every step (median {testing_utils.sci(np.median(rp), 0)})" in text
