"""docs/evaluation.md's measured numbers, against the committed files they come from.

The tables of the out-of-family evaluations and the main job's learned cells are checked by
tests/test_docs_numbers.py; this file checks the rest of the page, paragraph by paragraph, to the
precision it prints: the prose under each App. E table (pretrained/out_of_family/, pretrained/app_e/
and its update probe, recomputed by evaluation/shipped.py and the summaries' training checks), the
mixed theta's run (its progress.jsonl), the quickstart comparison's Adam column and accuracies
(pretrained/main_job/), the refined Adam (pretrained/paper_family/, pretrained/fig6/), the
benchmark of runs made two at a time (benchmarks/results/), the seed study the quickstart's
theta is read against (docs/quickstart_seeds.json) and the ledger's overlaps
(pretrained/ledger.json).
"""

import gzip
import json
import math
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import shipped, statistics
from task_specific_learned_opt.optimizers import hand_designed

from . import testing_utils

TRAIN = "(lr tuned per task on train loss)"
VALID = "(lr tuned per task on valid loss)"
PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
# App. E's problems on the generated family (pretrained/app_e/<problem>/), and its convnets.
GENERATED = shipped.GENERATED_PROBLEMS
CONVNETS = GENERATED[:6]
METRICS = ("mean_loss", "mean_test_loss", "final_test_loss")
BATCH_NORMED = ("L_train", "L_valid")
PAPER_FAMILY = ("cnn_train", "cnn_valid")


@pytest.fixture(scope="module")
def found():
  return shipped.records()


@pytest.fixture(scope="module")
def doc():
  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    return f.read()


def _flat(text):
  return re.sub(r"\s+", " ", text)


def _lines(doc, title):
  """The text under the heading `title`, up to the next heading."""
  after = re.split(rf"^#{{2,4}} {re.escape(title)}\n", doc, maxsplit=1, flags=re.M)[1]
  return re.split(r"^#{2,4} ", after, maxsplit=1, flags=re.M)[0]


def _section(doc, title):
  """The text under the heading `title`, its whitespace flattened (sentences wrap)."""
  return _flat(_lines(doc, title))


def _adam(found, evaluation, learned, metric, kind="adam"):
  """The comparison of `learned` with `kind` tuned per task on the metric's objective."""
  objective = TRAIN if metric == "mean_loss" else VALID
  (r,) = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["metric"], r["baseline"])
    == (evaluation, learned, metric, f"{kind} {objective}")
  ]
  return r


def _pair(r):
  return f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"


def _summary(*path):
  with open(os.path.join(PRETRAINED, *path, "summary.json")) as f:
    return json.load(f)


def _checks(*path):
  """{candidate: its training check} of the summary under pretrained/<path>."""
  return {k: c.get("training_check") for k, c in _summary(*path)["candidates"].items()}


def _range(values, digits=3):
  return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def test_runs_at_once_is_the_final_comparisons_benchmark(doc):
  path = os.path.join(
    testing_utils.REPO, "benchmarks", "results", "final_comparison_quickstart.json"
  )
  with open(path) as f:
    benchmark = json.load(f)
  assert benchmark["same_numbers"]
  speedup = benchmark["speedup_vs_first"]["2"]
  assert (
    f"so on 2 cores the quickstart's comparison two at a time finishes about {speedup:.1f}x sooner"
  ) in _flat(doc)


def test_the_sign_test_floor_at_5_tasks_is_the_sign_tests(doc):
  floor = statistics.sign_test_p(5, 0)
  assert all(statistics.sign_test_p(w, 5 - w) >= floor for w in range(6))
  assert f"With 5 tasks no count gives a sign test p below {floor:g} (5 of 5)" in _flat(doc)
  quickstart = _section(doc, "The quickstart's final comparison")
  assert f"At 5 tasks no count gives a sign test p below {statistics.format_p(floor)}." in (
    quickstart
  )


def test_out_of_family_bullets_are_the_seed_1_comparisons(found, doc):
  text = _section(doc, "Out of the shipped thetas' family (App. E, Fig. 7)")
  steps = []
  for name in ("generated_bn_cnn_train", "generated_bn_cnn_valid"):
    with open(os.path.join(PRETRAINED, name, "card.json")) as f:
      steps.append(json.load(f)["outer_steps"])
  assert f"thetas outer-trained for {min(steps)}-{max(steps)} steps" in text

  def one(problem, learned, metric):
    return _adam(found, f"out_of_family/{problem}", learned, metric)

  claim = statistics.claim
  # Width.
  train8, train32 = (one(p, "L_valid", "mean_loss") for p in ("cnn_8_channels", "cnn_32_channels"))
  test8, test32 = (
    one(p, "L_valid", "mean_test_loss") for p in ("cnn_8_channels", "cnn_32_channels")
  )
  final8, final32 = (
    one(p, "L_valid", "final_test_loss") for p in ("cnn_8_channels", "cnn_32_channels")
  )
  assert {train8["outcome"], train32["outcome"]} == {statistics.LEARNED_AHEAD}
  assert (
    "the L_valid theta trains the 8- and 32-channel CNNs faster than tuned Adam "
    f"({claim(train8)} and {claim(train32)})"
  ) in text
  assert f"on 8 channels {claim(test8)}; on 32, {claim(test32)}." in text
  assert f"level with Adam on 8 channels ({_pair(final8)}: {claim(final8)})" in text
  assert f"behind on 32 ({_pair(final32)}: {claim(final32)})" in text
  # Depth.
  deep = one("cnn_6_layers", "L_train", "mean_loss")
  assert deep["wins"] == 0
  assert f"the L_train theta is behind Adam on every task ({claim(deep)})" in text
  deep_train = one("cnn_6_layers", "L_valid", "mean_loss")
  deep_final = one("cnn_6_layers", "L_valid", "final_test_loss")
  assert f"training loss {claim(deep_train)}, last step {claim(deep_final)}" in text
  # No batch norm.
  wins = one("cnn_no_batch_norm", "L_train", "mean_loss")
  loses = one("cnn_no_batch_norm", "L_valid", "mean_loss")
  assert (wins["wins"], loses["wins"]) == (5, 0)
  assert (
    f"the L_train theta beats Adam on all 5 tasks ({_pair(wins)} mean training loss: "
    f"{claim(wins)}), the L_valid theta loses on all 5 ({claim(loses)})"
  ) in text
  # Smaller images.
  small = [one("images_16x16", "L_valid", m) for m in ("mean_loss", "mean_test_loss")]
  small_final = one("images_16x16", "L_valid", "final_test_loss")
  assert (
    f"hold for the L_valid theta on training loss ({claim(small[0])}) and mean test loss "
    f"({claim(small[1])}), not at the last step ({claim(small_final)})"
  ) in text
  # The MLP: the L_train theta at chance (ln 10 for 10 classes).
  chance = one("mlp_2x32", "L_train", "mean_loss")["learned_mean_loss"]
  assert abs(chance - math.log(10)) < 0.05
  assert f"the L_train theta stays at chance, {chance:.2f};" in text


