"""The measured numbers of docs/performance.md, docs/outer_training.md and benchmarks/README.md,
against the files they come from.

Each paragraph or table is found by a phrase of its own and each number recomputed, to the
precision it is printed, from the committed results: benchmarks/results/ (bin/benchmark's
benchmark.json files, benchmarks/*.py's outputs), pretrained/main_job/ (the quickstart's run),
pretrained/fig6/evaluation/summary.json (its timing rounds), docs/quickstart_seeds.json and
docs/quickstart_valid_seeds.json (the Fig. 5 seed studies). The batch-norm table's derivatives are
recomputed with the functions of tests/tasks/test_networks.py that they describe.
"""

import decimal
import json
import os
import re

import numpy as np
import pytest

from task_specific_learned_opt import files
from task_specific_learned_opt.evaluation import shipped, statistics

from . import testing_utils

RESULTS = os.path.join(testing_utils.REPO, "benchmarks", "results")
MAIN_JOB = os.path.join(testing_utils.REPO, "pretrained", "main_job")
# docs/performance.md's App. I runs: the current update's 6, the previous update's 9.
CURRENT = [f"paper_cnn_cpu_fused_run{i}.json" for i in range(1, 6)] + [
  "paper_cnn_cpu_fused_with_reference.json"
]
PREVIOUS = (
  [f"paper_cnn_cpu_run{i}.json" for i in range(1, 7)]
  + [f"paper_cnn_cpu_with_reference_run{i}.json" for i in (1, 2)]
  + ["paper_cnn_cpu_xla_update.json"]
)


def _result(name):
  with open(os.path.join(RESULTS, name)) as f:
    return json.load(f)


def _doc(*path):
  with open(os.path.join(testing_utils.REPO, *path)) as f:
    return f.read()


def _section(text, start, end=None):
  """The text after the first `start` and, with `end`, before the next `end`."""
  assert start in text, start
  text = text.split(start, 1)[1]
  return text.split(end, 1)[0] if end else text


def _flat(text):
  return re.sub(r"\s+", " ", text)


def _pooled(names, key):
  """Every round's value of ratios[key] over the runs `names`."""
  return np.concatenate(
    [_result(n)["ratios"][key]["values"] for n in names if key in _result(n)["ratios"]]
  )


def _median_interval(values):
  """The median and its 95% percentile bootstrap interval, resampled over rounds with the
  resamples, seed and level of evaluation/statistics.py's bootstrap_interval."""
  v = np.asarray(values, dtype=float)
  rng = np.random.default_rng(statistics.SEED)
  medians = np.median(v[rng.integers(0, v.size, size=(statistics.NUM_RESAMPLES, v.size))], axis=1)
  tail = 100 * (1 - statistics.LEVEL) / 2
  low, high = np.percentile(medians, [tail, 100 - tail], method="inverted_cdf")
  return float(np.median(v)), float(low), float(high)


def _one_decimal(x):
  """A load average as the docs print it: the files keep two decimals (os.getloadavg rounded),
  and a tie rounds up (2.55 -> 2.6)."""
  return str(decimal.Decimal(str(x)).quantize(decimal.Decimal("0.1"), decimal.ROUND_HALF_UP))


def _range(values, digits):
  return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def test_app_i_results_paragraph_and_pooled_rows_are_the_benchmark_runs():
  text = _section(
    _doc("docs", "performance.md"), "## Results", "## How the learned update got there"
  )
  flat = _flat(text)
  rounds = np.concatenate(
    [
      _result(n)["batches_per_second"][k]["values"]
      for n in CURRENT
      for k in ("sgd", "adam", "mlp_lopt")
    ]
  )
  by_adam, by_sgd = _pooled(CURRENT, "mlp_lopt/adam"), _pooled(CURRENT, "mlp_lopt/sgd")
  assert len(by_adam) == len(by_sgd) == 60
  assert f"single rounds ranged from {rounds.min():.0f} to {rounds.max():.0f} batches/s" in flat
  assert (
    f"single rounds' learned/Adam ratios from {by_adam.min():.2f} to {by_adam.max():.2f}" in flat
  )
  adam, sgd = _median_interval(by_adam), _median_interval(by_sgd)
  assert (
    f"| all {len(by_adam)} rounds pooled: median [95% bootstrap interval] | | | | "
    f"**{adam[0]:.3f}** [{adam[1]:.3f}, {adam[2]:.3f}] | "
    f"{sgd[0]:.3f} [{sgd[1]:.3f}, {sgd[2]:.3f}] |"
  ) in text
  previous = _pooled(PREVIOUS, "mlp_lopt/adam")
  median, low, high = _median_interval(previous)
  assert (
    f"{len(previous)} rounds of {len(PREVIOUS)} runs pooled (`paper_cnn_cpu_run*.json`, "
    f"`*_with_reference_run*.json`, `*_xla_update.json`) | | | | "
    f"{median:.3f} [{low:.3f}, {high:.3f}] |"
  ) in text
  reference = _result("paper_cnn_cpu_fused_with_reference.json")["ratios"]
  assert (
    f"1 run | | | | {reference['reference/adam']['median']:.3f} | "
    f"{reference['reference/sgd']['median']:.3f} |"
  ) in text
  for device, name in (("cpu", "paper, CPU (App. I)"), ("gpu", "paper, GPU Titan X (App. I)")):
    paper = _result(CURRENT[0])["paper_batches_per_second"][device]
    sgd_, adam_, learned = paper["sgd"], paper["adam"], paper["mlp_lopt"]
    assert (
      f"| {name} | {sgd_:.0f} | {adam_:.0f} | {learned:.0f} | {learned / adam_:.2f} | "
      f"{learned / sgd_:.2f} |"
    ) in text
  assert f"The interval around the median reaches {adam[1]:.3f}" in flat
  runs = [_result(n)["ratios"]["mlp_lopt/adam"]["median"] for n in CURRENT]
  assert "single runs fall on either side of 0.97." in flat and min(runs) < 0.97 < max(runs)


def test_the_update_alone_table_is_its_two_files():
  text = _section(_doc("docs", "performance.md"), "## The update alone", "Reproduce:")
  one, two = (
    _result(f"learned_update_threads_{t}.json")["microseconds_per_update"] for t in ("1_1", "2_0")
  )
  assert _result("learned_update_threads_1_1.json")["threads"] == {"inter_op": 1, "intra_op": 1}
  rows = [line for line in text.splitlines() if line.startswith("| `")]
  assert len(rows) == len(one) == len(two) == 6
  for row in rows:
    name, first, second = [c.strip() for c in row.strip("|").split("|")]
    variant = name.split("`")[1]
    assert (first, second) == (
      f"{one[variant]['median']:,.0f}",
      f"{two[variant]['median']:,.0f}",
    ), variant
  assert one["learned_relu_fused"]["median"] > one["learned_relu_op"]["median"]
  assert two["learned_relu_fused"]["median"] < two["learned_relu_op"]["median"]


def test_the_xla_update_line_is_its_run():
  ratios = _result("paper_cnn_cpu_xla_update.json")["ratios"]
  text = _flat(_section(_doc("docs", "performance.md"), "## Tried and not kept"))
  assert (
    f"XLA (`jit_compile=True`) on the update alone: {ratios['mlp_lopt_xla/adam']['median']:.3f} "
    f"against {ratios['mlp_lopt/adam']['median']:.3f} in the same run"
  ) in text


SHIPPED_SIZE = [
  ("generated_bn_cnn_cpu_shipped_train_theta.json", "shipped L_train", True),
  ("generated_bn_cnn_cpu_shipped_valid_theta.json", "shipped L_valid", True),
  ("generated_bn_cnn_cpu_intra0_under_load.json", "random", False),
  ("generated_bn_cnn_cpu_intra1_under_load.json", "random", False),
]


