"""The outer-training experiment: what local mode and the cluster roles all read from gin.

An experiment (gin: `outer_training.*`) names the task family, the learned optimizer, the seed,
the gradient estimator and the batch size of outer updates (paper Sec. 3, App. D.3), and how long
to train; `bin/train_local`, `bin/chief` and `bin/worker` all read it, so one gin file runs in one
process or on a cluster. The estimator is the one setting both roles act on: the chief combines
a batch with it, and the workers compute and carry what it asks (outer/estimators/). The mode that
runs the chief builds it from this record (`make_chief`); the chief's files are in
chief_files.py, the loops in loops.py.

What makes two runs the same experiment is `experiment_record`: theta's shapes and every gin
binding except those in RESUMABLE_BINDINGS (how long, how often, how fast, not what is learned).
A train dir resumes only the experiment it holds, and a worker joins only a chief of its own
experiment. Bindings of a setting that has changed its gin name (RENAMED_BINDINGS) compare under
the new name, so a train dir recorded under the old one still resumes.
"""

import dataclasses
import fnmatch
from typing import Any

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import gin_config
from task_specific_learned_opt.distributed import chief_update
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import registry
from task_specific_learned_opt.tasks import base as task_base

# Bindings that may change when a run resumes, or differ between the chief and its workers,
# without making it another experiment (fnmatch patterns over "scope/selector.parameter").
RESUMABLE_BINDINGS = (
  "outer_training.num_outer_steps",
  "outer_training.max_inner_steps",
  "outer_training.checkpoint_every_secs",
  "outer_training.keep_checkpoints",
  "outer_training.log_every",
  "outer_training.record_samples",
  "outer_training.snapshot_every",  # What is kept and evaluated, not what is learned:
  "Evaluator.*",
  "train_local.evaluate_snapshots",
  "configure_threads.*",  # Thread pools: speed only.
  "segment_lengths_for.*",  # Recomputation: memory and time; the same gradient.
  "Worker.recompute",
  "MLPLOpt.implementation",  # "fast" and "reference" compute the same update.
  "run_chief.*",  # Polling and lingering.
  "run_worker.*",  # Timeouts and sample caps.
  "TFRuntimeTransport.*",  # Queue capacity and timeouts.
  "train_local.final_evaluation",  # What runs after the last step, and on what:
  "compare_with_tuned_baseline.*",
  "eval/*",
  "evaluate_candidates.*",  # How many evaluation runs at once: the same numbers.
)
# Settings recorded under another gin name in earlier train dirs: {old: new} (selector.parameter).
RENAMED_BINDINGS = {
  "Chief.batch_size": "outer_training.batch_size",
  "Chief.estimator": "outer_training.estimator",
}
# Settings added after train dirs were written, with the value that is what those runs did:
# {selector.parameter: value as recorded}. A record without one holds that value.
ADDED_BINDINGS = {
  "paper_cnn.batch_norm_gradient": "'moments'",  # The only batch norm before there were three.
}


def experiment_record(theta_template: Any) -> dict:
  """What defines the experiment being run: theta's shapes and the gin bindings that matter.

  Args:
    theta_template: a nest of arrays or tensors shaped like theta.

  Returns:
    {"theta_shapes": [[...], ...], "bindings": {"scope/selector.parameter": "value", ...}}: every
    binding of the gin config (as written, not defaults) except RESUMABLE_BINDINGS.
  """
  bindings, key = {}, None
  for line in gin.config_str().splitlines():
    if line[:1].isspace() and key is not None:  # A long value wrapped onto the next line.
      bindings[key] = f"{bindings[key]} {line.strip()}".strip()
      continue
    key = None
    if not line or line.startswith(("#", "import ", "from ")) or " = " not in line:
      continue
    key, value = line.split(" = ", 1)
    bindings[key] = value.removesuffix("\\").rstrip()  # A value that starts on the next line.
  bindings = {
    k: v
    for k, v in bindings.items()
    if not any(fnmatch.fnmatchcase(k, pattern) for pattern in RESUMABLE_BINDINGS)
  }
  shapes = [list(np.shape(x)) for x in tf.nest.flatten(theta_template)]
  return {"theta_shapes": shapes, "bindings": bindings}


def differences(before: dict, now: dict, max_listed: int = 4) -> str | None:
  """How two experiment records differ, in words; None if they are the same experiment.

  Args:
    before: the record of the run already there (a train dir's, or the chief's).
    now: the record of this process.
    max_listed: bindings named before "and N more".
  """
  if before.get("theta_shapes") != now.get("theta_shapes"):
    return (
      f"theta's shapes differ ({before.get('theta_shapes')} there, {now.get('theta_shapes')} here)"
    )
  old, new = _renamed(before.get("bindings", {})), _renamed(now.get("bindings", {}))
  for key, value in ADDED_BINDINGS.items():
    if key not in old and key in new:
      old[key] = value
  changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
  if not changed:
    return None
  listed = [f"{k} {old.get(k, '(unset)')} there, {new.get(k, '(unset)')} here" for k in changed]
  more = f" and {len(listed) - max_listed} more" if len(listed) > max_listed else ""
  return f"gin bindings differ: {'; '.join(listed[:max_listed])}{more}"


