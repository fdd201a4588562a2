"""The README's headline numbers of the shipped evaluations, against the files they come from.

Each count of tasks won that the results table gives for a shipped evaluation is checked, to the
precision it is printed, against pretrained/: the means over tasks, the count, the sign test's p
and the mean difference with its bootstrap interval (evaluation/shipped.py recomputes them from
the per-task differences, as pretrained/statistics.md gives them). The worked example's README
(examples/own_keras_model/) is checked the same way against the result files committed beside it.
"""

import json
import os
import re

import numpy as np
import pytest

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import shipped, statistics

from . import testing_utils

TRAIN = "(lr tuned per task on train loss)"
VALID = "(lr tuned per task on valid loss)"


@pytest.fixture(scope="module")
def found():
  return shipped.records()


@pytest.fixture(scope="module")
def table():
  """{the first cell of a row of the README's results table: the row}."""
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    rows = [line for line in f if line.startswith("| ")]
  return {row.split("|")[1].strip(): row for row in rows}


_rows = testing_utils.comparison_rows


def _range(values, digits=3):
  low, high = min(values), max(values)
  return f"{low:.{digits}f}-{high:.{digits}f}"


# Fig. 6's four baselines of each panel.
FIG6_TRAIN = [f"{k} {TRAIN}" for k in ("adam", "rmsprop", "sgdm")] + ["adam+reg+decay (L_train)"]
FIG6_VALID = [f"{k} {VALID}" for k in ("adam", "rmsprop", "sgdm")] + ["adam+reg+decay (L_valid)"]


def test_fig6ab_every_baseline(found, table):
  row = table["Fig. 6a, b"]
  # L_train theta, mean training loss: 20 of 20 against each, every interval above zero.
  rows = _rows(found, "fig6", "L_train", "mean_loss", FIG6_TRAIN)
  assert len(rows) == 4
  learned = f"{rows[0]['learned_mean_loss']:.3f}"
  baselines = _range([r["baseline_mean_loss"] for r in rows])
  assert f"L_train theta mean training loss {learned} against {baselines} " in row
  assert {(r["wins"], r["num_tasks"]) for r in rows} == {(20, 20)}
  (p,) = {statistics.format_p(r["p_value"]) for r in rows}
  differences = [r["mean_difference"] for r in rows]
  text = f"(20 of 20 tasks each, p = {p}; differences {min(differences):.3f} to "
  assert text + f"{max(differences):.3f}, each 95% interval above zero)" in row
  assert {r["outcome"] for r in rows} == {statistics.LEARNED_AHEAD}
  # L_valid theta, final test loss: 17-18 of 20, every interval above zero.
  rows = _rows(found, "fig6", "L_valid", "final_test_loss", FIG6_VALID)
  learned = f"{rows[0]['learned_mean_loss']:.3f}"
  baselines = _range([r["baseline_mean_loss"] for r in rows])
  wins = [r["wins"] for r in rows]
  largest_p = statistics.format_p(max(r["p_value"] for r in rows))
  differences = [r["mean_difference"] for r in rows]
  assert (
    f"L_valid theta final test loss {learned} against {baselines} ({min(wins)}-{max(wins)} of "
    f"20, p = {largest_p} or less; differences {min(differences):.3f} to "
    f"{max(differences):.3f}, each interval above zero)"
  ) in row
  assert {r["outcome"] for r in rows} == {statistics.LEARNED_AHEAD}
  # L_valid theta, mean test loss: 20 of 20.
  rows = _rows(found, "fig6", "L_valid", "mean_test_loss", FIG6_VALID)
  (p,) = {statistics.format_p(r["p_value"]) for r in rows}
  assert {(r["wins"], r["outcome"]) for r in rows} == {(20, statistics.LEARNED_AHEAD)}
  learned = f"{rows[0]['learned_mean_loss']:.3f}"
  baselines = _range([r["baseline_mean_loss"] for r in rows])
  assert f"mean test loss {learned} against {baselines} (20 of 20, p = {p})" in row


@pytest.mark.parametrize("evaluation", ["fig6", "fig6_adam_reg_decay_1000"])
@pytest.mark.parametrize(
  "learned, baseline, metric, name",
  [
    ("L_train", "adam+reg+decay (L_train)", "mean_loss", "mean training loss"),
    ("L_valid", "adam+reg+decay (L_valid)", "final_test_loss", "final test loss"),
    ("L_valid", "adam+reg+decay (L_valid)", "mean_test_loss", "mean test loss"),
  ],
)
def test_fig6c_each_theta_against_its_search_winner(
  found, table, evaluation, learned, baseline, metric, name
):
  """The README's Fig. 6c row: the 100-configuration searches' winners on Fig. 6's tasks, and the
  1,000-configuration search's on seed 6's."""
  (r,) = _rows(found, evaluation, learned, metric, [baseline])
  means = f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"
  assert f"{name} {means}: {statistics.claim(r)}" in table["Fig. 6c"]


def test_app_h_the_shipped_theta_against_tuned_adam(found, table):
  (r,) = _rows(found, "generated_bn_cnn_train", "shipped", "mean_loss", [f"adam {TRAIN}"])
  assert f"against LR-tuned Adam wins {statistics.claim(r)} held-out tasks" in table["App. H"]


@pytest.mark.parametrize(
  "name, problem, learned",
  [
    ("8 channels", "cnn_8_channels", "L_valid"),
    ("32 channels", "cnn_32_channels", "L_valid"),
    ("6 layers", "cnn_6_layers", "L_valid"),
    ("16x16 images", "images_16x16", "L_valid"),
    ("no batch norm", "cnn_no_batch_norm", "L_valid"),
    ("L_train theta:", "cnn_no_batch_norm", "L_train"),
  ],
)
def test_app_e_out_of_family(found, table, name, problem, learned):
  (r,) = _rows(found, f"out_of_family/{problem}", learned, "mean_loss")
  assert f"{name} {statistics.claim(r)}" in table["App. E"]


def test_app_e_the_mlp_loses_with_both_thetas(found, table):
  rows = [r for r in found if r["evaluation"] == "out_of_family/mlp_2x32"]
  rows = [r for r in rows if r["metric"] == "mean_loss"]
  assert {(r["wins"], r["outcome"]) for r in rows} == {(0, statistics.BASELINE_AHEAD)}
  assert "MLP 0 of 5 for both, baseline ahead" in table["App. E"]


def test_five_tasks_cannot_give_a_sign_test_p_below_its_stated_floor(table):
  floor = statistics.format_p(statistics.sign_test_p(5, 0))
  assert f"no count of 5 gives a sign test p below {floor}" in table["App. E"]
  assert f"5 of 5 is p = {floor} by the sign test" in table["Fig. 6 at 10 minutes"]


# "k of n (p = ...; difference m [low, high])", as statistics.claim writes it.
CLAIM = re.compile(r"\d+ of \d+ \(p = [^;()]+; difference -?[\d.]+ \[-?[\d.]+, -?[\d.]+\]\)")
DOCS = (
  "README.md",
  "docs/evaluation.md",
  "docs/pretrained.md",
  "docs/results.md",
  "docs/paper_family.md",
)


@pytest.mark.parametrize("name", DOCS)
def test_every_claim_with_an_interval_in_the_docs_is_a_shipped_comparisons(found, name):
  """Each "k of n (p = ...; difference ...)" in the docs is a shipped comparison's, and one that
  is not a win says so right after it: "not resolved at this size", or "baseline ahead"."""
  with open(os.path.join(testing_utils.REPO, name)) as f:
    text = re.sub(r"\s+", " ", f.read())  # Claims may be wrapped over lines.
  outcomes = {}
  for r in found:
    outcomes.setdefault(CLAIM.match(statistics.claim(r)).group(0), set()).add(r["outcome"])
  for match in CLAIM.finditer(text):
    assert match.group(0) in outcomes, f"{name}: {match.group(0)} is no shipped comparison's"
    (outcome,) = outcomes[match.group(0)]
    after = text[match.end() : match.end() + 120]
    if outcome == statistics.NOT_RESOLVED:
      assert statistics.NOT_RESOLVED in after, f"{name}: {match.group(0)} is not resolved"
    elif outcome == statistics.BASELINE_AHEAD:
      assert "baseline ahead" in after, f"{name}: {match.group(0)} is the baseline's"