def test_the_shipped_family_size_table_and_paragraph_are_their_runs():
  text = _section(
    _doc("docs", "performance.md"),
    "## At the shipped family's size",
    "# Outer-training in local mode",
  )
  for name, theta, bold in SHIPPED_SIZE:
    r = _result(name)
    speeds = " | ".join(
      f"{r['batches_per_second'][k]['median']:.0f}" for k in ("sgd", "adam", "mlp_lopt")
    )
    ratio = r["ratios"]["mlp_lopt/adam"]
    median = f"**{ratio['median']:.3f}**" if bold else f"{ratio['median']:.3f}"
    threads = f"{r['environment']['inter_op_threads']} / {r['environment']['intra_op_threads']}"
    assert (
      f"| {threads} | {theta} | {speeds} | {median} [{ratio['min']:.3f}, {ratio['max']:.3f}] |"
    ) in text, name
    assert r["repetitions"] == 15
  for name, _, _ in SHIPPED_SIZE[2:]:  # "(load 4)": the load the runs ended under.
    assert (
      f"{name}` (load 4)" in text
      and round(_result(name)["environment"]["load_average_after"][0]) == 4
    )
  flat = _flat(text)
  shipped_ratios = [_result(n)["ratios"]["mlp_lopt/adam"]["median"] for n, _, _ in SHIPPED_SIZE[:2]]
  assert f"runs at {_range(shipped_ratios, 2)} of Adam's speed with the shipped thetas" in flat
  with open(
    os.path.join(testing_utils.REPO, "pretrained", "fig6", "evaluation", "summary.json")
  ) as f:
    timed = json.load(f)["timed_steps_per_second"]
  adam = timed["adam (lr tuned per task on train loss)"]
  winners = [timed[f"adam+reg+decay (L_{o})"] for o in ("train", "valid")]
  assert (
    f"give L_train {timed['L_train']:.0f}, L_valid {timed['L_valid']:.0f}, Adam {adam:.0f}, "
    f"RMSProp {timed['rmsprop (lr tuned per task on train loss)']:.0f}, SGD+momentum "
    f"{timed['sgdm (lr tuned per task on train loss)']:.0f} and the Adam+Reg+Decay winners "
    f"{_range(winners, 0)} steps per second (`pretrained/fig6/evaluation/summary.json`), so "
    f"{timed['L_train'] / adam:.2f} and {timed['L_valid'] / adam:.2f} of Adam's speed"
  ) in flat
  zero, one = (_result(n)["batches_per_second"] for n, _, _ in SHIPPED_SIZE[2:])
  gains = [one[k]["median"] / zero[k]["median"] for k in ("sgd", "adam", "mlp_lopt")]
  assert (
    f"gives every optimizer {min(gains):.1f}-{max(gains):.1f}x its speed at this size (the same "
    f"machine under the same load: {one['adam']['median']:.0f} against "
    f"{zero['adam']['median']:.0f} batches/s for Adam)"
  ) in flat


PROFILE_ROWS_TRUNCATION = ("+ and - unrolls forward", "backward pass and ES")
PROFILE_ROWS = {
  "the + and - unrolls forward (8 samples)": "+ and - unrolls forward",
  "the backward pass and ES (8 samples)": "backward pass and ES",
  "starting tasks (none fell in these steps; one every 500 inner steps per worker)": (
    "starting tasks (sampling, initial state)"
  ),
  "worker Python (theta in, flattening the sample)": "worker Python (theta in, sample out)",
  "chief: merge and Adam (`Chief.apply`)": "chief: merge and Adam",
  "chief: publish theta": "chief: publish theta",
  "chief: record (`progress.jsonl`, summaries)": "chief: record (progress.jsonl, summaries)",
  "chief: snapshots and checkpoints": "chief: snapshots and checkpoints",
  "loop Python and the rest": "loop Python and the rest",
}


def _seconds(x):
  """A part of an outer step as the profile table prints it."""
  if x == 0:
    return "0"
  return "< 0.001" if x < 0.0005 else f"{x:.3f}" if x < 0.1 else f"{x:.2f}"


def test_the_outer_step_profile_table_is_its_three_profiles():
  text = _section(
    _doc("docs", "performance.md"), "# Outer-training in local mode", "## Speed-ups, each measured"
  )
  profiles = [
    _result(f"outer_step_profile_quickstart{s}.json") for s in ("_intra0", "", "_closed_form")
  ]
  assert [p["gin_bindings"] for p in profiles] == [
    ["configure_threads.intra_op_threads = 0"],
    [],
    [],
  ]
  for row, part in PROFILE_ROWS.items():
    cells = " | ".join(_seconds(p["parts_seconds_per_outer_step"][part]) for p in profiles)
    assert f"| {row} | {cells} |" in text, row
  total = " | ".join(f"**{p['seconds_per_outer_step']:.2f}**" for p in profiles)
  assert f"| **an outer step** | {total} |" in text
  split = " | ".join(
    " / ".join(
      f"{p['split_truncation_seconds'][k]:.3f}"
      for k in ("one_unroll_forward", "pair_forward", "whole_sample")
    )
    for p in profiles
  )
  assert (
    "| one truncation at K = 16, split: one unroll forward / both forward / whole sample | "
    f"{split} |" in text
  )
  traces = " | ".join(str(p["truncation_traces"]) for p in profiles)
  assert f"| traces of the compiled truncation in the run | {traces} |" in text
  for p in profiles:
    assert round(p["mean_num_steps"]) == p["split_truncation_seconds"]["num_steps"] == 16
    assert p["samples_per_outer_step"] == 8
  flat = _flat(text)
  assert "(curriculum K about 16, 8 samples per step)" in flat
  truncation = ("+ and - unrolls forward", "backward pass and ES")
  for p in profiles:
    parts = p["parts_seconds_per_outer_step"]
    assert (
      sum(v for k, v in parts.items() if k not in truncation) < 0.04 * p["seconds_per_outer_step"]
    )
  assert "Everything but the compiled truncation is under 4% of a step." in flat
  parts = profiles[1]["parts_seconds_per_outer_step"]
  backward = parts["backward pass and ES"] / (
    parts["backward pass and ES"] + parts["+ and - unrolls forward"]
  )
  assert "the backward pass is about two thirds" in flat and round(3 * backward) == 2
  split = profiles[1]["split_truncation_seconds"]
  pair = split["pair_forward"] / split["one_unroll_forward"]
  assert f"(both forward: {pair:.1f}x one unroll with one" in flat
  split = profiles[2]["split_truncation_seconds"]
  assert split["pair_forward"] <= split["one_unroll_forward"]
  assert "in the last column, medians of 5 calls, both forward took no longer than one" in flat


def test_the_intra_op_ab_table_is_its_rounds():
  text = _section(
    _doc("docs", "performance.md"), "## Speed-ups, each measured", "## Batch norm's derivatives"
  )
  ab = _result("outer_step_ab_quickstart.json")
  before, after = ab["outer_steps_per_minute"]["before"], ab["outer_steps_per_minute"]["after"]
  ratios = ab["ratio_to_before"]["after"]["per_round"]
  assert len(before) == 3 and ab["steps"] == 20 and ab["warm_steps"] == 4
  for i, (b, a, r) in enumerate(zip(before, after, ratios, strict=True)):
    assert f"| round {i + 1} | {b:.1f} | {a:.1f} | {r:.2f} |" in text
  assert (
    f"| **{ab['median']['before']:.1f}** | **{ab['median']['after']:.1f}** | "
    f"**{ab['ratio_to_before']['after']['median_of_rounds']:.2f}** |"
  ) in text
  flat = _flat(text)
  assert f"Load average about {ab['load_average'][0]:.1f} throughout" in flat
  median = ab["ratio_to_before"]["after"]["median_of_rounds"]
  assert (
    f"One intra-op thread gave {median:.2f}x ({min(ratios):.2f}-{max(ratios):.2f} over three "
    "rounds)"
  ) in flat


def test_the_final_comparison_two_at_a_time_is_its_benchmark():
  result = _result("final_comparison_quickstart.json")
  assert result["same_numbers"] and result["num_tasks"] == 2
  flat = _flat(_doc("docs", "performance.md"))
  assert (
    f"{result['median_seconds']['1']:.0f} s one at a time, "
    f"{result['median_seconds']['2']:.0f} s two at a time, "
    f"**{result['speedup_vs_first']['2']:.2f}x**, every number the same"
  ) in flat