def test_app_e_what_it_shows_is_the_seed_4_and_digits_summaries(found, doc):
  text = _section(doc, "Every shipped theta, on fresh tasks and on real digits")
  text = text.split("What it shows:", 1)[1].split("So the bar of a theta", 1)[0]

  def one(path, learned, metric):
    return _adam(found, f"app_e/{path}", learned, metric)

  # In family: the gate moves the batch-normed thetas' training loss by less than 0.01.
  for learned in BATCH_NORMED:
    plain = one("cnn_batch_norm/bn_cnn", learned, "mean_loss")
    gated = one("cnn_batch_norm/bn_cnn_gated", learned, "mean_loss")
    assert plain["wins"] == gated["wins"] == 5
    assert abs(plain["learned_mean_loss"] - gated["learned_mean_loss"]) < 0.01
  assert "the growth gate changes their training loss by less than 0.01" in text
  # The MLPs.
  for problem in ("mlp_2x32", "mlp_3x128"):
    for thetas, names in (("bn_cnn", BATCH_NORMED), ("bn_cnn_gated", BATCH_NORMED)):
      for learned in names:
        assert one(f"{problem}/{thetas}", learned, "mean_loss")["wins"] == 0
    for learned in PAPER_FAMILY:
      assert one(f"{problem}/cnn", learned, "mean_loss")["wins"] == 0
  assert "(0 of 5 everywhere)" in text
  small, large = _checks("app_e", "mlp_2x32", "bn_cnn"), _checks("app_e", "mlp_3x128", "bn_cnn")
  assert f"the L_valid theta on {small['L_valid']['diverged']} of 5 runs of the 2x32 MLP" in text
  assert {large[n]["diverged"] for n in BATCH_NORMED} == {5}
  assert "both on all 5 of the 3x128 one" in text
  small, large = (_checks("app_e", p, "bn_cnn_gated") for p in ("mlp_2x32", "mlp_3x128"))
  assert {small[n]["trained"] for n in BATCH_NORMED} == {5}
  assert all(large[n]["diverged"] > 0 for n in BATCH_NORMED)
  assert "with the gate both train the 2x32 MLP on 5 of 5 runs but still diverge" in text
  trained, losses, adam = [], [], []
  for problem in ("mlp_2x32", "mlp_3x128"):
    checks = _checks("app_e", problem, "cnn")
    assert {checks[n]["diverged"] for n in PAPER_FAMILY} == {0}
    trained.append(sum(checks[n]["trained"] for n in PAPER_FAMILY))
    rows = [one(f"{problem}/cnn", n, "mean_loss") for n in PAPER_FAMILY]
    losses += [r["learned_mean_loss"] for r in rows]
    adam.append(rows[0]["baseline_mean_loss"])
  assert (
    f"train both MLPs on {min(trained)}-{max(trained)} of 10 runs without a divergence, slowly "
    f"(mean training loss {_range(losses, 2)} against Adam's {_range(adam, 2)})"
  ) in text
  # The real digits.
  for thetas in ("bn_cnn", "bn_cnn_gated", "cnn"):
    checks = _checks("app_e", "digits_mlp_2x32", thetas)
    for name, check in checks.items():
      if name.startswith("adam"):
        assert check["trained"] == 2
      else:
        assert check["diverged"] >= 1
        assert check["trained"] == (name == "L_valid" and thetas == "bn_cnn_gated")
  digits = [one("digits_mlp_2x32/cnn", n, "mean_loss") for n in PAPER_FAMILY]
  assert (
    f"(run means {digits[0]['learned_mean_loss']:.3f} and {digits[1]['learned_mean_loss']:.3f} "
    f"against Adam's {digits[0]['baseline_mean_loss']:.3f})"
  ) in text
  # The convnets, the paper-family thetas.
  for problem in ("images_16x16", "cnn_8_channels", "cnn_32_channels", "cnn_6_layers"):
    checks = _checks("app_e", problem, "cnn")
    assert {checks[n]["trained"] for n in PAPER_FAMILY} == {5}, problem

  def means(problem, metric):
    rows = [one(f"{problem}/cnn", n, metric) for n in PAPER_FAMILY]
    learned = " and ".join(f"{r['learned_mean_loss']:.3f}" for r in rows)
    return rows, learned, f"{rows[0]['baseline_mean_loss']:.3f}"

  rows, train, adam = means("cnn_8_channels", "mean_loss")
  final_rows, final, final_adam = means("cnn_8_channels", "final_test_loss")
  for n in PAPER_FAMILY:
    assert {one("cnn_8_channels/cnn", n, m)["wins"] for m in METRICS} == {0}
  assert (
    f"(mean training loss {train} against {adam}; final test loss {final} against {final_adam})"
  ) in text
  rows, train, adam = means("cnn_32_channels", "mean_loss")
  assert {r["wins"] for r in rows} == {5}
  assert {r["outcome"] for r in rows} == {statistics.LEARNED_AHEAD}
  final_rows, final, final_adam = means("cnn_32_channels", "final_test_loss")
  assert all(r["baseline_mean_loss"] < r["learned_mean_loss"] for r in final_rows)
  assert (
    f"faster than Adam on 5 of 5 tasks each (mean training loss {train} against {adam}, "
    f"intervals above zero), but Adam's final test loss is lower ({final_adam} against {final})"
  ) in text
  rows, train, adam = means("cnn_6_layers", "mean_loss")
  assert {r["outcome"] for r in rows} == {statistics.NOT_RESOLVED}
  final_rows, final, final_adam = means("cnn_6_layers", "final_test_loss")
  assert {(r["wins"], r["ties"]) for r in final_rows} == {(0, 0)}
  assert (
    f"level with Adam on training loss ({train} against {adam}, not resolved), but Adam's final "
    f"test loss is lower on 5 of 5 tasks ({final_adam} against {final})"
  ) in text