def _progress(run):
  path = os.path.join(testing_utils.REPO, "pretrained", run, "evaluation_progress.jsonl")
  with open(path) as f:
    return [json.loads(line) for line in f]


def test_the_l_valid_theta_against_adam_over_outer_training():
  """docs/pretrained.md: on final test loss below Adam's from outer step 300 on on the outer-test
  tasks, from 350 on on the outer-train ones (0.554 at 300); training loss from 250 on."""
  records = _progress("generated_bn_cnn_valid")
  path = os.path.join(
    testing_utils.REPO, "pretrained", "generated_bn_cnn_valid", "evaluation_reference.json"
  )
  with open(path) as f:
    adam = json.load(f)

  def first_step_from_which(split, metric):
    below = [r[split][metric] < adam[split][metric] for r in records]
    steps = [r["outer_step"] for r in records]
    return next(s for i, s in enumerate(steps) if all(below[i:]))

  assert first_step_from_which("outer_test", "final_test_loss") == 300
  assert first_step_from_which("outer_train", "final_test_loss") == 350
  assert first_step_from_which("outer_train", "mean_train_loss") == 250
  assert first_step_from_which("outer_test", "mean_train_loss") == 250
  later = [r for r in records if r["outer_step"] >= 300]
  test = [r["outer_test"]["final_test_loss"] for r in later]
  train = [r["outer_train"]["final_test_loss"] for r in later if r["outer_step"] >= 350]
  (at_300,) = [r["outer_train"]["final_test_loss"] for r in later if r["outer_step"] == 300]
  with open(os.path.join(testing_utils.REPO, "docs", "pretrained.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  assert (
    f"from outer step 300 on on the outer-test tasks ({_range(test)} against "
    f"{adam['outer_test']['final_test_loss']:.3f}), and from outer step 350 on on the outer-train "
    f"tasks ({_range(train)} against {adam['outer_train']['final_test_loss']:.3f}; at step 300 it "
    f"is still above, {at_300:.3f}); its mean training loss is below Adam's on both from outer "
    "step 250 on"
  ) in text


@pytest.mark.parametrize("directory", list(shipped.OUT_OF_FAMILY))
def test_the_out_of_family_tables_in_the_docs_are_the_shipped_ones(directory):
  path = os.path.join(testing_utils.REPO, "pretrained", directory, shipped.OUT_OF_FAMILY_TABLE)
  with open(path) as f:
    table = f.read()
  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    assert table in f.read()


def _paper_family(found, learned, metric, refined=False, evaluation="paper_family"):
  return [
    r for r in _rows(found, evaluation, learned, metric) if ("refined" in r["baseline"]) == refined
  ]


def test_fig6_on_the_papers_family(found, table):
  """The README's row gives the 5-init evaluation, with the 1,000-configuration search's
  Adam+Reg+Decay among the four baselines."""
  row = table["Fig. 6 on Sec. 4.2's CNN"]
  train = _paper_family(found, "L_train", "mean_loss", evaluation="paper_family_5_inits")
  assert len(train) == 4 and all(r["wins"] == r["num_tasks"] == 20 for r in train)
  assert "| 20 tasks x 5 inits, CNN without batch norm" in row
  assert f"mean training loss {train[0]['learned_mean_loss']:.3f}" in row
  assert _range([r["baseline_mean_loss"] for r in train]) in row
  assert "20 of 20 each, p = 1.9e-06" in row
  assert all(statistics.format_p(r["p_value"]) == "1.9e-06" for r in train)
  valid = {
    r["baseline"]: r
    for r in _paper_family(found, "L_valid", "final_test_loss", evaluation="paper_family_5_inits")
  }
  assert f"final test loss {valid[f'adam {VALID}']['learned_mean_loss']:.3f}" in row
  for kind, name in (("adam", "Adam"), ("rmsprop", "RMSProp")):
    r = valid[f"{kind} {VALID}"]
    assert f"{name}'s {r['baseline_mean_loss']:.3f} ({statistics.claim(r)})" in row, (
      statistics.claim(r)
    )
  searched = next(v for b, v in valid.items() if b.startswith("adam+reg+decay "))
  assert (
    f"Adam+Reg+Decay's {searched['baseline_mean_loss']:.3f} ({statistics.claim(searched)})" in row
  )
  sgdm = next(v for b, v in valid.items() if b.startswith("sgdm "))
  assert f"SGD+momentum's {sgdm['baseline_mean_loss']:.3f}" in row and sgdm["wins"] == 20
  with open(
    os.path.join(
      testing_utils.REPO, "pretrained", "paper_family", "evaluation_5_inits", "operative_config.gin"
    )
  ) as f:
    config = f.read()
  assert "evaluate.num_inits = 5" in config


def test_the_paper_scale_cost_table_recomputes_from_its_measurement():
  path = os.path.join(testing_utils.REPO, "benchmarks", "results")
  with open(os.path.join(path, "local_workers_paper_samples_intra1.json")) as f:
    per_step = json.load(f)["seconds_per_inner_step_of_a_sample"]
  samples, first_k, last_k, steps = 128, 53, 10_000, 5_000
  mean_k = (50 + last_k) / 2
  total = samples * steps * mean_k
  with open(os.path.join(testing_utils.REPO, "docs", "performance.md")) as f:
    text = f.read().split("## What the paper's scale costs", 1)[1]
  assert f"{per_step:.4f} s per inner step" in re.sub(r"\s+", " ", text)
  assert f"| {samples * first_k:,} | {samples * first_k * per_step:.0f} s here" in text
  last = samples * last_k * per_step
  assert f"| {samples * last_k:,} | {last / 3600:.1f} h here; {last / 128 / 60:.1f} min" in text
  assert f"| {total:.3e} | {total * per_step / 3600 / 24 / 365:.1f} years here; " in text
  assert f"{total * per_step / 128 / 3600 / 24:.1f} days on 128 workers" in text
  assert f"| {round(total * per_step / 3600, -2):,.0f} |" in text
  assert f"(mean K {mean_k:,.0f})" in text


EXAMPLE = os.path.join(testing_utils.REPO, "examples", "own_keras_model")
# The objective Adam's learning rate is tuned on for each metric (tuning.py, reporting.py).
TUNED_ON = {
  "mean_loss": "training",
  "mean_test_loss": "validation",
  "final_test_loss": "validation",
}


@pytest.fixture(scope="module")
def example_readme():
  with open(os.path.join(EXAMPLE, "README.md")) as f:
    return f.read()


def _example_results(name):
  with open(os.path.join(EXAMPLE, "results", name)) as f:
    return json.load(f)


@pytest.mark.parametrize(
  "name",
  [
    "summary.json",
    os.path.join("held_out_30_tasks", "summary.json"),
    os.path.join("selection_step_cap", "summary.json"),
    os.path.join("outer_train_tasks", "summary.json"),
  ],
)
def test_the_own_model_examples_comparison_tables_are_its_evaluations(example_readme, name):
  """Each comparison of the example's committed evaluations is a row of a table in its README:
  the two means and the count with its sign test and interval (statistics.claim)."""
  for c in _example_results(name)["comparisons"]:
    row = (
      f"| {c['metric_name']} (Adam tuned on {TUNED_ON[c['metric']]} loss) | "
      f"{c['learned_mean_loss']:.4f} | {c['baseline_mean_loss']:.4f} | "
      f"{statistics.claim(statistics.of_comparison(c))} |"
    )
    assert row in example_readme, row


def test_the_own_model_examples_model_fit_table_and_time_are_its_results(example_readme):
  for name, losses in _example_results("fit_with_theta.json")["results"].items():
    label = "learned" if name == "learned" else f"Adam, lr {name.split('=')[1]}"
    row = (
      f"| {label} | {losses['train_loss']:.4f} | {losses['test_loss']:.4f} | "
      f"{losses['test_accuracy']:.3f} |"
    )
    assert row in example_readme, row
  seconds = _example_results("wall_clock.json")
  text = re.sub(r"\s+", " ", example_readme)
  assert f"{seconds['total_seconds'] / 60:.1f} minutes" in text
  for stage in ("total", "train_local", "fit_with_theta", "cpu"):
    assert f"{seconds[stage + '_seconds']} s" in text, stage


def _benchmark(name):
  with open(os.path.join(testing_utils.REPO, "benchmarks", "results", name)) as f:
    return json.load(f)


def test_the_task_batch_tables_are_their_benchmarks():
  with open(os.path.join(testing_utils.REPO, "docs", "performance.md")) as f:
    text = f.read().split("## Many tasks' samples in one call", 1)[1]
  text = text.split("## What the paper's scale costs", 1)[0]
  batched = _benchmark("batched_worker_quickstart.json")
  assert f"K = {batched['num_steps']}" in text
  for m in batched["measurements"]:
    row = (
      f"| {m['tasks']} | {m['separate']['samples_per_second']:.3f} | "
      f"{m['batched']['samples_per_second']:.3f} | "
      f"{m['batched_over_separate_samples_per_second']:.2f} |"
    )
    assert row in text, row
  for m in _benchmark("vectorized_samples_quickstart.json")["measurements"]:
    row = (
      f"| {m['tasks']} | {m['vectorized']['first_call_seconds']:.0f} s | "
      f"{m['vectorized_over_separate_time']:.2f} | {m['max_relative_difference']:.1e} |"
    )
    assert row in text, row
  flat = re.sub(r"\s+", " ", text)
  grouped = _benchmark("batched_worker_grouped_quickstart.json")
  assert grouped["variants"] == ["separate", "batched", "grouped"] and grouped["rounds"] == 7
  assert f"K = {grouped['num_steps']}, B plain workers" in flat
  for m in grouped["measurements"]:
    row = (
      f"| {m['tasks']} | {m['separate']['samples_per_second']:.3f} | "
      f"{m['batched']['samples_per_second']:.3f} | {m['grouped']['samples_per_second']:.3f} | "
      f"{m['batched_over_separate_samples_per_second']:.2f} | "
      f"{m['grouped_over_separate_samples_per_second']:.2f} | "
      f"{m['batched']['first_call_seconds']:.0f} s / {m['grouped']['first_call_seconds']:.0f} s |"
    )
    assert row in text, row
  gains = [
    m["grouped_over_separate_samples_per_second"]
    for m in grouped["measurements"]
    if m["tasks"] >= 2
  ]
  assert (
    min(gains) > 1
    and (
      f"The grouped network gives {min(gains):.2f}-{max(gains):.2f}x the samples per second of B "
      "workers from B = 2"
    )
    in flat
  )
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    outer_training = re.sub(r"\s+", " ", f.read())
  assert f"{min(gains):.2f}-{max(gains):.2f}x the samples per second of B workers" in outer_training
  paper = _benchmark("batched_worker_grouped_paper.json")
  assert paper["gin_file"] == ["gin/paper/train_objective.gin"]
  (m,) = paper["measurements"]
  slower = m["grouped_over_separate_samples_per_second"]
  assert (
    slower < 1
    and (f"K = {paper['num_steps']}, B = {m['tasks']}, {paper['rounds']} interleaved rounds")
    in flat
  )
  assert (
    f"{m['separate']['samples_per_second']:.3f} samples/s for {m['tasks']} plain workers against "
    f"{m['grouped']['samples_per_second']:.3f} grouped ({slower:.2f}x)"
  ) in flat
  assert f"but {slower:.2f}x at the paper's (B = 8)" in outer_training
  with open(os.path.join(testing_utils.REPO, "docs", "performance.md")) as f:
    costs = re.sub(r"\s+", " ", f.read().split("## What the paper's scale costs", 1)[1])
  assert f"made {slower:.2f}x the samples per second of 8 plain workers" in costs
  run1 = _benchmark("batched_worker_grouped_quickstart_run1.json")["measurements"]
  assert (
    "gave grouped / plain "
    + ", ".join(f"{m['grouped_over_separate_samples_per_second']:.2f}" for m in run1)
    + " and batched / plain "
    + ", ".join(f"{m['batched_over_separate_samples_per_second']:.2f}" for m in run1)
    + " for B = 1, 2, 4, 8"
  ) in flat
  vectorized = _benchmark("batched_worker_vectorized_quickstart.json")
  forms = ("separate", "batched", "grouped", "vectorized", "grouped_vectorized")
  assert vectorized["variants"] == list(forms) and vectorized["rounds"] == 5
  assert vectorized["num_steps"] == 20 and vectorized["gin_file"] == ["gin/quickstart.gin"]
  for m in vectorized["measurements"]:
    speeds = " / ".join(f"{m[k]['samples_per_second']:.3f}" for k in forms)
    ratios = " | ".join(f"{m[f'{k}_over_separate_samples_per_second']:.2f}" for k in forms[1:])
    assert f"| {m['tasks']} | {speeds} | {ratios} |" in text, m["tasks"]
  (last,) = [m for m in vectorized["measurements"] if m["tasks"] == 8]
  small = [m for m in vectorized["measurements"] if m["tasks"] <= 4]

  def span(key):
    values = [m[f"{key}_over_separate_samples_per_second"] for m in small]
    assert key == "grouped" or max(values) < 1.06
    return f"{min(values):.2f}-{max(values):.2f}"

  assert all(m["vectorized_over_separate_samples_per_second"] < 1 for m in small)
  assert all(
    m["grouped_vectorized"]["samples_per_second"] < m["grouped"]["samples_per_second"]
    for m in small
  )
  assert (
    f"for B up to 4 (vectorized {span('vectorized')}), and with the grouped network it gives "
    f"less than the grouped network alone ({span('grouped_vectorized')} against "
    f"{span('grouped')})"
  ) in flat
  assert (
    f"(vectorized {last['vectorized_over_separate_samples_per_second']:.2f} against batched "
    f"{last['batched_over_separate_samples_per_second']:.2f}; grouped and vectorized "
    f"{last['grouped_vectorized_over_separate_samples_per_second']:.2f} against grouped "
    f"{last['grouped_over_separate_samples_per_second']:.2f})"
  ) in flat
  assert "It is not a gain on this machine." in flat
  assert "on this CPU it is slower, or level at B = 8" in outer_training
  convolution = _benchmark("batched_convolution_cpu.json")
  assert convolution["onednn"] == "default (on)" and convolution["grouped_filter_gradient"] == "ok"
  assert (
    f"takes {convolution['batched_over_separate_time']:.1f}x the time of the B tasks' own "
    f"`tf.nn.conv2d` ops, with the same gradients (largest difference "
    f"{convolution['max_gradient_difference']:.1e}); the grouped convolution takes "
    f"{convolution['grouped_over_separate_time']:.2f}x (largest difference "
    f"{convolution['grouped_max_gradient_difference']:.1e})"
  ) in flat
  eigen = _benchmark("batched_convolution_cpu_eigen.json")
  assert eigen["onednn"] == "0" and "not supported on CPU" in eigen["grouped_filter_gradient"]
  assert f"the batched matrix products take {eigen['batched_over_separate_time']:.1f}x." in flat


def test_the_readmes_task_batch_row_is_its_benchmarks(table):
  row = table["beyond: many tasks' samples in one call"]
  ratios = [
    m["batched_over_separate_samples_per_second"]
    for m in _benchmark("batched_worker_quickstart.json")["measurements"]
  ]
  assert ", ".join(f"{r:.2f}x" for r in ratios) + " for B = 1, 2, 4, 8" in row
  convolution = _benchmark("batched_convolution_cpu.json")
  assert f"batched matmuls {convolution['batched_over_separate_time']:.1f}x" in row
  assert f"{convolution['grouped_over_separate_time']:.2f}" == "1.25"
  (paper,) = _benchmark("batched_worker_grouped_paper.json")["measurements"]
  assert (
    f"at the paper's size (32 channels, batches of 128) "
    f"{paper['grouped_over_separate_samples_per_second']:.2f}x for B = 8, since grouped "
    "convolutions are slower on CPU than the tasks' own (1.25x at 16 channels"
  ) in row

  def ratios(name, form, unit):
    measurements = _benchmark(name)["measurements"]
    values = [m[f"{form}_over_separate_samples_per_second"] for m in measurements]
    return ", ".join(f"{r:.2f}{unit}" for r in values) + " for B = 1, 2, 4, 8"

  grouped = ratios("batched_worker_grouped_quickstart.json", "grouped", "x")
  assert f"`BatchedWorker.group_models = True`: {grouped}" in row
  both = ratios("batched_worker_vectorized_quickstart.json", "grouped_vectorized", "")
  assert (
    f"the learned updates vectorised across tasks are slower here (grouped and vectorised: {both})"
  ) in row


def test_the_relative_step_caps_probe_in_the_docs_is_its_summaries():
  def means(problem, variant):
    path = os.path.join(
      testing_utils.REPO, "pretrained", "app_e", "update_probe", problem, variant, "summary.json"
    )
    with open(path) as f:
      candidates = json.load(f)["candidates"]
    return {
      name: (float(np.mean(c["per_task"]["mean_loss"])), c.get("training_check"))
      for name, c in candidates.items()
    }

  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  small, large = means("mlp_2x32", "relative"), means("mlp_3x128", "relative")
  gate = means("mlp_2x32", "gate")
  assert (
    f"mean training loss {small['L_train'][0]:.2f} (L_train) and {small['L_valid'][0]:.2f} "
    f"(L_valid) on the 2x32 MLP against {gate['L_train'][0]:.2f} and {gate['L_valid'][0]:.2f} "
    f"with the gate alone, and {large['L_train'][0]:.2f} and {large['L_valid'][0]:.2f} on the "
    "3x128 MLP"
  ) in text
  trained = sum(r[1]["trained"] for r in (*small.values(), *large.values()))
  assert f"by `training_check` {trained} of the 8 runs trained" in text


def test_the_relative_step_caps_cost_in_family_in_the_docs_is_its_summaries():
  def mean_loss(variant):
    path = os.path.join(
      testing_utils.REPO,
      "pretrained",
      "app_e",
      "update_probe",
      "in_family",
      variant,
      "summary.json",
    )
    with open(path) as f:
      candidates = json.load(f)["candidates"]
    return [float(np.mean(candidates[n]["per_task"]["mean_loss"])) for n in ("L_train", "L_valid")]

  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  (rel_train, rel_valid), (paper_train, paper_valid) = mean_loss("relative"), mean_loss("paper")
  assert (
    f"mean training loss {rel_train:.2f} and {rel_valid:.2f} on the batch-normed CNN against "
    f"{paper_train:.2f} and {paper_valid:.2f} with the paper's update"
  ) in text


def _seed_rows(study, metric, steps, adam):
  """Per seed of a seed study: (seed, its outer-test `metric` at `steps` as the docs print it,
  its records below `adam`)."""
  for seed, run in sorted(study["seeds"].items()):
    records = {r["outer_step"]: r for r in run["records"]}
    cells = [f"{records[k]['outer_test'][metric]:.3f}" for k in steps]
    yield seed, cells, [r for r in run["records"] if r["outer_test"][metric] < adam]


def test_fig5_on_the_papers_family_is_its_seed_study():
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family_seeds.json")) as f:
    study = json.load(f)["paper_family"]
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family.md")) as f:
    text = f.read().split("## Fig. 5 on the paper's family", 1)[1]
  adam = study["reference"]["outer_test"]["mean_train_loss"]
  assert f"(LR-tuned Adam: {adam:.3f})" in text
  passed = 0
  for seed, cells, below in _seed_rows(study, "mean_train_loss", (0, 10, 40, 80, 120, 160), adam):
    first = (
      f"outer step {below[0]['outer_step']} ({below[0]['inner_steps']:,} inner steps)"
      if below
      else "never"
    )
    assert f"| {seed} | " + " | ".join(cells) + f" | {first} |" in text
    passed += bool(below)
  assert f"depends on the seed: {passed} of {len(study['seeds'])} here" in re.sub(r"\s+", " ", text)


def test_fig6_on_the_papers_family_against_the_refined_adam(found, table):
  # The sceptic's Adam (lr, beta1 and eps refined per task) beside the paper's baselines, in the
  # same evaluation: the doc's table and the README row are its comparisons.
  refined = _refined_adam(found, "paper_family")
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family.md")) as f:
    text = f.read().split("### Against a better-tuned Adam", 1)[1]
  names = {"mean_loss": "mean training loss", "mean_test_loss": "mean test loss"}
  names["final_test_loss"] = "final test loss"
  for (learned, metric), r in refined.items():
    if (learned, metric) == ("L_train", "mean_test_loss"):
      continue  # Not in the doc's table.
    cell = f"{r['baseline_mean_loss']:.3f}: {statistics.claim(r)}"
    assert f"| {learned}, {names[metric]} | {r['learned_mean_loss']:.3f} | {cell} |" in text, cell
  # The README row leads with the same Adam at 5 inits (the headline evaluation) and names the
  # 1-init result beside it.
  row = table["Fig. 6 on Sec. 4.2's CNN"]
  at_5_inits = _refined_adam(found, "paper_family_5_inits")
  r = at_5_inits[("L_train", "mean_loss")]
  lead = f"L_train theta {r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"
  assert f"{lead} ({statistics.claim(r)})" in row
  r = at_5_inits[("L_valid", "final_test_loss")]
  assert (
    f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f} ({statistics.claim(r)})"
    in row
  )
  r = refined[("L_valid", "final_test_loss")]
  assert f"{r['baseline_mean_loss']:.3f} against {r['learned_mean_loss']:.3f}, not resolved" in row
  # The doc's count of the refined Adam's beta1 choices is summary.json's.
  _assert_beta1_counts(re.sub(r"\s+", " ", text), ("paper_family", "evaluation"), "tasks")


