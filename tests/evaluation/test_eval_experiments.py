"""Every gin/eval/ experiment runs end to end, as bin/eval runs it, at a tiny size.

Each file is parsed with the project's gin parsing and the bindings of bin/eval's size flags plus
a few that shrink the data, then `held_out.evaluate` (what bin/eval calls) evaluates a theta of
the file's learned optimizer beside the file's tuned baselines, into a fresh output directory.
MNIST comes from tfds.testing.mock_data, so nothing is downloaded.
"""

import json
import os
import socket

import gin
import numpy as np
import pytest
import tensorflow_datasets as tfds
import testing_utils

from task_specific_learned_opt import checkpoints, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.evaluation import held_out, reporting, tuning

EVAL_DIR = os.path.join(testing_utils.REPO, "gin", "eval")
# Each experiment -> (the kinds it tunes per task, the thetas it evaluates: None for a fresh
# export of its learned optimizer's init named "learned"[, the objectives of the searches whose
# winners it takes]).
EXPERIMENTS = {
  "generated.gin": (("adam", "rmsprop", "sgdm"), None),
  "longer_unrolls.gin": (("adam", "rmsprop", "sgdm"), None),
  "ood_mnist_conv3.gin": (("adam", "rmsprop", "sgdm"), None),
  "ood_mnist_conv6.gin": (("adam", "rmsprop", "sgdm"), None),
  "ood_mnist_mlp_2x32.gin": (("adam", "rmsprop", "sgdm"), None),
  "ood_mnist_mlp_3x128.gin": (("adam", "rmsprop", "sgdm"), None),
  "pretrained.gin": (("adam",), {"learned": "pretrained/generated_bn_cnn_train/theta"}),
  "pretrained_fig6.gin": (
    ("adam", "rmsprop", "sgdm"),
    {
      "L_train": "pretrained/generated_bn_cnn_train/theta",
      "L_valid": "pretrained/generated_bn_cnn_valid/theta",
    },
    ("train", "valid"),
  ),
  "quickstart.gin": (("adam", "sgdm"), None),
}
# bin/eval --num_tasks 1 --num_inits 1 --num_steps 10, and the rest of the run and data shrunk.
TINY = [
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
MOCK_MNIST_EXAMPLES = 200  # per split: about 20 per digit, 2 of them inner-valid


@pytest.fixture
def no_network(monkeypatch):
  """Fails the test on any network connection (a TFDS download would make one)."""

  def fail(*args, **kwargs):
    pytest.fail("a network connection was attempted", pytrace=False)

  monkeypatch.setattr(socket.socket, "connect", fail)
  monkeypatch.setattr(socket, "create_connection", fail)


def test_every_eval_experiment_is_run_here():
  assert sorted(EXPERIMENTS) == sorted(f for f in os.listdir(EVAL_DIR) if f.endswith(".gin"))


def _write_best(path, objective):
  """A random search's best.json (as bin/tune_baselines writes it) with one Adam winner."""
  hparams = {"learning_rate": 1e-2, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
  hparams.update({"linear_decay": 1e-3, "exponential_decay": 1e-3, "l1": 1e-6, "l2": 1e-4})
  signature = {"mode": "random_search", "objective": objective}
  best = {"adam": {"id": "adam/0", "hparams": hparams, "objective": 1.0}}
  path.write_text(json.dumps({"signature": signature, "best": best}))
  return str(path)


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_eval_experiment_runs_end_to_end(name, tmp_path, no_network):
  kinds, thetas, *rest = EXPERIMENTS[name]
  objectives = rest[0] if rest else ()
  searched = [_write_best(tmp_path / f"{o}.json", o) for o in objectives]
  output_dir = str(tmp_path / "eval")
  with tfds.testing.mock_data(num_examples=MOCK_MNIST_EXAMPLES):
    gin_config.parse([os.path.join(EVAL_DIR, name)], TINY)
    if thetas is None:
      thetas = {"learned": str(tmp_path / "theta")}
      lopt = gin.get_bindings("evaluate")["lopt"]
      checkpoints.save_theta(thetas["learned"], lopt.init(0))
    held_out.evaluate(output_dir, thetas, searched)

  saved = json.load(open(os.path.join(output_dir, reporting.RESULTS_FILENAME)))
  baselines = [
    tuning.tuned_name(k, objective) for k in kinds for objective in tuning.TUNING_METRICS
  ]
  baselines += [f"adam+reg+decay (L_{o})" for o in objectives]
  assert sorted(saved["results"]) == sorted([*thetas, *baselines])
  for candidate, results in saved["results"].items():
    for key in ("train_loss", "valid_loss", "test_loss"):
      losses = np.asarray(results[key], dtype=float)
      assert losses.shape == (1, 1, len(saved["steps"])), (candidate, key)
      assert np.all(np.isfinite(losses)), (candidate, key, losses)
    for key in ("mean_loss", "mean_valid_loss", "mean_test_loss"):
      assert np.all(np.isfinite(np.asarray(results[key], dtype=float))), (candidate, key)
  assert saved["steps"][-1] == 10
