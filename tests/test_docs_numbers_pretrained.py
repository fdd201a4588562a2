"""docs/pretrained.md's and docs/results.md's measured numbers, against the files they come from.

Each paragraph or table of docs/pretrained.md that reports a measurement of the shipped thetas'
runs (outer-training's progress.jsonl, the evaluator's evaluation_progress.jsonl and its Adam
reference, the held-out evaluations' evaluation.json and summary.json, the baseline searches'
results.jsonl, the benchmarks in benchmarks/results/) is read from the doc and its numbers
recomputed from those files, to the precision the doc prints them; so are the numbers
docs/results.md repeats from them. The "k of n (p = ...; difference ...)" claims are
statistics.claim's of shipped.records().
"""

import gzip
import json
import os
import re

import numpy as np
import pytest

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import search_space, shipped, statistics

from . import testing_utils

PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
TRAIN = "(lr tuned per task on train loss)"
VALID = "(lr tuned per task on valid loss)"
METRICS = ("mean_loss", "final_test_loss", "mean_test_loss")


@pytest.fixture(scope="module")
def found():
  return shipped.records()


def _doc(name):
  """The doc's text with every run of whitespace one space (sentences wrap over lines)."""
  with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
    return re.sub(r"\s+", " ", f.read())


def _lines(name, start, end=None):
  """The doc's lines from the one containing `start` to the one before `end`'s."""
  with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
    text = f.read()
  text = text[text.index(start) :]
  return text[: text.index(end)] if end else text


def _jsonl(*path):
  return files.read_jsonl(os.path.join(PRETRAINED, *path))


def _json(*path):
  opener = gzip.open if path[-1].endswith(".gz") else open
  with opener(os.path.join(PRETRAINED, *path), "rt") as f:
    return json.load(f)


def _one(found, evaluation, learned, baseline, metric):
  (r,) = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["baseline"], r["metric"])
    == (evaluation, learned, baseline, metric)
  ]
  return r


def _segments(run):
  """Minutes of process time of one outer-training run, and its number of segments (the chief's
  elapsed_seconds starts again at each resume)."""
  elapsed = [r["elapsed_seconds"] for r in _jsonl(run, "progress.jsonl")]
  ends = [a for a, b in zip(elapsed[:-1], elapsed[1:], strict=True) if b < a] + [elapsed[-1]]
  return sum(ends) / 60, len(ends)


def _cells(record, columns):
  return [f"{record[split][metric]:.3f}" for split, metric in columns]


def _table_rows(text):
  """{first cell: the other cells, bold marks dropped} of the markdown rows in `text`."""
  rows = {}
  for line in text.splitlines():
    if line.startswith("| ") and not line.startswith("|---"):
      cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
      rows[cells[0]] = cells[1:]
  return rows


def test_the_theta_export_is_its_files():
  """The files table: 610 meta-parameters (the shapes of theta_info.json), 2.8 KB."""
  info = _json("generated_bn_cnn_train", "theta", "theta_info.json")
  count = sum(int(np.prod(shape)) for layer in info["shapes"].values() for shape in layer.values())
  size = os.path.getsize(
    os.path.join(PRETRAINED, "generated_bn_cnn_train", "theta", "theta.data-00000-of-00001")
  )
  assert f"the theta export ({count} meta-parameters, {size / 1000:.1f} KB;" in _doc(
    "pretrained.md"
  )


def test_the_l_train_experiment_length_and_time_are_its_progress():
  """The experiment's list, "Why this one" and "Time": the run's progress.jsonl, the quickstart's
  seed study and the plain learned-optimizer step of benchmarks/results/."""
  text = _doc("pretrained.md")
  progress = _jsonl("generated_bn_cnn_train", "progress.jsonl")
  last = progress[-1]
  assert last["outer_step"] == len(progress) == 350
  assert (
    f"of which the run did 350 (K reached about 89; mean {last['mean_num_steps']:.0f} at" in text
  )
  per_worker = round(np.mean(list(last["inner_steps_per_worker"].values())), -2)
  assert (
    f"**Length**: 350 outer steps, {last['inner_steps']:,} inner steps of truncations in all "
    f"(about {per_worker:,.0f} per worker)."
  ) in text
  # The quickstart's 3 theta seeds passed LR-tuned Adam between outer steps 80 and 110.
  with open(os.path.join(testing_utils.REPO, "docs", "quickstart_seeds.json")) as f:
    study = json.load(f)["quickstart"]
  adam = study["reference"]["outer_test"]["mean_train_loss"]
  firsts = [
    next(r["outer_step"] for r in run["records"] if r["outer_test"]["mean_train_loss"] < adam)
    for run in study["seeds"].values()
  ]
  assert (
    f"(whose {len(firsts)} theta seeds all passed LR-tuned Adam between outer steps "
    f"{min(firsts)} and {max(firsts)}," in text
  )
  (plain,) = [
    r for r in _benchmark("truncation_sample_quickstart_intra1.json") if r["mode"] == "plain"
  ]
  assert f"({1000 * plain['seconds_per_step']:.0f} ms on 2 cores)" in text
  minutes, segments = _segments("generated_bn_cnn_train")
  rates = [r["samples_per_second"] for r in progress]
  assert (
    f"The run took {minutes:.0f} minutes of process time on the 2 cores in {segments} segments "
    "(two stops with SIGTERM and resumes)"
  ) in text
  assert f"a median of {np.median(rates):.1f} samples/s, at most {max(rates):.1f}." in text
  assert f"the shipped run took {minutes:.0f} minutes of process time on 2 cores)" in text


def test_choosing_the_l_train_theta_is_its_evaluators_table():
  records = _jsonl("generated_bn_cnn_train", "evaluation_progress.jsonl")
  adam = _json("generated_bn_cnn_train", "evaluation_reference.json")
  columns = [
    ("outer_train", "mean_train_loss"),
    ("outer_test", "mean_train_loss"),
    ("outer_test", "final_test_loss"),
  ]
  rows = _table_rows(
    _lines("pretrained.md", "| outer step | cumulative inner steps |", "(Mean training loss")
  )
  chosen = min(records, key=lambda r: r["outer_train"]["mean_train_loss"])
  assert chosen is records[-1]  # "the last one, outer step 350"
  for r in records:
    label = f"{r['outer_step']} (shipped)" if r is chosen else str(r["outer_step"])
    assert rows[label] == [f"{r['inner_steps']:,}", *_cells(r, columns)], label
  assert rows["LR-tuned Adam"] == ["", *_cells(adam, columns)]

  def passed(split):
    below = [r[split]["mean_train_loss"] < adam[split]["mean_train_loss"] for r in records]
    i = next(i for i in range(len(below)) if all(below[i:]))
    return records[i - 1]["outer_step"], records[i]["outer_step"]

  train, test = passed("outer_train"), passed("outer_test")
  assert (
    f"passed Adam on the outer-train tasks between outer steps {train[0]} and {train[1]} and on "
    f"the outer-test tasks between {test[0]} and {test[1]}, and stayed below on both."
  ) in _doc("pretrained.md")


