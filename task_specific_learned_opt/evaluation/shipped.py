"""The statistics of the shipped evaluations, recomputed from their per-task files.

The evaluations shipped in pretrained/ keep, for each comparison, the per-task differences
(baseline minus learned, inits averaged): pretrained/fig6/evaluation/summary.json (every Fig. 6
baseline, both thetas), pretrained/fig6/adam_reg_decay_1000/evaluation/summary.json (both thetas
against the 1,000-configuration Adam+Reg+Decay search's winners, on other tasks),
pretrained/app_f/evaluation/summary.json (App. F's searched RMSProp and
SGD+momentum on the same tasks), pretrained/generated_bn_cnn_train/evaluation/evaluation.json
(the L_train theta's first evaluation), pretrained/out_of_family/<problem>/summary.json and
pretrained/app_e/<problem>/<thetas>/summary.json (App. E) and
pretrained/l_valid_alternatives/horizon_1000/evaluation_at_1000_steps/summary.json (snapshots of
a longer-horizon L_valid run at 1,000 inner steps) and pretrained/paper_family/evaluation/
summary.json (Fig. 6 on the paper's own family, Sec. 4.2's CNN without batch norm, with the
refined Adam, "adam_refined", beside the paper's baselines), pretrained/paper_family/
adam_reg_decay/evaluation/summary.json (against the 1,000-configuration search's winner) and
pretrained/paper_family/evaluation_5_inits/summary.json (the same tasks at 5 inits each). From
those this writes

  pretrained/statistics.json   one record per comparison: the evaluation, theta, baseline and
                               metric, both means and statistics.paired's statistics;
  pretrained/statistics.md     the same as markdown tables, one per evaluation, each comparison
                               worded by its interval (statistics.verdict);
  pretrained/out_of_family/summary.md, pretrained/app_e/summary.md
                               summary.py's tables of the out-of-family evaluations (App. E):
                               the batch-normed thetas on seed 1's tasks, every shipped theta
                               on seed 4's tasks and the digits;

and, with --histograms, draws the shipped Fig. 6c histograms again (plots.plot_histogram) with
their intervals. The docs' "k of n" claims are read from statistics.md; a test checks that the
committed files are what this writes.

  python -m task_specific_learned_opt.evaluation.shipped [--histograms]
"""

import os
from collections.abc import Sequence

from absl import app, flags

from task_specific_learned_opt import files, plots
from task_specific_learned_opt.evaluation import reporting, statistics, summary

