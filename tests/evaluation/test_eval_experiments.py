"""Every gin/eval/ experiment runs end to end, as bin/eval runs it, at a tiny size.

Each file (gin/eval/out_of_family/ included) is parsed with the project's gin parsing and the
bindings of bin/eval's size flags plus a few that shrink the data, then `held_out.evaluate` (what
bin/eval calls) evaluates a theta of the file's learned optimizer beside the file's tuned
baselines, into a fresh output directory. For the shipped thetas' family and each problem out of
it, the test also checks what the evaluated tasks train: the model, its parameter count and the
image shape. MNIST comes from tfds.testing.mock_data, so nothing is downloaded.
"""

import json
import os
import socket

import gin
import numpy as np
import pytest
import tensorflow_datasets as tfds
import testing_utils

from task_specific_learned_opt import checkpoints, gin_config, random_seeds
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.evaluation import held_out, reporting, running, tuning
from task_specific_learned_opt.tasks import networks

EVAL_DIR = os.path.join(testing_utils.REPO, "gin", "eval")
SHIPPED_THETAS = {
  "L_train": "pretrained/generated_bn_cnn_train/theta",
  "L_valid": "pretrained/generated_bn_cnn_valid/theta",
}
# Each experiment (its path under gin/eval/) -> (the kinds it tunes per task, the thetas it
# evaluates: None for a fresh export of its learned optimizer's init named "learned"[, the
# objectives of the searches whose winners it takes[, their best.json files with "{o}" for the
# objective, and the kinds they searched]]).
PAPER_FAMILY_THETAS = {
  "L_train": "pretrained/generated_cnn_train/theta",
  "L_valid": "pretrained/generated_cnn_valid/theta",
}
PAPER_FAMILY_SEARCH_AT_1000 = ("pretrained/paper_family/adam_reg_decay/L_{o}/best.json", ("adam",))
FIG6_SEARCHES = ("pretrained/fig6/adam_reg_decay_L_{o}/best.json", ("adam",))
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
  "pretrained_fig6_seed6.gin": (
    ("adam", "rmsprop", "sgdm", "adam_refined"),
    SHIPPED_THETAS,
    ("train", "valid"),
  ),
  "pretrained_adam_reg_decay_1000.gin": (
    (),
    SHIPPED_THETAS,
    ("train", "valid"),
    ("pretrained/fig6/adam_reg_decay_1000/L_{o}/best.json", ("adam",)),
  ),
  "pretrained_app_f.gin": (
    (),
    {
      "L_train": "pretrained/generated_bn_cnn_train/theta",
      "L_valid": "pretrained/generated_bn_cnn_valid/theta",
    },
    ("train", "valid"),
    ("pretrained/app_f/L_{o}/best.json", ("rmsprop", "sgdm")),
  ),
  "pretrained_app_f_seed6.gin": (
    (),
    SHIPPED_THETAS,
    ("train", "valid"),
    ("pretrained/app_f/L_{o}/best.json", ("rmsprop", "sgdm")),
  ),
  "paper_family.gin": (
    ("adam", "rmsprop", "sgdm", "adam_refined"),
    PAPER_FAMILY_THETAS,
    ("train", "valid"),
  ),
  "paper_family_adam_reg_decay.gin": (
    (),
    PAPER_FAMILY_THETAS,
    ("train", "valid"),
    PAPER_FAMILY_SEARCH_AT_1000,
  ),
  "paper_family_5_inits.gin": (
    ("adam", "rmsprop", "sgdm", "adam_refined"),
    PAPER_FAMILY_THETAS,
    ("train", "valid"),
    PAPER_FAMILY_SEARCH_AT_1000,
  ),
  "quickstart.gin": (("adam", "sgdm"), None),
  "out_of_family/cnn_6_layers.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/cnn_8_channels.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/cnn_32_channels.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/cnn_no_batch_norm.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/images_16x16.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/mlp_2x32.gin": (("adam",), SHIPPED_THETAS),
  "out_of_family/mlp_3x128.gin": (("adam",), SHIPPED_THETAS),
  "digits/mlp_2x32.gin": (("adam",), SHIPPED_THETAS),
  "digits/conv3.gin": (("adam",), SHIPPED_THETAS),
  "digits/conv6.gin": (("adam",), SHIPPED_THETAS),
}
# Files given after an experiment's (a second --gin_file), not experiments themselves;
# tests/test_gin_config.py builds each after its base.
OVERLAYS = (
  "out_of_family/guarded_update.gin",
  "out_of_family/past_horizon_decay.gin",
  "out_of_family/relative_cap.gin",
  "out_of_family/decay_from_start.gin",
  "out_of_family/bounded_weights.gin",
  "out_of_family/bounded_weights_small_cap.gin",
)
# What the evaluated tasks train, (model name, parameters, image shape): the shipped thetas' own
# family (pretrained.gin) and each problem out of it. A 3x3 conv layer from c to c' channels has
# 9 c c' weights and c' biases, plus 2 c' batch-norm scales and offsets; the linear layer to the 10
# classes 10 c + 10 from c channels (after the global average pool) or hidden units.
MODELS = {
  "pretrained.gin": (
    "conv3x16_bn",
    (9 * 3 * 16 + 3 * 16) + 2 * (9 * 16 * 16 + 3 * 16) + (10 * 16 + 10),  # 5,354
    (32, 32, 3),
  ),
  "out_of_family/cnn_8_channels.gin": (
    "conv3x8_bn",
    (9 * 3 * 8 + 3 * 8) + 2 * (9 * 8 * 8 + 3 * 8) + (10 * 8 + 10),  # 1,530
    (32, 32, 3),
  ),
  "out_of_family/cnn_32_channels.gin": (
    "conv3x32_bn",
    (9 * 3 * 32 + 3 * 32) + 2 * (9 * 32 * 32 + 3 * 32) + (10 * 32 + 10),  # 19,914
    (32, 32, 3),
  ),
  "out_of_family/cnn_6_layers.gin": (
    "conv6x16_bn",
    (9 * 3 * 16 + 3 * 16) + 5 * (9 * 16 * 16 + 3 * 16) + (10 * 16 + 10),  # 12,410
    (32, 32, 3),
  ),
  "out_of_family/cnn_no_batch_norm.gin": (
    "conv3x16",
    (9 * 3 * 16 + 16) + 2 * (9 * 16 * 16 + 16) + (10 * 16 + 10),  # 5,258
    (32, 32, 3),
  ),
  "out_of_family/mlp_2x32.gin": (
    "mlp32x32",
    (32 * 32 * 3 * 32 + 32) + (32 * 32 + 32) + (10 * 32 + 10),  # 99,722
    (32, 32, 3),
  ),
  "out_of_family/images_16x16.gin": (
    "conv3x16_bn",
    (9 * 3 * 16 + 3 * 16) + 2 * (9 * 16 * 16 + 3 * 16) + (10 * 16 + 10),  # 5,354: pooled
    (16, 16, 3),
  ),
}
TINY = testing_utils.TINY_EVAL
MOCK_MNIST_EXAMPLES = 200  # per split: about 20 per digit, 2 of them inner-valid