COLUMNS = [
  ("outer_train", "mean_train_loss"),
  ("outer_train", "final_test_loss"),
  ("outer_test", "mean_train_loss"),
  ("outer_test", "final_test_loss"),
]


def test_the_l_valid_run_and_its_choice_are_its_files():
  text = _doc("pretrained.md")
  progress = _jsonl("generated_bn_cnn_valid", "progress.jsonl")
  records = _jsonl("generated_bn_cnn_valid", "evaluation_progress.jsonl")
  adam = _json("generated_bn_cnn_valid", "evaluation_reference.json")
  chosen = min(records, key=lambda r: r["outer_train"]["final_test_loss"])
  minutes, segments = _segments("generated_bn_cnn_valid")
  assert (
    f"The run took {minutes:.0f} minutes of process time in {segments} segments (two stops and "
    f"resumes), on 2 cores shared throughout with a baseline search and other runs; "
    f"{progress[-1]['inner_steps']:,} inner steps of truncations over the {len(progress)} outer "
    f"steps ({chosen['inner_steps']:,} up to the chosen snapshot, outer step "
    f"{chosen['outer_step']}), K about {progress[-1]['mean_num_steps']:.0f} at the end."
  ) in text
  assert f"on the outer-train tasks: outer step {chosen['outer_step']}." in text
  rows = _table_rows(
    _lines("pretrained.md", "| outer step | outer-train: mean training loss |", "(4 tasks x 1")
  )
  for r in records:
    label = f"{r['outer_step']} (shipped)" if r is chosen else str(r["outer_step"])
    assert rows[label] == _cells(r, COLUMNS), label
  assert rows["Adam, lr tuned on validation loss"] == _cells(adam, COLUMNS)
  # The two thetas' snapshots, in "Every Fig. 6 baseline, both thetas".
  l_train = _json("generated_bn_cnn_train", "theta", "theta_info.json")
  assert (
    f"(its snapshot is outer step {chosen['outer_step']}, the L_train theta's "
    f"{l_train['outer_step']}, with {chosen['inner_steps']:,} inner steps of truncations up to it "
    f"against {l_train['inner_steps']:,})"
  ) in text


def test_the_authors_objective_is_its_run_beside_the_shipped_one():
  text = _doc("pretrained.md")
  code = _jsonl("l_valid_alternatives", "code_objective", "progress.jsonl")
  shipped_run = _jsonl("generated_bn_cnn_valid", "progress.jsonl")
  assert f"Run to outer step {code[-1]['outer_step']} of 500 and stopped there" in text
  adam = _json("generated_bn_cnn_valid", "evaluation_reference.json")
  assert (
    f"Adam tuned per task on validation loss: final test loss "
    f"{adam['outer_train']['final_test_loss']:.3f} and {adam['outer_test']['final_test_loss']:.3f})"
  ) in text
  mine = {
    r["outer_step"]: r
    for r in _jsonl("l_valid_alternatives", "code_objective", "evaluation_progress.jsonl")
  }
  theirs = {
    r["outer_step"]: r for r in _jsonl("generated_bn_cnn_valid", "evaluation_progress.jsonl")
  }
  rows = _table_rows(
    _lines("pretrained.md", "| 50: code objective / shipped run |", "Its mean outer loss")
  )
  assert len(rows) == 3
  for step, label in ((50, "50: code objective / shipped run"), (100, "100"), (150, "150")):
    cells = [
      f"{a} / {b}"
      for a, b in zip(_cells(mine[step], COLUMNS), _cells(theirs[step], COLUMNS), strict=True)
    ]
    assert rows[label] == cells, step
  # Mean outer loss over four spans, and the gradient norm Adam received.
  spans = ((1, 50), (51, 100), (101, 150), (151, 175))

  def means(run):
    return ", ".join(
      f"{np.mean([r['outer_loss'] for r in run if a <= r['outer_step'] <= b]):.3f}"
      for a, b in spans
    )

  assert (
    f"Its mean outer loss over steps 1-50, 51-100, 101-150 and 151-175 was {means(code)} against "
    f"{means(shipped_run)} for the shipped run"
  ) in text
  norms = [np.array([r["gradient_norm"] for r in run[:175]]) for run in (code, shipped_run)]
  assert (
    f"was {np.median(norms[0] / norms[1]):.2f}x the shipped run's (median over the 175 steps)"
    in text
  )
  assert f"at gradient norms of at most {norms[0].max():.1f} over 610 coordinates" in text
  # docs/results.md: the same run to within 0.01 at outer steps 50-150.
  largest = max(
    abs(mine[s][split][metric] - theirs[s][split][metric])
    for s in (50, 100, 150)
    for split, metric in COLUMNS
  )
  assert largest < 0.01
  assert "gave the same run as the paper's to within 0.01 at outer steps 50-150" in _doc(
    "results.md"
  )


