"""The README's and docs/pathologies.md's measured numbers that other tests leave out, against the
committed files they come from.

tests/test_docs_numbers.py checks the README's results table row by row and
tests/figures/test_committed_figures.py the pathology figures' main numbers; this file checks the
rest, to the precision it is printed: the Status bullets (the shipped evaluations in pretrained/,
recomputed by evaluation/shipped.py), the paragraph on the paper's family in "Set up and run"
(pretrained/generated_cnn_train/'s progress and evaluator, pretrained/main_job/), the parts of the
table's rows that no other test reads (App. E's training checks in pretrained/app_e/, the seed
studies in docs/, the soak and the outer-step profile in benchmarks/results/), and
docs/pathologies.md's times, regimes and bounds (docs/figures/*.json.gz).
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
from task_specific_learned_opt.evaluation import search_space, shipped, statistics

TRAIN = "(lr tuned per task on train loss)"
VALID = "(lr tuned per task on valid loss)"
PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
FIGURES = os.path.join(testing_utils.REPO, "docs", "figures")
FIG6_TRAIN = [f"{k} {TRAIN}" for k in ("adam", "rmsprop", "sgdm")] + ["adam+reg+decay (L_train)"]
FIG6_VALID = [f"{k} {VALID}" for k in ("adam", "rmsprop", "sgdm")] + ["adam+reg+decay (L_valid)"]


@pytest.fixture(scope="module")
def found():
  return shipped.records()


def _flat(text):
  return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def readme():
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    return f.read()


def _status(readme, start):
  """The Status bullet that starts with `start`, its whitespace flattened."""
  text = readme.split("## Status", 1)[1].split("\n## ", 1)[0]
  (bullet,) = [b for b in text.split("\n- ") if b.lstrip("- ").startswith(start)]
  return _flat(bullet)


def _row(readme, first_cell):
  (row,) = [line for line in readme.splitlines() if line.startswith(f"| {first_cell} |")]
  return row


_rows = testing_utils.comparison_rows


def _one(found, evaluation, learned, metric, baseline):
  (r,) = _rows(found, evaluation, learned, metric, [baseline])
  return r


def _wins(rows):
  wins = sorted(r["wins"] for r in rows)
  return f"{wins[0]}-{wins[-1]}" if wins[0] != wins[-1] else f"{wins[0]}"


def _range(values, digits=3):
  return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def _checks(*path):
  """{candidate: its training check} of the summary.json under pretrained/<path>."""
  with open(os.path.join(PRETRAINED, *path, "summary.json")) as f:
    return {k: c.get("training_check") for k, c in json.load(f)["candidates"].items()}


# The Status section.


def test_status_bn_family_bullet_is_the_fig6_seed_6_app_f_and_search_evaluations(found, readme):
  text = _status(readme, "Two thetas outer-trained here")
  # Fig. 6's tasks (seed 1).
  train = _rows(found, "fig6", "L_train", "mean_loss", FIG6_TRAIN)
  assert {(r["wins"], r["num_tasks"], r["outcome"]) for r in train} == {
    (20, 20, statistics.LEARNED_AHEAD)
  }
  (p,) = {statistics.format_p(r["p_value"]) for r in train}
  assert f"a lower mean training loss on 20 of 20 tasks against each (sign test p = {p})" in text
  final = _rows(found, "fig6", "L_valid", "final_test_loss", FIG6_VALID)
  average = _rows(found, "fig6", "L_valid", "mean_test_loss", FIG6_VALID)
  largest_p = statistics.format_p(max(r["p_value"] for r in final))
  assert {r["outcome"] for r in final + average} == {statistics.LEARNED_AHEAD}
  assert (
    f"a lower test loss at the last step on {_wins(final)} of 20 (p = {largest_p} or less) and "
    f"averaged over the run on {_wins(average)} of 20; every one of these mean differences has "
    "its 95% bootstrap interval above zero"
  ) in text
  # Seed 6's tasks.
  train = _rows(found, "fig6_seed_6", "L_train", "mean_loss", FIG6_TRAIN)
  final = _rows(found, "fig6_seed_6", "L_valid", "final_test_loss", FIG6_VALID)
  assert {r["outcome"] for r in train + final} == {statistics.LEARNED_AHEAD}
  assert (
    f"the L_train theta wins {_wins(train)} of 20 against each, the L_valid theta's final test "
    f"loss {_wins(final)} of 20, every interval above zero"
  ) in text
  # App. F's searched rules.
  sgdm = _one(found, "app_f", "L_valid", "final_test_loss", "sgdm+reg+decay (L_valid)")
  assert sgdm["outcome"] == statistics.BASELINE_AHEAD
  assert (
    f"SGD+momentum+Reg+Decay ends below the L_valid theta on final test loss "
    f"({sgdm['baseline_mean_loss']:.3f} against {sgdm['learned_mean_loss']:.3f}; the theta wins "
    f"{statistics.claim(sgdm)})"
  ) in text
  rmsprop = _one(found, "app_f", "L_valid", "final_test_loss", "rmsprop+reg+decay (L_valid)")
  assert rmsprop["outcome"] == statistics.NOT_RESOLVED
  assert "and RMSProp+Reg+Decay level with it" in text
  faster = [
    r for learned in ("L_train", "L_valid") for r in _rows(found, "app_f", learned, "mean_loss")
  ]
  assert len(faster) == 4 and {r["outcome"] for r in faster} == {statistics.LEARNED_AHEAD}
  lowest = _rows(found, "app_f", "L_valid", "mean_test_loss")
  assert {r["outcome"] for r in lowest} == {statistics.LEARNED_AHEAD}
  assert (
    f"both thetas still train faster than both ({_wins(faster)} of 20), and the L_valid theta's "
    f"test loss averaged over the run stays the lowest ({_wins(lowest)} of 20)"
  ) in text
  # The 1,000-configuration search, on seed 6's tasks.

  def searched(learned, metric, objective):
    return _one(found, "fig6_adam_reg_decay_1000", learned, metric, f"adam+reg+decay ({objective})")

  slow = searched("L_train", "mean_loss", "L_train")
  below = searched("L_valid", "final_test_loss", "L_valid")
  fast = searched("L_valid", "mean_loss", "L_train")
  average = searched("L_valid", "mean_test_loss", "L_valid")
  assert {slow["outcome"], below["outcome"]} == {statistics.BASELINE_AHEAD}
  assert {fast["outcome"], average["outcome"]} == {statistics.LEARNED_AHEAD}
  # A claim the baseline leads ends ", baseline ahead".
  assert f"faster than the L_train theta, which wins {statistics.claim(slow)}, and its" in text
  assert f"ends below the L_valid theta, {statistics.claim(below)};" in text
  assert f"trains faster than the L_train winner, {statistics.claim(fast)}, and keeps" in text
  assert f"the lower test loss averaged over the run, {statistics.claim(average)}" in text


def test_status_papers_family_bullet_is_the_5_init_evaluation(found, readme):
  text = _status(readme, "On the paper's own family")
  train = _rows(found, "paper_family_5_inits", "L_train", "mean_loss", FIG6_TRAIN)
  assert len(train) == 4 and {(r["wins"], r["num_tasks"]) for r in train} == {(20, 20)}
  (p,) = {statistics.format_p(r["p_value"]) for r in train}
  assert (
    "the L_train theta's mean training loss is lower on 20 of 20 against LR-tuned Adam, RMSProp, "
    f"SGD+momentum and the searched Adam+Reg+Decay (p = {p} each)"
  ) in text
  final = {
    r["baseline"].split(" ")[0]: r
    for r in _rows(found, "paper_family_5_inits", "L_valid", "final_test_loss", FIG6_VALID)
  }
  assert {final[k]["wins"] for k in ("sgdm", "adam+reg+decay")} == {20}
  assert {r["outcome"] for r in final.values()} == {statistics.LEARNED_AHEAD}

  def rest(r):  # "(p = ...; difference ...)" of a claim.
    return statistics.claim(r).split(" of 20 ", 1)[1]

  assert (
    f"the L_valid theta's final test loss on {final['adam']['wins']} of 20 against Adam "
    f"{rest(final['adam'])}, SGD+momentum and Adam+Reg+Decay and on {final['rmsprop']['wins']} of "
    f"20 against RMSProp {rest(final['rmsprop'])}"
  ) in text
  refined = {
    (r["learned"], r["metric"]): r
    for r in found
    if r["evaluation"] == "paper_family_5_inits" and "refined" in r["baseline"]
  }
  fast = refined[("L_train", "mean_loss")]
  assert f"the L_train theta still trains faster on {statistics.claim(fast)}" in text
  thin = refined[("L_valid", "final_test_loss")]
  assert (
    f"lower by a thin margin ({thin['learned_mean_loss']:.3f} against "
    f"{thin['baseline_mean_loss']:.3f}; {statistics.claim(thin)})"
  ) in text
  at_1_init = _one(
    found,
    "paper_family",
    "L_valid",
    "final_test_loss",
    "adam (refined lr, beta1, eps, tuned per task on valid loss)",
  )
  assert at_1_init["baseline_mean_loss"] < at_1_init["learned_mean_loss"]
  assert at_1_init["outcome"] == statistics.NOT_RESOLVED
  assert "at 1 init that Adam was ahead, not resolved" in text


# "Set up and run".


def test_set_up_papers_family_paragraph_is_its_runs_evaluator_and_the_main_job(found, readme):
  text = _flat(readme.split("The main job stays on App. H's", 1)[1].split("Flags say where", 1)[0])
  main = files.read_jsonl(os.path.join(PRETRAINED, "main_job", "progress.jsonl"))
  adam = _one(found, "main_job", "learned", "mean_loss", f"adam {TRAIN}")
  assert adam["outcome"] == statistics.LEARNED_AHEAD
  assert f"where its {main[-1]['outer_step']} outer steps pass tuned Adam" in text
  run = os.path.join(PRETRAINED, "generated_cnn_train")
  evaluations = files.read_jsonl(os.path.join(run, "evaluation_progress.jsonl"))
  with open(os.path.join(run, "evaluation_reference.json")) as f:
    reference = json.load(f)
  assert reference["metric"] == "mean_train_loss" and reference["objective"] == "train"
  (first,) = [e for e in evaluations[:2] if e["outer_step"] > 0]
  assert evaluations[0]["outer_step"] == 0
  for split in ("outer_train", "outer_test"):
    assert evaluations[0][split]["mean_train_loss"] > reference[split]["mean_train_loss"]
    assert first[split]["mean_train_loss"] < reference[split]["mean_train_loss"]
  progress = files.read_jsonl(os.path.join(run, "progress.jsonl"))
  (at,) = [r for r in progress if r["outer_step"] == first["outer_step"]]
  assert (
    f"the L_train run had passed tuned Adam by its outer step {first['outer_step']}, the first it "
    f"evaluated after 0: {at['elapsed_seconds'] / 60:.0f} minutes into a run"
  ) in text
  assert f"more than the main job's {main[-1]['elapsed_seconds'] / 60:.1f} minutes" in text


# The results table's rows.


def test_fig2_row_starts_the_adam_runs_spread_at_its_first_step(readme):
  with gzip.open(os.path.join(FIGURES, "fig2d_trajectories.json.gz"), "rt") as f:
    spread = json.load(f)["relative_spread"]
  assert f"Adam runs' relative spread {spread[1]:.3f} -> {spread[40]:.2f}" in _row(readme, "Fig. 2")


def test_fig6ab_row_l_train_final_test_loss_and_the_ledger(found, readme):
  row = _row(readme, "Fig. 6a, b")
  rows = _rows(found, "fig6", "L_train", "final_test_loss", FIG6_VALID)
  assert all(r["learned_mean_loss"] > r["baseline_mean_loss"] for r in rows)
  assert (
    f"the L_train theta ends above every baseline on final test loss "
    f"({rows[0]['learned_mean_loss']:.3f} against "
    f"{_range([r['baseline_mean_loss'] for r in rows])})"
  ) in row
  with open(os.path.join(PRETRAINED, "ledger.json")) as f:
    ledger = json.load(f)
  (violation,) = [v for v in ledger["known_violations"] if v["evaluation"] == "Fig. 6"]
  assert "its tasks 0-3" in violation["reason"]
  assert "these are seed 1's tasks, 0-3 of which also served a choice (the ledger)" in row


def test_fig6c_row_the_100_configuration_winners_decay(readme):
  for objective in ("L_train", "L_valid"):
    path = os.path.join(PRETRAINED, "fig6", f"adam_reg_decay_{objective}")
    with open(os.path.join(path, "results.jsonl")) as f:
      records = [json.loads(line) for line in f if line.strip()][1:]
    ranked = sorted((r for r in records if np.isfinite(r["mean"])), key=lambda r: r["mean"])
    with open(os.path.join(path, "best.json")) as f:
      assert json.load(f)["best"]["adam"]["id"] == ranked[0]["id"]

    def decays(r):
      return bool(r["hparams"]["linear_decay"] or r["hparams"]["exponential_decay"])

    assert not decays(ranked[0]) and decays(ranked[1]), objective
  assert "(both searches' winner uses no decay; the best decayed configuration is second)" in (
    _row(readme, "Fig. 6c")
  )


def test_fig6_on_the_papers_family_row_search_means_and_seed_study(found, readme):
  row = _row(readme, "Fig. 6 on Sec. 4.2's CNN")
  for learned, metric, objective, words in (
    ("L_train", "mean_loss", "L_train", "L_train mean training loss"),
    ("L_valid", "final_test_loss", "L_valid", "L_valid final test loss"),
  ):
    r = _one(found, "paper_family_adam_reg_decay", learned, metric, f"adam+reg+decay ({objective})")
    assert (
      f"{words} {r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f} "
      f"({statistics.claim(r)})"
    ) in row
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family_seeds.json")) as f:
    study = json.load(f)["paper_family"]
  adam = study["reference"]["outer_test"]["mean_train_loss"]
  firsts = []
  for run in study["seeds"].values():
    below = [r for r in run["records"] if r["outer_test"]["mean_train_loss"] < adam]
    if below:
      firsts.append(below[0]["outer_step"])
  firsts.sort()
  assert len(firsts) == 2 and len(study["seeds"]) == 3
  assert (
    f"{len(firsts)} of {len(study['seeds'])} L_train seeds leave the plateau and pass LR-tuned "
    f"Adam (outer steps {firsts[0]} and {firsts[1]}), the third stays on it"
  ) in row


def _quickstart_crossings():
  with open(os.path.join(testing_utils.REPO, "docs", "quickstart_seeds.json")) as f:
    study = json.load(f)["quickstart"]
  adam = study["reference"]["outer_test"]["mean_train_loss"]
  firsts = []
  for run in study["seeds"].values():
    below = [r for r in run["records"] if r["outer_test"]["mean_train_loss"] < adam]
    firsts.append(below[0]["outer_step"])
  return len(study["seeds"]), min(firsts), max(firsts)


def test_app_h_and_main_job_rows_name_the_quickstart_seeds_crossings(readme):
  n, first, last = _quickstart_crossings()
  assert (
    f"{n} of {n} quickstart seeds pass LR-tuned Adam on outer-test tasks by outer step {last}"
  ) in _row(readme, "App. H")
  assert f"pass the crossing its seeds show at {first}-{last}" in _row(
    readme, "Fig. 6 at 10 minutes"
  )


def test_app_e_row_training_checks_and_capped_losses_are_the_app_e_summaries(found, readme):
  row = _flat(_row(readme, "App. E"))
  generated = shipped.GENERATED_PROBLEMS
  # The paper-family thetas on every generated-data problem they were run on.
  paper = [
    _checks("app_e", p, "cnn")[n]
    for p in generated
    if os.path.exists(os.path.join(PRETRAINED, "app_e", p, "cnn"))
    for n in ("cnn_train", "cnn_valid")
  ]
  runs, trained = sum(c["runs"] for c in paper), sum(c["trained"] for c in paper)
  assert {c["diverged"] for c in paper} == {0}
  assert f"the paper-family thetas train {trained} of {runs} runs on the generated-data" in row
  for thetas in ("bn_cnn", "bn_cnn_gated"):
    checks = _checks("app_e", "mlp_3x128", thetas)
    assert {checks[n]["diverged"] for n in ("L_train", "L_valid")} == {5}, thetas
  # The mixed theta.
  mixed = [_checks("app_e", p, "mixed")["mixed"] for p in generated]
  runs = sum(c["runs"] for c in mixed)
  assert sum(c["trained"] for c in mixed) == runs
  assert f"trains all {runs} runs on them" in row
  decayed = _checks("app_e", "digits_mlp_2x32", "mixed_past_horizon_decay")["mixed"]
  assert decayed["trained"] == decayed["runs"] == 2 and "both digits runs" in row
  slow = [_one(found, f"app_e/{p}/mixed", "mixed", "mean_loss", f"adam {TRAIN}") for p in generated]
  assert {(r["wins"], r["num_tasks"]) for r in slow} == {(0, 5)}
  assert "(0 of 5 tasks on each;" in row
  # The relative cap at use time.
  four = ("L_train", "L_valid", "cnn_train", "cnn_valid")
  capped = [_checks("app_e", p, "capped")[n] for p in generated[:6] for n in four]
  runs = sum(c["runs"] for c in capped)
  assert sum(c["trained"] for c in capped) == runs
  assert f"train every convnet problem ({runs} of {runs} runs)" in row
  digits = [
    _checks("app_e", f"digits_conv{n}", "capped_past_horizon_decay")[t]
    for n in (3, 6)
    for t in (*four, "mixed")
  ]
  runs = sum(c["runs"] for c in digits)
  assert sum(c["trained"] for c in digits) == runs
  as_trained = [
    _checks("app_e", "digits_conv3", thetas)[n]
    for thetas, names in (("bn_cnn", four[:2]), ("cnn", four[2:]))
    for n in names
  ]
  assert (
    f"with the mixed theta ({runs} of {runs}; as outer-trained "
    f"{sum(c['trained'] for c in as_trained)} of {sum(c['runs'] for c in as_trained)} runs on "
    "the 3-layer one)"
  ) in row
  final = [
    _one(
      found,
      "app_e/digits_mlp_2x32/capped_past_horizon_decay",
      n,
      "final_test_loss",
      f"adam {VALID}",
    )
    for n in four[:2]
  ]
  assert all(r["learned_mean_loss"] < r["baseline_mean_loss"] for r in final)
  assert (
    f"(final test loss {final[0]['learned_mean_loss']:.3f} and {final[1]['learned_mean_loss']:.3f}"
    f" against Adam's {final[0]['baseline_mean_loss']:.3f}, one task)"
  ) in row
  price = [
    _one(found, "app_e/cnn_batch_norm/capped", n, "mean_loss", f"adam {TRAIN}") for n in four[:2]
  ]
  assert {r["wins"] for r in price} == {0}
  assert (
    f"costs them their lead in family ({price[0]['learned_mean_loss']:.3f} and "
    f"{price[1]['learned_mean_loss']:.3f} against {price[0]['baseline_mean_loss']:.3f})"
  ) in row


def test_app_f_row_on_fig6s_tasks_is_the_app_f_evaluation(found, readme):
  row = _row(readme, "App. F")
  train = sorted(_rows(found, "app_f", "L_train", "mean_loss"), key=lambda r: r["baseline"])
  assert [r["baseline"].split("+")[0] for r in train] == ["rmsprop", "sgdm"]
  assert {(r["wins"], r["outcome"]) for r in train} == {(19, statistics.LEARNED_AHEAD)}
  assert (
    f"mean training loss {train[0]['learned_mean_loss']:.3f} (L_train theta) against "
    f"{train[0]['baseline_mean_loss']:.3f} and {train[1]['baseline_mean_loss']:.3f} (19 of 20 "
    "each)"
  ) in row
  final = sorted(_rows(found, "app_f", "L_valid", "final_test_loss"), key=lambda r: r["baseline"])
  assert (
    f"L_valid theta final test loss {final[0]['learned_mean_loss']:.3f} against "
    f"RMSProp+Reg+Decay's {final[0]['baseline_mean_loss']:.3f} ({statistics.claim(final[0])}) "
    f"and SGD+momentum+Reg+Decay's {final[1]['baseline_mean_loss']:.3f} "
    f"({statistics.claim(final[1])})"
  ) in row
  average = sorted(_rows(found, "app_f", "L_valid", "mean_test_loss"), key=lambda r: r["baseline"])
  assert {(r["wins"], r["outcome"]) for r in average} == {(20, statistics.LEARNED_AHEAD)}
  assert (
    f"mean test loss {average[0]['learned_mean_loss']:.3f} against "
    f"{average[0]['baseline_mean_loss']:.3f} and {average[1]['baseline_mean_loss']:.3f} (20 of "
    "20 each)"
  ) in row


def test_fig8_row_fixed_10_led_at_the_first_budget(readme):
  results = {}
  for name in ("ablations", "ablations_at_20k"):
    path = os.path.join(testing_utils.REPO, "docs", "ablations_small", f"{name}.json")
    with open(path) as f:
      results[name] = json.load(f)
  early = results["ablations_at_20k"]
  assert early["results"]["fixed_10"]["median"] < early["results"]["merged"]["median"]
  assert f"(fixed 10 led at {early['max_inner_steps']:,} inner steps)" in _row(readme, "Fig. 8")


def test_app_f_row_sgdm_winner_anneals_to_its_best_json():
  with open(os.path.join(PRETRAINED, "app_f", "L_valid", "best.json")) as f:
    best = json.load(f)["best"]["sgdm"]
  percent = 100 * search_space.final_fraction(best["hparams"], 500)
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    row = _row(f.read(), "App. F")
  assert f"whose winner anneals its learning rate to {percent:.1f}% at the horizon" in row


def test_faults_row_is_the_soak_run(readme):
  with open(os.path.join(testing_utils.REPO, "benchmarks", "results", "soak.json")) as f:
    run = json.load(f)
  assert not run["not_recovered"] and run["steps_each_once_in_order"]
  assert run["no_sample_applied_twice"] and run["theta_export_equals_last_checkpoint"]
  assert set(run["exit_statuses"].values()) == {0}
  slowest = max(max(secs) for secs in run["recovery_secs_by_kind"].values())
  assert (
    f"{run['duration_secs'] // 60}-minute soak, {run['faults']} faults (chief and worker kills, "
    "partitions of workers and of the chief, link flapping, a full disk): all recovered (within "
    f"{slowest:.1f} s), {run['final_outer_step']:,} outer steps each once"
  ) in _row(readme, "beyond: faults")


def test_outer_training_speed_row_is_the_outer_step_profile(readme):
  with open(
    os.path.join(testing_utils.REPO, "benchmarks", "results", "outer_step_profile_quickstart.json")
  ) as f:
    profile = json.load(f)
  assert profile["gin_bindings"] == []  # One intra-op thread, the default.
  parts = profile["parts_seconds_per_outer_step"]
  truncation = ("+ and - unrolls forward", "backward pass and ES")
  outside = sum(v for k, v in parts.items() if k not in truncation)
  backward = parts["backward pass and ES"] / sum(parts[k] for k in truncation)
  assert round(3 * backward) == 2
  assert (
    f"{outside / profile['seconds_per_outer_step']:.0%} of a step is outside the compiled "
    "truncation, whose backward pass is 2/3"
  ) in _row(readme, "beyond: outer-training speed")


# docs/pathologies.md.


def _figure(name):
  with gzip.open(os.path.join(FIGURES, f"{name}.json.gz"), "rt") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def pathologies():
  with open(os.path.join(testing_utils.REPO, "docs", "pathologies.md")) as f:
    return f.read()


def _pathologies_section(text, title):
  return _flat(text.split(f"## {title}", 1)[1].split("\n## ", 1)[0])


def _about(seconds):
  """A run's time as the table prints it: seconds below 100 s, minutes above."""
  return f"~{round(seconds)} s" if seconds < 100 else f"~{round(seconds / 60)} min"


