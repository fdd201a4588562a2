"""Helpers for the tests: loading bin/ scripts, small task families."""

import importlib.machinery
import importlib.util
import json
import os

from absl import flags

from task_specific_learned_opt.tasks import families, generated, networks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_LOADED = {}  # The binary loaded last: {"name": ..., "module": ..., "flags": names it defined}.


def sci(x: float, digits: int = 1) -> str:
  """x as the docs print it in scientific notation: 1.3e-4, 2.9e6 (no exponent padding or +)."""
  mantissa, exponent = f"{x:.{digits}e}".split("e")
  return f"{mantissa}e{int(exponent)}"


def comparison_rows(found, evaluation, learned, metric, baselines=None):
  """The records of shipped.records() of one evaluation, theta and metric (and baselines)."""
  rows = [
    r
    for r in found
    if (r["evaluation"], r["learned"], r["metric"]) == (evaluation, learned, metric)
    and (baselines is None or r["baseline"] in baselines)
  ]
  assert rows, (evaluation, learned, metric, baselines)
  return rows


def load_binary(name: str):
  """Imports bin/<name> (a script without .py) so its main() can be called.

  One binary is loaded at a time: binaries define flags of the same name (--output_dir), which
  absl refuses to define twice, so loading another one first deletes the flags the previous one
  defined. Loading the same binary again returns the loaded module.
  """
  if _LOADED.get("name") != name:
    for flag in _LOADED.get("flags", ()):
      delattr(flags.FLAGS, flag)
    before = set(flags.FLAGS)
    path = os.path.join(REPO, "bin", name)
    loader = importlib.machinery.SourceFileLoader(f"bin_{name}", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    _LOADED.update(name=name, module=module, flags=set(flags.FLAGS) - before)
  return _LOADED["module"]


def run_main(name: str, argv: list):
  """Runs bin/<name>'s main() with the command line `argv` (argv[0] is the program name)."""
  binary = load_binary(name)
  flags.FLAGS.unparse_flags()
  flags.FLAGS(argv)
  return binary.main(argv[:1])


def run_figure(output_dir, gin_name: str, bindings=()) -> dict:
  """Runs bin/figure on gin/figures/<gin_name> with `bindings`; returns the JSON it wrote."""
  gin_name = gin_name if gin_name.endswith(".gin") else gin_name + ".gin"
  argv = ["figure", f"--gin_file={os.path.join(REPO, 'gin', 'figures', gin_name)}"]
  argv += [f"--output_dir={output_dir}", *[f"--gin_bindings={b}" for b in bindings]]
  run_main("figure", argv)
  with open(os.path.join(output_dir, gin_name[: -len(".gin")] + ".json")) as f:
    return json.load(f)


def small_generated_family(**kwargs) -> families.ClassSubsetFamily:
  """A generated family with few, small classes and a small CNN: fast to sample and train."""
  source = generated.GeneratedClassSource(
    num_classes=20, train_images_per_class=40, test_images_per_class=10
  )
  kwargs.setdefault("model", networks.ConvNet(channels=(8, 8), strides=(2, 2)))
  kwargs.setdefault("batch_size", 16)
  return families.ClassSubsetFamily(source=source, **kwargs)


# bin/eval --num_tasks 1 --num_inits 1 --num_steps 10, and the rest of the run and data shrunk:
# gin bindings for any gin/eval/ experiment at a tiny size.
# The quickstart shrunk for benchmark smoke tests: a 4-channel CNN on batches of 4, small classes.
SMALL_QUICKSTART = [
  "paper_cnn.channels = 4",
  "ClassSubsetFamily.batch_size = 4",
  "GeneratedClassSource.train_images_per_class = 20",
  "GeneratedClassSource.test_images_per_class = 5",
]

TINY_EVAL = [
  "evaluate.num_tasks = 1",
  "evaluate.num_inits = 1",
  "evaluate.num_steps = 10",
  "evaluate.num_points = 3",
  "evaluate.num_average_points = 2",
  "evaluate.num_eval_batches = 1",
  "evaluate.learning_rates = (1e-3, 1e-1)",
  "ClassSubsetFamily.batch_size = 8",
  "GeneratedClassSource.train_images_per_class = 20",  # 2 inner-valid images per class
  "GeneratedClassSource.test_images_per_class = 5",
]