def test_more_outer_steps_is_its_continued_run():
  text = _doc("pretrained.md")
  records = _jsonl("l_valid_alternatives", "more_outer_steps", "evaluation_progress.jsonl")
  progress = _jsonl("l_valid_alternatives", "more_outer_steps", "progress.jsonl")
  rows = _table_rows(_lines("pretrained.md", "**More outer steps.**", "Run to outer step"))
  for r in records:
    label = f"{r['outer_step']} (shipped)" if r["outer_step"] == 450 else str(r["outer_step"])
    assert rows[label] == _cells(r, COLUMNS), label
  last = progress[-1]["outer_step"]
  assert (
    f"Run to outer step {last} and stopped (the last {700 - last} steps were not needed" in text
  )
  later = [r for r in records if r["outer_step"] >= 500]
  train = [r[s]["mean_train_loss"] for r in later for s in ("outer_train", "outer_test")]
  final = [r["outer_train"]["final_test_loss"] for r in later]
  flat = f"{min(train):.2f}-{max(train):.2f}"
  assert (
    f"the training loss on both sets stays flat ({flat}) and the outer-train final test loss "
    f"rises ({min(final):.2f}-{max(final):.2f})"
  ) in text
  chosen = min(records, key=lambda r: r["outer_train"]["final_test_loss"])
  assert chosen["outer_step"] == 450  # None of the later snapshots is chosen.
  lowest = min(records, key=lambda r: r["outer_test"]["final_test_loss"])
  assert (
    f"step {lowest['outer_step']} is lower, {lowest['outer_test']['final_test_loss']:.3f} against "
    f"{chosen['outer_test']['final_test_loss']:.3f}"
  ) in text
  # docs/results.md: the steps past 500 against the shipped snapshot.
  new = [r["outer_train"]["final_test_loss"] for r in records if r["outer_step"] > 500]
  assert (
    f"{last - 500} more outer steps (to {last}) did not lower the outer-train final test loss "
    f"below the shipped snapshot's ({min(new):.2f}-{max(new):.2f} against "
    f"{chosen['outer_train']['final_test_loss']:.3f})"
  ) in _doc("results.md")


HORIZON = "l_valid_alternatives/horizon_1000"


def test_the_longer_horizon_is_its_run_and_its_evaluation(found):
  text = _doc("pretrained.md")
  progress = _jsonl("l_valid_alternatives", "horizon_1000", "progress.jsonl")
  shipped_run = {r["outer_step"]: r for r in _jsonl("generated_bn_cnn_valid", "progress.jsonl")}
  last = progress[-1]
  minutes, _ = _segments("generated_bn_cnn_valid")
  assert (
    f"({last['inner_steps']:,} inner steps of truncations up to outer step {last['outer_step']}, "
    f"against {shipped_run[last['outer_step']]['inner_steps']:,}), so its 500 outer steps would "
    f"take much longer than the shipped run's {minutes:.0f} minutes; it ran to outer step "
    f"{last['outer_step']} and was stopped."
  ) in text
  summary = _json(HORIZON, "evaluation_at_1000_steps", "summary.json")
  rates = {lr for rates in summary["tuned_learning_rates"].values() for lr in rates}
  assert f"Adam's learning rate tuned per task on the same runs, {rates.pop():g} on all 4)" in text
  assert not rates
  rows = _table_rows(
    _lines("pretrained.md", "| theta (at 1,000 inner steps) |", "(Means over the 4 tasks;")
  )
  labels = {
    "h1000_step150": "horizon 1,000, outer step 150",
    "h500_step150": "horizon 500 (the shipped run), outer step 150",
    "h1000_step200": "horizon 1,000, outer step 200",
    "h500_step200": "horizon 500 (the shipped run), outer step 200",
    "shipped_L_valid": "shipped L_valid theta (outer step 450, horizon 500)",
  }
  metrics = ("mean_loss", "final_test_loss", "mean_test_loss")
  for name, label in labels.items():
    cells = []
    for metric in metrics:
      baseline = f"adam {TRAIN}" if metric == "mean_loss" else f"adam {VALID}"
      r = _one(found, HORIZON, name, baseline, metric)
      cells.append(f"{r['learned_mean_loss']:.3f} ({r['wins']} of 4)")
    cells.append(f"{summary['candidates'][name]['final_test_accuracy']:.3f}")
    assert rows[label] == cells, label
  adam = [_one(found, HORIZON, "shipped_L_valid", f"adam {TRAIN}", "mean_loss")]
  adam += [_one(found, HORIZON, "shipped_L_valid", f"adam {VALID}", m) for m in metrics[1:]]
  accuracy = summary["candidates"][f"adam {VALID}"]["final_test_accuracy"]
  assert rows["Adam, lr tuned per task"] == [
    *(f"{r['baseline_mean_loss']:.3f}" for r in adam),
    f"{accuracy:.3f}",
  ]
  floor = statistics.format_p(statistics.sign_test_p(4, 0))
  assert f"with 4 tasks no count gives a sign test p below {floor}" in text
  h1000, h500 = (
    _one(found, HORIZON, name, f"adam {VALID}", "final_test_loss")
    for name in ("h1000_step150", "h500_step150")
  )
  pair = f"{h1000['learned_mean_loss']:.3f} against {h500['learned_mean_loss']:.3f}"
  assert f"shipped run's snapshot ({pair} at step 150;" in text
  train, final, average = adam
  assert (
    f"mean training loss {statistics.claim(train)}, mean test loss {statistics.claim(average)}); "
    f"its final test loss, {final['learned_mean_loss']:.3f} against "
    f"{final['baseline_mean_loss']:.3f}, is {statistics.claim(final)}"
  ) in text
  # docs/results.md's summary of it, at two decimals.
  pair = f"{h1000['learned_mean_loss']:.2f} against {h500['learned_mean_loss']:.2f}"
  assert f"a lower test loss than the shipped run at the same outer steps ({pair} at step 150)" in (
    _doc("results.md")
  )


def _benchmark(name):
  with open(os.path.join(testing_utils.REPO, "benchmarks", "results", name)) as f:
    return json.load(f)


def test_making_samples_cheaper_is_its_benchmarks():
  def milliseconds(name):
    return {r["mode"]: r for r in _benchmark(name)}

  quick = [milliseconds(f"truncation_sample_quickstart_intra{i}.json") for i in (0, 1)]
  long = [milliseconds(f"truncation_sample_pretrained_intra{i}.json") for i in (0, 1)]
  rows = [
    (
      "K = 50, TensorFlow's default intra-op pool, no recomputation",
      quick[0],
      "sample_norecompute",
    ),
    ("K = 50, one intra-op thread (inter-op 2)", quick[1], "sample_norecompute"),
    ("K = 100, default pool, two levels of recomputation (the default)", long[0], "sample"),
    ("K = 100, one intra-op thread, two levels of recomputation", long[1], "sample"),
    ("K = 100, one intra-op thread, no recomputation (this run)", long[1], "sample_norecompute"),
  ]
  table = _table_rows(
    _lines("pretrained.md", "| setting | one sample, per inner step |", "The K = 50 rows")
  )
  ratios = {}
  for label, measured, mode in rows:
    sample = 1000 * measured[mode]["seconds_per_step"]
    plain = 1000 * measured["plain"]["seconds_per_step"]
    ratios[label] = sample / plain
    assert table[label] == [f"{sample:.1f} ms", f"{plain:.1f} ms", f"{sample / plain:.1f}"], label
  text = _doc("pretrained.md")
  before, after = (1000 * q["sample_norecompute"]["seconds_per_step"] for q in quick)
  assert (
    f"A sample's inner step went from {before:.1f} to {after:.1f} ms ({before / after:.1f}x)"
    in text
  )
  kept = long[1]["sample_norecompute"]
  per_step = kept["peak_over_resting_mib"] / kept["num_steps"]
  assert (
    f"costs at most {120 * per_step / 1024:.0f} GiB ({per_step:.0f} MiB per step, measured: "
    f"{kept['peak_over_resting_mib'] / 1024:.1f} GiB over resting at K = {kept['num_steps']})"
  ) in text
  recomputed = 1000 * long[1]["sample"]["seconds_per_step"]
  assert (
    f"halves the time of a sample ({recomputed:.0f} to {1000 * kept['seconds_per_step']:.0f} ms "
    "per inner step)"
  ) in text
  now = [ratios[rows[1][0]], ratios[rows[4][0]]]
  assert f"a sample now costs {min(now):.1f}-{max(now):.1f} plain learned-optimizer steps" in text