def test_pathologies_times_are_the_runs_seconds(pathologies):
  table = {
    line.split("|")[2].strip(): line.split("|")[4].strip()
    for line in pathologies.splitlines()
    if line.startswith("| ") and ".gin` |" in line
  }
  assert "(the `seconds` of its JSON)" in pathologies
  for name in (
    "fig2_toy_momentum",
    "fig2_toy_lr_momentum",
    "fig2_toy_lr",
    "exploding_lr_gradient",
    "fig2d_trajectories",
    "fig2ef_outer_loss_slices",
    "fig3_truncation_bias",
  ):
    assert table[f"`{name}.gin`"] == _about(_figure(name)["seconds"]), name
  app_g = {
    _about(_figure(n)["seconds"])
    for n in (
      "appg_adam_lr1e-1",
      "appg_adam_lr1e-1_beta1_0",
      "appg_adam_lr1e-2",
      "appg_adam_lr1e-2_beta1_0",
      "appg_sgd_lr1",
      "appg_sgd_lr1e-1",
    )
  }
  (each,) = app_g
  assert table["`appg_*.gin`"] == f"{each} each"
  minutes = each.removeprefix("~").removesuffix(" min")
  assert f"`gin/figures/appg_*.gin`, ~{minutes} minutes each;" in _flat(pathologies)