def test_the_update_probes_final_test_loss_and_divergences_are_its_summaries(doc):
  text = _section(doc, "Every shipped theta, on fresh tasks and on real digits")
  summaries = {
    p: _summary("app_e", "update_probe", p, "relative") for p in ("mlp_2x32", "mlp_3x128")
  }
  final = [
    np.mean(summaries["mlp_2x32"]["candidates"][n]["per_task"]["final_test_loss"])
    for n in BATCH_NORMED
  ]
  assert f"(final test loss {final[0]:.2f} and {final[1]:.2f} on the 2x32 MLP)" in text
  # Past twice the first value (training_check's divergence) on every run but two.
  diverged = {
    (p, n): s["candidates"][n]["training_check"]["diverged"]
    for p, s in summaries.items()
    for n in BATCH_NORMED
  }
  assert diverged == {
    ("mlp_2x32", "L_train"): 2,
    ("mlp_2x32", "L_valid"): 2,
    ("mlp_3x128", "L_train"): 2,
    ("mlp_3x128", "L_valid"): 0,
  }
  assert "on every run except the L_valid theta's two on the 3x128 MLP" in text


def _minutes(*path):
  """The outer-training minutes of a run's progress.jsonl, over its segments (a resumed run's
  elapsed seconds start again)."""
  records = files.read_jsonl(os.path.join(PRETRAINED, *path, "progress.jsonl"))
  elapsed = [r["elapsed_seconds"] for r in records]
  ends = [a for a, b in zip(elapsed[:-1], elapsed[1:], strict=True) if b < a] + [elapsed[-1]]
  return sum(ends) / 60, records[-1]["outer_step"]


def test_the_mixed_thetas_runs_are_their_progress(doc):
  text = _section(doc, "A theta outer-trained on a mix of App. E's problems")
  minutes, steps = _minutes("mixed_app_e_valid")
  assert f"{steps} outer steps of 8 samples, {minutes:.0f} minutes on 2 cores" in text
  minutes, steps = _minutes("mixed_app_e_valid", "without_relative_cap")
  assert steps == 60
  assert f"`pretrained/mixed_app_e_valid/without_relative_cap/`, {minutes:.0f} minutes)" in text


def test_the_mixed_theta_paragraphs_are_its_summaries(found, doc):
  text = _section(doc, "A theta outer-trained on a mix of App. E's problems")

  def one(path, metric="mean_loss", learned="mixed"):
    return _adam(found, f"app_e/{path}", learned, metric)

  large = one("mlp_3x128/mixed_without_relative_cap")
  small = one("mlp_2x32/mixed_without_relative_cap")
  assert _checks("app_e", "mlp_3x128", "mixed_without_relative_cap")["mixed"]["diverged"] == 5
  assert (
    f"diverged on all 5 runs of the 3x128 MLP (mean training loss "
    f"{large['learned_mean_loss']:.3f} against Adam's {large['baseline_mean_loss']:.3f}) and "
    f"trained the 2x32 MLP slowly ({_pair(small)})"
  ) in text
  checks = [_checks("app_e", p, "mixed")["mixed"] for p in GENERATED]
  assert sum(c["trained"] for c in checks) == sum(c["runs"] for c in checks)
  assert {c["diverged"] for c in checks} == {0}
  assert f"all {sum(c['runs'] for c in checks)} runs on the generated-data problems train" in text
  started = _checks("app_e", "mlp_3x128", "cnn")["cnn_valid"]["trained"]
  assert f"trained {started} of 5 runs of that MLP on seed 4's tasks" in text
  digits = one("digits_mlp_2x32/mixed", "final_test_loss")
  assert _checks("app_e", "digits_mlp_2x32", "mixed")["mixed"]["diverged"] == 2
  assert (
    f"(final test loss {digits['learned_mean_loss']:.3f} against Adam's "
    f"{digits['baseline_mean_loss']:.3f})"
  ) in text
  decayed = one("digits_mlp_2x32/mixed_past_horizon_decay", "final_test_loss")
  assert _checks("app_e", "digits_mlp_2x32", "mixed_past_horizon_decay")["mixed"]["trained"] == 2
  assert f"both runs train (final test loss {_pair(decayed)})" in text
  checks = _checks("app_e", "digits_mlp_2x32", "cnn_past_horizon_decay")
  assert (checks["cnn_valid"]["trained"], checks["cnn_train"]["trained"]) == (2, 1)
  valid = one("digits_mlp_2x32/cnn_past_horizon_decay", "final_test_loss", "cnn_valid")
  assert (
    f"trains both digits runs too ({valid['learned_mean_loss']:.3f}), the L_train theta one of two"
  ) in text
  assert {one(f"{p}/mixed")["wins"] for p in GENERATED} == {0}
  assert "0 of 5 tasks on mean training loss on every problem" in text
  own = one("cnn_no_batch_norm/mixed")
  assert (
    f"(the CNN without batch norm: {own['learned_mean_loss']:.3f} against Adam's "
    f"{own['baseline_mean_loss']:.3f}"
  ) in text


