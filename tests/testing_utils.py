"""Helpers for the tests: loading bin/ scripts, small task families."""

import importlib.machinery
import importlib.util
import os

from task_specific_learned_opt.tasks import families, generated, networks

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BINARIES = {}


def load_binary(name: str):
  """Imports bin/<name> (a script without .py) once per session, so its main() can be called."""
  if name not in _BINARIES:
    path = os.path.join(REPO, "bin", name)
    loader = importlib.machinery.SourceFileLoader(f"bin_{name}", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    _BINARIES[name] = module
  return _BINARIES[name]


def small_generated_family(**kwargs) -> families.ClassSubsetFamily:
  """A generated family with few, small classes and a small CNN: fast to sample and train."""
  source = generated.GeneratedClassSource(
    num_classes=20, train_images_per_class=40, test_images_per_class=10
  )
  kwargs.setdefault("model", networks.ConvNet(channels=(8, 8), strides=(2, 2)))
  kwargs.setdefault("batch_size", 16)
  return families.ClassSubsetFamily(source=source, **kwargs)
