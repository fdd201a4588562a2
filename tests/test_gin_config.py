"""Gin plumbing: every experiment file parses strictly and builds; bad input gets a clear error.

Every gin file under gin/ is an experiment a binary runs (a few are also included by others).
`test_every_experiment_builds` parses each as its binary does and builds what the binary would
run, without running it, as dopamine's tests build a runner from each config: the setup and
roles of outer-training (bin/train_local, chief, worker, evaluator), the figure's experiment
(bin/figure), the evaluation's family, optimizers and learned optimizer (bin/eval), the baseline
search and its configurations (bin/tune_baselines), the benchmark's task and optimizers
(bin/benchmark), the one-task comparison (bin/train_inner), and every configuration of an
ablation or seed study with the run's own bindings (bin/ablations, bin/seeds). TFDS datasets are
mocked (tfds.testing.mock_data), so nothing is downloaded and no data is read.
"""

import fnmatch
import glob
import inspect
import os
import subprocess

import gin
import pytest
import tensorflow_datasets as tfds
import testing_utils

from task_specific_learned_opt import checkpoints, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import cluster, evaluator_role, outer_training
from task_specific_learned_opt.evaluation import baseline_search, candidates
from task_specific_learned_opt.figures import runner
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.studies import processes

GIN_DIR = os.path.join(testing_utils.REPO, "gin")
GIN_FILES = sorted(glob.glob(os.path.join(GIN_DIR, "**", "*.gin"), recursive=True))


def _name(path: str) -> str:
  return os.path.relpath(path, GIN_DIR)


def _arguments(configurable: str) -> dict:
  """The arguments gin gives `configurable`, built (each @X() called); none REQUIRED is unbound."""
  parameters = inspect.signature(gin.get_configurable(configurable)).parameters
  arguments = gin.get_bindings(configurable)
  unbound = [p for p, v in parameters.items() if v.default is gin.REQUIRED and p not in arguments]
  assert not unbound, f"{configurable}: no binding for {unbound}"
  return arguments


def _literal(value: object) -> bool:
  return isinstance(value, (bool, int, float, str)) or (
    isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value)
  )


def _check_bound(record: object, configurable: str) -> None:
  """Every literal value the file binds to `configurable` is the value `record` holds."""
  for name, value in gin.get_bindings(configurable).items():
    if _literal(value):
      held = getattr(record, name)
      held = list(held) if isinstance(held, tuple) else held
      value = list(value) if isinstance(value, tuple) else value
      assert held == value, f"{configurable}.{name} = {value!r} was built as {held!r}"


def _outer_training(train_dir: str) -> dict:
  """bin/train_local, chief, worker, evaluator: the experiment, its chief, a worker."""
  setup = outer_training.outer_training()
  _check_bound(setup, "outer_training")
  if isinstance(setup.lopt, mlp_lopt.MLPLOpt):
    _check_bound(setup.lopt.options, "MLPLOpt")
  built = {
    "setup": setup,
    "chief": outer_training.make_chief(setup),
    "worker": cluster.make_worker(setup, index=0, worker_run=0),
    "train_local": _arguments("train_local"),
  }
  if "test_family" in gin.get_bindings("Evaluator", resolve_references=False):
    built["evaluator"] = evaluator_role.Evaluator(train_dir, setup.lopt, setup.family)
  return built


def _figure(_: str) -> dict:
  """bin/figure: the experiment bound to run_figure."""
  experiment = _arguments("run_figure")["experiment"]
  assert isinstance(experiment, runner.Experiment), experiment
  return {"experiment": experiment}


def _baseline_search(_: str) -> dict:
  """bin/tune_baselines: the runs every configuration is judged on, and the configurations."""
  setup = baseline_search.baseline_search()
  arguments = _arguments("tune_baselines")
  defaults = inspect.signature(baseline_search.tune_baselines).parameters
  mode, kinds, num_configs, learning_rates = (
    arguments.get(name, defaults[name].default)
    for name in ("mode", "kinds", "num_configs", "learning_rates")
  )
  assert mode in baseline_search.MODES, mode
  configs = baseline_search.configurations(
    mode, kinds, num_configs, setup.seed, learning_rates, setup.num_steps
  )
  first = {config["kind"]: config for config in reversed(configs)}
  assert sorted(first) == sorted(kinds), (sorted(first), kinds)
  # Each kind's first configuration as the optimizer it evaluates.
  return {"setup": setup, **{kind: candidates.from_config(c) for kind, c in first.items()}}