def test_fig5_for_l_valid_on_the_papers_family_is_its_seed_study(table):
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family_seeds_valid.json")) as f:
    study = json.load(f)["paper_family_valid"]
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family.md")) as f:
    text = f.read().split("### For L_valid", 1)[1]
  assert study["reference"]["objective"] == "valid"
  adam = study["reference"]["outer_test"]["final_test_loss"]
  assert f"(validation-tuned Adam: {adam:.3f})" in text
  passed = 0
  steps = (0, 10, 20, 40, 80, 120, 160)
  for seed, cells, below in _seed_rows(study, "final_test_loss", steps, adam):
    first = f"outer step {below[0]['outer_step']}" if below else "never"
    assert f"| {seed} | " + " | ".join(cells) + f" | {first} |" in text
    passed += bool(below)
  words = re.sub(r"\s+", " ", text)
  assert f"No L_valid seed leaves the plateau in 160 outer steps: {passed} of 3" in words
  assert passed == 0  # "No seed" and the README's "0 of 3" say so.
  row = table["Fig. 6 on Sec. 4.2's CNN"]
  assert f"{passed} of {len(study['seeds'])} L_valid seeds leave it in 160 outer steps" in row


def _search_winners(path, records, threshold, same_winner=True):
  """{objective: (the winner's id, its objective as the docs print it, configurations below
  `threshold`)} of one rule's search records, each winner checked against its best.json; with
  `same_winner`, one configuration must win both objectives."""
  kind = records[0]["kind"]
  winners = {}
  for objective, key in (("train", "train_mean"), ("valid", "mean")):
    finite = [r for r in records if np.isfinite(r[key])]
    winner = min(finite, key=lambda r: r[key])
    with open(os.path.join(path, f"L_{objective}", "best.json")) as f:
      assert json.load(f)["best"][kind]["id"] == winner["id"]
    winners[objective] = (
      winner["id"],
      f"{winner[key]:.3f}",
      sum(r[key] < threshold for r in finite),
    )
  if same_winner:
    assert winners["train"][0] == winners["valid"][0]  # "The same configuration wins both"
  return winners


