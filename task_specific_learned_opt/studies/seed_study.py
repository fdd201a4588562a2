"""Performance over outer-training across theta seeds (paper Fig. 5, Sec. 4.3): bin/seeds.

`seed_study` runs every configuration with N theta seeds to its last outer step, each a
bin/train_local process with the evaluator in it (processes.py: finished runs are skipped, cut
ones resumed), then overlays the seeds: seeds.json (every seed's evaluations, when it passed the
learning-rate-tuned baseline on outer-test tasks, the best seed by outer-train performance) and,
per configuration, <name>_seeds.png.
"""

import os
from collections.abc import Mapping, Sequence

import gin

from task_specific_learned_opt import files, plots
from task_specific_learned_opt.distributed import evaluator_role
from task_specific_learned_opt.studies import processes

SEEDS_FILENAME = "seeds.json"


def judged_on(reference: Mapping) -> str:
  """The number thetas are judged on: that of the experiment's objective (evaluator_role.py)."""
  return reference.get("metric", evaluator_role.OBJECTIVE_METRICS["train"])


def passed_at(records: Sequence[dict], reference: Mapping, family: str = "outer_test") -> dict:
  """The first evaluated snapshot below the reference on its objective's number; {} if none.

  Returns:
    {"outer_step": ..., "inner_steps": ...} of that snapshot.
  """
  metric = judged_on(reference)
  target = reference[family][metric]
  for r in records:
    if r[family][metric] < target:
      return {"outer_step": r["outer_step"], "inner_steps": r["inner_steps"]}
  return {}


def summarize_seeds(runs: Sequence[processes.Run]) -> dict:
  """Per configuration: every seed's evaluations, when it passed the reference, the best seed.

  The best seed is the one lowest on outer-train tasks at its last snapshot, on the number of
  the experiment's objective (mean training loss for L_train, final test loss for L_valid):
  chosen on outer-train tasks only, as Sec. 4.3 does, so the outer-test numbers stay held out.
  """
  summary: dict[str, dict] = {}
  for run in runs:
    records = evaluator_role.current_records(run.train_dir)
    if not records:
      continue
    reference = evaluator_role.read_reference(run.train_dir)
    s = summary.setdefault(
      run.name, {"gin_file": run.gin_file, "reference": reference, "seeds": {}}
    )
    s["seeds"][str(run.seed)] = {
      "records": records,
      "last": {k: records[-1][k] for k in ("outer_step", "inner_steps", *evaluator_role.FAMILIES)},
      "passed_reference_on_outer_test": passed_at(records, reference) if reference else {},
    }
  for s in summary.values():
    metric = judged_on(s["reference"] or {})
    last = {seed: r["last"]["outer_train"][metric] for seed, r in s["seeds"].items()}
    s["best_seed_by_outer_train"] = int(min(last, key=last.get))
  return summary


@gin.configurable(denylist=["output_dir", "num_seeds"])
def seed_study(
  output_dir: str,
  configurations: Mapping[str, str] = gin.REQUIRED,
  num_seeds: int = 3,
  num_parallel: int = 2,
  bindings: Sequence[str] = ("train_local.evaluate_snapshots = True",),
) -> dict:
  """Performance over outer-training across theta seeds (Fig. 5): runs, then overlays the seeds.

  Every configuration runs with seeds 0 ... num_seeds - 1 to its last outer step (resumable as
  the ablation study is), with the evaluator in each run; then writes seeds.json and, per
  configuration, <name>_seeds.png (the evaluator's numbers of every seed, the tuned baseline
  dashed).

  Args:
    output_dir: the runs' train dirs and the study's files.
    configurations: {name: gin file}, e.g. the L_train and L_valid experiments.
    num_seeds: theta seeds per configuration.
    num_parallel: runs at a time, each its own process.
    bindings: gin bindings added to every run (by default: evaluate snapshots in-process).

  Returns:
    {name: summary (summarize_seeds)}, with "paths".

  Raises:
    processes.AblationError: some runs failed; the others' results are still written.
  """
  runs = processes.runs_of(output_dir, configurations, num_seeds)
  failure = None
  try:
    processes.run_all(runs, None, num_parallel, bindings)
  except processes.AblationError as e:
    failure = e
  summary = summarize_seeds(runs)
  paths = {"json": os.path.join(output_dir, SEEDS_FILENAME)}
  files.write_json(paths["json"], summary, indent=1)
  for name, s in summary.items():
    metric = judged_on(s["reference"] or {})
    words = metric.replace("_", " ").replace("train", "training")
    paths[name] = os.path.join(output_dir, f"{name}_seeds.png")
    plots.plot_evaluation_progress(
      {f"seed {seed}": r["records"] for seed, r in s["seeds"].items()},
      s["reference"] or None,
      paths[name],
      f"{name}: {len(s['seeds'])} theta seeds; best by outer-train {words}: seed "
      f"{s['best_seed_by_outer_train']}",
    )
    for seed, r in s["seeds"].items():
      passed = r["passed_reference_on_outer_test"]
      when = f"from outer step {passed['outer_step']}" if passed else "never"
      loss = r["last"]["outer_test"][metric]
      print(
        f"{name} seed {seed}: outer-test {words} {loss:.4f} at outer step "
        f"{r['last']['outer_step']}; below the reference {when}",
        flush=True,
      )
  print(f"Seeds: {paths['json']}", flush=True)
  summary["paths"] = paths
  if failure is not None:
    raise failure
  return summary