def test_the_capped_thetas_paragraph_is_their_summaries(found, doc):
  text = _section(doc, "Every theta with the relative step cap at use time")
  four = BATCH_NORMED + PAPER_FAMILY

  def one(path, learned, metric="mean_loss"):
    return _adam(found, f"app_e/{path}", learned, metric)

  # Every convnet problem.
  checks = [_checks("app_e", p, "capped")[n] for p in CONVNETS for n in four]
  runs = sum(c["runs"] for c in checks)
  assert sum(c["trained"] for c in checks) == runs and {c["diverged"] for c in checks} == {0}
  assert f"({runs} of {runs} runs, none diverging)" in text
  # The real digits on the 2x32 MLP.
  capped = _checks("app_e", "digits_mlp_2x32", "capped_past_horizon_decay")
  assert {capped[n]["trained"] for n in BATCH_NORMED} == {2}
  assert {_checks("app_e", "digits_mlp_2x32", "bn_cnn")[n]["diverged"] for n in BATCH_NORMED} == {2}
  gated = _checks("app_e", "digits_mlp_2x32", "bn_cnn_gated")
  assert {gated[n]["diverged"] for n in BATCH_NORMED} == {1, 2}
  final = [
    one("digits_mlp_2x32/capped_past_horizon_decay", n, "final_test_loss") for n in BATCH_NORMED
  ]
  assert (
    f"lower final test loss than tuned Adam ({final[0]['learned_mean_loss']:.3f} and "
    f"{final[1]['learned_mean_loss']:.3f} against {final[0]['baseline_mean_loss']:.3f};"
  ) in text
  assert (capped["cnn_valid"]["trained"], capped["cnn_train"]["trained"]) == (2, 1)
  valid = one("digits_mlp_2x32/capped_past_horizon_decay", "cnn_valid", "final_test_loss")
  assert (
    f"The paper-family L_valid theta trains both runs ({valid['learned_mean_loss']:.3f}), the "
    "L_train theta one of two"
  ) in text
  # App. E's convnets on the real digits.
  five = (*four, "mixed")
  checks = [
    _checks("app_e", f"digits_conv{n}", "capped_past_horizon_decay")[t]
    for n in (3, 6)
    for t in five
  ]
  runs = sum(c["runs"] for c in checks)
  assert sum(c["trained"] for c in checks) == runs
  assert f"every theta trains both runs of both ({runs} of {runs})" in text
  train = {n: [one(f"digits_conv{n}/capped_past_horizon_decay", t) for t in five] for n in (3, 6)}
  assert all(r["wins"] == 0 for rows in train.values() for r in rows)
  assert (
    f"(mean training loss {_range([r['learned_mean_loss'] for r in train[3]])} against "
    f"{train[3][0]['baseline_mean_loss']:.3f} on 3 layers, "
    f"{_range([r['learned_mean_loss'] for r in train[6]])} against "
    f"{train[6][0]['baseline_mean_loss']:.3f} on 6)"
  ) in text
  final = {
    n: {t: one(f"digits_conv{n}/capped_past_horizon_decay", t, "final_test_loss") for t in five}
    for n in (3, 6)
  }
  three = list(final[3].values())
  assert all(r["learned_mean_loss"] < r["baseline_mean_loss"] for r in three)
  assert (
    f"below Adam's for all five on 3 layers ({_range([r['learned_mean_loss'] for r in three])} "
    f"against {three[0]['baseline_mean_loss']:.3f})"
  ) in text
  six = final[6]
  below = [t for t in five if six[t]["learned_mean_loss"] < six[t]["baseline_mean_loss"]]
  assert below == ["L_valid", "mixed"]
  others = [six[t]["learned_mean_loss"] for t in five if t not in below]
  assert (
    f"({six['L_valid']['learned_mean_loss']:.3f} and {six['mixed']['learned_mean_loss']:.3f} "
    f"against {six['mixed']['baseline_mean_loss']:.3f}; the other three {_range(others)})"
  ) in text
  # The same 3-layer convnet without the cap or the decay.
  bn = _checks("app_e", "digits_conv3", "bn_cnn")
  diverged = sum(bn[n]["diverged"] for n in BATCH_NORMED)
  runs = sum(bn[n]["runs"] for n in BATCH_NORMED)
  blown = [one("digits_conv3/bn_cnn", n, "final_test_loss") for n in BATCH_NORMED]
  assert (
    f"the batch-normed thetas diverge on {diverged} of their {runs} runs (final test loss "
    f"{blown[0]['learned_mean_loss']:,.0f} and {blown[1]['learned_mean_loss']:,.0f})"
  ) in text
  paper = _checks("app_e", "digits_conv3", "cnn")
  assert (paper["cnn_train"]["diverged"], paper["cnn_valid"]["trained"]) == (2, 2)
  valid = one("digits_conv3/cnn", "cnn_valid", "final_test_loss")
  assert (
    f"the L_valid one trains both, to a final test loss of {valid['learned_mean_loss']:.3f}"
    in (text)
  )
  # The MLPs.
  fits = one("mlp_2x32/capped", "L_train")
  assert fits["wins"] == 5
  stalled = one("mlp_2x32/bn_cnn", "L_train")
  assert (
    f"below tuned Adam's on 5 of 5 tasks ({_pair(fits)}, difference "
    f"{statistics.interval_cell(fits)}), where as outer-trained it stalled at "
    f"{stalled['learned_mean_loss']:.3f}"
  ) in text
  mlps = {p: _checks("app_e", p, "capped") for p in ("mlp_2x32", "mlp_3x128")}
  diverged = {n: sum(c[n]["diverged"] for c in mlps.values()) for n in BATCH_NORMED}
  assert (
    f"the L_train theta on all {diverged['L_train']} MLP runs, the L_valid theta on "
    f"{diverged['L_valid']} of 10"
  ) in text
  final = [one("mlp_2x32/capped", n, "final_test_loss") for n in BATCH_NORMED]
  assert (
    f"(final test loss {final[0]['learned_mean_loss']:.3f} and {final[1]['learned_mean_loss']:.3f}"
    f" on the 2x32 MLP against Adam's {final[0]['baseline_mean_loss']:.3f})"
  ) in text
  adam = {p: c[f"adam {VALID}"]["diverged"] for p, c in mlps.items()}
  assert (
    f"{adam['mlp_2x32']} of 5 runs of the 2x32 MLP and {adam['mlp_3x128']} of 5 of the 3x128 one"
  ) in text
  trained = {p: sum(c[n]["trained"] for n in PAPER_FAMILY) for p, c in mlps.items()}
  assert {c[n]["diverged"] for c in mlps.values() for n in PAPER_FAMILY} == {0}
  cnn_train = mlps["mlp_3x128"]["cnn_train"]
  assert (
    f"The paper-family thetas train {trained['mlp_2x32']} of 10 runs of the 2x32 MLP and "
    f"{trained['mlp_3x128']} of 10 of the 3x128 one, none diverging (cnn_train's other "
    f"{cnn_train['runs'] - cnn_train['trained']} end above their first training loss)"
  ) in text
  # The price.
  slow = [one("cnn_batch_norm/capped", n) for n in BATCH_NORMED]
  assert {r["wins"] for r in slow} == {0}
  assert {one("cnn_batch_norm/bn_cnn", n)["wins"] for n in BATCH_NORMED} == {5}
  assert (
    f"(mean training loss {slow[0]['learned_mean_loss']:.3f} and "
    f"{slow[1]['learned_mean_loss']:.3f} against {slow[0]['baseline_mean_loss']:.3f}; with their "
    "own update they win 5 of 5 on seed 4's tasks)"
  ) in text
  ahead = {n: one("cnn_no_batch_norm/capped", n) for n in PAPER_FAMILY}
  mixed = one("cnn_no_batch_norm/mixed", "mixed")
  assert (
    f"(cnn_train {ahead['cnn_train']['wins']} of 5, {_pair(ahead['cnn_train'])}; cnn_valid "
    f"{ahead['cnn_valid']['wins']} of 5, {ahead['cnn_valid']['learned_mean_loss']:.3f}; the mixed "
    f"theta, started from cnn_valid, is not: {mixed['learned_mean_loss']:.3f})"
  ) in text