def test_the_batch_norm_table_recomputes_from_its_tests():
  """The batch-norm table's differences, recomputed with tests/tasks/test_networks.py's own
  inputs: float64 second derivatives, and one antithetic truncation of its small CNN."""
  tf = pytest.importorskip("tensorflow")
  from tasks import test_networks

  from task_specific_learned_opt.tasks import networks

  text = _section(
    _doc("docs", "performance.md"), "| one sample | g_rp against", "So the quickstart"
  )
  x, scale, offset = test_networks._bn_inputs(tf.float64)
  moments, _ = test_networks._second_order(networks.batch_norm_moments, x, scale, offset)
  plain, _ = test_networks._second_order(networks.batch_norm_autodiff, x, scale, offset)
  off = float(np.abs(moments[4] - plain[4]).max())
  assert (
    f"moments: second derivatives off by up to {testing_utils.sci(off)} (values up to "
    f"{float(np.abs(plain[4]).max()):.0f})"
  ) in text
  samples = {k: test_networks._bn_cnn_sample(k) for k in ("closed_form", "moments", "autodiff")}
  reference = [np.asarray(g) for g in tf.nest.flatten(samples["autodiff"][0])]
  norm = float(np.sqrt(sum(np.sum(np.square(g)) for g in reference)))
  largest = {
    k: max(
      float(np.abs(np.asarray(a) - b).max())
      for a, b in zip(tf.nest.flatten(samples[k][0]), reference, strict=True)
    )
    for k in ("closed_form", "moments")
  }
  assert largest["closed_form"] < 1e-9 and largest["closed_form"] / norm < 1e-7
  assert (
    f"closed form: float rounding, largest difference under 1e-9, under 1e-7 of the norm "
    f"({norm:.4f}); moments: {testing_utils.sci(largest['moments'])}, "
    f"{testing_utils.sci(largest['moments'] / norm)} of the norm | identical |"
  ) in text
  for k in ("closed_form", "moments"):  # g_es, L+ and L-: identical.
    for i in (1, 2, 3):
      for a, b in zip(
        tf.nest.flatten(samples[k][i]), tf.nest.flatten(samples["autodiff"][i]), strict=True
      ):
        np.testing.assert_array_equal(a, b)


def test_the_batch_norm_ab_table_and_paragraph_are_its_two_runs():
  text = _section(
    _doc("docs", "performance.md"),
    "Outer steps per minute, `benchmarks/outer_step.py --mode ab`",
    "## The quickstart now",
  )
  ab = _result("outer_step_ab_bn_gradient.json")
  speeds = ab["outer_steps_per_minute"]
  by_before = np.divide(speeds["after"], speeds["before"])
  by_first = ab["ratio_to_c1d5a8f1"]["after"]["per_round"]
  assert ab["steps"] == 10 and ab["warm_steps"] == 3
  for i in range(3):
    assert (
      f"| {i + 1} | {speeds['c1d5a8f1'][i]:.2f} | {speeds['before'][i]:.2f} | "
      f"{speeds['after'][i]:.2f} | {by_before[i]:.2f} | {by_first[i]:.2f} |"
    ) in text
  medians = " | ".join(f"**{ab['median'][k]:.2f}**" for k in ("c1d5a8f1", "before", "after"))
  assert f"| {medians} | **{np.median(by_before):.2f}** | **{np.median(by_first):.2f}** |" in text
  flat = _flat(text)
  assert f"under a load of about {ab['load_average'][0]:.0f} from other jobs" in flat
  assert (
    f"The closed form gives {np.median(by_before):.2f}x the outer steps per minute of the commit "
    f"before it ({_range(by_before, 2)} over the three rounds)"
  ) in flat
  run2 = _result("outer_step_ab_bn_gradient_run2.json")
  before, after = run2["outer_steps_per_minute"]["before"], run2["outer_steps_per_minute"]["after"]
  ratios = run2["ratio_to_before"]["after"]["per_round"]
  assert (
    f"(load about {run2['load_average'][0]:.0f}, "
    "`benchmarks/results/outer_step_ab_bn_gradient_run2.json`): "
    f"{before[0]:.2f} and {before[1]:.2f} before, {after[0]:.2f} and {after[1]:.2f} after, ratios "
    f"{ratios[0]:.2f} and {ratios[1]:.2f}"
  ) in flat
  slow = int(np.argmax(speeds["c1d5a8f1"]))
  assert (
    f"Against 1d5a8f1 the median is {np.median(by_first):.2f}x, with one round ({slow + 1}) where "
    f"1d5a8f1 ran at {speeds['c1d5a8f1'][slow]:.2f}"
  ) in flat
  first = ab["ratio_to_c1d5a8f1"]["before"]
  assert (
    f"with about {ab['load_average'][0]:.0f} runnable processes on the 2 cores: before / 1d5a8f1 "
    "was "
    f"{first['median_of_rounds']:.2f} here ({', '.join(f'{r:.2f}' for r in first['per_round'])})"
  ) in flat
  intra = _result("outer_step_ab_quickstart.json")["ratio_to_before"]["after"]["median_of_rounds"]
  assert (
    f"about {intra:.2f} x {np.median(by_before):.2f} = {intra * np.median(by_before):.1f}x against "
    "1d5a8f1; measured on an idle machine it is about that"
  ) in flat
  measured = _result("outer_step_ab_vs_1d5a8f1_run2.json")["ratio_to_c1d5a8f1"]["now"]
  assert abs(measured["median_of_rounds"] - intra * np.median(by_before)) < 0.1


def test_the_against_1d5a8f1_section_is_its_two_runs_and_the_op_profile():
  text = _section(
    _doc("docs", "performance.md"), "## Against 1d5a8f1 on an idle machine", "## The quickstart now"
  )
  flat = _flat(text)
  medians = []
  for name, rounds in (
    ("outer_step_ab_vs_1d5a8f1.json", 3),
    ("outer_step_ab_vs_1d5a8f1_run2.json", 5),
  ):
    ab = _result(name)
    speeds = ab["outer_steps_per_minute"]
    ratios = ab["ratio_to_c1d5a8f1"]["now"]["per_round"]
    assert len(ratios) == rounds and ab["steps"] == 20 and ab["warm_steps"] == 4
    assert max(ab["load_average"][:2]) < 3  # Idle but for the runs' own two threads.
    np.testing.assert_allclose(ratios, np.divide(speeds["now"], speeds["c1d5a8f1"]))
    cells = " | ".join(
      ", ".join(f"{x:.{d}f}" for x in xs)
      for xs, d in ((speeds["c1d5a8f1"], 1), (speeds["now"], 1), (ratios, 2))
    )
    median = np.median(ratios)
    assert f"(../benchmarks/results/{name})" in text
    assert f"| {cells} | **{median:.2f}** |" in text, name
    medians.append(median)
  assert f"({medians[1]:.2f}x over the five steadier rounds)" in flat
  assert medians[1] < 3 and "The goal of 3x is not reached on this machine." in flat
  ops = _result("outer_step_ops_quickstart.json")
  seconds, calls = ops["op_seconds_per_sample"], ops["op_calls_per_sample"]
  total, wall = sum(seconds.values()), ops["wall_seconds_per_sample"]
  assert ops["num_steps"] == 16 and (ops["inter_op_threads"], ops["intra_op_threads"]) == (2, 1)
  assert (
    f"The ops of a sample take {total:.3f} s of thread time against {wall:.3f} s of wall-clock on "
    f"the two inter-op threads, so the threads are busy {100 * total / (2 * wall):.0f}% of the "
    "time in ops; the executor's own work around them adds "
    f"{100 * (ops['executor_seconds_per_sample'] / total - 1):.0f}%."
  ) in flat
  runs = sum(calls.values())
  assert f"{runs:,} op runs per sample (about {round(runs / 16, -1):.0f} per inner step" in flat

  def share(*types):
    return f"{100 * sum(v for k, v in seconds.items() if any(t in k for t in types)) / total:.0f}%"

  grouped = ("Conv2D", "MatMul", "Mean", "Sum")
  rest = 100 * sum(v for k, v in seconds.items() if not any(t in k for t in grouped)) / total
  assert f"(`Conv2DBackpropInput`, `Conv2DBackpropFilter`) | {share('Conv2D')} |" in text
  assert f"and the learned update) | {rest:.0f}% |" in text
  mul = f"{100 * seconds['Mul'] / total:.0f}%"
  assert f"`Mul` alone {mul} in {calls['Mul']:,} runs" in text
  assert f"the linear layer) | {share('MatMul')} |" in text
  assert f"batch norm's statistics) | {share('Mean', 'Sum')} |" in text
  assert "Half of a sample is convolutions" in flat and abs(float(share("Conv2D")[:-1]) - 50) < 5