def test_the_first_held_out_evaluation_is_its_evaluation_json(found):
  """ "Held-out evaluation (Fig. 6)": its table and the paragraph on step 500, from
  generated_bn_cnn_train/evaluation/evaluation.json."""
  evaluation = _json("generated_bn_cnn_train", "evaluation", "evaluation.json")
  results = evaluation["results"]
  rows = _table_rows(
    _lines(
      "pretrained.md", "| comparison (per task, mean over 5 inits) |", "(The tasks' statistics"
    )
  )
  for label, baseline, metric in (
    (
      "mean training loss over the run, vs Adam lr tuned on training loss",
      f"adam {TRAIN}",
      "mean_loss",
    ),
    (
      "mean training loss over the run, vs Adam+Reg+Decay (L_train winner)",
      "adam+reg+decay (L_train)",
      "mean_loss",
    ),
    (
      "mean test loss at 20 evenly spaced steps, vs Adam lr tuned on validation loss",
      f"adam {VALID}",
      "mean_test_loss",
    ),
  ):
    r = _one(found, "generated_bn_cnn_train", "shipped", baseline, metric)
    runs = np.array(results[baseline][metric]) - np.array(results["shipped"][metric])
    won = f"{statistics.claim(r)}"
    if r["wins"] == r["num_tasks"]:
      won += f" (smallest margin {runs.mean(axis=1).min():.3f})"
    assert rows[label] == [
      f"{r['learned_mean_loss']:.3f}",
      f"{r['baseline_mean_loss']:.3f}",
      won,
      f"{int((runs > 0).sum())} of {runs.size}",
    ], label
  rates = {lr for rates in evaluation["tuned_learning_rates"].values() for lr in rates}
  assert rates == {0.01}
  text = _doc("pretrained.md")
  assert "(test-loss panel); 0.01 won on every task both ways." in text

  def final(name, key="test_loss"):
    return np.mean(np.array(results[name][key])[:, :, -1])

  assert (
    f"Adam ends lower on test loss ({final(f'adam {VALID}'):.3f} against {final('shipped'):.3f}, "
    f"Adam+Reg+Decay {final('adam+reg+decay (L_train)'):.3f}) at the same test accuracy "
    f"({final(f'adam {VALID}', 'test_accuracy'):.3f} against "
    f"{final('shipped', 'test_accuracy'):.3f})"
  ) in text


def _search(objective):
  path = os.path.join(PRETRAINED, "fig6", f"adam_reg_decay_L_{objective}", "results.jsonl")
  return files.read_jsonl(path)[1:]


def test_the_100_configuration_searches_are_their_results():
  """ "The Adam+Reg+Decay searches, with decays that act at the horizon": winners, runners-up, the
  runner-up's learning rate left at step 500, the count below 0.9 and the process time."""
  text = _doc("pretrained.md")
  table = _table_rows(
    _lines("pretrained.md", "| objective | winner | its objective |", "Both searches draw")
  )
  ranked = {}
  for objective in ("train", "valid"):
    records = _search(objective)
    assert len(records) == 100
    ranked[objective] = sorted(records, key=lambda r: r["mean"])
    minutes = sum(r["seconds"] for r in records) / 60
    assert f"{minutes:.0f} minutes of process time" in text
    assert sum(r["mean"] < 0.9 for r in records) == 3
  train, valid = ranked["train"], ranked["valid"]
  assert train[0]["id"] == valid[0]["id"] == "adam/59"
  assert train[1]["id"] == valid[1]["id"] == "adam/52"
  runner_up = train[1]["hparams"]
  left = search_space.final_fraction(runner_up, 500)
  assert table["L_train"][0].startswith("`adam/59`: lr 0.019, beta1 0.81,")
  assert table["L_train"][1:] == [
    f"{train[0]['mean']:.3f}",
    f"`adam/52`: lr {runner_up['learning_rate']:.2g}, exponential decay "
    f"{testing_utils.sci(runner_up['exponential_decay'])} per step, l1 "
    f"{testing_utils.sci(runner_up['l1'])}, {train[1]['mean']:.3f}",
    f"{100 * left:.1f}% of its initial value",
  ]
  assert table["L_valid"] == [
    "the same `adam/59`",
    f"{valid[0]['mean']:.3f}",
    f"the same `adam/52`, {valid[1]['mean']:.3f}",
    f"{100 * left:.1f}%",
  ]
  gap = valid[1]["mean"] - valid[0]["mean"]
  assert gap < 0.001 and "best decayed one is second, within 0.001 on L_valid" in text
  assert "Only 3 of the 100 configurations reach an objective below 0.9" in text
  minutes = sum(r["seconds"] for r in _search("train")) / 60
  assert f"winner of its search ({minutes:.0f} minutes of process time, two processes):" in text


# The doc's baselines: {name in the doc: the record's baseline, trained panel then test panel}.
FIG6_BASELINES = {
  "Adam": (f"adam {TRAIN}", f"adam {VALID}"),
  "RMSProp": (f"rmsprop {TRAIN}", f"rmsprop {VALID}"),
  "SGD+momentum": (f"sgdm {TRAIN}", f"sgdm {VALID}"),
  "Adam+Reg+Decay": ("adam+reg+decay (L_train)", "adam+reg+decay (L_valid)"),
  "RMSProp+Reg+Decay": ("rmsprop+reg+decay (L_train)", "rmsprop+reg+decay (L_valid)"),
  "SGD+momentum+Reg+Decay": ("sgdm+reg+decay (L_train)", "sgdm+reg+decay (L_valid)"),
}