PRETRAINED = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "pretrained"))
STATISTICS_JSON = "statistics.json"
STATISTICS_MARKDOWN = "statistics.md"
OUT_OF_FAMILY_TABLE = "summary.md"
# App. E: {directory under pretrained/: its evaluations, in table order}, each directory's table in
# its summary.md. out_of_family/: the batch-normed thetas on seed 1's tasks. app_e/: every shipped
# theta on seed 4's tasks and on the digits, as <problem>/<thetas>: bn_cnn (the batch-normed
# thetas as outer-trained), bn_cnn_gated (the same with the growth gate at use time) and cnn (the
# paper-family thetas, with the guarded update they were outer-trained with); mixed (the theta
# outer-trained on a mix of these problems, on seed 5's tasks), the digits again with App. H's
# decay past the horizon (*_past_horizon_decay), and the mixed run without its relative step cap
# (mixed_without_relative_cap, seed 4); capped: the four batch-normed and paper-family thetas with
# one update, the guarded one with the mixed theta's relative step cap at use time (seed 5's tasks
# and Adam's runs, as the mixed theta's); digits_conv<n>: App. E's convnets on the real digits,
# every theta with that update (the mixed one too) and, for conv3, as in bn_cnn and cnn;
# decay_from_start: every theta with that update and a weight decay from the first step (seed 7's
# tasks; the digits with App. E's 2,000 steps); bounded_weights: every theta with the guarded
# update, a max-norm bound on each kernel and a 3% relative step cap (seed 8's tasks), and
# bounded_weights_small_cap the same with the 1% cap (seed 9's).
# App. E's problems on the generated family, in table order.
GENERATED_PROBLEMS = (
  "cnn_no_batch_norm",
  "cnn_batch_norm",
  "cnn_8_channels",
  "cnn_32_channels",
  "cnn_6_layers",
  "images_16x16",
  "mlp_2x32",
  "mlp_3x128",
)
APP_E = (
  tuple(
    f"{problem}/{thetas}"
    for problem in ("cnn_batch_norm", "mlp_2x32", "mlp_3x128", "digits_mlp_2x32")
    for thetas in ("bn_cnn", "bn_cnn_gated", "cnn")
  )
  + ("images_16x16/cnn", "cnn_6_layers/cnn", "cnn_8_channels/cnn", "cnn_32_channels/cnn")
  + tuple(f"{problem}/mixed" for problem in (*GENERATED_PROBLEMS, "digits_mlp_2x32"))
  + (
    "digits_mlp_2x32/mixed_past_horizon_decay",
    "digits_mlp_2x32/cnn_past_horizon_decay",
    "mlp_2x32/mixed_without_relative_cap",
    "mlp_3x128/mixed_without_relative_cap",
  )
  + tuple(f"{problem}/capped" for problem in GENERATED_PROBLEMS)
  + ("digits_mlp_2x32/capped_past_horizon_decay",)
  + tuple(f"digits_conv{n}/capped_past_horizon_decay" for n in (3, 6))
  + ("digits_conv3/bn_cnn", "digits_conv3/cnn")
  + tuple(
    f"{problem}/{update}"
    for update in ("decay_from_start", "bounded_weights", "bounded_weights_small_cap")
    for problem in (*GENERATED_PROBLEMS, "digits_mlp_2x32", "digits_conv3", "digits_conv6")
  )
)
OUT_OF_FAMILY = {
  "out_of_family": (
    "in_family",
    "cnn_8_channels",
    "cnn_32_channels",
    "cnn_6_layers",
    "cnn_no_batch_norm",
    "mlp_2x32",
    "images_16x16",
  ),
  "app_e": APP_E,
}
# {name: directory under pretrained/}, in the order they are written.
EVALUATIONS = {
  "fig6": "fig6/evaluation",
  "fig6_seed_6": "fig6/evaluation_seed_6",
  "fig6_adam_reg_decay_1000": "fig6/adam_reg_decay_1000/evaluation",
  "app_f": "app_f/evaluation",
  "app_f_seed_6": "app_f/evaluation_seed_6",
  "generated_bn_cnn_train": "generated_bn_cnn_train/evaluation",
  **{f"{d}/{name}": f"{d}/{name}" for d, names in OUT_OF_FAMILY.items() for name in names},
  "l_valid_alternatives/horizon_1000": "l_valid_alternatives/horizon_1000/evaluation_at_1000_steps",
  "paper_family": "paper_family/evaluation",
  "paper_family_adam_reg_decay": "paper_family/adam_reg_decay/evaluation",
  "paper_family_5_inits": "paper_family/evaluation_5_inits",
  "main_job": "main_job/eval",
}
# The evaluations whose histograms are shipped (Fig. 6c).
WITH_HISTOGRAMS = (
  "fig6",
  "fig6_seed_6",
  "fig6_adam_reg_decay_1000",
  "app_f",
  "app_f_seed_6",
  "generated_bn_cnn_train",
  "paper_family",
  "paper_family_adam_reg_decay",
  "paper_family_5_inits",
  "main_job",
)


def records(pretrained: str = PRETRAINED) -> list[dict]:
  """One record per comparison of every shipped evaluation, in file order.

  Args:
    pretrained: the pretrained/ directory.

  Returns:
    [{"evaluation", "learned", "baseline", "metric", "learned_mean_loss", "baseline_mean_loss",
      **statistics.paired(the comparison's "difference")}].
  """
  found = []
  for name, directory in EVALUATIONS.items():
    evaluation = summary.read_evaluation(os.path.join(pretrained, directory))
    for c in evaluation["comparisons"]:
      found.append(
        {
          "evaluation": name,
          **{k: c[k] for k in ("learned", "baseline", "metric")},
          "learned_mean_loss": float(c["learned_mean_loss"]),
          "baseline_mean_loss": float(c["baseline_mean_loss"]),
          **statistics.paired(c["difference"]),
        }
      )
  return found


