"""The pathology figures' numbers in the README and docs/pathologies.md are their committed runs.

Every default gin file of gin/figures/ for Fig. 2, Fig. 3, App. A, B and G was run with
bin/figure; the JSON each wrote (every number its figure plots) is committed gzipped beside its PNG
in docs/figures/, with four more runs of Fig. 3's PES curve (other seeds, other outer learning
rates). Each number the docs give for these figures is recomputed here from those files, to the
precision it is printed.
"""

import gzip
import json
import os
import re

import numpy as np
import pytest
import testing_utils

FIGURES = os.path.join(testing_utils.REPO, "docs", "figures")
_sci = testing_utils.sci  # 1.3e-4, as the docs print a learning rate.
TRUNCATIONS = (10, 100, 1000, 10000)
APP_G = {  # The App. G table's rows: gin file -> its label.
  "appg_adam_lr1e-1": "Adam 0.1, beta1 0.9",
  "appg_adam_lr1e-1_beta1_0": "Adam 0.1, beta1 0",
  "appg_adam_lr1e-2": "Adam 0.01, beta1 0.9",
  "appg_adam_lr1e-2_beta1_0": "Adam 0.01, beta1 0",
  "appg_sgd_lr1": "SGD 1.0",
  "appg_sgd_lr1e-1": "SGD 0.1",
}


def _figure(name):
  with gzip.open(os.path.join(FIGURES, f"{name}.json.gz"), "rt") as f:
    return json.load(f)


def _text(name):
  with open(os.path.join(testing_utils.REPO, *name.split("/"))) as f:
    return re.sub(r"\s+", " ", f.read())


def _readme_row(first_cell):
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    (row,) = [line for line in f if line.startswith(f"| {first_cell} |")]
  return row


def _section(title):
  text = _text("docs/pathologies.md")
  return text.split(f"## {title}", 1)[1].split(" ## ", 1)[0]


def _pes_runs(curve):
  """(lr at the end of each inner run, the peak lr of each run) of a PES curve."""
  rates = np.asarray(curve["learning_rate"])
  runs = np.split(rates, len(curve["run_mean_loss"]))
  return [run[-1] for run in runs], [run.max() for run in runs]


@pytest.mark.parametrize(
  "name",
  [
    "fig2_toy_momentum",
    "fig2_toy_lr_momentum",
    "fig2_toy_lr",
    "exploding_lr_gradient",
    "fig2d_trajectories",
    "fig2ef_outer_loss_slices",
    "fig3_truncation_bias",
    *APP_G,
  ],
)
def test_each_figure_in_the_docs_has_the_json_of_its_run(name):
  result = _figure(name)
  assert result["figure"] == name
  assert os.path.exists(os.path.join(FIGURES, f"{name}.png"))
  assert f"figures/{name}.png" in _text("docs/pathologies.md")


def test_fig3_table_and_text_are_its_run():
  result = _figure("fig3_truncation_bias")
  curves, gradients = result["curves"], result["gradients_over_run"]
  section = _section("Fig. 3 and App. G: truncation bias")
  for length in TRUNCATIONS:
    curve, key = curves[str(length)], str(length)
    row = (
      f"| {length:,} | {_sci(curve['final_learning_rate'])} | "
      f"{curve['final_run_mean_loss']:.3f} | {curve['eval_loss']:.3f} | "
      f"{gradients[key]['sum']:+#.3g} ("
    )
    assert row in section, row
  pes = curves["pes_10"]
  ends, peaks = _pes_runs(pes)
  assert (
    f"| PES, 10 (beyond the paper) | {_sci(pes['final_learning_rate'])} (peak "
    f"{_sci(max(peaks))}) | {pes['final_run_mean_loss']:.3f} | {pes['eval_loss']:.3f} | - |"
  ) in section
  reference = result["evaluation"]["reference"]
  losses = dict(zip(reference["learning_rates"], reference["run_loss"], strict=True))
  assert (
    f"the best is {_sci(reference['best_learning_rate'], 0)}, loss "
    f"{reference['best_run_loss']:.3f}; 1e-3 gives {losses[1e-3]:.3f}, 1e-4 gives "
    f"{losses[1e-4]:.2f}"
  ) in section
  # Panel (c): the first two 1,000-step truncations' gradients, and the later ones' signs.
  first = gradients["1000"]["gradient"][:2]
  assert f"{first[0]:.2f} and {first[1]:.2f} for the first two 1,000-step" in section
  later = [np.asarray(gradients[str(n)]["gradient"][1:]) for n in (10, 100, 1000)]
  shares = (
    ", ".join(f"{np.mean(g > 0):.0%}" for g in later[:2]) + f" and {np.mean(later[2] > 0):.0%}"
  )
  assert f"({shares} of them for 10, 100 and 1,000 steps" in section, shares
  tops = ", ".join(f"+{g.max():.2g}" for g in later[:2]) + f" and +{later[2].max():.2g}"
  assert f"up to {tops})" in section, tops
  # The 10,000-step truncation's 3 outer steps, and the 10-step curve's rise in the first run.
  assert f"only x{curves['10000']['final_learning_rate'] / 1e-3:.2f}" in section
  steps, rates = np.asarray(curves["10"]["inner_step"]), np.asarray(curves["10"]["learning_rate"])
  in_first = steps <= result["settings"]["horizon"]
  peak = int(np.argmax(rates[in_first]))
  assert f"up to {_sci(rates[in_first][peak])} by inner step {steps[in_first][peak]}" in section
  # The README row.
  lr = {n: _sci(curves[str(n)]["final_learning_rate"]) for n in TRUNCATIONS}
  assert (
    f"truncations of 10 and 100 end at {lr[10]} and {lr[100]}, of 1,000 and 10,000 at "
    f"{lr[1000]} and {lr[10000]}"
  ) in _readme_row("Fig. 3")