def _assert_theta_baseline_table(found, evaluation, text):
  """Rows "| <theta> | <baseline> | <learned> / <baseline>, <claim> | ... |", one cell per metric
  (mean training loss, final test loss, mean test loss), are the evaluation's comparisons."""
  rows = {}
  for line in text.splitlines():
    if line.startswith("| L_"):
      cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
      rows[tuple(cells[:2])] = cells[2:]
  assert rows
  for (theta, name), cells in rows.items():
    train, test = FIG6_BASELINES[name]
    expected = []
    for metric in METRICS:
      r = _one(found, evaluation, theta, train if metric == "mean_loss" else test, metric)
      expected.append(
        f"{r['learned_mean_loss']:.3f} / {r['baseline_mean_loss']:.3f}, {statistics.claim(r)}"
      )
    assert cells == expected, (theta, name)
  return rows


def _accuracy(summary, names):
  return {name: summary["candidates"][name]["final_test_accuracy"] for name in names}


def test_every_fig6_baseline_both_thetas_is_its_summary(found):
  section = _lines(
    "pretrained.md", "### Every Fig. 6 baseline, both thetas", "### Every Fig. 6 baseline on"
  )
  rows = _assert_theta_baseline_table(found, "fig6", section)
  assert len(rows) == 8
  text = re.sub(r"\s+", " ", section)
  summary = _json("fig6", "evaluation", "summary.json")
  accuracy = _accuracy(summary, summary["candidates"])
  assert (
    f"L_valid {accuracy['L_valid']:.3f}, L_train {accuracy['L_train']:.3f}, Adam "
    f"{accuracy[f'adam {VALID}']:.3f}, SGD+momentum {accuracy[f'sgdm {VALID}']:.3f}, RMSProp and "
    f"Adam+Reg+Decay {accuracy[f'rmsprop {VALID}']:.3f}."
  ) in text
  assert f"{accuracy[f'sgdm {TRAIN}']:.3f}" == f"{accuracy[f'sgdm {VALID}']:.3f}"
  assert f"{accuracy['adam+reg+decay (L_valid)']:.3f}" == f"{accuracy[f'rmsprop {VALID}']:.3f}"
  rates = summary["tuned_learning_rates"]
  assert {lr for k in ("adam", "rmsprop") for o in (TRAIN, VALID) for lr in rates[f"{k} {o}"]} == {
    0.01
  }
  assert set(rates[f"sgdm {TRAIN}"]) == {0.1}
  odd = [lr for lr in rates[f"sgdm {VALID}"] if lr != 0.1]
  assert len(odd) == 1
  assert f"0.1 for SGD+momentum ({odd[0]:.2g} on one task, tuned on validation loss)" in text
  # The wall-clock panels' speeds.
  speed = summary["timed_steps_per_second"]
  searched = sorted(speed[f"adam+reg+decay (L_{o})"] for o in ("train", "valid"))
  assert (
    f"inner steps per second L_train {speed['L_train']:.0f}, L_valid {speed['L_valid']:.0f}, "
    f"Adam+Reg+Decay {searched[0]:.0f}-{searched[1]:.0f}, Adam {speed[f'adam {TRAIN}']:.0f}, "
    f"RMSProp {speed[f'rmsprop {TRAIN}']:.0f}, SGD+momentum {speed[f'sgdm {TRAIN}']:.0f}."
  ) in text
  adam = speed[f"adam {TRAIN}"]
  assert (
    f"runs at {speed['L_train'] / adam:.2f} (L_train theta) and {speed['L_valid'] / adam:.2f} "
    "(L_valid theta) of Adam's speed here"
  ) in text
  benchmark = [
    _benchmark(f"generated_bn_cnn_cpu_shipped_{t}_theta.json")["ratios"]["mlp_lopt/adam"]["median"]
    for t in ("train", "valid")
  ]
  assert f"network alone: {benchmark[0]:.2f} and {benchmark[1]:.2f} of Adam's speed" in text
  # The paragraph after the table.
  final = [
    _one(found, "fig6", "L_valid", FIG6_BASELINES[n][1], "final_test_loss")
    for n in ("Adam", "RMSProp", "SGD+momentum", "Adam+Reg+Decay")
  ]
  wins = [r["wins"] for r in final]
  p = statistics.format_p(max(r["p_value"] for r in final))
  assert f"at the last step on {min(wins)}-{max(wins)} of 20 tasks (p = {p} or less" in text
  lead = [
    _one(found, "fig6", "L_train", FIG6_BASELINES[n][1], "mean_test_loss")
    for n in ("RMSProp", "Adam+Reg+Decay")
  ]
  (count,) = {f"{r['wins']} of 20, p = {statistics.format_p(r['p_value'])}" for r in lead}
  assert f"over RMSProp and Adam+Reg+Decay is smaller ({count}, intervals just above zero)" in text
  train = {t: _one(found, "fig6", t, f"adam {TRAIN}", "mean_loss") for t in ("L_valid", "L_train")}
  assert (
    f"trains faster than the L_train one here ({train['L_valid']['learned_mean_loss']:.3f} against "
    f"{train['L_train']['learned_mean_loss']:.3f})"
  ) in text


def test_fig6_on_seed_6s_accuracy_rates_and_two_inits_are_its_evaluation():
  text = re.sub(
    r"\s+",
    " ",
    _lines(
      "pretrained.md", "### Every Fig. 6 baseline on tasks no choice used", "**Against the refined"
    ),
  )
  evaluation = _json("fig6", "evaluation_seed_6", "evaluation.json.gz")
  results = evaluation["results"]

  def accuracy(name):
    return f"{np.mean(np.array(results[name]['test_accuracy'])[:, :, -1]):.3f}"

  both = {accuracy(f"adam {VALID}"), accuracy("adam+reg+decay (L_valid)")}
  assert len(both) == 1
  assert (
    f"L_valid {accuracy('L_valid')}, L_train {accuracy('L_train')}, RMSProp "
    f"{accuracy(f'rmsprop {VALID}')}, SGD+momentum {accuracy(f'sgdm {VALID}')}, Adam and "
    f"Adam+Reg+Decay {both.pop()}."
  ) in text
  rates = evaluation["tuned_learning_rates"]
  assert {lr for k in ("adam", "rmsprop") for o in (TRAIN, VALID) for lr in rates[f"{k} {o}"]} == {
    0.01
  }
  odd = [lr for lr in rates[f"sgdm {VALID}"] if lr != 0.1]
  assert set(rates[f"sgdm {TRAIN}"]) == {0.1} and len(odd) == 1
  assert f"0.1 for SGD+momentum ({odd[0]:.2g} on one task, tuned on validation loss)" in text
  # At 2 inits per task (the first 1,480 runs), the L_valid theta against RMSProp on final test
  # loss: the first 2 inits of each task's runs.
  first = {
    name: np.array(results[name]["final_test_loss"])[:, :2].mean(axis=1)
    for name in ("L_valid", f"rmsprop {VALID}")
  }
  stats = statistics.paired(list(first[f"rmsprop {VALID}"] - first["L_valid"]))
  assert stats["outcome"] == statistics.NOT_RESOLVED
  assert (
    f"against RMSProp was not resolved ({stats['wins']} of 20, interval "
    f"{statistics.format_interval(stats['ci95'])};"
  ) in text