def _renamed(bindings: dict[str, str]) -> dict[str, str]:
  """`bindings` with each key of RENAMED_BINDINGS ("scope/" kept) under its current name."""
  renamed = {}
  for key, value in bindings.items():
    scope, _, name = key.rpartition("/")
    name = RENAMED_BINDINGS.get(name, name)
    renamed[f"{scope}/{name}" if scope else name] = value
  return renamed


@dataclasses.dataclass(frozen=True)
class OuterTraining:
  """One outer-training experiment, whatever runs it; gin's `outer_training.*` are its fields.

  Attributes:
    family: the task family (outer-train classes).
    lopt: the learned optimizer.
    seed: seeds theta's initialisation and every worker.
    num_outer_steps: stop when the outer step reaches this.
    checkpoint_every_secs: seconds between checkpoints (one is also written at exit).
    keep_checkpoints: checkpoints kept.
    log_every: outer steps between progress lines.
    record_samples: also record, per outer step, which samples it applied (worker, worker run,
      sample index, chief incarnation, theta version) in progress.jsonl, for audits such as
      benchmarks/fault_injection.py.
    max_inner_steps: also stop once the samples taken add up to this many inner steps (the sum
      of their K, checkpoint_state.InnerSteps), e.g. to compare configurations at an equal budget of
      inner steps (the paper's Fig. 8); None: no budget.
    snapshot_every: keep theta every this many outer steps (and at step 0 and the last step) in
      theta_history/, for the evaluator (distributed/evaluator_role.py, the paper's Fig. 5);
      None: keep none.
    batch_size: samples per outer update (App. D.3: 128); local mode's default number of
      workers.
    estimator: the outer-gradient estimator's name (outer/estimators/registry.py): what the
      workers compute per truncation and how the chief combines a batch. "merged" (Sec. 3,
      eq. 1), "rp" or "es" (the Fig. 8 ablations), "pes" or "pes_merged" (docs/pes.md),
      "backprop" (Sec. 2.4's truncated backpropagation at theta, one unroll per truncation).

  Raises:
    ValueError: snapshot_every < 1, batch_size < 1 or an unknown estimator.
  """

  family: task_base.TaskFamily
  lopt: lopt_base.LearnedOptimizer
  seed: int = 0
  num_outer_steps: int = 10000
  checkpoint_every_secs: float = 600.0
  keep_checkpoints: int = 3
  log_every: int = 1
  record_samples: bool = False
  max_inner_steps: int | None = None
  snapshot_every: int | None = None
  batch_size: int = chief_update.BATCH_SIZE
  estimator: str = chief_update.ESTIMATOR

  def __post_init__(self) -> None:
    if self.snapshot_every is not None and self.snapshot_every < 1:
      raise ValueError(
        f"outer_training.snapshot_every must be >= 1 or None, got {self.snapshot_every}."
      )
    if self.batch_size < 1:
      raise ValueError(f"outer_training.batch_size must be >= 1, got {self.batch_size}.")
    registry.get(self.estimator)  # Raises on an unknown estimator.
    optional = lambda value: None if value is None else int(value)  # noqa: E731
    normalized = {
      "seed": int(self.seed),
      "num_outer_steps": int(self.num_outer_steps),
      "checkpoint_every_secs": float(self.checkpoint_every_secs),
      "keep_checkpoints": int(self.keep_checkpoints),
      "log_every": int(self.log_every),
      "record_samples": bool(self.record_samples),
      "max_inner_steps": optional(self.max_inner_steps),
      "snapshot_every": optional(self.snapshot_every),
      "batch_size": int(self.batch_size),
    }
    for name, value in normalized.items():
      object.__setattr__(self, name, value)  # A frozen record normalises its own fields.


@gin.configurable
@gin_config.takes_fields_of(OuterTraining)
def outer_training(**settings: Any) -> OuterTraining:
  """The experiment gin describes: OuterTraining(**settings).

  Args:
    **settings: the fields of OuterTraining, which documents them (family and lopt required).

  Returns:
    The record.

  Raises:
    ValueError: a value OuterTraining refuses.
  """
  return OuterTraining(**settings)


def make_estimator(setup: OuterTraining) -> estimator_base.Estimator:
  """The experiment's estimator, for its workers (the chief makes its own from the name)."""
  return registry.get(setup.estimator)


def make_chief(setup: OuterTraining) -> chief_update.Chief:
  """The experiment's chief: theta = lopt.init(seed), its estimator and batch size.

  The chief's other settings (learning rate, Adam's betas, clipping, staleness) are gin's
  `Chief.*`.
  """
  return chief_update.Chief(
    lopt=setup.lopt, seed=setup.seed, estimator=setup.estimator, batch_size=setup.batch_size
  )