def test_fig3s_pes_over_seeds_and_outer_learning_rates_is_its_runs():
  section = _section("Fig. 3 and App. G: truncation bias")
  curves = [_figure("fig3_truncation_bias")["curves"]["pes_10"]]
  for seed in (1, 2):
    result = _figure(f"fig3_pes_seed{seed}")
    assert result["settings"]["seed"] == seed and result["settings"]["truncation_lengths"] == []
    curves.append(result["curves"]["pes_10"])
  ends = ", ".join(_sci(c["final_learning_rate"]) for c in curves[:2])
  peaks = ", ".join(_sci(max(_pes_runs(c)[1])) for c in curves[:2])
  assert f"ends at {ends} and {_sci(curves[2]['final_learning_rate'])}" in section, ends
  assert f"after peaks of {peaks} and {_sci(max(_pes_runs(curves[2])[1]))}" in section, peaks
  evals = ", ".join(f"{c['eval_loss']:.3f}" for c in curves[:2])
  assert f"({evals} and {curves[2]['eval_loss']:.3f} for a fresh run at that rate" in section
  ends = sorted(c["final_learning_rate"] for c in curves)
  assert f"(3 seeds end between {_sci(ends[0])} and {_sci(ends[-1])})" in _text("docs/results.md")
  for label, name in (("0.1", "fig3_pes_outer_lr_0.1"), ("0.01", "fig3_pes_outer_lr_0.01")):
    result = _figure(name)
    assert result["settings"]["pes_outer_optimizer"].startswith(f"Adam(lr={label}")
    curve = result["curves"]["pes_10"]
    rates = np.asarray(curve["learning_rate"])
    words = (
      f"at {label} (`{name}.json.gz`) the rate peaks at {_sci(rates.max())}, falls to "
      f"{_sci(rates.min())} and ends at {_sci(rates[-1])}"
    )
    assert words in section, words
    if label == "0.1":  # The MLP dead (ln 10) from the second inner run on.
      dead = curve["run_mean_loss"][1:]
      assert min(dead) > 2.30 and f"(mean loss {dead[0]:.2f}, ln 10 =" in section


def test_app_g_table_and_readme_row_are_their_runs():
  section = _section("Fig. 3 and App. G: truncation bias")
  short, long = [], []
  for name, label in APP_G.items():
    curves = _figure(name)["curves"]
    cells = " | ".join(
      f"{_sci(curves[str(n)]['final_learning_rate'])} ({curves[str(n)]['final_run_mean_loss']:.3f})"
      for n in TRUNCATIONS
    )
    assert f"| {label} | {cells} |" in section, label
    short += [curves[str(n)]["final_learning_rate"] for n in (10, 100)]
    long += [curves[str(n)]["final_learning_rate"] for n in (1000, 10000)]
    # Every outer optimizer shows the bias: both short truncations end below both long ones.
    assert max(short[-2:]) < min(long[-2:]), name
  assert (
    f"short truncations end at lr {_sci(min(short))} to {_sci(max(short))}, long ones at "
    f"{_sci(min(long))} to {_sci(max(long))}, in all six"
  ) in _readme_row("App. G")