def test_app_f_on_fig6s_tasks_is_its_evaluation(found):
  section = _lines("pretrained.md", "### App. F: RMSProp", "**On tasks no choice used (seed 6).**")
  rows = _assert_theta_baseline_table(found, "app_f", section.split("| theta | baseline |", 1)[1])
  assert len(rows) == 4
  text = re.sub(r"\s+", " ", section)
  records = files.read_jsonl(os.path.join(PRETRAINED, "app_f", "results.jsonl"))[1:]
  minutes = sum(r["seconds"] for r in records) / 60
  assert f"winners ({minutes:.0f} minutes of process time, in two processes," in text
  # SGD+momentum's winner against Adam+Reg+Decay's on the outer-train tasks (both 8 x 500).
  sgdm = min((r for r in records if r["kind"] == "sgdm"), key=lambda r: r["train_mean"])
  adam = min(_search("train"), key=lambda r: r["mean"])
  assert f"than Adam+Reg+Decay's ({sgdm['train_mean']:.3f} against {adam['mean']:.3f})" in text
  # The thetas' runs made again agree with Fig. 6's.
  here = _json("app_f", "evaluation", "summary.json")["candidates"]
  there = _json("fig6", "evaluation", "summary.json")["candidates"]
  largest = max(
    abs(np.mean(here[t]["per_task"][m]) - np.mean(there[t]["per_task"][m]))
    for t in ("L_train", "L_valid")
    for m in METRICS
  )
  assert f"their means agree with Fig. 6's to within {largest:.3f}" in text
  train = [r for r in found if r["evaluation"] == "app_f" and r["metric"] == "mean_loss"]
  wins = sorted(r["wins"] for r in train)
  assert {r["outcome"] for r in train} == {statistics.LEARNED_AHEAD}
  assert f"rules on {wins[0]}-{wins[-1]} of 20 tasks, every interval above zero" in text
  r = _one(found, "app_f", "L_valid", "sgdm+reg+decay (L_valid)", "final_test_loss")
  assert (
    f"({r['baseline_mean_loss']:.3f} against {r['learned_mean_loss']:.3f}, the theta ahead on "
    f"{r['wins']} of 20 tasks, interval below zero)"
  ) in text


def test_the_results_fig5_l_valid_sentences_are_the_runs():
  text = _doc("results.md")
  records = _jsonl("generated_bn_cnn_valid", "evaluation_progress.jsonl")
  adam = _json("generated_bn_cnn_valid", "evaluation_reference.json")["outer_test"][
    "final_test_loss"
  ]
  later = [r["outer_test"]["final_test_loss"] for r in records if r["outer_step"] >= 300]
  assert max(later) < adam
  assert (
    f"below Adam's from outer step 300 on ({min(later):.2f}-{max(later):.2f} against {adam:.2f};"
  ) in text
  with open(os.path.join(testing_utils.REPO, "docs", "quickstart_valid_seeds.json")) as f:
    study = json.load(f)["quickstart_valid"]
  adam = study["reference"]["outer_test"]["final_test_loss"]
  firsts, ends = [], []
  for run in study["seeds"].values():
    firsts.append(
      next(r["outer_step"] for r in run["records"] if r["outer_test"]["final_test_loss"] < adam)
    )
    ends.append(run["records"][-1]["outer_test"]["final_test_loss"])
  assert max(ends) < adam
  assert (
    f"(between outer steps {min(firsts)} and {max(firsts)}) and ends below it, "
    f"{min(ends):.2f}-{max(ends):.2f} against {adam:.2f}"
  ) in text


def test_the_results_fig6ab_paragraph_is_the_shipped_evaluations(found):
  text = _doc("results.md")

  def rows(learned, metric, panel):
    return [
      _one(found, "fig6", learned, FIG6_BASELINES[n][panel], metric)
      for n in list(FIG6_BASELINES)[:4]
    ]

  def spread(records):
    means = [r["baseline_mean_loss"] for r in records]
    return f"{records[0]['learned_mean_loss']:.3f} against {min(means):.3f}-{max(means):.3f}"

  train = rows("L_train", "mean_loss", 0)
  (p,) = {statistics.format_p(r["p_value"]) for r in train}
  assert {r["wins"] for r in train} == {20}
  assert f"on 20 of 20 tasks ({spread(train)}; sign test p = {p} against each" in text
  final = rows("L_valid", "final_test_loss", 1)
  wins = [r["wins"] for r in final]
  largest = statistics.format_p(max(r["p_value"] for r in final))
  assert (
    f"a lower final test loss on {min(wins)}-{max(wins)} of 20 ({spread(final)}; p = {largest} or "
    "less, every interval above zero)"
  ) in text
  average = rows("L_valid", "mean_test_loss", 1)
  (p,) = {statistics.format_p(r["p_value"]) for r in average}
  assert {r["wins"] for r in average} == {20}
  assert f"a lower mean test loss on 20 of 20 ({spread(average)}; p = {p})" in text
  summary = _json("fig6", "evaluation", "summary.json")
  accuracy = _accuracy(summary, summary["candidates"])
  others = [v for k, v in accuracy.items() if not k.startswith("L_")]
  assert max(others) < accuracy["L_valid"]
  assert (
    f"with the highest test accuracy ({accuracy['L_valid']:.3f} against {min(others):.3f}-"
    f"{max(others):.3f})"
  ) in text
  last = rows("L_train", "final_test_loss", 1)
  assert all(r["learned_mean_loss"] > r["baseline_mean_loss"] for r in last)
  assert f"final test loss is above every baseline's ({last[0]['learned_mean_loss']:.3f})" in text


