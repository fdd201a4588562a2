"""Theta cards (cards.py): written at export, generated for shipped thetas, checked on load."""

import json
import os

import gin
import numpy as np
import pytest
import tensorflow as tf

from task_specific_learned_opt import cards, checkpoints
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import chief_files, outer_training
from task_specific_learned_opt.keras import optimizer as keras_optimizer
from task_specific_learned_opt.learned_optimizers import mlp_lopt

from . import testing_utils

PRETRAINED = os.path.join(testing_utils.REPO, "pretrained")
SHIPPED = {"bn_cnn_train": "generated_bn_cnn_train", "bn_cnn_valid": "generated_bn_cnn_valid"}


def test_an_outer_training_export_carries_a_card_without_results(tmp_path):
  gin.clear_config()
  gin.parse_config(
    "outer_training.family = @QuadraticFamily()\n"
    "QuadraticFamily.dim = 4\n"
    "outer_training.lopt = @MLPLOpt()\n"
    "MLPLOpt.step_scale_lin = 0.003\n"
    "Worker.horizon = 50\n"
    "Worker.objective = 'valid'\n"
    "outer_training.snapshot_every = 2\n"
  )
  try:
    setup = outer_training.outer_training()
    chief = outer_training.make_chief(setup)
    files = chief_files.ChiefFiles(str(tmp_path / "run"), chief, setup, "test")
    files.lineage.begin(1)
    files.chief.outer_step.assign_add(2)
    files.recorded_step = files.chief.step
    files.save()
    snapshot = files.snapshot()
  finally:
    gin.clear_config()
  for directory in (tmp_path / "run" / "theta", snapshot):
    card = json.load(open(os.path.join(directory, cards.CARD_FILENAME)))
    assert card["name"] == "run" and card["objective"] == "valid" and card["horizon"] == 50
    assert card["outer_steps"] == 2 and card["results"] == []
    assert card["family"]["name"] == "QuadraticFamily"
    assert card["family"]["bindings"]["QuadraticFamily.dim"] == 4
    assert card["options"]["step_scale_lin"] == 0.003
    assert card["summary"].endswith("not evaluated yet")
  # It loads with its own options (None: from the card), and not with others.
  optimizer = keras_optimizer.LearnedOptimizer.from_directory(str(tmp_path / "run" / "theta"))
  assert optimizer.lopt.step_scale_lin == 0.003
  with pytest.raises(cards.CardMismatchError, match="step_scale_lin=0.003"):
    checkpoints.load_theta(str(tmp_path / "run" / "theta"), mlp_lopt.MLPLOpt())


def test_a_theta_saved_again_keeps_one_export_and_its_card(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  card = {"name": "x", "options": {"hidden_size": 32}}
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0), card=card)
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(1), card=card)
  assert sorted(os.listdir(tmp_path)) == ["theta"]  # Swapped in whole, nothing left over.
  assert json.load(open(tmp_path / "theta" / cards.CARD_FILENAME)) == card


def test_loading_with_options_other_than_the_cards_is_refused_in_one_line():
  with pytest.raises(cards.CardMismatchError) as error:
    keras_optimizer.LearnedOptimizer.from_pretrained(
      "bn_cnn_valid", lopt=mlp_lopt.MLPLOpt(step_scale_exp=2e-3)
    )
  message = str(error.value)
  assert "\n" not in message
  assert "step_scale_exp=0.001" in message and "step_scale_exp=0.002" in message
  assert "lopt=None" in message and "card.json" in message
  with pytest.raises(cards.CardMismatchError, match="hidden_size=32"):  # Before the shape check.
    checkpoints.load_theta(
      os.path.join(PRETRAINED, "generated_bn_cnn_train", "theta"), mlp_lopt.MLPLOpt(hidden_size=8)
    )


@pytest.mark.parametrize(
  "options",
  [
    {"time_max_step": 499, "weight_decay": 1e-3, "implementation": "reference"},  # longer runs
    {"gate_growth": True, "max_step_rms": 3e-3},  # out of the family: the step's guards
  ],
)
def test_options_changed_on_purpose_are_not_refused(options):
  lopt = mlp_lopt.MLPLOpt(**options)
  theta = checkpoints.load_theta(os.path.join(PRETRAINED, "generated_bn_cnn_valid", "theta"), lopt)
  assert theta["hidden"]["w"].shape == (16, 32)