@pytest.fixture
def no_network(monkeypatch):
  """Fails the test on any network connection (a TFDS download would make one)."""

  def fail(*args, **kwargs):
    pytest.fail("a network connection was attempted", pytrace=False)

  monkeypatch.setattr(socket.socket, "connect", fail)
  monkeypatch.setattr(socket, "create_connection", fail)


@pytest.fixture
def trained(monkeypatch):
  """Records (model name, parameter count, image shape) of the task of every inner run."""
  seen = set()
  evaluate_run = running.evaluate_run

  def record(family, task, *args, **kwargs):
    params = task.init_params(random_seeds.as_seed(0))
    seen.add((task.model.name, networks.num_params(params), task.image_shape))
    return evaluate_run(family, task, *args, **kwargs)

  monkeypatch.setattr(running, "evaluate_run", record)
  return seen


def _gin_files(directory: str) -> list[str]:
  """Every .gin file under `directory`, its subdirectories included, relative to it."""
  return [
    os.path.relpath(os.path.join(folder, name), directory)
    for folder, _, names in os.walk(directory)
    for name in names
    if name.endswith(".gin")
  ]


def test_every_eval_experiment_is_run_here():
  assert "out_of_family/mlp_2x32.gin" in _gin_files(EVAL_DIR)
  assert sorted(EXPERIMENTS) == sorted(f for f in _gin_files(EVAL_DIR) if f not in OVERLAYS)


def test_the_models_checked_are_experiments():
  assert set(MODELS) <= set(EXPERIMENTS)


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_eval_experiment_runs_end_to_end(name, tmp_path, no_network, trained):
  kinds, thetas, *rest = EXPERIMENTS[name]
  objectives = rest[0] if rest else ()
  search, searched_kinds = rest[1] if len(rest) > 1 else FIG6_SEARCHES
  searched = [  # The shipped searches' winners (gin/eval/pretrained_fig6.gin's, or its own).
    os.path.join(testing_utils.REPO, search.format(o=o)) for o in objectives
  ]
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
  baselines += [f"{k}+reg+decay (L_{o})" for o in objectives for k in searched_kinds]
  assert sorted(saved["results"]) == sorted([*thetas, *baselines])
  for candidate, results in saved["results"].items():
    for key in ("train_loss", "valid_loss", "test_loss"):
      losses = np.asarray(results[key], dtype=float)
      assert losses.shape == (1, 1, len(saved["steps"])), (candidate, key)
      assert np.all(np.isfinite(losses)), (candidate, key, losses)
    for key in ("mean_loss", "mean_valid_loss", "mean_test_loss"):
      assert np.all(np.isfinite(np.asarray(results[key], dtype=float))), (candidate, key)
  assert saved["steps"][0] == 0 and saved["steps"][-1] == 10
  # Every candidate starts from the same initialisation and is measured on the same batches
  # (the protocol's run seeds): before its first step, each has the same losses.
  for key in ("train_loss", "test_loss"):
    at_start = {c: np.asarray(r[key], dtype=float)[..., 0] for c, r in saved["results"].items()}
    first = at_start[sorted(at_start)[0]]
    for candidate, losses in at_start.items():
      np.testing.assert_allclose(losses, first, rtol=1e-5, err_msg=f"{candidate} {key}")
  if name in MODELS:
    assert trained == {MODELS[name]}