def _search_row_cells(text, winners):
  """The cells of the docs' table row naming the winner, from its L_train column on."""
  (row,) = [line for line in text.splitlines() if f"`{winners['train'][0]}`" in line]
  return [c.strip() for c in row.split("|")][3:6]


def _search_records(path):
  with open(os.path.join(path, "results.jsonl")) as f:
    return [json.loads(line) for line in f if line.strip()][1:]


def test_app_f_searches_in_the_docs_are_their_shipped_results():
  path = os.path.join(testing_utils.REPO, "pretrained", "app_f")
  records = _search_records(path)
  with open(os.path.join(testing_utils.REPO, "docs", "pretrained.md")) as f:
    text = f.read().split("### App. F", 1)[1]
  for kind in ("rmsprop", "sgdm"):
    mine = [r for r in records if r["kind"] == kind]
    assert len(mine) == 50
    best = _search_winners(path, mine, 0.9)
    assert _search_row_cells(text, best) == [
      best["train"][1],
      best["valid"][1],
      f"{best['train'][2]} / {best['valid'][2]} of 50",
    ]


def test_the_papers_family_search_at_1000_in_the_docs_is_its_shipped_results():
  path = os.path.join(testing_utils.REPO, "pretrained", "paper_family", "adam_reg_decay")
  records = _search_records(path)
  assert len(records) == 1000 and {r["kind"] for r in records} == {"adam"}
  winners = _search_winners(path, records, 2.0)
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family.md")) as f:
    text = f.read().split("### Against Adam+Reg+Decay searched at 1,000", 1)[1]
  assert _search_row_cells(text, winners) == [
    winners["train"][1],
    winners["valid"][1],
    f"{winners['train'][2]} / {winners['valid'][2]} of 1000",
  ]