def _regimes(name):
  """Where the toy's runs end at the longest T along the grid: (the first theta that reaches the
  global minimum, the first after it that does not, the last that does not diverge), with the
  labels of runs_basins (0: w = 0, 1: w = 3.569, 3: diverged)."""
  result = _figure(name)
  thetas = np.asarray(result["thetas"])
  w = np.asarray(result["final_w"][-1], dtype=float)
  minima, radius = result["minima"], result["basin_radius"]
  finite = np.isfinite(w) & (np.abs(w) <= result["max_abs_w"])
  at_zero = finite & (np.abs(w - minima[0]) < radius)
  at_global = finite & (np.abs(w - minima[1]) < radius)
  first = int(np.argmax(at_global))
  assert at_zero[:first].all()  # Every smaller theta stays at w = 0.
  end = first + int(np.argmax(~at_global[first:]))
  return result, thetas, w, thetas[first], thetas[end], thetas[finite].max()


def test_pathologies_toy_regimes_are_their_runs(pathologies):
  section = _pathologies_section(pathologies, "Fig. 2a-c and App. B: the toy loss with two minima")
  _, _, _, first, end, _ = _regimes("fig2_toy_momentum")
  assert (
    f"momentum below {first:.2f} stays at w = 0, {first:.2f}-{end:.2f} reaches w = 3.569, "
    f"above {end:.2f} the runs oscillate"
  ) in section
  _, _, _, first, end, last = _regimes("fig2_toy_lr_momentum")
  assert (
    f"w = 0 below lr {first:.2g}, the global minimum up to {end:.2g}, then a mixture of either "
    f"minimum and divergence up to {last:.2g}, and divergence above"
  ) in section
  result, thetas, w, first, end, last = _regimes("fig2_toy_lr")
  # The 2-cycle: runs of the global minimum's basin that do not settle on it.
  settled = np.abs(w - result["minima"][1]) < 1e-3
  in_basin = np.abs(w - result["minima"][1]) < result["basin_radius"]
  cycle = thetas[in_basin & ~settled].min()
  assert (
    f"w = 0 below lr {first:.2g}, the global minimum up to {end:.2g} (a 2-cycle around it above "
    f"{cycle:.2g}), either minimum in ever finer bands up to {last:.2g}, divergence above"
  ) in section
  at_longest = result["max_abs_dloss_dtheta"][-1]
  assert result["num_steps"][-1] == 1000
  assert f"the 2-cycle keeps it ~1e{math.floor(math.log10(at_longest))} even at T = 1000" in (
    section
  )