def test_the_grouped_task_batch_in_local_mode_is_its_ab_runs():
  text = _flat(_doc("docs", "performance.md"))
  ab = _result("outer_step_ab_grouped_quickstart.json")
  medians = ab["median"]
  ratios = ab["ratio_to_workers_8"]
  assert (
    ab["steps"] == 20 and ab["warm_steps"] == 4 and len(ratios["grouped_4x2"]["per_round"]) == 3
  )
  assert ab["variants"]["grouped_4x2"]["bindings"] == [
    "train_local.num_workers = 4",
    "train_local.tasks_per_worker = 2",
    "BatchedWorker.group_models = True",
  ]
  assert (
    f"{medians['workers_8']:.1f} (8 workers), {medians['batched_4x2']:.1f} (4 x 2) and "
    f"{medians['grouped_4x2']:.1f} (4 x 2 grouped) outer steps per minute (medians); 4 x 2 / 8 "
    "workers "
    + ", ".join(f"{x:.2f}" for x in ratios["batched_4x2"]["per_round"])
    + ", grouped / 8 workers "
    + ", ".join(f"{x:.2f}" for x in ratios["grouped_4x2"]["per_round"])
  ) in text
  runs = [
    _result(f"outer_step_ab_grouped_vs_1d5a8f1{s}.json")["ratio_to_c1d5a8f1"]["grouped_4x2"]
    for s in ("", "_run2")
  ]
  assert [len(r["per_round"]) for r in runs] == [3, 5]
  per_round = [", ".join(f"{x:.2f}" for x in r["per_round"]) for r in runs]
  assert (
    f"now / 1d5a8f1 {per_round[0]} (3 rounds, "
    "[outer_step_ab_grouped_vs_1d5a8f1.json](../benchmarks/results/"
    f"outer_step_ab_grouped_vs_1d5a8f1.json)) and {per_round[1]} (5 rounds right after,"
  ) in text
  medians = [r["median_of_rounds"] for r in runs]
  assert (
    f"medians {medians[0]:.2f} and {medians[1]:.2f}: more than twice, still short of 3x" in text
  )
  assert 2 < min(medians) and max(medians) < 3


def test_the_quickstart_now_paragraph_is_the_main_job():
  text = _flat(_section(_doc("docs", "performance.md"), "## The quickstart now", "## The paper's"))
  progress = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  (at_80,) = [r["elapsed_seconds"] for r in progress if r["outer_step"] == 80]
  last_60 = progress[-1]["elapsed_seconds"] - at_80
  assert last_60 > at_80 and len(progress) == 140
  assert f"the last 60 steps at K = 50 took {last_60:.1f} s, more than the first 80." in text
  (r,) = [
    r
    for r in shipped.records()
    if (r["evaluation"], r["learned"], r["metric"]) == ("main_job", "learned", "mean_loss")
  ]
  assert r["wins"] == r["num_tasks"] == 5
  assert (
    f"mean training loss of {r['learned_mean_loss']:.3f} against tuned Adam's "
    f"{r['baseline_mean_loss']:.3f} on its 5 held-out tasks, ahead on all 5"
  ) in text
  with open(os.path.join(testing_utils.REPO, "docs", "quickstart_seeds.json")) as f:
    study = json.load(f)["quickstart"]
  adam = study["reference"]["outer_train"]["mean_train_loss"]
  records = [run["records"] for run in study["seeds"].values()]
  first = min(
    s
    for s in range(0, 170, 10)
    if all(
      r["outer_train"]["mean_train_loss"] < adam
      for rs in records
      for r in rs
      if r["outer_step"] >= s
    )
  )
  at_140 = [
    r["outer_train"]["mean_train_loss"] for rs in records for r in rs if r["outer_step"] == 140
  ]
  assert (
    f"(every seed below Adam there from step {first} on, {_range(at_140, 2)} against {adam:.2f} "
    "by step 140)"
  ) in text
  with open(os.path.join(MAIN_JOB, "timeline.json")) as f:
    seconds = json.load(f)["seconds"]
  assert "in about 10 minutes;" in text and round(seconds / 60, -1) == 10
  ab = _result("outer_step_ab_vs_1d5a8f1_run2.json")["ratio_to_c1d5a8f1"]["now"]
  assert (
    f"about twice the outer steps per minute ({ab['median_of_rounds']:.2f}x), not the 3x" in text
  )


def test_the_paper_configuration_table_is_its_two_runs():
  text = _section(_doc("docs", "performance.md"), "## The paper's configuration", "## Many tasks'")
  zero, one = (_result(f"local_workers_paper_samples_intra{i}.json") for i in (0, 1))
  for r in (zero, one):
    assert r["first_sample_num_steps"] == 53 and r["outer_step_seconds_measured"]
  assert f"| {zero['seconds_per_sample']:.2f} | {one['seconds_per_sample']:.2f} |" in text
  assert (
    f"| an outer step (128 samples) | about {128 * zero['seconds_per_sample']:.0f} s | about "
    f"{128 * one['seconds_per_sample']:.0f} s |"
  ) in text
  earlier = _result("local_workers_paper.json")
  assert not earlier["outer_step_seconds_measured"]
  flat = _flat(text)
  assert (
    f"{zero['seconds_per_sample'] / one['seconds_per_sample']:.2f}x. The earlier measurement of "
    f"{earlier['outer_step_seconds']:.0f} s per outer step (`local_workers_paper.json`, "
    f"{earlier['seconds_per_sample']:.2f} s per sample with the default threads)"
  ) in flat


def test_the_batched_workers_first_calls_are_its_benchmark():
  text = _section(
    _doc("docs", "performance.md"), "## Many tasks' samples in one call", "## What the"
  )
  batched = _result("batched_worker_quickstart.json")
  assert batched["rounds"] == 3 and batched["num_steps"] == 20
  for m in batched["measurements"]:
    assert (
      f"{m['batched_over_separate_samples_per_second']:.2f} | "
      f"{m['batched']['first_call_seconds']:.0f} s |"
    ) in text, m["tasks"]
  grouped = _result("batched_worker_grouped_quickstart.json")
  assert grouped["num_steps"] == batched["num_steps"]
  assert f"(median of {grouped['rounds']} interleaved rounds, idle machine" in _flat(text)


def test_the_paper_scale_costs_measured_and_machine_hour_cells():
  text = _section(_doc("docs", "performance.md"), "## What the paper's scale costs")
  measured = _result("local_workers_paper_samples_intra1.json")
  per_step = measured["seconds_per_inner_step_of_a_sample"]
  first = 128 * 53 * per_step
  assert (
    f"{first:.0f} s here ({128 * measured['seconds_per_sample']:.0f} s measured at K = "
    f"{measured['first_sample_num_steps']}) | {first / 3600:.2f} |"
  ) in text
  last = 128 * 10_000 * per_step
  assert f"min on 128 workers | {last / 3600:.1f} |" in text


def test_the_quickstarts_minutes_in_outer_training_md_are_the_main_job():
  text = _flat(_doc("docs", "outer_training.md"))
  progress = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  (at_80,) = [r["elapsed_seconds"] for r in progress if r["outer_step"] == 80]
  with open(os.path.join(MAIN_JOB, "timeline.json")) as f:
    timeline = json.load(f)
  first, last = (
    np.datetime64(timeline[k].rstrip("Z")) for k in ("comparison_first_run", "comparison_last_run")
  )
  comparison = (last - first) / np.timedelta64(1, "s")
  minutes = progress[-1]["elapsed_seconds"] / 60
  assert (
    f"(140 outer steps in {minutes:.1f} minutes, the first 80 of them in {at_80 / 60:.1f}; then "
    f"the final comparison, {comparison / 60:.1f} minutes)"
  ) in text
  assert "scaled down to about 10 minutes on 2 cores" in text
  assert round(timeline["seconds"] / 60, -1) == 10
  assert "held-out tasks (about a minute;" in text and round(comparison / 60) == 1