def test_per_step_decays_could_not_act_over_500_steps(doc):
  # Both decays at the top of the per-step ranges the doc names, over a 500-step horizon.
  factor = float(hand_designed.learning_rate_at(tf.constant(500), 1.0, 1e-4, 1e-3))
  text = _section(doc, "`bin/tune_baselines`")
  assert "(log-uniform in [1e-7, 1e-4] and [1e-7, 1e-3]" in text
  assert f"the learning rate's factor at the last step could not fall below about {factor:.1f}" in (
    text
  )


def test_the_quickstart_comparisons_adam_and_accuracies_are_its_run(found, doc):
  lines = _lines(doc, "The quickstart's final comparison")
  text = _flat(lines)
  rows = {line.split(" | ", 1)[0]: line for line in lines.splitlines() if line.startswith("| ")}
  # The last column: Adam, tuned per task on the metric's objective.
  for metric, name in (
    ("mean_loss", "| mean training loss over the 500 steps"),
    ("mean_test_loss", "| mean test loss (20 steps)"),
    ("final_test_loss", "| final test loss (step 500)"),
  ):
    adam = _adam(found, "main_job", "learned", metric)
    shipped_theta = _adam(found, "main_job", "shipped", metric)
    assert shipped_theta["baseline_mean_loss"] == adam["baseline_mean_loss"]
    assert rows[name].endswith(f"| {adam['baseline_mean_loss']:.3f} |"), (metric, rows[name])
  candidates = _summary("main_job", "eval")["candidates"]
  accuracy = [candidates[n]["final_test_accuracy"] for n in ("learned", "shipped")]
  (adam,) = {candidates[f"adam {o}"]["final_test_accuracy"] for o in (TRAIN, VALID)}
  cells = " | ".join(f"{a:.3f}" for a in (*accuracy, adam))
  assert rows["| test accuracy at step 500"] == f"| test accuracy at step 500 | {cells} |"
  # The paragraph under the table: the main job's theta against Adam.
  train, average, final = (_adam(found, "main_job", "learned", m) for m in METRICS)
  assert train["wins"] == train["num_tasks"] and train["outcome"] == statistics.LEARNED_AHEAD
  assert (
    "tuned Adam on every one of its held-out tasks, with the interval of the difference above"
    in (text)
  )
  assert average["outcome"] == statistics.LEARNED_AHEAD
  assert (
    f"lower test loss averaged over the run ({average['wins']} of {average['num_tasks']}, "
    "interval above zero); at the last step it is not resolved against Adam"
  ) in text
  assert final["outcome"] == statistics.NOT_RESOLVED
  # The seeds of docs/quickstart_seeds.json first pass Adam between these outer steps.
  with open(os.path.join(testing_utils.REPO, "docs", "quickstart_seeds.json")) as f:
    study = json.load(f)["quickstart"]
  reference = study["reference"]["outer_test"]["mean_train_loss"]
  firsts = [
    next(r["outer_step"] for r in run["records"] if r["outer_test"]["mean_train_loss"] < reference)
    for run in study["seeds"].values()
  ]
  assert f"where its seeds cross Adam (outer steps {min(firsts)}-{max(firsts)}," in text
  minutes, steps = _minutes("generated_bn_cnn_train")
  with open(os.path.join(PRETRAINED, "generated_bn_cnn_train", "card.json")) as f:
    assert json.load(f)["outer_steps"] == steps
  assert f"the shipped theta, {minutes:.0f} minutes of it, is further ahead" in text