def test_the_toy_losses_numbers_are_their_runs():
  momentum = _figure("fig2_toy_momentum")
  section = _section("Fig. 2a-c and App. B: the toy loss with two minima")
  changes = ", ".join(str(n) for n in momentum["num_basin_changes"])
  assert f"the basin changes {changes} times" in section
  largest = ", ".join(f"{x:.2g}".replace("e+0", "e") for x in momentum["max_abs_dloss_dtheta"])
  assert f"The largest |d l(w_T)/d theta| is {largest}" in section, largest
  ends = momentum["basin_counts"][-1]
  assert f"{ends['w=0']:,} of the 2,000 runs end at w = 0 and {ends['w=3.569']:,}" in section
  assert f"(median {momentum['median_abs_dloss_dtheta'][-1]:.0e})".replace("e-", "e-") in section
  steps = momentum["num_steps"]
  row = _readme_row("Fig. 2")
  assert (
    f"basin changes along theta {momentum['num_basin_changes'][0]} -> "
    f"{momentum['num_basin_changes'][steps.index(100)]} from T = {steps[0]} to 100"
  ) in row
  top = max(momentum["max_abs_dloss_dtheta"])
  assert f"up to {top:.2g}".replace("e+0", "e") in row
  with_momentum, plain = _figure("fig2_toy_lr_momentum"), _figure("fig2_toy_lr")
  diverged = (max(with_momentum["num_diverged"]), max(plain["num_diverged"]))
  assert f"{diverged[0]} and {diverged[1]} of 2,000 learning rates diverge" in _readme_row("App. B")
  assert f"({diverged[0]} of 2,000 runs diverge" in section
  assert f"divergence above ({diverged[1]} runs)" in section
  grad = with_momentum["max_abs_dloss_dtheta"]
  assert f"reaches {grad[0]:.2g} at T = 10 and {grad[1]:.2g} at T = 30".replace("e+0", "e") in (
    section
  )
  converged = max(grad[steps.index(100) :])
  assert f"it is at most {converged:.3g} everywhere on the grid" in section
  assert (
    f"reaches {max(plain['max_abs_dloss_dtheta']):.2g} at T = 30".replace("e+0", "e") in section
  )


def test_app_as_numbers_are_its_run():
  result = _figure("exploding_lr_gradient")
  section = _section("Sec. 2.3 and App. A: the exploding gradient of a learned learning rate")
  rates = result["learning_rates"]
  measured = " | ".join(f"{x:.3f}" for x in result["measured_slope"])
  predicted = " | ".join(f"{x:.3f}" for x in result["predicted_slope"])
  assert f"| measured slope of log \\|d l/d lr\\| (T = 101-200) | {measured} |" in section
  assert f"| 2 log rho | {predicted} |" in section
  assert f"relative error of {_sci(result['max_relative_error'])}" in section
  last = {lr: abs(row[-1]) for lr, row in zip(rates, result["dloss_dtheta"], strict=True)}
  assert result["num_steps"][-1] == 200
  text = f"reaches {last[2.2]:.2g} at T = 200 for lr = 2.2 and {last[2.05]:.2g} for lr = 2.05"
  assert text.replace("e+", "e") in section, text
  top = rates.index(2.2)
  slope_dw = f"{result['measured_slope_dw'][top]:.3f} measured against log 1.2 = "
  assert slope_dw + f"{result['predicted_slope_dw'][top]:.3f}" in section
  slope = f"{result['measured_slope'][top]:.3f} against {result['predicted_slope'][top]:.3f}"
  assert f"twice that rate, {slope}" in section
  assert f"growing at {result['measured_slope'][top]:.3f}/step against" in _readme_row("App. A")


def test_fig2d_and_fig2ef_numbers_are_their_runs():
  trajectories = _figure("fig2d_trajectories")
  section = _section("Fig. 2d: diverging trajectories")
  spread = trajectories["relative_spread"]
  assert f"is {spread[1]:.3f} after step 1" in section
  later = ", ".join(f"{spread[t]:.2g}" for t in (2, 5, 10, 20)) + f", {spread[40]:.2f}"
  assert f"then {later} at steps 2, 5, 10, 20, 40" in section, later
  pairwise = trajectories["max_pairwise_2d"]
  assert f"grows from {pairwise[1]:.0e} to {pairwise[-1]:.2f}".replace("e-0", "e-") in section
  assert f"(training loss {trajectories['final_loss_max']:.3f} against" in section
  assert f"relative spread 0.003 -> {spread[40]:.2f} over 40 steps" in _readme_row("Fig. 2")
  slices = _figure("fig2ef_outer_loss_slices")
  section = _section("Fig. 2e-f: slices of a learned optimizer's outer-loss surface")
  second = slices["line_mean_abs_second_difference"]
  assert (
    "the mean |second difference| of the slice is " + ", ".join(f"{x:.3f}" for x in second)
    in section
  )
  variation = ", ".join(f"{x:.1f}" for x in slices["line_total_variation"])
  assert f"its total variation {variation}" in section
  laplacian = slices["grid_mean_abs_laplacian"]
  assert "mean |Laplacian| " + ", ".join(f"{x:.3f}" for x in laplacian) in section
  assert f"1-D slice roughness x{round(second[-1] / second[0])}" in _readme_row("Fig. 2")