def _study(configurable: str):
  """bin/ablations, bin/seeds: every configuration, built as its run's bin/train_local would."""

  def build(output_dir: str) -> dict:
    arguments = _arguments(configurable)
    runs = processes.runs_of(output_dir, arguments["configurations"], num_seeds=1)
    commands = [
      processes.command(run, arguments.get("max_inner_steps"), arguments.get("bindings", ()))
      for run in runs
    ]
    built = {}
    for run, command in zip(runs, commands, strict=True):
      gin_files = [f.split("=", 1)[1] for f in command if f.startswith("--gin_file=")]
      bindings = [f.split("=", 1)[1] for f in command if f.startswith("--gin_bindings=")]
      gin_config.parse(gin_files, bindings)
      built[run.name] = _outer_training(run.train_dir)
    return built

  return build


def _entry_point(configurable: str):
  """A binary that calls `configurable`: its arguments, built."""
  return lambda _: _arguments(configurable)


def _overlay(overlay: str, base: str):
  """A file given after `base` (a second --gin_file): bin/eval's arguments for both files, whose
  learned optimizer holds the overlay's options."""

  def build(_: str) -> dict:
    gin_config.parse([os.path.join(GIN_DIR, base), os.path.join(GIN_DIR, overlay)])
    arguments = _arguments("evaluate")
    _check_bound(arguments["lopt"].options, "MLPLOpt")
    return arguments

  return build


# What each gin file's binary builds, by the file's path under gin/ (first match wins).
BUILDERS = [
  ("figures/*.gin", _figure),
  (
    "eval/out_of_family/guarded_update.gin",
    _overlay("eval/out_of_family/guarded_update.gin", "eval/out_of_family/mlp_2x32.gin"),
  ),
  (
    "eval/out_of_family/past_horizon_decay.gin",
    _overlay("eval/out_of_family/past_horizon_decay.gin", "eval/digits/mlp_2x32.gin"),
  ),
  (
    "eval/out_of_family/relative_cap.gin",
    _overlay("eval/out_of_family/relative_cap.gin", "eval/out_of_family/mlp_3x128.gin"),
  ),
  (
    "eval/out_of_family/decay_from_start.gin",
    _overlay("eval/out_of_family/decay_from_start.gin", "eval/out_of_family/mlp_3x128.gin"),
  ),
  (
    "eval/out_of_family/bounded_weights.gin",
    _overlay("eval/out_of_family/bounded_weights.gin", "eval/out_of_family/mlp_3x128.gin"),
  ),
  (
    "eval/out_of_family/bounded_weights_small_cap.gin",
    _overlay(
      "eval/out_of_family/bounded_weights_small_cap.gin", "eval/out_of_family/mlp_3x128.gin"
    ),
  ),
  ("eval/*.gin", _entry_point("evaluate")),
  ("baselines/*.gin", _baseline_search),
  ("benchmark/*.gin", _entry_point("benchmark.run")),
  ("inner/*.gin", _entry_point("inner_comparison.run")),
  ("ablations_small/study.gin", _study("ablation_study")),
  ("paper/ablations/study.gin", _study("ablation_study")),
  ("paper_family_plateau/study.gin", _study("ablation_study")),
  ("quickstart_seeds.gin", _study("seed_study")),
  ("quickstart_seeds_valid.gin", _study("seed_study")),
  ("paper/seeds.gin", _study("seed_study")),
  ("paper_family_seeds.gin", _study("seed_study")),
  ("paper_family_seeds_valid.gin", _study("seed_study")),
  ("paper_family_quickstart.gin", _outer_training),
  ("paper_family_quickstart_valid.gin", _outer_training),
  ("quickstart.gin", _outer_training),
  ("quickstart_valid.gin", _outer_training),
  ("pes_quickstart.gin", _outer_training),
  ("paper/*_objective.gin", _outer_training),
  ("paper/ablations/*.gin", _outer_training),
  ("ablations_small/*.gin", _outer_training),
  ("paper_family_plateau/*.gin", _outer_training),
  ("original_code/*.gin", _outer_training),
  ("pretrained/*.gin", _outer_training),
]