def test_the_refined_adam_paragraph_is_its_evaluations(found, doc):
  text = _section(doc, "A refined Adam baseline (`adam_refined`)")
  refined = "adam (refined lr, beta1, eps, tuned per task on train loss)"
  plain = _adam(found, "paper_family", "L_valid", "mean_loss")
  better = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["metric"], r["baseline"])
    == ("paper_family", "L_valid", "mean_loss", refined)
  ][0]
  final_plain = _adam(found, "paper_family", "L_valid", "final_test_loss")
  (final_better,) = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["metric"])
    == ("paper_family", "L_valid", "final_test_loss")
    and "refined" in r["baseline"]
  ]
  assert final_better["learned_mean_loss"] > final_better["baseline_mean_loss"]
  assert final_better["outcome"] == statistics.NOT_RESOLVED
  assert (
    f"takes Adam's mean training loss from {plain['baseline_mean_loss']:.3f} to "
    f"{better['baseline_mean_loss']:.3f} and its final test loss from "
    f"{final_plain['baseline_mean_loss']:.3f} to {final_better['baseline_mean_loss']:.3f}, below "
    f"the L_valid theta's {final_better['learned_mean_loss']:.3f} (not resolved at this size;"
  ) in text
  # Seed 6: it trains faster than the L_train theta; the L_valid theta is ahead on both halves.
  seed_6 = {
    (r["learned"], r["metric"]): r["outcome"]
    for r in found
    if r["evaluation"] == "fig6_seed_6" and "refined" in r["baseline"]
  }
  assert seed_6[("L_train", "mean_loss")] == statistics.BASELINE_AHEAD
  assert seed_6[("L_valid", "mean_loss")] == statistics.LEARNED_AHEAD
  assert seed_6[("L_valid", "final_test_loss")] == statistics.LEARNED_AHEAD
  assert "where it trains faster than the L_train theta and the L_valid theta keeps both" in text


def test_the_ledger_paragraph_is_the_ledgers_overlaps(doc):
  with open(os.path.join(PRETRAINED, "ledger.json")) as f:
    ledger = json.load(f)
  overlaps = [o for o in ledger["monitoring_overlaps"] if o["evaluation"] == "Fig. 6"]
  assert overlaps
  (shares,) = {
    (o["classes"], o["of_monitored_classes"], o["tasks"], o["of_tasks"]) for o in overlaps
  }
  classes, of_classes, tasks, of_tasks = shares
  text = _section(doc, "Which tasks chose what: the ledger")
  assert (
    f"Fig. 6 shares {classes} of the {of_classes} classes of the evaluator's outer-test tasks "
    f"(in {tasks} of its {of_tasks} tasks)"
  ) in text
  (violation,) = [
    v
    for v in ledger["known_violations"]
    if (v["evaluation"], v["choice"]) == ("Fig. 6", "L_valid horizon 1000")
  ]
  assert "task" in violation["shares"] and "its tasks 0-3" in violation["reason"]
  assert "shares its tasks 0-3 with the L_valid horizon comparison" in text


# The weight decay from the first step (docs/evaluation.md): its choice and its evaluation.
DECAY_STRENGTHS = ("0", "1e-3", "3e-3", "1e-2")
FIVE = (*BATCH_NORMED, *PAPER_FAMILY, "mixed")
ADAM_VALID = f"adam {VALID}"
DIGITS = ("digits_mlp_2x32", "digits_conv3", "digits_conv6")


def _trained(problem, run, thetas, key="trained"):
  checks = _checks("app_e", problem, run)
  return sum(checks[t][key] for t in thetas)


def _capped(problem, key="trained"):
  """The four thetas with the relative cap alone and the mixed theta with its own (seed 5)."""
  return _trained(problem, "capped", BATCH_NORMED + PAPER_FAMILY, key) + _trained(
    problem, "mixed", ("mixed",), key
  )


def _decay_probe_rows():
  rows = []
  for strength in DECAY_STRENGTHS:
    trained, diverged, final = [], 0, []
    for mlp in ("mlp_2x32", "mlp_3x128"):
      run = os.path.join("app_e", "update_probe", mlp, f"relative_decay_{strength}")
      checks = _checks(run)
      assert set(checks) == set(BATCH_NORMED + PAPER_FAMILY)
      trained.append(sum(c["trained"] for c in checks.values()))
      diverged += sum(c["diverged"] for c in checks.values())
      with gzip.open(os.path.join(PRETRAINED, run, "evaluation.json.gz"), "rt") as f:
        arrays = json.load(f)["results"]
      final.append(np.mean(np.asarray(arrays["L_train"]["train_loss"])[..., -1]))
    rows.append((strength, trained, diverged, final))
  return rows