def markdown(found: Sequence[dict]) -> str:
  """statistics.md: a table per evaluation of `records`."""
  lines = [
    "# Statistics of the shipped evaluations\n",
    "\n",
    "Written by `python -m task_specific_learned_opt.evaluation.shipped` from the per-task\n",
    "differences of each evaluation's comparisons (baseline minus learned, inits averaged; a\n",
    'positive difference is a task the learned optimizer wins). "tasks won": the tasks with a\n',
    "positive difference, with the exact two-sided sign test's p (ties left out); Wilcoxon: the\n",
    "exact signed-rank test's p; the mean difference with its 95% percentile bootstrap interval\n",
    f"over tasks ({statistics.NUM_RESAMPLES:,} resamples, seed {statistics.SEED}). A comparison "
    f'whose interval holds\nzero is "{statistics.NOT_RESOLVED}".\n',
  ]
  columns = [
    "theta",
    "baseline",
    "metric",
    "learned vs baseline",
    "tasks won (sign test p)",
    "Wilcoxon p",
    "baseline - learned, mean [95% CI]",
    "outcome",
  ]
  for name in EVALUATIONS:
    rows = [r for r in found if r["evaluation"] == name]
    lines += [f"\n## {name} ({rows[0]['num_tasks']} tasks)\n\n"]
    lines += [f"| {' | '.join(columns)} |\n", "|" + " --- |" * len(columns) + "\n"]
    for r in rows:
      cells = [
        r["learned"],
        r["baseline"],
        reporting.METRIC_NAMES[r["metric"]],
        f"{r['learned_mean_loss']:.3f} vs {r['baseline_mean_loss']:.3f}",
        f"{r['wins']} of {r['num_tasks']} (p = {statistics.format_p(r['p_value'])})",
        statistics.format_p(r["wilcoxon_p_value"]),
        statistics.interval_cell(r),
        r["outcome"],
      ]
      lines.append(f"| {' | '.join(cells)} |\n")
  return "".join(lines)


def out_of_family_table(directory: str = "out_of_family", pretrained: str = PRETRAINED) -> str:
  """summary.py's table of the out-of-family evaluations in `directory` (a key of OUT_OF_FAMILY),
  in their order."""
  evaluations = {
    name: summary.read_evaluation(os.path.join(pretrained, directory, name))
    for name in OUT_OF_FAMILY[directory]
  }
  return summary.table(evaluations)


def histograms(pretrained: str = PRETRAINED) -> list[str]:
  """Draws again the shipped histograms (those of WITH_HISTOGRAMS that exist); their paths."""
  drawn = []
  for name in WITH_HISTOGRAMS:
    directory = os.path.join(pretrained, EVALUATIONS[name])
    for c in summary.read_evaluation(directory)["comparisons"]:
      path = os.path.join(directory, f"{reporting.histogram_key(c)}.png")
      if os.path.exists(path):
        plots.plot_histogram(c, path)
        drawn.append(path)
  return drawn


def write(pretrained: str = PRETRAINED) -> dict[str, str]:
  """Writes statistics.json, statistics.md and each OUT_OF_FAMILY directory's summary.md;
  returns {what: path}."""
  found = records(pretrained)
  paths = {
    "json": os.path.join(pretrained, STATISTICS_JSON),
    "markdown": os.path.join(pretrained, STATISTICS_MARKDOWN),
    **{d: os.path.join(pretrained, d, OUT_OF_FAMILY_TABLE) for d in OUT_OF_FAMILY},
  }
  files.write_json(paths["json"], found, indent=1)
  files.write_text(paths["markdown"], markdown(found))
  for directory in OUT_OF_FAMILY:
    files.write_text(paths[directory], out_of_family_table(directory, pretrained))
  return paths


def main(argv: Sequence[str]) -> None:
  """Writes the statistics files (and the histograms with --histograms); prints their paths."""
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  for path in write(flags.FLAGS.pretrained).values():
    print(path)
  if flags.FLAGS.histograms:
    for path in histograms(flags.FLAGS.pretrained):
      print(path)


if __name__ == "__main__":  # The flags only when run, so importing this module defines none.
  flags.DEFINE_string("pretrained", PRETRAINED, "The pretrained/ directory.")
  flags.DEFINE_bool("histograms", False, "Draw the shipped Fig. 6c histograms again.")
  app.run(main)