def test_pathologies_app_a_bounds_are_its_run(pathologies):
  section = _pathologies_section(
    pathologies, "Sec. 2.3 and App. A: the exploding gradient of a learned learning rate"
  )
  result = _figure("exploding_lr_gradient")
  decaying = [
    abs(row[-1])
    for lr, row in zip(result["learning_rates"], result["dloss_dtheta"], strict=True)
    if lr <= 1.9
  ]
  assert (
    f"against {testing_utils.sci(max(decaying))} to {testing_utils.sci(min(decaying))} for "
    "lr <= 1.9"
  ) in section
  gaps = {
    f"{m - p:+.3f}"
    for m, p in zip(result["measured_slope"], result["predicted_slope"], strict=True)
  }
  (gap,) = gaps
  assert f"The remaining {gap} in every row" in section


def test_pathologies_fig2d_and_fig2ef_ratios_are_their_runs(pathologies):
  trajectories = _figure("fig2d_trajectories")
  section = _pathologies_section(pathologies, "Fig. 2d: diverging trajectories")
  assert f"{trajectories['relative_lr_spread']:.3f}" == f"{trajectories['relative_spread'][1]:.3f}"
  assert f"every run's {trajectories['num_params']:,} parameters" in section
  slices = _figure("fig2ef_outer_loss_slices")
  section = _pathologies_section(
    pathologies, "Fig. 2e-f: slices of a learned optimizer's outer-loss surface"
  )
  second = slices["line_mean_abs_second_difference"]
  laplacian = slices["grid_mean_abs_laplacian"]
  assert f"T = 5, 10, 20 (x{round(second[-1] / second[0])})" in section
  assert f"{laplacian[-1]:.3f}, x{laplacian[-1] / laplacian[0]:.1f})" in section


def test_the_ci_timing_sentence_is_its_committed_run():
  with open(os.path.join(testing_utils.REPO, "benchmarks", "results", "ci_time.json")) as f:
    found = json.load(f)
  assert found["exit_status"] == 0 and found["machine"]["cpus"] == 2
  assert set(found["pytest_counts"]) <= {"passed", "warning", "warnings", "skipped"}
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  passed = found["pytest_counts"]["passed"]
  assert (
    f"from a fresh clone of commit {found['commit'][:7]} on this 2-core machine with nothing else "
    f"running, `bash .ci/run` took {found['seconds'] / 60:.1f} minutes, "
    f"{found['pytest_seconds'] / 60:.1f} of them the tests ({passed:,} passed; "
    f"{found['cpu_seconds'] / 60:.1f} CPU-minutes)"
  ) in text
  assert found["load_average_before"][0] < 2  # The machine was otherwise idle.