def test_the_independent_batches_paragraph_is_its_two_comparisons():
  cells = {}
  for w in (4, 8):
    path = os.path.join(RESULTS, "independent_batches", f"w{w}", "eval", "summary.json")
    with open(path) as f:
      cells[w] = {
        c["metric"]: c["learned_mean_loss"]
        for c in json.load(f)["comparisons"]
        if c["learned"] == "learned"
      }
  train = cells[8]["mean_loss"] - cells[4]["mean_loss"]
  final = cells[4]["final_test_loss"] - cells[8]["final_test_loss"]
  assert train > 0 and final > 0  # W = 4 ahead on training loss, W = 8 on final test loss.
  text = _flat(_doc("docs", "outer_training.md"))
  assert f"(each ahead on one metric, by {train:.3f} and {final:.3f})" in text


def test_the_paper_configs_sample_cost_is_the_truncation_sample_run():
  text = _flat(_section(_doc("docs", "outer_training.md"), "**The paper configs**", "**Staggered"))
  (sample,) = [
    r
    for r in _result("truncation_sample.json")
    if r["mode"] == "sample" and r["num_steps"] == 10_000
  ]
  assert sample["segment_lengths"] == [224, 5]  # Two levels.
  assert f"plus about {sample['peak_over_resting_mib'] / 1024:.0f} GB above resting" in text
  per_step = sample["seconds_per_step"]
  assert (
    f"at about {per_step:.2f} s per inner step of a sample on this 2-core machine (the table "
    f"below) is about {128 * 50 * per_step / 60:.0f} minutes at the curriculum's first K = 50 and "
    f"about {128 * 10_000 * per_step / 3600:.0f} hours at K = 10,000"
  ) in text


def _seed_study(name, key):
  with open(os.path.join(testing_utils.REPO, "docs", name)) as f:
    return json.load(f)[key]


def test_the_evaluators_cost_is_the_seed_study_and_the_main_job():
  text = _flat(_section(_doc("docs", "outer_training.md"), "The quickstart binds", "**Fig. 5 at"))
  study = _seed_study("quickstart_seeds.json", "quickstart")
  seconds = np.median([r["seconds"] for run in study["seeds"].values() for r in run["records"]])
  progress = files.read_jsonl(os.path.join(MAIN_JOB, "progress.jsonl"))
  snapshots = progress[-1]["outer_step"] // 10 + 1  # Steps 0, 10, ..., 140.
  training = progress[-1]["elapsed_seconds"]
  assert (
    f"takes a median of {seconds:.0f} s ([quickstart_seeds.json](quickstart_seeds.json)), so the "
    f"{snapshots} snapshots of the quickstart's {progress[-1]['outer_step']} outer steps about "
    f"{snapshots * seconds / 60:.0f} minutes, against {training / 60:.1f} minutes of outer-training"
  ) in text
  assert "it would add about three quarters to the run's time" in text
  assert 0.65 < snapshots * seconds / training < 0.85


def _seed_table(text, study, metric, last_columns):
  adam = study["reference"]["outer_test"][metric]
  for seed, run in study["seeds"].items():
    at = {r["outer_step"]: r for r in run["records"]}
    passed = run["passed_reference_on_outer_test"]
    cells = " | ".join(f"{at[s]['outer_test'][metric]:.3f}" for s in (0, 40, 80, 120, 160))
    row = f"| {seed} | {cells} | outer step {passed['outer_step']} ({passed['inner_steps']:,}"
    below = [r["outer_step"] for r in run["records"] if r["outer_test"][metric] < adam]
    assert below[0] == passed["outer_step"]
    assert row in text, row
    last = " | ".join(f"{v:.3f}" for v in last_columns(run["last"]))
    assert f"| {last} |" in text.split(row, 1)[1].split("\n", 1)[0], seed


def test_the_quickstart_fig5_table_and_paragraphs_are_its_seed_study():
  text = _section(
    _doc("docs", "outer_training.md"), "**Fig. 5 at the quickstart's scale**", "**Fig. 5 for"
  )
  flat = _flat(text)
  study = _seed_study("quickstart_seeds.json", "quickstart")
  ref = study["reference"]
  train, test = ref["outer_train"]["mean_train_loss"], ref["outer_test"]["mean_train_loss"]
  rates = {lr for f in ("outer_train", "outer_test") for lr in ref[f]["learning_rates"]}
  assert (
    f"mean training loss {train:.3f} on the 4 outer-train tasks and {test:.3f} on the 4 outer-test "
    f"tasks (learning rate {rates.pop():g} chosen on every task); final test loss "
    f"{ref['outer_test']['final_test_loss']:.3f} on outer-test tasks"
  ) in flat and not rates
  assert f"mean training loss over the 500-step run (LR-tuned Adam: {test:.3f})" in flat
  assert (
    f"| outer-train at 160 (Adam {train:.3f}) | final test loss at 160 (Adam "
    f"{ref['outer_test']['final_test_loss']:.3f}) |"
  ) in text
  _seed_table(
    text,
    study,
    "mean_train_loss",
    lambda last: (last["outer_train"]["mean_train_loss"], last["outer_test"]["final_test_loss"]),
  )
  seed_0 = [
    r["outer_step"]
    for r in study["seeds"]["0"]["records"]
    if r["outer_test"]["mean_train_loss"] < test
  ]
  assert seed_0[:2] == [110, 130]  # "above again at 120, below from 130".
  assert "above again at 120, below from 130" in text
  runs = study["seeds"]
  passed = [run["passed_reference_on_outer_test"] for run in runs.values()]
  steps = [p["outer_step"] for p in passed]
  inner = [p["inner_steps"] for p in passed]
  ends = [run["last"]["outer_test"]["mean_train_loss"] for run in runs.values()]
  ends_train = [run["last"]["outer_train"]["mean_train_loss"] for run in runs.values()]
  below = [1 - e / test for e in ends]
  below_train = [1 - e / train for e in ends_train]
  assert (
    f"between outer steps {min(steps)} and {max(steps)} ({min(inner) / 1000:.0f}k-"
    f"{max(inner) / 1000:.0f}k cumulative inner steps), and end "
    f"{_range(np.multiply(below, 100), 0)}% below it ({_range(ends, 2)} against {test:.2f}); on "
    f"outer-train tasks they end {_range(np.multiply(below_train, 100), 0)}% below "
    f"({_range(ends_train, 2)} against {train:.2f})"
  ) in flat
  at_80 = {
    s: [r for r in run["records"] if r["outer_step"] == 80][0]["outer_test"]["mean_train_loss"]
    for s, run in runs.items()
  }
  assert [s for s, v in at_80.items() if v < test] == ["2"]
  assert (
    f"only seed 2 is below ({at_80['2']:.3f}; seed 1 {at_80['1']:.3f}, seed 0 {at_80['0']:.3f})"
    in flat
  )
  best = str(study["best_seed_by_outer_train"])
  assert min(ends) == runs[best]["last"]["outer_test"]["mean_train_loss"]
  assert (
    f"step 160 is seed {best} ({runs[best]['last']['outer_train']['mean_train_loss']:.3f}), whose "
    f"outer-test loss ({runs[best]['last']['outer_test']['mean_train_loss']:.3f}) is also the "
    "lowest"
  ) in flat
  finals = [run["last"]["outer_test"]["final_test_loss"] for run in runs.values()]
  assert (
    f"({_range(finals, 2)} against {ref['outer_test']['final_test_loss']:.2f})" in flat
    and min(finals) > ref["outer_test"]["final_test_loss"]
  )
  # "Single snapshots move by up to 0.1 between neighbours (seed 0 at outer steps 90 and 120)":
  # every rise of more than 0.05 after outer step 40.
  rises = {
    (s, b["outer_step"]): b["outer_test"]["mean_train_loss"] - a["outer_test"]["mean_train_loss"]
    for s, run in runs.items()
    for a, b in zip(run["records"], run["records"][1:], strict=False)
    if b["outer_step"] > 40
  }
  large = sorted(k for k, v in rises.items() if v > 0.05)
  assert large == [("0", 90), ("0", 120)] and f"{max(rises.values()):.1f}" == "0.1"
  assert "move by up to 0.1 between neighbours (seed 0 at outer steps 90 and 120)" in _flat(
    _doc("docs", "outer_training.md")
  )