@pytest.mark.parametrize("short", sorted(SHIPPED))
def test_a_shipped_theta_loads_by_short_name_and_prints_its_summary(short, capsys):
  optimizer = keras_optimizer.LearnedOptimizer.from_pretrained(short)
  shipped = checkpoints.load_theta(
    os.path.join(PRETRAINED, SHIPPED[short], "theta"), mlp_lopt.MLPLOpt()
  )
  for a, b in zip(tf.nest.flatten(optimizer.theta), tf.nest.flatten(shipped), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  printed = capsys.readouterr().out
  assert printed.startswith(f"Theta card: {SHIPPED[short]}: L_") and "in family" in printed
  # The directory's name works too.
  assert keras_optimizer.LearnedOptimizer.from_pretrained(SHIPPED[short]).lopt.hidden_size == 32


def test_the_listing_names_every_shipped_theta_with_its_summary():
  listed = keras_optimizer.list_pretrained()
  assert set(SHIPPED) <= set(listed)
  for short, directory in SHIPPED.items():
    assert listed[short].startswith(f"{directory}: L_")
  assert "L_valid" in listed["bn_cnn_valid"] and "final test loss" in listed["bn_cnn_valid"]
  assert "L_train" in listed["bn_cnn_train"] and "mean training loss" in listed["bn_cnn_train"]


def test_an_unknown_name_is_refused_with_the_valid_names():
  with pytest.raises(cards.UnknownThetaError) as error:
    keras_optimizer.LearnedOptimizer.from_pretrained("cnn_valid_typo")
  message = str(error.value)
  assert "cnn_valid_typo" in message and "bn_cnn_train" in message and "bn_cnn_valid" in message


@pytest.mark.parametrize("directory", sorted(cards.pretrained_names().values()))
def test_the_committed_card_and_readme_are_those_the_committed_files_give(directory):
  path = os.path.join(PRETRAINED, directory)
  card = cards.pretrained_card(path)
  assert os.path.exists(os.path.join(path, cards.CARD_FILENAME)), f"run bin/write_cards: {path}"
  assert json.load(open(os.path.join(path, cards.CARD_FILENAME))) == json.loads(json.dumps(card))
  readme = open(os.path.join(path, cards.README_FILENAME)).read()
  assert cards.render_markdown(card) in readme


@pytest.mark.parametrize("directory", sorted(SHIPPED.values()))
def test_a_shipped_cards_numbers_are_those_of_its_evaluation_files(directory):
  card = cards.pretrained_card(os.path.join(PRETRAINED, directory))
  # E.g. the Fig. 6 comparison with tuned Adam.
  fig6 = json.load(open(os.path.join(PRETRAINED, "fig6", "evaluation", "summary.json")))
  label = "L_valid" if directory.endswith("valid") else "L_train"
  expected = next(
    c for c in fig6["comparisons"] if c["learned"] == label and c["metric"] == "final_test_loss"
  )
  result = next(r for r in card["results"] if r["file"].startswith("pretrained/fig6/"))
  found = next(
    c
    for c in result["comparisons"]
    if c["metric"] == "final test loss" and c["baseline"] == expected["baseline"]
  )
  assert found["learned"] == round(expected["learned_mean_loss"], 4)
  assert card["options"] == json.loads(json.dumps(cards.options_from_bindings({})))  # MLPLOpt()
  assert card["horizon"] == 500 and card["objective"] == label[2:]


def test_the_card_beside_a_shipped_theta_comes_before_the_one_written_at_export(tmp_path):
  lopt = mlp_lopt.MLPLOpt()
  export_card = {"name": "run", "summary": "at export", "options": {}}
  checkpoints.save_theta(str(tmp_path / "theta"), lopt.init(0), card=export_card)
  assert cards.read_card(str(tmp_path / "theta"))["summary"] == "at export"
  cards.write_card(str(tmp_path), {"name": "shipped", "summary": "with results", "options": {}})
  assert cards.read_card(str(tmp_path / "theta"))["summary"] == "with results"


def test_a_mixtures_family_names_every_member():
  bindings = {
    "outer_training.family": "@MixtureFamily()",
    "MixtureFamily.families": "[@a/ClassSubsetFamily(), @b/ClassSubsetFamily()]",
    "a/ClassSubsetFamily.model": "@a/paper_cnn()",
    "a/paper_cnn.channels": 8,
    "b/ClassSubsetFamily.model": "@b/MLP()",
  }
  family = cards.family_of(bindings)
  assert family["description"] == (
    "MixtureFamily(families=[a/ClassSubsetFamily(model=a/paper_cnn(channels=8)), "
    "b/ClassSubsetFamily(model=b/MLP())])"
  )