def test_the_results_fig6c_claims_are_the_searched_winners(found):
  text = _doc("results.md")
  for learned, metric in (
    ("L_train", "mean_loss"),
    ("L_valid", "final_test_loss"),
    ("L_valid", "mean_test_loss"),
  ):
    baseline = f"adam+reg+decay ({learned})"
    assert statistics.claim(_one(found, "fig6", learned, baseline, metric)) in text, metric
    r = _one(found, "fig6_adam_reg_decay_1000", learned, baseline, metric)
    assert statistics.claim(r) in text, metric


def test_the_results_papers_family_paragraph_is_its_evaluations():
  text = _doc("results.md")
  records = _jsonl("generated_cnn_train", "evaluation_progress.jsonl")
  adam = _json("generated_cnn_train", "evaluation_reference.json")
  at_50 = next(r for r in records if r["outer_step"] == 50)
  assert all(
    at_50[s]["mean_train_loss"] < adam[s]["mean_train_loss"] for s in ("outer_train", "outer_test")
  )
  assert "the L_train run passed LR-tuned Adam on its evaluator's tasks by outer step 50" in text
  found = [r for r in shipped.records() if r["evaluation"] == "paper_family"]
  train = [r for r in found if r["learned"] == "L_train" and r["metric"] == "mean_loss"]
  assert {r["wins"] for r in train} == {20}
  assert "the L_train theta's mean training loss is lower than every baseline's on 20 of 20" in text
  for name, key in (("Adam", f"adam {VALID}"), ("RMSProp", f"rmsprop {VALID}")):
    r = _one(found, "paper_family", "L_valid", key, "final_test_loss")
    assert f"{name}'s on {statistics.claim(r)}" in text, name
  refined = {(r["learned"], r["metric"]): r for r in found if "refined" in r["baseline"]}
  assert refined[("L_train", "mean_loss")]["wins"] == 20
  final = refined[("L_valid", "final_test_loss")]
  assert final["outcome"] == statistics.NOT_RESOLVED
  assert (
    f"the L_train half holds (20 of 20) and the L_valid half does not: that Adam's final test "
    f"loss is the lower one, {final['baseline_mean_loss']:.3f} against "
    f"{final['learned_mean_loss']:.3f}, not resolved at this size"
  ) in text

  # Fig. 5 at the quickstart's scale: the seeds that pass LR-tuned Adam, and the L_valid ones.
  counts = []
  for name, key, metric in (
    ("paper_family_seeds.json", "paper_family", "mean_train_loss"),
    ("paper_family_seeds_valid.json", "paper_family_valid", "final_test_loss"),
  ):
    with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
      study = json.load(f)[key]
    adam = study["reference"]["outer_test"][metric]
    passed = sum(
      any(r["outer_test"][metric] < adam for r in run["records"]) for run in study["seeds"].values()
    )
    counts.append(f"{passed} of {len(study['seeds'])}")
  assert (
    f"{counts[0]} L_train seeds leave the plateau and pass LR-tuned Adam; {counts[1]} L_valid "
    "seeds leave it"
  ) in text


def test_the_results_main_job_paragraph_is_its_run(found):
  text = _doc("results.md")
  progress = files.read_jsonl(os.path.join(PRETRAINED, "main_job", "progress.jsonl"))
  minutes = progress[-1]["elapsed_seconds"] / 60
  assert f"(140 outer steps in {minutes:.1f} minutes," in text and len(progress) == 140

  def one(learned, metric):
    (r,) = [
      r
      for r in found
      if (r["evaluation"], r["learned"], r["metric"]) == ("main_job", learned, metric)
    ]
    return r

  for metric, name in (("mean_loss", "mean training loss"), ("mean_test_loss", "mean test loss")):
    r = one("learned", metric)
    assert (
      f"{name} {r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}, "
      f"{statistics.claim(r)}"
    ) in text, metric
  assert one("learned", "final_test_loss")["outcome"] == statistics.NOT_RESOLVED
  assert "at the last step it is not resolved against Adam" in text
  shipped_theta = one("shipped", "mean_loss")["learned_mean_loss"]
  assert f"evaluated beside it on the same runs, is at {shipped_theta:.3f}" in text
  floor = statistics.format_p(statistics.sign_test_p(5, 0))
  assert f"5 of 5 is p = {floor} by the sign test, the least 5 tasks can give" in text


def test_the_results_appendix_sentences_are_the_shipped_evaluations(found):
  text = _doc("results.md")
  # App. E: width and image size, the L_valid theta on training loss.
  carried = [
    _one(found, f"out_of_family/{problem}", "L_valid", f"adam {TRAIN}", "mean_loss")
    for problem in ("cnn_8_channels", "cnn_32_channels", "images_16x16")
  ]
  assert {r["outcome"] for r in carried} == {statistics.LEARNED_AHEAD}
  wins = sorted(r["wins"] for r in carried)
  floor = statistics.format_p(statistics.sign_test_p(5, 0))
  assert (
    f"(the L_valid theta ahead on {wins[0]}-{wins[-1]} of 5 tasks, each 95% interval of the mean "
    f"difference above zero, though no count of 5 tasks gives a sign test p below {floor})"
  ) in text
  # App. F: both thetas against both searched rules, and SGD+momentum's last step.
  train = [r for r in found if r["evaluation"] == "app_f" and r["metric"] == "mean_loss"]
  wins = sorted(r["wins"] for r in train)
  assert (
    f"Both thetas still train faster than both rules ({wins[0]}-{wins[-1]} of 20 tasks)" in text
  )
  r = _one(found, "app_f", "L_valid", "sgdm+reg+decay (L_valid)", "final_test_loss")
  assert (
    f"test loss ({r['baseline_mean_loss']:.3f} against {r['learned_mean_loss']:.3f}; the theta "
    f"wins {statistics.claim(r)})"
  ) in text
  # App. H: the shipped theta against LR-tuned Adam, its first held-out evaluation.
  r = _one(found, "generated_bn_cnn_train", "shipped", f"adam {TRAIN}", "mean_loss")
  assert f"the shipped theta wins every held-out task, {statistics.claim(r)} against" in text