def test_the_decay_from_the_first_step_is_chosen_and_reported_as_the_doc_says(doc, found):
  text = _section(doc, "A weight decay from the first step")
  table = _lines(doc, "A weight decay from the first step")
  rows = _decay_probe_rows()
  for strength, trained, diverged, final in rows:
    assert (
      f"| {strength} | {trained[0]} | {trained[1]} | {diverged} | "
      f"{final[0]:.3f} and {final[1]:.3f} |"
    ) in table
  # 3e-3: the smallest under which every run trained and none diverged.
  clean = [s for s, trained, diverged, _ in rows if trained == [8, 8] and diverged == 0]
  assert clean[0] == "3e-3"
  with open(
    os.path.join(testing_utils.REPO, "gin", "eval", "out_of_family", "decay_from_start.gin")
  ) as f:
    config = f.read()
  assert "MLPLOpt.weight_decay = 3e-3" in config and "MLPLOpt.weight_decay_start = 0" in config
  assert "evaluate.seed = 7" in config

  run = "decay_from_start"
  mlps = ("mlp_2x32", "mlp_3x128")
  mlp_trained = sum(_trained(p, run, FIVE) for p in mlps)
  assert sum(_trained(p, run, FIVE, "diverged") for p in mlps) == 0
  capped_trained = sum(_capped(p) for p in mlps)
  capped_diverged = sum(_capped(p, "diverged") for p in mlps)
  adam_diverged = sum(_checks("app_e", p, run)[ADAM_VALID]["diverged"] for p in mlps)
  assert (
    f"{mlp_trained} of 50 runs on the two generated MLPs train and none diverges (with the "
    f"relative cap alone, the mixed theta with its own update, on seed 5's tasks: {capped_trained} "
    f"of 50, {capped_diverged} diverging), "
    f"where Adam tuned on validation loss diverges on {adam_diverged} of 10"
  ) in text
  faster = {
    p: _adam(found, f"app_e/{p}/{run}", t, "mean_loss")
    for p, t in (("mlp_3x128", "L_train"), ("mlp_2x32", "cnn_train"))
  }
  assert {r["outcome"] for r in faster.values()} == {statistics.LEARNED_AHEAD}
  pair = {
    p: f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"
    for p, r in faster.items()
  }
  assert (
    f"faster than tuned Adam, mean training loss {pair['mlp_3x128']} on "
    f"{statistics.claim(faster['mlp_3x128'])}, and the paper-family L_train theta the 2x32 one, "
    f"{pair['mlp_2x32']} on {statistics.claim(faster['mlp_2x32'])};"
  ) in text
  checks = [_checks("app_e", p, run) for p in mlps]
  failing = {t for c in checks for t in FIVE if c[t]["trained"] < c[t]["runs"]}
  assert failing == {"L_valid"}
  # The CNN without batch norm.
  nobn = _checks("app_e", "cnn_no_batch_norm", run)
  assert (
    f"the batch-normed L_valid theta trains {nobn['L_valid']['trained']} of 5 runs and the mixed "
    f"theta {nobn['mixed']['trained']} of 5"
  ) in text
  assert _checks("app_e", "cnn_no_batch_norm", "capped")["L_valid"]["trained"] == 5
  assert _checks("app_e", "cnn_no_batch_norm", "mixed")["mixed"]["trained"] == 5
  # Every other convnet, slower than Adam on every task.
  convnets = [p for p in CONVNETS if p != "cnn_no_batch_norm"]
  trained = sum(_trained(p, run, FIVE) for p in convnets)
  assert f"**Every other convnet trains**: {trained} of 125 runs" in text
  for p in convnets:
    assert {_adam(found, f"app_e/{p}/{run}", t, "mean_loss")["wins"] for t in FIVE} == {0}, p
  in_family = [_adam(found, f"app_e/cnn_batch_norm/{run}", t, "mean_loss") for t in BATCH_NORMED]
  assert (
    f"(mean training loss {in_family[0]['learned_mean_loss']:.3f} and "
    f"{in_family[1]['learned_mean_loss']:.3f} against {in_family[0]['baseline_mean_loss']:.3f})"
  ) in text
  # The real digits.
  generated, digits = _trained_totals(run)
  assert f"**Real digits**: {digits} of 30 runs" in text
  final = [_adam(found, f"app_e/digits_mlp_2x32/{run}", t, "final_test_loss") for t in BATCH_NORMED]
  assert all(r["learned_mean_loss"] < r["baseline_mean_loss"] for r in final)
  assert (
    f"({final[0]['learned_mean_loss']:.3f} and {final[1]['learned_mean_loss']:.3f} against "
    f"{final[0]['baseline_mean_loss']:.3f}; one task"
  ) in text
  # All generated-data problems.
  assert sum(_trained(p, run, FIVE, "diverged") for p in GENERATED) == 0
  capped = sum(_capped(p) for p in GENERATED)
  capped_diverged = sum(_capped(p, "diverged") for p in GENERATED)
  assert (
    f"with the decay {generated} of 200 runs on the generated-data problems train and none "
    f"diverges (with the relative cap alone: {capped}, {capped_diverged} diverging)"
  ) in text


def _readme_app_e_row():
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    (row,) = [line for line in f if line.startswith("| App. E |")]
  return row


def _trained_totals(run):
  """Runs of the five thetas that trained: (on the generated-data problems, on the digits)."""
  return (
    sum(_trained(p, run, FIVE) for p in GENERATED),
    sum(_trained(p, run, FIVE) for p in DIGITS),
  )


def test_the_readme_app_e_row_gives_the_decay_from_the_first_steps_counts():
  row = _readme_app_e_row()
  generated, digits = _trained_totals("decay_from_start")
  assert (
    f"trains {generated} of 200 runs on fresh tasks of the generated-data problems with none "
    f"diverging, the MLPs included, and {digits} of 30 on the real digits"
  ) in row


BOUND_PROBES = (
  ("kappa 0.1", "step_decay_0.1"),
  ("kappa 0.3", "step_decay_0.3"),
  ("kappa 1", "step_decay_1.0"),
  ("c 1.5", "max_norm_1.5"),
  ("c 3", "max_norm_3"),
  ("c 6", "max_norm_6"),
  ("c 1.5, cap 2%", "max_norm_1.5_cap_2e-2"),
  ("c 1.5, cap 3%", "max_norm_1.5_cap_3e-2"),
)
BOUND_PROBLEMS = ("mlp_2x32", "mlp_3x128", "cnn_no_batch_norm")
BOUNDED = ("bounded_weights", "bounded_weights_small_cap")


def _probe_cell(problem, run):
  """'trained, diverged (thetas with a run that did not train)' of one probe, or 'not run'."""
  path = os.path.join(PRETRAINED, "app_e", "update_probe", problem, run, "summary.json")
  if not os.path.exists(path):
    return "not run", None
  checks = _checks("app_e", "update_probe", problem, run)
  assert set(checks) == set(FIVE)
  trained = sum(c["trained"] for c in checks.values())
  diverged = sum(c["diverged"] for c in checks.values())
  failing = [t for t in FIVE if checks[t]["trained"] < checks[t]["runs"]]
  cell = f"{trained}, {diverged}" + (f" ({', '.join(failing)})" if failing else "")
  return cell, (trained, diverged)