BN_SEARCH_AT_1000 = os.path.join(testing_utils.REPO, "pretrained", "fig6", "adam_reg_decay_1000")


def _pretrained_doc_section(title):
  with open(os.path.join(testing_utils.REPO, "docs", "pretrained.md")) as f:
    return f.read().split(f"### {title}", 1)[1].split("\n### ", 1)[0]


def _assert_theta_metric_table(text, records):
  """Every comparison in `records` is a cell of the doc table in `text` whose rows are
  "| <theta>, <metric> | <theta's mean> | ... <baseline's mean>: <claim> ... |"."""
  names = {"mean_loss": "mean training loss", "mean_test_loss": "mean test loss"}
  names["final_test_loss"] = "final test loss"
  rows = {
    line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line[:3] == "| L"
  }
  for r in records:
    row = rows[f"{r['learned']}, {names[r['metric']]}"]
    assert f"| {r['learned_mean_loss']:.3f} |" in row
    assert f"{r['baseline_mean_loss']:.3f}: {statistics.claim(r)}" in row, (r["baseline"], row)


def test_the_bn_familys_search_at_1000_in_the_docs_is_its_shipped_results():
  records = _search_records(BN_SEARCH_AT_1000)
  assert len(records) == 1000 and {r["kind"] for r in records} == {"adam"}
  winners = _search_winners(BN_SEARCH_AT_1000, records, 0.9, same_winner=False)
  text = _pretrained_doc_section("Adam+Reg+Decay searched at 1,000 configurations")
  for objective, column in (("train", 0), ("valid", 1)):
    (row,) = [line for line in text.splitlines() if line.startswith(f"| L_{objective} | ")]
    cells = [c.strip() for c in row.split("|")][1:-1]
    assert cells[1].startswith(f"`{winners[objective][0]}`"), (objective, cells[1])
    assert cells[2 + column] == winners[objective][1], (objective, cells)
    assert cells[4] == f"{winners[objective][2]} of 1000", (objective, cells)
  flat = re.sub(r"\s+", " ", text)
  hours = sum(r["seconds"] for r in records) / 3600
  assert f"({hours:.1f} hours of process time, in two processes)" in flat
  # The 100-configuration searches' winner on these tasks, and what ten times the draws gain.
  (earlier,) = [r for r in records if r["id"] == "adam/59"]
  best = {
    o: min(r[key] for r in records) for o, key in (("train", "train_mean"), ("valid", "mean"))
  }
  assert (
    f"(`adam/59`) scores {earlier['train_mean']:.3f} on L_train and {earlier['mean']:.3f} on "
    f"L_valid: ten times the draws improve the searched Adam by "
    f"{earlier['train_mean'] - best['train']:.3f} and {earlier['mean'] - best['valid']:.3f}"
  ) in flat


def test_the_bn_familys_search_at_1000_repeats_the_100_configuration_searches_runs():
  """Its first 100 configurations are the 100-configuration searches' (the same seed draws
  them), and their runs on its 4 tasks are those searches' runs on their first 4 tasks, to the
  bit: the docs compare the two searches' winners on that ground."""
  records = {r["id"]: r for r in _search_records(BN_SEARCH_AT_1000)}
  for objective, key in (("train", "train_objective"), ("valid", "objective")):
    path = os.path.join(testing_utils.REPO, "pretrained", "fig6", f"adam_reg_decay_L_{objective}")
    earlier = _search_records(path)
    assert len(earlier) == 100
    for r in earlier:
      assert records[r["id"]]["hparams"] == r["hparams"]
      assert records[r["id"]][key] == r["objective"][:4], (objective, r["id"])


def test_the_bn_familys_search_at_1000_table_is_its_shipped_evaluation(found):
  text = _pretrained_doc_section("Adam+Reg+Decay searched at 1,000 configurations")
  records = [r for r in found if r["evaluation"] == "fig6_adam_reg_decay_1000"]
  assert len(records) == 2 * 3  # Two thetas, three metrics, each against its objective's winner.
  _assert_theta_metric_table(text, records)
  # The L_train theta's mean training loss here and on Fig. 6's tasks.
  (here,) = _rows(found, "fig6_adam_reg_decay_1000", "L_train", "mean_loss")
  (there,) = _rows(found, "fig6", "L_train", "mean_loss", ["adam+reg+decay (L_train)"])
  flat = re.sub(r"\s+", " ", text)
  assert (
    f"L_train's mean training loss {here['learned_mean_loss']:.3f} here, "
    f"{there['learned_mean_loss']:.3f} there"
  ) in flat


def test_the_papers_family_5_init_table_is_the_shipped_evaluation(found):
  with open(os.path.join(testing_utils.REPO, "docs", "paper_family.md")) as f:
    text = f.read().split("### 20 tasks x 5 inits (the headline)", 1)[1].split("###", 1)[0]
  records = [r for r in found if r["evaluation"] == "paper_family_5_inits"]
  assert len(records) == 2 * 3 * 5  # Two thetas, three metrics, five baselines.
  _assert_theta_metric_table(text, records)