def test_the_searched_winners_decays_are_their_best_json():
  """The learning rate each decayed winner leaves at step 500, in App. F's and the
  1,000-configuration search's tables."""
  text = _doc("pretrained.md")

  def left(*path, kind):
    best = _json(*path, "best.json")["best"][kind]
    return best["id"], 100 * search_space.final_fraction(best["hparams"], 500)

  name, percent = left("app_f", "L_train", kind="rmsprop")
  assert (
    f"`{name}`: lr 0.009," in text
    and f"linear decay to {percent:.1f}% of the rate at step 500" in text
  )
  name, percent = left("app_f", "L_train", kind="sgdm")
  assert f"`{name}`: lr 0.47," in text and f"linear decay to {percent:.1f}% at step 500" in text
  name, percent = left("fig6", "adam_reg_decay_1000", "L_valid", kind="adam")
  assert f"`{name}`: lr 0.014," in text
  assert f"({percent:.1f}% of the learning rate left at step 500)" in text
  name, percent = left("fig6", "adam_reg_decay_1000", "L_train", kind="adam")
  assert percent == 100 and f"`{name}`: lr 0.009, beta1 0.47," in text


def _outer_steps(gin):
  with open(os.path.join(testing_utils.REPO, "gin", gin)) as f:
    (steps,) = re.findall(r"^outer_training\.num_outer_steps = (\d+)", f.read(), re.M)
  return int(steps)


def test_the_shipped_theta_ran_its_stated_multiple_of_the_quickstarts_outer_steps():
  ratio = _outer_steps("pretrained/generated_bn_cnn_train.gin") / _outer_steps("quickstart.gin")
  assert len(_jsonl("generated_bn_cnn_train", "progress.jsonl")) == 350
  assert f"for {ratio:.1f} times the quickstart's outer steps." in _doc("pretrained.md")


def test_the_results_fig8_and_app_h_remarks_are_their_runs():
  text = _doc("results.md")
  # Fig. 8: fixed truncations of 10 led the study at 20,000 inner steps, not at 40,000.
  with open(
    os.path.join(testing_utils.REPO, "docs", "ablations_small", "ablations_at_20k.json")
  ) as f:
    at_20k = json.load(f)
  with open(os.path.join(testing_utils.REPO, "docs", "ablations_small", "ablations.json")) as f:
    at_40k = json.load(f)
  assert at_20k["max_inner_steps"] == 20_000
  medians = {k: v["median"] for k, v in at_20k["results"].items()}
  assert min(medians, key=medians.get) == "fixed_10"
  assert at_40k["results"]["fixed_10"]["median"] > at_40k["results"]["merged"]["median"]
  assert "fixed truncations of 10 led at 20,000 inner steps" in text
  # App. H: the decayed L_train theta's training loss at step 5,000 against validation-tuned Adam,
  # on the 4 held-out tasks.
  decayed, adam = [], []
  for seed, name in (
    ("seed_1", "weight decay 3e-3 from 500"),
    ("seed_3", "L_train, weight decay from 500"),
  ):
    directory = os.path.join(PRETRAINED, "app_h", seed)
    (path,) = [f for f in os.listdir(directory) if f.endswith(".json.gz")]
    with gzip.open(os.path.join(directory, path), "rt") as f:
      tasks = json.load(f)["tasks"]
    decayed += [t["summary"][name]["train_loss_end"] for t in tasks]
    adam += [t["summary"]["adam (tuned on valid)"]["train_loss_end"] for t in tasks]
  assert len(decayed) == 4
  assert f"{sum(decayed) / sum(adam):.0f}" == "2"
  assert "at about twice Adam's training loss" in text


def test_the_seed_6_and_1000_configuration_paragraphs_are_their_evaluations(found):
  text = _doc("pretrained.md")
  # Fig. 6 on seed 6: the L_valid theta's final test loss against Fig. 6's four baselines, the
  # L_train theta's above every baseline's, and the refined Adam's count.
  valid = [
    _one(found, "fig6_seed_6", "L_valid", FIG6_BASELINES[n][1], "final_test_loss")
    for n in list(FIG6_BASELINES)[:4]
  ]
  wins = sorted(r["wins"] for r in valid)
  assert f"L_valid theta's final test loss is lower on {wins[0]}-{wins[-1]} of 20" in text
  last = [r for r in found if r["evaluation"] == "fig6_seed_6" and r["learned"] == "L_train"]
  last = [r for r in last if r["metric"] == "final_test_loss"]
  assert len(last) == 5 and all(r["learned_mean_loss"] > r["baseline_mean_loss"] for r in last)
  (refined,) = [
    r
    for r in found
    if r["evaluation"] == "fig6_seed_6"
    and "refined" in r["baseline"]
    and (r["learned"], r["metric"]) == ("L_train", "mean_loss")
  ]
  assert (
    f"the refined Adam trains faster on {refined['losses']} of 20 tasks (mean training loss "
    f"{refined['baseline_mean_loss']:.3f} against {refined['learned_mean_loss']:.3f};"
  ) in text
  # The 1,000-configuration search's winners on seed 6's tasks.
  evaluation = "fig6_adam_reg_decay_1000"
  train = _one(found, evaluation, "L_train", "adam+reg+decay (L_train)", "mean_loss")
  fast = _one(found, evaluation, "L_valid", "adam+reg+decay (L_train)", "mean_loss")
  average = _one(found, evaluation, "L_valid", "adam+reg+decay (L_valid)", "mean_test_loss")
  final = _one(found, evaluation, "L_valid", "adam+reg+decay (L_valid)", "final_test_loss")
  assert train["outcome"] == final["outcome"] == statistics.BASELINE_AHEAD
  assert (
    f"the L_train winner's mean training loss is lower by {-train['mean_difference']:.3f}, its "
    f"interval below zero. The L_valid theta still trains faster than it ({fast['wins']} of 20 "
    f"tasks) and keeps a lower test loss averaged over the run ({average['wins']} of 20)"
  ) in text
  assert (
    f"ends lower at step 500 (final test loss {final['baseline_mean_loss']:.3f} against "
    f"{final['learned_mean_loss']:.3f})"
  ) in text
  # App. F on seed 6: both thetas against both searched rules on training loss.
  rows = [r for r in found if r["evaluation"] == "app_f_seed_6" and r["metric"] == "mean_loss"]
  wins = sorted(r["wins"] for r in rows)
  assert {r["outcome"] for r in rows} == {statistics.LEARNED_AHEAD}
  assert (
    f"both thetas train faster than both searched rules ({wins[0]}-{wins[-1]} of 20, every "
    "interval above zero)"
  ) in text