def _trained_cell(problem, run):
  """Runs of the five thetas that trained, with each theta that missed some."""
  checks = _checks("app_e", problem, run)
  failing = [
    f"{t} {checks[t]['trained']} of {checks[t]['runs']}"
    for t in FIVE
    if checks[t]["trained"] < checks[t]["runs"]
  ]
  cell = str(sum(checks[t]["trained"] for t in FIVE))
  return cell + (f" ({', '.join(failing)})" if failing else "")


def test_the_bound_on_the_weights_is_chosen_and_reported_as_the_doc_says(doc, found):
  title = "A bound on the weights"
  text, table = _section(doc, title), _lines(doc, title)
  clean = []
  for label, run in BOUND_PROBES:
    cells = [_probe_cell(p, run) for p in BOUND_PROBLEMS]
    assert f"| {label} | {' | '.join(c for c, _ in cells)} |" in table, label
    if all(n == (10, 0) for _, n in cells):
      clean.append(label)
  assert clean == ["c 1.5, cap 3%"]  # The one setting under which all 30 runs trained.
  with open(
    os.path.join(testing_utils.REPO, "gin", "eval", "out_of_family", "bounded_weights.gin")
  ) as f:
    config = f.read()
  assert "MLPLOpt.max_weight_rms = 1.5" in config and "MLPLOpt.max_relative_step = 3e-2" in config
  assert "evaluate.seed = 8" in config
  small = os.path.join(
    testing_utils.REPO, "gin", "eval", "out_of_family", "bounded_weights_small_cap.gin"
  )
  with open(small) as f:
    config = f.read()
  assert "MLPLOpt.max_relative_step = 1e-2" in config and "evaluate.seed = 9" in config
  seed8 = _checks("app_e", "mlp_3x128", "bounded_weights")
  assert (
    f"({sum(seed8[t]['trained'] for t in FIVE)} of 25 runs trained, "
    f"{'none' if not sum(seed8[t]['diverged'] for t in FIVE) else 'some'} diverging)"
  ) in text
  for problem in (*GENERATED, *DIGITS):
    row = [_trained_cell(problem, run) for run in (*BOUNDED, "decay_from_start")]
    assert f"| {problem} | {' | '.join(row)} |" in table, problem
    for run in BOUNDED:
      assert sum(_checks("app_e", problem, run)[t]["diverged"] for t in FIVE) == 0, problem
  generated, digits = _trained_totals("bounded_weights_small_cap")
  assert (generated, digits) == (200, 30)  # Every theta trains every problem.
  assert (
    f"on tasks drawn after it was chosen: {generated} of 200 runs on the generated-data problems "
    f"and {digits} of 30 on the real digits, none diverging"
  ) in text


def test_the_readme_app_e_row_gives_the_bounds_counts():
  row = _readme_app_e_row()
  generated, digits = _trained_totals("bounded_weights_small_cap")
  assert (
    f"makes every shipped theta train every one of these problems: {generated} of 200 runs on "
    f"fresh tasks (seed 9) and {digits} of 30 on the real digits, none diverging"
  ) in row


def test_what_the_bound_on_the_weights_costs_against_tuned_adam(doc, found):
  text = _section(doc, "A bound on the weights")
  run = "bounded_weights_small_cap"
  for problem in CONVNETS:  # Each theta wins at most 1 of 5 tasks on mean training loss.
    assert max(_adam(found, f"app_e/{problem}/{run}", t, "mean_loss")["wins"] for t in FIVE) <= 1
  in_family = [_adam(found, f"app_e/cnn_batch_norm/{run}", t, "mean_loss") for t in BATCH_NORMED]
  assert all(r["wins"] == 0 for r in in_family)
  assert (
    f"they are behind (mean training loss {in_family[0]['learned_mean_loss']:.3f} and "
    f"{in_family[1]['learned_mean_loss']:.3f} against {in_family[0]['baseline_mean_loss']:.3f})"
  ) in text
  faster = [
    _adam(found, f"app_e/mlp_3x128/{run}", t, "mean_loss") for t in ("L_train", "cnn_train")
  ]
  assert {r["outcome"] for r in faster} == {statistics.LEARNED_AHEAD}
  others = [
    _adam(found, f"app_e/mlp_3x128/{run}", t, "mean_loss")
    for t in ("L_valid", "cnn_valid", "mixed")
  ]
  assert all(r["wins"] == 0 for r in others)
  assert (
    f"(mean training loss {faster[0]['learned_mean_loss']:.3f} and "
    f"{faster[1]['learned_mean_loss']:.3f} against {faster[0]['baseline_mean_loss']:.3f}: "
    f"{statistics.claim(faster[0])} and {statistics.claim(faster[1])})"
  ) in text
  # The 3% cap on seed 8.
  six = [_adam(found, "app_e/cnn_6_layers/bounded_weights", t, "mean_loss") for t in FIVE]
  assert all(r["wins"] == 5 for r in six)
  losses = [r["learned_mean_loss"] for r in six]
  assert (
    f"all five beat tuned Adam on the 6-layer CNN (mean training loss {_range(losses)} against "
    f"{six[0]['baseline_mean_loss']:.3f}, 5 of 5 tasks each)"
  ) in text
  wide = [_adam(found, "app_e/cnn_32_channels/bounded_weights", t, "mean_loss") for t in FIVE]
  ahead = [r for r in wide if r["wins"] == 5]
  assert len(ahead) == 4
  assert (
    f"four of them on the 32-channel one ({_range([r['learned_mean_loss'] for r in ahead])} "
    f"against {wide[0]['baseline_mean_loss']:.3f}, 5 of 5 each)"
  ) in text
  nobn = _checks("app_e", "cnn_no_batch_norm", "bounded_weights")["mixed"]
  conv6 = _checks("app_e", "digits_conv6", "bounded_weights")["cnn_valid"]
  assert (
    f"leaves the mixed theta at ln 10 on {nobn['runs'] - nobn['trained']} of 5 runs of the CNN "
    f"without batch norm and the paper-family L_valid theta on {conv6['runs'] - conv6['trained']} "
    "of 2 runs of the 6-layer convnet on the digits"
  ) in text