def test_the_valid_fig5_table_and_paragraph_are_its_seed_study():
  text = _section(
    _doc("docs", "outer_training.md"), "**Fig. 5 for the validation objective**", "## State on disk"
  )
  flat = _flat(text)
  study = _seed_study("quickstart_valid_seeds.json", "quickstart_valid")
  ref = study["reference"]
  adam = ref["outer_test"]["final_test_loss"]
  assert (
    f"final test loss {adam:.3f} on the 4 outer-test tasks "
    f"({ref['outer_train']['final_test_loss']:.3f} on outer-train)"
  ) in flat
  assert f"(validation-tuned Adam: {adam:.3f})" in flat
  assert (
    f"| final test accuracy at 160 (Adam {ref['outer_test']['final_test_accuracy']:.3f}) | mean "
    f"training loss at 160 (Adam tuned on validation: {ref['outer_test']['mean_train_loss']:.3f}) |"
  ) in text
  _seed_table(
    text,
    study,
    "final_test_loss",
    lambda last: (last["outer_test"]["final_test_accuracy"], last["outer_test"]["mean_train_loss"]),
  )
  runs = study["seeds"].values()
  steps = [run["passed_reference_on_outer_test"]["outer_step"] for run in runs]
  ends = [run["last"]["outer_test"]["final_test_loss"] for run in runs]
  below = np.multiply([1 - e / adam for e in ends], 100)
  assert (
    f"between outer steps {min(steps)} and {max(steps)}, and end {_range(below, 0)}% below it "
    f"({_range(ends, 3)} against {adam:.3f})"
  ) in flat
  train_adam = ref["outer_train"]["final_test_loss"]
  ends_train = [run["last"]["outer_train"]["final_test_loss"] for run in runs]
  assert sum(e < train_adam for e in ends_train) == 1
  assert (
    f"they end at {_range(ends_train, 2)} against Adam's {train_adam:.3f} (one seed below)"
  ) in flat


MEMORY_ROWS = [
  ("truncation_sample_plain_backprop.json", 200, "none (plain backpropagation)"),
  ("truncation_sample_one_level.json", 1000, "one level"),
  ("truncation_sample.json", 1000, "two levels (default)"),
  ("truncation_sample_one_level.json", 10_000, "one level"),
  ("truncation_sample.json", 10_000, "two levels (default)"),
]


def _sample_and_plain(name, k):
  runs = [r for r in _result(name) if r["num_steps"] == k]
  (sample,) = [r for r in runs if r["mode"] != "plain"]
  (plain,) = [r for r in runs if r["mode"] == "plain"]
  return sample, plain


def test_the_memory_table_and_paragraph_are_the_truncation_sample_runs():
  text = _section(
    _doc("docs", "outer_training.md"), "## Memory: recomputation in the backward pass"
  )
  ratios = []
  for name, k, recomputation in MEMORY_ROWS:
    sample, plain = _sample_and_plain(name, k)
    chunks = (
      f"[{', '.join(map(str, sample['segment_lengths']))}]" if sample["segment_lengths"] else "-"
    )
    ratio = sample["seconds_per_step"] / plain["seconds_per_step"]
    ratios.append(ratio)
    row = (
      f"| {k:,} | {recomputation} | {chunks} | {sample['peak_rss_mib']:,.0f} MiB | "
      f"{sample['peak_over_resting_mib']:,.0f} MiB | {1000 * sample['seconds_per_step']:.0f} | "
      f"{1000 * plain['seconds_per_step']:.1f} | {ratio:.1f}x | `{name}` |"
    )
    assert row in text, row
  flat = _flat(text)
  plain_backprop, _ = _sample_and_plain("truncation_sample_plain_backprop.json", 200)
  per_step = plain_backprop["peak_over_resting_mib"] / 200
  one, _ = _sample_and_plain("truncation_sample_one_level.json", 10_000)
  two, _ = _sample_and_plain("truncation_sample.json", 10_000)
  two_short, _ = _sample_and_plain("truncation_sample.json", 1000)
  growth = two["peak_over_resting_mib"] / two_short["peak_over_resting_mib"]
  assert (
    f"holds {plain_backprop['peak_over_resting_mib']:,.0f} MiB above resting at K = 200: about "
    f"{per_step:.0f} MiB per inner step of both unrolls, so K = 10,000 would need about "
    f"{round(per_step * 10_000 / 1024, -1):.0f} GiB. One level of recomputation brings K = "
    f"10,000 to {one['peak_rss_mib'] / 1024:.1f} GiB; two levels to "
    f"{two['peak_rss_mib'] / 1024:.1f} GiB (ten times more steps cost {growth:.1f} times more "
    f"memory above resting; K^(1/3) predicts {10 ** (1 / 3):.2f})"
  ) in flat
  plains = [_sample_and_plain(n, k)[1]["peak_rss_mib"] for n, k, _ in MEMORY_ROWS]
  assert "Plain training stays under 1 GiB." in flat and max(plains) < 1024
  assert (
    f"a sample costs {np.floor(min(ratios)):.0f} to {np.ceil(max(ratios)):.0f} times plain training"
  ) in flat
  assert (
    f"(two levels cost {two['seconds_per_step'] / one['seconds_per_step']:.1f} times one level's "
    "time at K = 10,000"
  ) in flat


README_LOADS = [
  ("`results/paper_cnn_cpu_fused_run1.json` ... `run5.json`", CURRENT[:5]),
  ("`results/paper_cnn_cpu_fused_with_reference.json`", CURRENT[5:]),
  ("`results/paper_cnn_cpu_run1.json` ... `run6.json`", PREVIOUS[:6]),
  ("`results/paper_cnn_cpu_with_reference_run1.json`, `run2.json`", PREVIOUS[6:8]),
  ("`results/paper_cnn_cpu_xla_update.json`", PREVIOUS[8:]),
]


def test_the_benchmark_readmes_load_table_is_the_runs_environment():
  text = _section(
    _doc("benchmarks", "README.md"), "| file | command | load average (1 min) start -> end |"
  )
  rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}
  for first_cell, names in README_LOADS:
    (row,) = [r for k, r in rows.items() if k.startswith(first_cell)]
    environments = [_result(n)["environment"] for n in names]
    loads = ", ".join(
      f"{_one_decimal(e['load_average_1_5_15_min'][0])} -> "
      f"{_one_decimal(e['load_average_after'][0])}"
      for e in environments
    )
    assert row.rstrip().endswith(f"| {loads} |"), (first_cell, loads)
  for name in CURRENT + PREVIOUS:
    e = _result(name)["environment"]
    assert e["cpu_count"] == 2 and e["tensorflow"].startswith("2.21")
    assert e["inter_op_threads"] == 2 and e["intra_op_threads"] == 0
    assert bool(e["xla_update"]) == (name == "paper_cnn_cpu_xla_update.json")