def _builder(path: str):
  name = _name(path)
  return next((build for pattern, build in BUILDERS if fnmatch.fnmatch(name, pattern)), None)


def test_the_parametrised_tests_see_every_gin_file_and_every_builder_is_used():
  out = subprocess.run(
    ["git", "ls-files", "gin"], cwd=testing_utils.REPO, capture_output=True, text=True, check=True
  )
  tracked = [f for f in out.stdout.split() if f.endswith(".gin")]
  tracked = sorted(os.path.join(testing_utils.REPO, f) for f in tracked)
  assert tracked and GIN_FILES == tracked
  unused = [p for p, _ in BUILDERS if not any(fnmatch.fnmatch(_name(f), p) for f in GIN_FILES)]
  assert not unused, f"BUILDERS patterns that match no gin file: {unused}"


@pytest.mark.parametrize("path", GIN_FILES, ids=_name)
def test_every_gin_file_parses_with_unknown_names_refused(path):
  gin_config.parse([path])


@pytest.mark.parametrize("path", GIN_FILES, ids=_name)
def test_every_experiment_builds(path, tmp_path):
  build = _builder(path)
  assert build is not None, f"{_name(path)}: add the binary that runs it to BUILDERS."
  with tfds.testing.mock_data(num_examples=1):
    gin_config.parse([path])
    built = build(str(tmp_path))
  assert built and all(value is not None for value in built.values()), built


def test_a_wrong_value_fails_the_build_though_it_parses():
  path = os.path.join(GIN_DIR, "quickstart.gin")
  gin_config.parse([path], ["outer_training.estimator = 'merge'"])
  with pytest.raises(ValueError, match="merge"):
    _outer_training("unused")


def test_unknown_configurable_names_the_binding():
  with pytest.raises(gin_config.GinConfigError, match="Adamm"):
    gin_config.parse([], ["Adamm.learning_rate = 0.1"])


def test_unknown_parameter_names_the_parameter():
  with pytest.raises(gin_config.GinConfigError, match="learning_rat"):
    gin_config.parse([], ["Adam.learning_rat = 0.1"])


def test_missing_file_is_named():
  with pytest.raises(gin_config.GinConfigError, match="nope.gin"):
    gin_config.parse(["nope.gin"])


def test_bindings_override_files_and_the_config_stays_unlocked():
  gin_config.parse(
    [os.path.join(testing_utils.REPO, "gin", "inner", "generated_cnn.gin")],
    ["Adam.learning_rate = 0.5"],
  )
  assert gin.query_parameter("Adam.learning_rate") == 0.5
  gin.bind_parameter("Adam.learning_rate", 0.25)  # Would raise if the config were finalized.


def test_operative_config_is_written(tmp_path):
  gin_config.parse([], ["Adam.learning_rate = 0.5"])
  adam.Adam()
  path = checkpoints.write_operative_config(str(tmp_path))
  assert "Adam.learning_rate = 0.5" in open(path).read()


def test_an_include_is_found_in_gin_though_a_namespace_package_has_its_name(tmp_path, monkeypatch):
  # gin/eval/pretrained.gin includes 'pretrained/generated_bn_cnn_train.gin' (in gin/). Run from
  # a directory on sys.path (python -m, --import_module) that holds a pretrained/ directory with
  # no __init__.py, gin's package lookup of the include raised TypeError before trying gin/.
  os.makedirs(tmp_path / "pretrained")
  monkeypatch.chdir(tmp_path)
  monkeypatch.syspath_prepend(str(tmp_path))
  gin_config.parse([os.path.join(GIN_DIR, "eval", "pretrained.gin")])
  assert gin.query_parameter("evaluate.timing_rounds") == 5