def test_the_partitions_table_is_what_the_partition_tests_measured():
  measured = _benchmark("partitions.json")
  with open(os.path.join(testing_utils.REPO, "docs", "cluster.md")) as f:
    text = f.read()
  section = text[text.index("## Partitions") : text.index("After all of them, in the same run")]
  cells = {
    row.split("|")[1].strip(): row.split("|")[3]
    for row in re.findall(r"^\| (?:a|the) .*", section, re.M)
  }

  def numbers(cell):
    return sorted(float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", cell))

  def of(*keys, extra=()):
    return sorted([round(measured[k], 1) for k in keys] + list(extra))

  cut = measured["cut_secs"]
  workers = [f"worker {w}" for w in (0, 1, 3)]
  chief_back = {round(measured[f"chief healed: {w} applied again after"], 1) for w in workers}
  expected = {
    f"a worker cut off for {cut} s, then healed": of(
      "outer steps while worker 0 was cut",
      "worker cut: detected after",
      "worker healed: applied again after",
    ),
    f"the chief cut off from every worker for {cut} s, then healed": of(
      *[f"chief cut: {w} detected after" for w in workers], extra=[15, *chief_back]
    ),
    "a cut in the middle of a sample's put": of(
      "cut mid-put: detected after",
      "cut mid-put: applied again after the heal",
      extra=[4866, 128, 2.5],
    ),
    "a cut in the middle of a theta read": of(
      "cut mid-read: detected after", "cut mid-read: applied again after the heal"
    ),
    f"a link flapping (down 3 s, up 3 s) for {cut} s": of(
      "flapping worker: samples applied while flapping"
    ),
    "a worker whose link never comes back": of("worker never back: exited after", extra=[1, 30]),
  }
  assert set(cells) == set(expected)
  for row, values in expected.items():
    assert numbers(cells[row]) == values, row
  back = [v for k, v in measured.items() if "applied again" in k]
  assert f"measured: {min(back):.1f}-{max(back):.1f} s." in " ".join(section.split())
  assert f"The tests cut for {cut} s" in " ".join(section.split())


def test_fig6_on_seed_6_in_the_docs_is_its_shipped_evaluation(found, table):
  """Fig. 6 again on tasks no choice used: docs/pretrained.md's table, and the README's row and
  status line, against pretrained/fig6/evaluation_seed_6/."""
  records = [r for r in found if r["evaluation"] == "fig6_seed_6"]
  assert len(records) == 2 * 3 * 5  # Two thetas, three metrics, Fig. 6's four and the refined.
  assert {r["num_tasks"] for r in records} == {20}
  text = _pretrained_doc_section("Every Fig. 6 baseline on tasks no choice used (seed 6)")
  _assert_theta_metric_table(text, records)
  row = table["Fig. 6a, b"].split("on seed 6's, which no choice used", 1)[1]
  train = _rows(found, "fig6_seed_6", "L_train", "mean_loss", FIG6_TRAIN)
  valid = _rows(found, "fig6_seed_6", "L_valid", "final_test_loss", FIG6_VALID)
  assert {r["outcome"] for r in train + valid} == {statistics.LEARNED_AHEAD}
  assert {r["wins"] for r in train} == {20}
  wins = [r["wins"] for r in valid]
  assert (
    f"L_train theta mean training loss {train[0]['learned_mean_loss']:.3f} against "
    f"{_range([r['baseline_mean_loss'] for r in train])} (20 of 20 each, every interval above "
    f"zero); L_valid theta final test loss {valid[0]['learned_mean_loss']:.3f} against "
    f"{_range([r['baseline_mean_loss'] for r in valid])} ({min(wins)}-{max(wins)} of 20, every "
    "interval above zero)"
  ) in row
  for name, words in (("README.md", "final test loss"), ("docs/results.md", "final test loss on")):
    with open(os.path.join(testing_utils.REPO, name)) as f:
      flat = re.sub(r"\s+", " ", f.read())
    assert f"{words} {min(wins)}-{max(wins)} of 20, every interval above zero" in flat, name
  _assert_the_refined_adam_on_seed_6(found, row)


def _assert_the_refined_adam_on_seed_6(found, row):
  """The sceptic's Adam on seed 6's tasks: the README's row and status line, docs/pretrained.md's
  paragraph and docs/results.md, against the shipped evaluation."""
  refined = _refined_adam(found, "fig6_seed_6")
  train = refined[("L_train", "mean_loss")]
  fast = refined[("L_valid", "mean_loss")]
  final = refined[("L_valid", "final_test_loss")]
  average = refined[("L_valid", "mean_test_loss")]
  assert train["outcome"] == statistics.BASELINE_AHEAD  # The L_train theta trains slower.
  assert {fast["outcome"], final["outcome"]} == {statistics.LEARNED_AHEAD}

  def pair(r):
    return f"{r['learned_mean_loss']:.3f} against {r['baseline_mean_loss']:.3f}"

  assert (
    f"L_train theta {pair(train)} ({statistics.claim(train)}), L_valid theta mean training loss "
    f"{pair(fast)} ({statistics.claim(fast)}), final test loss {pair(final)} "
    f"({statistics.claim(final)})"
  ) in row
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    readme = re.sub(r"\s+", " ", f.read())
  assert f"the theta winning {statistics.claim(train)}" in readme
  assert f"trains faster than it, {statistics.claim(fast)}, and ends" in readme
  assert f"test loss, {statistics.claim(final)}." in readme
  text = re.sub(
    r"\s+", " ", _pretrained_doc_section("Every Fig. 6 baseline on tasks no choice used (seed 6)")
  )
  assert (
    f"mean training loss {train['baseline_mean_loss']:.3f} against "
    f"{train['learned_mean_loss']:.3f}; the theta wins {statistics.claim(train)})"
  ) in text
  assert f"on {fast['wins']} of 20 ({pair(fast)}; {statistics.claim(fast).split('(', 1)[1]}" in text
  assert f"final test loss {pair(final)}, {final['wins']} of 20" in text
  assert f"test loss averaged over the run {average['wins']} of 20" in text
  _assert_beta1_counts(text, ("fig6", "evaluation_seed_6"), "task")
  with open(os.path.join(testing_utils.REPO, "docs", "results.md")) as f:
    results = re.sub(r"\s+", " ", f.read())
  assert f"trains slower (it wins {train['wins']} of 20, baseline ahead)" in results
  assert f"faster than that Adam ({fast['wins']} of 20)" in results
  assert f"loss ({final['wins']} of 20, interval above zero)" in results


def _refined_adam(found, evaluation):
  """{(theta, metric): the comparison} of one shipped evaluation's refined Adam, all six."""
  refined = {
    (r["learned"], r["metric"]): r
    for r in found
    if r["evaluation"] == evaluation and "refined" in r["baseline"]
  }
  assert len(refined) == 6
  return refined


def _assert_beta1_counts(text, path, unit):
  """The doc's "training loss: 0.25 on 6 <unit>, 0.5 on 12; validation loss: ..." is the refined
  Adam's beta1 choices in the summary.json under pretrained/<path>."""
  with open(os.path.join(testing_utils.REPO, "pretrained", *path, "summary.json")) as f:
    hparams = json.load(f)["tuned_hparams"]
  for objective, words in (("train", "training loss"), ("valid", "validation loss")):
    (beta1,) = [v["beta1"] for k, v in hparams.items() if k.endswith(f"on {objective} loss)")]
    counts = ", ".join(
      f"{b:g} on {beta1.count(b)}{f' {unit}' if i == 0 and objective == 'train' else ''}"
      for i, b in enumerate(sorted(set(beta1)))
    )
    assert f"{words}: {counts}" in text, counts


MAIN_JOB = os.path.join(testing_utils.REPO, "pretrained", "main_job")


def test_the_main_jobs_numbers_are_its_shipped_run(found, table):
  """The README's Fig. 6 row for the main job, its set-up comment's minutes and docs/evaluation.md's
  table, against the run shipped in pretrained/main_job/ (progress.jsonl, timeline.json, eval/)."""

  def one(learned, metric):
    (r,) = _rows(found, "main_job", learned, metric)
    return r

  row = table["Fig. 6 at 10 minutes"]
  for metric, name in (
    ("mean_loss", "mean training loss"),
    ("mean_test_loss", "mean test loss"),
    ("final_test_loss", "final test loss"),
  ):
    r = one("learned", metric)
    adam = "LR-tuned Adam's " if metric == "mean_loss" else ""
    tasks = " on 5 held-out tasks" if metric == "mean_loss" else ""
    assert (
      f"{name} {r['learned_mean_loss']:.3f} against {adam}{r['baseline_mean_loss']:.3f}{tasks}: "
      f"{statistics.claim(r)}"
    ) in row, metric
  progress = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  assert progress[-1]["outer_step"] == 140
  minutes = progress[-1]["elapsed_seconds"] / 60
  assert f"its 140 outer steps ({minutes:.1f} minutes)" in row
  with open(os.path.join(MAIN_JOB, "timeline.json")) as f:
    timeline = json.load(f)
  assert timeline["exit_status"] == 0
  seconds = {
    k: np.datetime64(timeline[k].rstrip("Z"))
    for k in ("comparison_first_run", "comparison_last_run")
  }
  comparison = (seconds["comparison_last_run"] - seconds["comparison_first_run"]) / np.timedelta64(
    60, "s"
  )
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    readme = f.read()
  assert (
    f"~{round(timeline['seconds'] / 60)} min:\n#    1-3 to install, {minutes:.1f} of "
    f"outer-training, {comparison:.1f} for the final comparison"
  ) in readme
  # docs/evaluation.md's table: each theta's cell of each metric.
  with open(os.path.join(testing_utils.REPO, "docs", "evaluation.md")) as f:
    text = f.read().split("## The quickstart's final comparison", 1)[1].split("\n## ", 1)[0]
  for learned in ("learned", "shipped"):
    for metric in ("mean_loss", "mean_test_loss", "final_test_loss"):
      r = one(learned, metric)
      assert f"| {r['learned_mean_loss']:.3f}: {statistics.claim(r)} |" in text, (learned, metric)
  assert f"This is {minutes:.1f}\nminutes of outer-training" in text
  # docs/performance.md's account of the run.
  with open(os.path.join(testing_utils.REPO, "docs", "performance.md")) as f:
    flat = re.sub(r"\s+", " ", f.read().split("## The quickstart now", 1)[1])
  started = np.datetime64(timeline["started"].rstrip("Z"))
  clock = np.datetime64(timeline["outer_step_1"].rstrip("Z")) - np.timedelta64(
    round(progress[0]["elapsed_seconds"] * 1e6), "us"
  )
  (at_80,) = [r["elapsed_seconds"] for r in progress if r["outer_step"] == 80]
  comparison_seconds = comparison * 60
  assert (
    f"{timeline['seconds']} s for the whole command, of which "
    f"{(clock - started) / np.timedelta64(1, 's'):.0f} s to create the environment"
  ) in flat
  assert (
    f"140 outer steps in {progress[-1]['elapsed_seconds']:.1f} s (the first 80 in {at_80:.1f} s)"
    in flat
  )
  assert f"in {comparison_seconds:.0f} s." in flat
  assert f"mean training loss of {one('learned', 'mean_loss')['learned_mean_loss']:.3f}" in flat


def test_the_quickstarts_outer_loss_table_is_the_shipped_runs():
  progress = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    text = f.read().split("| outer steps | mean outer loss (L_train) |", 1)[1].split("\n\n", 1)[0]
  rows = [line for line in text.splitlines() if line.startswith("| ") and "-" in line]
  assert len(rows) == 8
  for row in rows:
    span, loss = [c.strip() for c in row.strip("|").split("|")]
    first, last = map(int, span.split("-"))
    losses = [r["outer_loss"] for r in progress if first <= r["outer_step"] <= last]
    assert loss == f"{np.mean(losses):.2f}", span


def test_app_f_on_seed_6_in_the_docs_is_its_shipped_evaluation(found, table):
  records = [r for r in found if r["evaluation"] == "app_f_seed_6"]
  assert len(records) == 2 * 3 * 2  # Two thetas, three metrics, two searched rules.
  text = _pretrained_doc_section("App. F: RMSProp and SGD+momentum +Reg+Decay")
  text = text.split("**On tasks no choice used (seed 6).**", 1)[1]
  _assert_theta_metric_table(text, records)
  row = table["App. F"].split("on seed 6's tasks", 1)[1]
  train = _rows(found, "app_f_seed_6", "L_train", "mean_loss")
  wins = sorted(r["wins"] for r in train)
  baselines = sorted(train, key=lambda r: r["baseline"])  # rmsprop, then sgdm.
  assert (
    f"L_train theta {train[0]['learned_mean_loss']:.3f} against "
    f"{baselines[0]['baseline_mean_loss']:.3f} and {baselines[1]['baseline_mean_loss']:.3f} "
    f"({wins[0]}-{wins[-1]} of 20)"
  ) in row
  for r in _rows(found, "app_f_seed_6", "L_valid", "final_test_loss"):
    assert f"{r['baseline_mean_loss']:.3f} ({statistics.claim(r)})" in row, r["baseline"]


def _variances(run):
  """Fig. 4's numbers of one shipped run, from its progress.jsonl."""
  records = files.read_jsonl(os.path.join(testing_utils.REPO, "pretrained", run, "progress.jsonl"))
  rp, es = (np.array([r[k] for r in records]) for k in ("rp_variance", "es_variance"))
  weight = np.array([r["es_weight"] for r in records])
  ratio, quarters = rp / es, np.array_split(np.arange(len(records)), 4)
  top = int(np.argmax(ratio))
  return {
    "steps": len(records),
    "above": int(np.sum(rp > es)),
    "ratio": testing_utils.sci(ratio[top]),
    "step": records[top]["outer_step"],
    "weight_there": f"{weight[top]:.2f}",
    "max_weight": f"{weight.max():.3f}",
    "growth": f"{np.median(rp[quarters[-1]]) / np.median(rp[quarters[0]]):.1f}",
    "es_growth": f"{np.median(es[quarters[-1]]) / np.median(es[quarters[0]]):.1f}",
    "median_ratio": testing_utils.sci(np.median(ratio)),
  }


def test_fig4_in_the_docs_is_the_shipped_runs_variances(table):
  valid = _variances("generated_bn_cnn_valid")
  long = _variances("l_valid_alternatives/horizon_1000")
  main = _variances("main_job")
  assert main["above"] == 0 and valid["above"] > 0 and long["above"] > 0
  row = table["Fig. 4"]
  assert (
    f"g_rp's variance above g_es's at {valid['above']} of {valid['steps']} outer steps, up to "
    f"{valid['ratio']} times (step {valid['step']}, ES weight {valid['weight_there']} there), its "
    f"median {valid['growth']}x higher in the run's last quarter than in its first (g_es's "
    f"{valid['es_growth']}x); at horizon 1,000 (`pretrained/l_valid_alternatives/horizon_1000/`) "
    f"up to {long['ratio']} times; in the main job's {main['steps']} steps never (at most "
    f"{main['ratio']} of it)"
  ) in row
  assert f"its median stays below g_es's ({valid['median_ratio']} of it)" in row
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    doc = re.sub(r"\s+", " ", f.read())
  assert (
    f"stays below g_es's at all {main['steps']} outer steps (at most {main['ratio']} of it, at "
    f"step {main['step']}) and the merge gives ES a weight of at most {main['max_weight']}"
  ) in doc
  assert (
    f"above g_es's at {valid['above']} of its {valid['steps']} outer steps, up to {valid['ratio']} "
    f"times (step {valid['step']}, where ES takes a weight of {valid['weight_there']})"
  ) in doc
  assert f"up to {long['ratio']} times; over the L_valid run" in doc
  assert f"grows {valid['growth']}x from its first quarter to its last (g_es's " in doc
  assert f"({valid['median_ratio']} of it)." in doc
  with open(os.path.join(testing_utils.REPO, "docs", "results.md")) as f:
    results = re.sub(r"\s+", " ", f.read())
  assert (
    f"run: {valid['above']} of {valid['steps']} outer steps, up to {valid['ratio']} times; at "
    f"horizon 1,000 up to {long['ratio']} times)"
  ) in results


def _study(name, key):
  with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
    return json.load(f)[key]


@pytest.mark.parametrize(
  "name, key, metric, words",
  [
    ("quickstart_seeds.json", "quickstart", "mean_train_loss", "LR-tuned Adam on outer-test tasks"),
    (
      "quickstart_valid_seeds.json",
      "quickstart_valid",
      "final_test_loss",
      "validation-tuned Adam on outer-test final test loss",
    ),
  ],
)
def test_the_readmes_fig5_row_is_the_quickstarts_seed_studies(table, name, key, metric, words):
  study = _study(name, key)
  adam = study["reference"]["outer_test"][metric]
  firsts, ends = [], []
  for run in study["seeds"].values():
    below = [r for r in run["records"] if r["outer_test"][metric] < adam]
    assert below  # Every seed passes the baseline.
    firsts.append(below[0]["outer_step"])
    ends.append(run["records"][-1]["outer_test"][metric])
  n = len(study["seeds"])
  assert (
    f"{n} of {n} seeds pass {words} between outer steps {min(firsts)} and {max(firsts)}, end at "
    f"{min(ends):.2f}-{max(ends):.2f} against {adam:.2f}"
  ) in table["Fig. 5"]


def test_the_readmes_fig8_row_is_the_ablation_studys_medians(table):
  study = _study(os.path.join("ablations_small", "ablations.json"), "results")
  names = {
    "merged": "merged",
    "estimator_rp": "g_rp only",
    "estimator_es": "ES only",
    "fixed_10": "fixed 10",
    "fixed_100": "fixed 100",
    "fixed_500": "fixed 500",
    "no_momentum": "no momentum",
    "no_time": "no time",
  }
  medians = ", ".join(f"{names[k]} {np.median(study[k]['window_loss']):.3f}" for k in names)
  assert f"window medians: {medians} |" in table["Fig. 8"], medians


def test_the_readmes_app_c_row_is_the_main_jobs_run(table):
  records = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  first = np.mean([r["outer_loss"] for r in records[:10]])
  last = np.mean([r["outer_loss"] for r in records[-10:]])
  n = len(records)
  assert (f"mean outer loss {first:.2f} (outer steps 1-10) -> {last:.2f} ({n - 9}-{n})") in table[
    "App. C"
  ]


def _benchmark_json(name):
  with open(os.path.join(testing_utils.REPO, "benchmarks", "results", name)) as f:
    return json.load(f)


def test_the_readmes_speed_rows_are_their_benchmarks(table):
  # App. I: the median of the 6 runs' median learned/Adam ratios, with the lowest and highest.
  runs = [f"paper_cnn_cpu_fused_run{i}.json" for i in range(1, 6)]
  runs.append("paper_cnn_cpu_fused_with_reference.json")
  ratios = [_benchmark_json(r)["ratios"]["mlp_lopt/adam"]["median"] for r in runs]
  assert (
    f"CPU: learned/Adam {np.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}], median "
    f"of {len(runs)} runs"
  ) in table["App. I"]
  shipped = [
    _benchmark_json(f"generated_bn_cnn_cpu_shipped_{t}_theta.json")["ratios"]["mlp_lopt/adam"][
      "median"
    ]
    for t in ("train", "valid")
  ]
  assert (
    f"0.{round(100 * shipped[0]):02d} and 0.{round(100 * shipped[1]):02d} with the"
    in (table["App. I"])
  )
  with open(os.path.join(testing_utils.REPO, "docs", "performance.md")) as f:
    performance = f.read()
  speeds = [
    np.median([_benchmark_json(r)["batches_per_second"][k]["median"] for r in runs])
    for k in ("sgd", "adam", "mlp_lopt")
  ]
  by_sgd = [_benchmark_json(r)["ratios"]["mlp_lopt/sgd"]["median"] for r in runs]
  assert (
    "| median of the 6 runs' medians [lowest, highest run] | "
    + " | ".join(f"{x:.0f}" for x in speeds)
    + f" | **{np.median(ratios):.3f}** [{min(ratios):.3f}, {max(ratios):.3f}] | "
    f"**{np.median(by_sgd):.3f}** [{min(by_sgd):.3f}, {max(by_sgd):.3f}] |"
  ) in performance
  assert f"runs at {np.median(ratios):.3f} of Adam's speed here" in performance
  keras = _benchmark_json("keras_optimizer.json")["ratios"]["learned/adam"]
  assert (
    f"`model.fit` at {keras['median']:.3f} [{keras['q25']:.3f}, {keras['q75']:.3f}] of Keras "
    "Adam's steps/s"
  ) in table["beyond: Keras"]
  first = _benchmark_json("outer_step_ab_quickstart.json")["ratio_to_before"]["after"]
  second = _benchmark_json("outer_step_ab_bn_gradient.json")["outer_steps_per_minute"]
  per_round = np.divide(second["after"], second["before"])
  row = table["beyond: outer-training speed"]
  assert f"in local mode {first['median_of_rounds']:.2f}x faster (median of 3" in row
  assert f"written out: {np.median(per_round):.2f}x more (3 rounds" in row
  idle = _benchmark_json("outer_step_ab_vs_1d5a8f1_run2.json")["ratio_to_c1d5a8f1"]["now"]
  assert (
    f"against 1d5a8f1 on an idle machine {np.median(idle['per_round']):.2f}x (median of 5" in row
  )
  layers = _benchmark_json("convolution_rate_quickstart.json")["layers"][1:]
  rates = [
    layer["fraction_of_gemm"][kernel]
    for layer in layers
    for kernel in ("forward", "input_gradient", "filter_gradient")
  ]
  assert f"matrix products of their shape ({min(rates):.2f}-{max(rates):.2f})" in row


def _independent_batches_run(workers):
  path = os.path.join(
    testing_utils.REPO, "benchmarks", "results", "independent_batches", f"w{workers}"
  )
  records = files.read_jsonl(os.path.join(path, "progress.jsonl"))
  with open(os.path.join(path, "process.json")) as f:
    process = json.load(f)
  with open(os.path.join(path, "eval", "summary.json")) as f:
    comparisons = {c["metric"]: c for c in json.load(f)["comparisons"] if c["learned"] == "learned"}
  return records, process, comparisons


def test_the_independent_batches_table_is_its_two_runs():
  runs = {w: _independent_batches_run(w) for w in (4, 8)}
  end = min(records[-1]["elapsed_seconds"] for records, _, _ in runs.values())
  cells = {}
  for w, (records, process, comparisons) in runs.items():
    assert process["rc"] == 0 and len(records) == 80
    seconds = np.array([r["elapsed_seconds"] for r in records])
    window = (seconds > 0.75 * end) & (seconds <= end)
    rp, es = (np.array([r[k] for r in records]) for k in ("rp_variance", "es_variance"))
    above = [r["outer_step"] for r in records if r["rp_variance"] > r["es_variance"]]
    train, final = comparisons["mean_loss"], comparisons["final_test_loss"]
    cells[w] = {
      "time": f"{seconds[-1]:.0f} s",
      "memory": f"{process['max_rss_bytes'] / 1e9:.2f} GB",
      "inner": f"{records[-1]['inner_steps']:,}",
      "window": f"{np.mean(np.array([r['outer_loss'] for r in records])[window]):.2f}",
      "weight": f"{np.mean([r['es_weight'] for r in records]):.3f}",
      "variance": f"{testing_utils.sci(np.median(rp))} / {testing_utils.sci(np.median(es))}",
      "above": (
        ", ".join(str(s) for s in above)
        + f" (up to {(rp / es).max():.1e} times)".replace("e+0", "e")
        if above
        else "none"
      ),
      "train": f"{train['learned_mean_loss']:.3f}",
      "train_wins": train["wins"],
      "final": f"{final['learned_mean_loss']:.3f}",
      "final_wins": final["wins"],
      "adam": (f"{train['baseline_mean_loss']:.3f}", f"{final['baseline_mean_loss']:.3f}"),
    }
  four, eight = cells[4], cells[8]
  assert four["adam"] == eight["adam"]  # The same Adam runs on the same tasks.
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    text = f.read().split("### Independent samples in every batch", 1)[1]
  change = runs[8][0][-1]["elapsed_seconds"] / runs[4][0][-1]["elapsed_seconds"] - 1
  for row in (
    f"| 80 outer steps, wall-clock | {four['time']} | {eight['time']} ({change:+.0%}) |",
    f"| peak memory (max RSS) | {four['memory']} | {eight['memory']} |",
    f"| inner steps taken | {four['inner']} | {eight['inner']} |",
    f"| mean outer loss, last quarter of the shorter run's time ({0.75 * end:.0f}-{end:.0f} s) | "
    f"{four['window']} | {eight['window']} |",
    f"| mean ES weight | {four['weight']} | {eight['weight']} |",
    f"(each the mean over coordinates) | {four['variance']} | {eight['variance']} |",
    f"| outer steps where g_rp's variance is above g_es's | {four['above']} | {eight['above']} |",
    f"(LR-tuned Adam {four['adam'][0]}) | {four['train']}, {four['train_wins']} of 5 tasks won | "
    f"{eight['train']}, {eight['train_wins']} of 5 |",
    f"(Adam tuned on validation loss {four['adam'][1]}) | {four['final']}, {four['final_wins']} "
    f"of 5 | {eight['final']}, {eight['final_wins']} of 5 |",
  ):
    assert row in text, row
  with open(os.path.join(testing_utils.REPO, "gin", "quickstart.gin")) as f:
    comment = re.sub(r"\s+", " ", f.read().replace("#", " "))
  memory = runs[8][1]["max_rss_bytes"] / runs[4][1]["max_rss_bytes"] - 1
  assert (
    f"{-change:.0%} less time ({eight['time']} against {four['time']}), {memory:.0%} more memory "
    f"({eight['memory']}), level on held-out tasks (5 tasks: mean training loss {eight['train']} "
    f"against {four['train']}, final test loss {eight['final']} against {four['final']})"
  ) in comment


def test_the_main_jobs_sample_rate_in_the_docs_is_its_run():
  records = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  seconds = [r["elapsed_seconds"] for r in records]
  batch = 8  # gin/quickstart.gin's outer_training.batch_size.
  first = batch * 10 / (seconds[10] - seconds[0])
  last = batch * 10 / (seconds[-1] - seconds[-11])
  k_first = np.mean([r["mean_num_steps"] for r in records[1:11]])
  k_last = np.mean([r["mean_num_steps"] for r in records[-10:]])
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  assert (
    f"the rate fell from {first:.1f} samples/s (outer steps 2-11, mean K {k_first:.0f}) to "
    f"{last:.1f} (its last 10, mean K {k_last:.0f})"
  ) in text


def test_the_paper_configs_memory_in_the_docs_is_its_measurement():
  measured = _benchmark_json("local_workers_paper.json")
  assert measured["num_workers"] == 128
  with open(os.path.join(testing_utils.REPO, "docs", "outer_training.md")) as f:
    text = re.sub(r"\s+", " ", f.read())
  assert (
    f"{measured['rss_with_worker_states_mib'] / 1024:.1f} GiB RSS in all, of which "
    f"{measured['worker_states_mib'] / 1024:.1f} GiB are the 128 tasks' data and inner states "
    f"({measured['worker_states_mib_each']:.0f} MiB per worker)"
  ) in text