def test_the_benchmark_readmes_result_cells_are_their_files():
  text = _flat(_doc("benchmarks", "README.md"))
  zero, one = (
    {r["mode"]: r for r in _result(f"truncation_sample_quickstart_intra{i}.json")} for i in (0, 1)
  )
  assert (
    f"a sample's inner step {1000 * one['sample_norecompute']['seconds_per_step']:.1f} ms against "
    f"{1000 * zero['sample_norecompute']['seconds_per_step']:.1f} ms, plain training "
    f"{1000 * one['plain']['seconds_per_step']:.1f} ms against "
    f"{1000 * zero['plain']['seconds_per_step']:.1f} ms (sample/plain "
    f"{one['sample_norecompute']['seconds_per_step'] / one['plain']['seconds_per_step']:.1f}x)"
  ) in text
  quick = _result("local_workers_quickstart.json")
  assert quick["outer_step_seconds_measured"]
  assert (
    f"{quick['num_workers']} workers: {quick['worker_states_mib']:.0f} MiB of states "
    f"({quick['worker_states_mib_each']:.0f} MiB each), peak "
    f"{quick['peak_rss_mib'] / 1024:.1f} GiB, an outer step {quick['outer_step_seconds']:.1f} s at "
    f"K ~ {round(np.mean(quick['timed_num_steps']), -1):.0f}"
  ) in text
  paper = _result("local_workers_paper.json")
  assert (
    f"{paper['num_workers']} workers: {paper['worker_states_mib'] / 1024:.1f} GiB of states "
    f"({paper['worker_states_mib_each']:.0f} MiB each), peak "
    f"{paper['peak_rss_mib'] / 1024:.1f} GiB, {paper['seconds_to_start_worker_runs']:.0f} s to "
    f"start the inner runs, {paper['seconds_per_sample']:.1f} s per sample at K ~ "
    f"{round(np.mean(paper['timed_num_steps']), -1):.0f}, "
    f"an outer step ~ {paper['outer_step_seconds']:.0f} s (extrapolated;"
  ) in text
  intra0, intra1 = (_result(f"local_workers_paper_samples_intra{i}.json") for i in (0, 1))
  assert (
    f"{intra0['seconds_per_sample']:.2f} s and {intra1['seconds_per_sample']:.2f} s per sample at "
    f"K = {intra1['first_sample_num_steps']}: an outer step of 128 samples ~ "
    f"{128 * intra0['seconds_per_sample']:.0f} s and ~ {128 * intra1['seconds_per_sample']:.0f} s; "
    f"{intra0['seconds_per_sample'] / intra1['seconds_per_sample']:.2f}x with one intra-op thread"
  ) in text
  for suffix in ("_intra0", ""):
    p = _result(f"outer_step_profile_quickstart{suffix}.json")
    parts = p["parts_seconds_per_outer_step"]
    forward, backward = parts["+ and - unrolls forward"], parts["backward pass and ES"]
    rest = p["seconds_per_outer_step"] - forward - backward
    assert (
      f"{p['seconds_per_outer_step']:.2f} s{' per outer step at K ~ 16' if suffix else ''}: "
      f"{'both unrolls ' if suffix else ''}forward {forward:.2f}, backward and ES {backward:.2f}, "
      f"everything else {rest:.2f}"
    ) in text, suffix
  ab = _result("outer_step_ab_quickstart.json")
  per_round = ", ".join(f"{r:.2f}" for r in ab["ratio_to_before"]["after"]["per_round"])
  assert (
    f"{ab['median']['before']:.1f} against {ab['median']['after']:.1f} outer steps per minute "
    f"(medians); after / before {per_round}"
  ) in text
  bn = _result("outer_step_ab_bn_gradient.json")
  speeds = bn["outer_steps_per_minute"]
  by_before = ", ".join(
    f"{a / b:.2f}" for a, b in zip(speeds["after"], speeds["before"], strict=True)
  )
  by_first = ", ".join(f"{r:.2f}" for r in bn["ratio_to_c1d5a8f1"]["after"]["per_round"])
  assert f"--output ...` (load about {bn['load_average'][0]:.0f}) |" in text
  assert (
    f"{bn['median']['c1d5a8f1']:.2f} (1d5a8f1), {bn['median']['before']:.2f} (before), "
    f"{bn['median']['after']:.2f} (after) outer steps per minute (medians); after / before "
    f"{by_before}; after / 1d5a8f1 {by_first}"
  ) in text
  run2 = _result("outer_step_ab_bn_gradient_run2.json")
  per_round = ", ".join(f"{r:.2f}" for r in run2["ratio_to_before"]["after"]["per_round"])
  assert (
    f"(load about {run2['load_average'][0]:.0f}) | {run2['median']['before']:.2f} against "
    f"{run2['median']['after']:.2f} outer steps per minute (medians); after / before {per_round}"
  ) in text
  p = _result("outer_step_profile_quickstart_closed_form.json")
  forward, backward = (p["parts_seconds_per_outer_step"][k] for k in PROFILE_ROWS_TRUNCATION)
  assert (
    f"| {p['seconds_per_outer_step']:.2f} s: forward {forward:.2f}, backward and ES "
    f"{backward:.2f}, everything else {p['seconds_per_outer_step'] - forward - backward:.2f} |"
  ) in text
  for name in ("outer_step_ab_vs_1d5a8f1.json", "outer_step_ab_vs_1d5a8f1_run2.json"):
    ab = _result(name)
    per_round = ", ".join(f"{r:.2f}" for r in ab["ratio_to_c1d5a8f1"]["now"]["per_round"])
    assert (
      f"(load about {ab['load_average'][0]:.0f}) | {ab['median']['c1d5a8f1']:.1f}"
      f"{' (1d5a8f1)' if '_run2' not in name else ''} against {ab['median']['now']:.1f}"
      f"{' (now)' if '_run2' not in name else ''} outer steps per minute (medians); now / "
      f"1d5a8f1 {per_round} |"
    ) in text, name
  ops = _result("outer_step_ops_quickstart.json")
  seconds = ops["op_seconds_per_sample"]
  conv = sum(v for k, v in seconds.items() if "Conv2D" in k) / sum(seconds.values())
  assert (
    f"one sample at K = {ops['num_steps']}: {sum(seconds.values()):.3f} s of op time, "
    f"{ops['wall_seconds_per_sample']:.3f} s wall-clock, "
    f"{sum(ops['op_calls_per_sample'].values()):,} op runs; convolutions {100 * conv:.0f}% of op "
    "time |"
  ) in text

  ab = _result("outer_step_ab_grouped_quickstart.json")
  grouped_rounds = ", ".join(
    f"{x:.2f}" for x in ab["ratio_to_workers_8"]["grouped_4x2"]["per_round"]
  )
  assert (
    f"(load about {ab['load_average'][0]:.0f}) | {ab['median']['workers_8']:.1f} (8 workers), "
    f"{ab['median']['batched_4x2']:.1f} (4 x 2), {ab['median']['grouped_4x2']:.1f} (4 x 2 "
    f"grouped) outer steps per minute (medians); grouped / 8 workers {grouped_rounds} |"
  ) in text
  against = [
    ", ".join(
      f"{x:.2f}"
      for x in _result(f"outer_step_ab_grouped_vs_1d5a8f1{s}.json")["ratio_to_c1d5a8f1"][
        "grouped_4x2"
      ]["per_round"]
    )
    for s in ("", "_run2")
  ]
  assert f"| grouped / 1d5a8f1 {against[0]}; then {against[1]} |" in text

  def ratios(name, key):
    return ", ".join(f"{m[key]:.2f}" for m in _result(name)["measurements"])

  grouped = "grouped_over_separate_samples_per_second"
  assert f"grouped / plain {ratios('batched_worker_grouped_quickstart.json', grouped)} for" in text
  assert (
    f"| grouped / plain {ratios('batched_worker_grouped_quickstart_run1.json', grouped)} |"
    in (text)
  )
  (paper,) = _result("batched_worker_grouped_paper.json")["measurements"]
  assert (
    f"the paper's size: {paper['separate']['samples_per_second']:.3f} samples/s for 8 plain "
    f"workers, {paper['grouped']['samples_per_second']:.3f} grouped "
    f"({paper['grouped_over_separate_samples_per_second']:.2f}x) |"
  ) in text
  for key, label in (
    ("vectorized", "vectorized / plain"),
    ("grouped_vectorized", "grouped and vectorized / plain"),
    ("grouped", "grouped / plain"),
  ):
    cells = ratios(
      "batched_worker_vectorized_quickstart.json", f"{key}_over_separate_samples_per_second"
    )
    assert f"{label} {cells}" in text, key
  batched = ratios("batched_worker_quickstart.json", "batched_over_separate_samples_per_second")
  assert f"| batched / plain {batched} |" in text
  convolution, eigen = (_result(f"batched_convolution_cpu{s}.json") for s in ("", "_eigen"))
  assert (
    f"batched matmuls {convolution['batched_over_separate_time']:.1f}x, grouped "
    f"{convolution['grouped_over_separate_time']:.2f}x the time of the tasks' own |"
  ) in text
  assert (
    f"no grouped gradient on CPU; batched matmuls {eigen['batched_over_separate_time']:.1f}x |"
    in (text)
  )
  vectorized = ratios("vectorized_samples_quickstart.json", "vectorized_over_separate_time")
  assert (
    "separate samples for B = 1, 2, 4 |" in text
    and f"map` of a whole sample: {vectorized} of" in text
  )
  final = _result("final_comparison_quickstart.json")
  assert (
    f"on {final['num_tasks']} of its tasks: {final['median_seconds']['1']:.0f} s with its runs one "
    f"at a time, {final['median_seconds']['2']:.0f} s two at a time "
    f"({final['speedup_vs_first']['2']:.2f}x), the same numbers"
  ) in text and final["same_numbers"]
  medians = [_result(n)["ratios"]["mlp_lopt/adam"]["median"] for n, _, _ in SHIPPED_SIZE]
  assert f"(idle machine) | {medians[0]:.3f} and {medians[1]:.3f} |" in text
  assert f"(load about 4) | {medians[2]:.3f} and {medians[3]:.3f} |" in text


def test_a_theta_snapshots_size_is_a_shipped_exports():
  """The snapshots' "a few KB each": a snapshot is an export like the shipped ones (theta, its
  info and card)."""
  sizes = []
  for name in ("generated_bn_cnn_train", "generated_cnn_valid"):
    directory = os.path.join(testing_utils.REPO, "pretrained", name, "theta")
    sizes.append(sum(os.path.getsize(os.path.join(directory, f)) for f in os.listdir(directory)))
  assert 1_000 < min(sizes) and max(sizes) < 10_000
  text = _flat(_doc("docs", "outer_training.md"))
  assert "(kept; a few KB each)" in text and "(a few KB each, all kept;" in text


def test_how_fast_the_convolutions_run_is_its_two_runs_and_the_op_profile():
  text = _section(
    _doc("docs", "performance.md"), "### How fast the convolutions run", "## The quickstart now"
  )
  flat = _flat(text)
  quick, paper = (_result(f"convolution_rate_{s}.json") for s in ("quickstart", "paper"))
  assert (quick["batch_size"], quick["channels"], quick["rounds"]) == (32, 16, 5)
  assert (paper["batch_size"], paper["channels"]) == (128, 32)
  assert f"which reaches {quick['square_gflops_per_second']:.0f} GFLOP/s on one core" in flat
  layers = quick["layers"]
  for i, layer in enumerate(layers):
    out = (layer["size"] + layer["stride"] - 1) // layer["stride"]
    assert layer["flops_per_call"] == 2 * 32 * out**2 * 9 * layer["in_channels"] * 16

    def cell(kernel, layer=layer):
      return f"{layer['microseconds'][kernel]:.0f} µs, {layer['fraction_of_gemm'][kernel]:.2f}"

    assert (
      f"| {i + 1} ({layer['size']}x{layer['size']}x{layer['in_channels']}, {layer['stride']}) | "
      f"{cell('forward')} | {cell('input_gradient')}{' (not run in a sample)' if i == 0 else ''} "
      f"| {cell('filter_gradient')} | {layer['microseconds']['gemm']:.0f} µs "
      f"({layer['fraction_of_square']['gemm']:.2f}) |"
    ) in text, i
  # Kernels per unroll step and layer (layer 1's input needs no gradient), and per sample of
  # 2 K unroll steps and the last loss of both unrolls: the op profile's counts.
  forward, filters, inputs = (2, 3, 3), (2, 3, 3), (0, 3, 3)
  ops = _result("outer_step_ops_quickstart.json")
  calls, k = ops["op_calls_per_sample"], ops["num_steps"]
  assert calls["_MklNativeConv2D"] + calls["_MklNativeFusedConv2D"] == 2 * k * 8 + 6
  assert calls["_MklNativeConv2DBackpropFilter"] == 2 * k * 8 + 6
  assert calls["_MklNativeConv2DBackpropInput"] == 2 * k * 6 + 4

  def us(i, kernel):
    return layers[i]["microseconds"][kernel]

  step = sum(
    forward[i] * us(i, "forward")
    + filters[i] * us(i, "filter_gradient")
    + inputs[i] * us(i, "input_gradient")
    for i in range(3)
  )
  last = 2 * sum(
    us(i, "forward") + us(i, "filter_gradient") + (us(i, "input_gradient") if i else 0)
    for i in range(3)
  )
  sample = (2 * k * step + last) / 1000
  seconds = ops["op_seconds_per_sample"]
  profile = 1000 * sum(v for name, v in seconds.items() if "Conv2D" in name)
  total = 1000 * sum(seconds.values())
  flops = [layer["flops_per_call"] for layer in layers]
  step_flops = sum((forward[i] + filters[i] + inputs[i]) * flops[i] for i in range(3))
  last_flops = 2 * sum((3 if i else 2) * flops[i] for i in range(3))
  ideal = 1000 * (2 * k * step_flops + last_flops) / (quick["square_gflops_per_second"] * 1e9)
  assert (
    f"that is {step / 1000:.1f} ms per unroll step and {sample:.0f} ms per sample, against the "
    f"profile's {profile:.0f} ms of convolution time. Their {step_flops / 1e6:.0f} MFLOP per "
    f"unroll step at the 512x512 product's rate would take {ideal:.0f} ms per sample"
  ) in flat
  assert abs(sample / profile - 1) < 0.1  # The kernels' timings account for the profile's.
  assert (
    f"would save at most {sample - ideal:.0f} ms of the sample's {total:.0f} ms of op time "
    f"({100 * (sample - ideal) / total:.0f}%), making it at most "
    f"{total / (total - sample + ideal):.2f}x shorter."
  ) in flat
  run2 = np.median(
    _result("outer_step_ab_vs_1d5a8f1_run2.json")["ratio_to_c1d5a8f1"]["now"]["per_round"]
  )
  assert f"needs a sample {3 / run2:.2f}x faster (3 / {run2:.2f})" in flat
  assert total / (total - sample + ideal) < 3 / run2
  slow = layers[1]["fraction_of_gemm"]["input_gradient"]
  assert f"(all but layer 2's stride-2 input gradient, at {slow:.2f})" in flat
  run_in_a_sample = [
    layers[i]["fraction_of_gemm"][kernel]
    for i in range(3)
    for kernel in ("forward", "input_gradient", "filter_gradient")
    if (i, kernel) not in ((0, "input_gradient"), (1, "input_gradient"))
  ]
  assert min(run_in_a_sample) > 0.7 and slow < 0.7
  fractions = [
    paper["layers"][i]["fraction_of_square"][kernel]
    for i in (1, 2)
    for kernel in ("forward", "input_gradient", "filter_gradient")
  ]
  assert f"3 run at {min(fractions):.2f}-{max(fractions):.2f} of the 512x512 product's rate" in flat


def test_the_benchmark_readmes_convolution_rate_rows_are_their_files():
  text = _doc("benchmarks", "README.md")
  for name, label in (("quickstart", "of a matrix product of their shape"), ("paper", None)):
    result = _result(f"convolution_rate_{name}.json")

    def span(key, result=result):
      values = [
        result["layers"][i][key][kernel]
        for i in (1, 2)
        for kernel in ("forward", "input_gradient", "filter_gradient")
      ]
      return f"{min(values):.2f}-{max(values):.2f}"

    (row,) = [r for r in text.splitlines() if r.startswith(f"| `results/convolution_rate_{name}")]
    assert f"layers 2 and 3: {span('fraction_of_gemm')} of " in row, name
    assert (
      f"{span('fraction_of_square')} of a 512x512 product's" in row
      or f"{span('fraction_of_square')} of the 512x512 product's" in row
    ), name
    assert f"({result['square_gflops_per_second']:.0f} GFLOP/s" in row, name
    assert label is None or label in row


def test_the_batchs_trace_time_is_its_run():
  text = _flat(_doc("docs", "performance.md"))
  result = _result("batched_worker_trace_small.json")
  assert result["device"] == "cpu" and "paper_cnn.channels = 4" in result["gin_bindings"]
  first = {
    m["tasks"]: {k: m[k]["first_call_seconds"] for k in ("grouped", "grouped_vectorized")}
    for m in result["measurements"]
  }
  slope = (first[32]["grouped_vectorized"] - first[8]["grouped_vectorized"]) / 24
  at_128 = first[8]["grouped_vectorized"] + 120 * slope
  assert (
    f"the first call took {first[8]['grouped']:.0f} s grouped and "
    f"{first[8]['grouped_vectorized']:.0f} s grouped and vectorised at B = 8, "
    f"{first[32]['grouped']:.0f} s and {first[32]['grouped_vectorized']:.0f} s at B = 32: about "
    f"{slope:.1f} s more per task for the vectorised form, so about {at_128 / 60:.1f} minutes at "
    "B = 128 if it stays linear (not measured)."
  ) in text
  row = [r for r in _doc("benchmarks", "README.md").splitlines() if "trace_small" in r][0]
  assert (
    f"{first[8]['grouped']:.0f} s and {first[32]['grouped']:.0f} s grouped, "
    f"{first[8]['grouped_vectorized']:.0f} s and {first[32]['grouped_vectorized']:.0f} s grouped "
    "and vectorised |"
  ) in row
