"""docs/longer_unrolls.md's tables (App. H) against the runs shipped in pretrained/app_h/.

Each table row is recomputed from the JSON of the run it reports (figures/longer_unrolls.py's
result, gzipped), to the precision the page prints it: task 0 / task 1 for the held-out runs, the
mean over the 2 tasks for the weight decay's choice on outer-train tasks.
"""

import gzip
import json
import os

import numpy as np
import pytest

from task_specific_learned_opt.figures import longer_unrolls

from . import testing_utils

APP_H = os.path.join(testing_utils.REPO, "pretrained", "app_h")
DOC = os.path.join(testing_utils.REPO, "docs", "longer_unrolls.md")


def _result(name: str) -> dict:
  directory = os.path.join(APP_H, name)
  (path,) = [f for f in os.listdir(directory) if f.endswith(".json.gz")]
  with gzip.open(os.path.join(directory, path), "rt") as f:
    return json.load(f)


@pytest.fixture(scope="module")
def rows():
  """{a table row's first cell: its other cells, bold marks removed}, per section of the page."""
  with open(DOC) as f:
    text = f.read()
  found = {}
  for section in text.split("\n## ")[1:]:
    title = section.split("\n", 1)[0]
    for line in section.splitlines():
      if line.startswith("| ") and not line.startswith("| ---"):
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        found.setdefault(title, {})[cells[0]] = cells[1:]
  return found


def _step(result: dict, step: int) -> int:
  return list(result["record_steps"]).index(step)


def _pair(result: dict, value, fmt: str = ".3f") -> str:
  return " / ".join(format(value(task), fmt) for task in result["tasks"])


def _sci(x: float) -> str:
  """2.9e-4, as the page prints a relative step."""
  mantissa, exponent = f"{x:.1e}".split("e")
  return f"{mantissa}e{int(exponent)}"


# The seed-1 table's rows: label -> (the summary it prints, the run its test loss at 500 is of).
SEED_1 = {
  "shipped (the paper's update)": ("shipped", "shipped"),
  "time features held at step 499": ("time held at 499", None),
  "weight decay 3e-3 from step 500": ("weight decay 3e-3 from 500", None),
  "both": ("both", None),
  "Adam, lr tuned per task on training loss (0.01 on both)": (
    longer_unrolls.TUNED_ADAM,
    "adam 0.01",
  ),
  "Adam, lr tuned per task on validation loss (0.01 on both)": (
    longer_unrolls.TUNED_ADAM_VALID,
    "adam 0.01",
  ),
  **{
    f"Adam {lr}": (f"adam {lr}", f"adam {lr}") for lr in ("0.000316", "0.001", "0.00316", "0.0316")
  },
}


def _summaries(result: dict, name: str, keys) -> list[str]:
  return [_pair(result, lambda task, k=k: task["summary"][name][k]) for k in keys]


def test_the_seed_1_results_table_is_its_runs(rows):
  result = _result("seed_1")
  table = rows["Results at 5,000 steps"]
  assert set(table) == set(SEED_1) | {"optimizer"}
  i = _step(result, 500)
  for label, (name, run) in SEED_1.items():
    keys = ("minibatch_loss_end", "train_loss", "test_loss_end", "test_loss")
    at_500 = _pair(result, lambda t, r=run: t["runs"][r]["test_loss"][i]) if run else "same"
    assert table[label] == [*_summaries(result, name, keys), at_500], label
  for task in result["tasks"]:  # "0.01 on both", both ways.
    assert task["adam_learning_rate"] == task["adam_learning_rate_valid"] == 0.01


def test_the_cheap_fixes_table_is_its_runs(rows):
  result = _result("seed_1")
  table = rows["What each cheap fix gave"]
  names = {
    "shipped": "shipped",
    "time features held at step 499": "time held at 499",
    "weight decay 3e-3 from step 500": "weight decay 3e-3 from 500",
    "both": "both",
    "Adam, lr tuned (0.01)": "adam 0.01",
  }
  for label, name in names.items():
    norm = _pair(result, lambda t, n=name: t["runs"][n]["kinds"]["conv/w"]["param_norm"][-1], ".0f")
    step = " / ".join(
      _sci(t["windows"][name]["kinds"]["conv/w"]["relative_step"]["end"]) for t in result["tasks"]
    )
    keys = ("minibatch_loss_end", "test_loss_end", "test_loss")
    assert table[label] == [norm, step, *_summaries(result, name, keys)], label


def test_the_weight_decay_choice_table_is_its_runs_on_outer_train_tasks(rows):
  result = _result("weight_decay_choice")
  assert result["family"].startswith("generated_outer_train")
  table = rows["What each cheap fix gave"]
  chosen = result["lopt_best_on_valid"]
  assert chosen == "weight decay 3e-3 from 500"
  for name, means in result["mean_summary"].items():
    label = "none (shipped)" if name == "shipped" else name.split()[2]
    assert table[label] == [
      f"{means[k]:.3f}"
      for k in ("mean_valid_loss", "valid_loss_end", "test_loss_end", "minibatch_loss_end")
    ], label
  # What the held-out runs use is what was chosen here.
  decays = {v["weight_decay"] for v in _result("seed_1")["lopts"].values()}
  assert decays == {0.0, result["lopts"][chosen]["weight_decay"]}
  np.testing.assert_allclose(result["lopts"][chosen]["weight_decay"], 3e-3)


def test_the_seed_3_table_of_both_thetas_is_its_runs(rows):
  result = _result("seed_3")
  assert result["seed"] == 3
  table = rows["On tasks nobody chose anything on, and the L_valid theta"]
  variants = {
    "shipped update": "shipped",
    "time features held at 499": "time held at 499",
    "weight decay 3e-3 from 500": "weight decay from 500",
    "both": "both",
  }
  names = {
    f"{theta}, {label}": f"{theta}, {name}"
    for theta in ("L_train", "L_valid")
    for label, name in variants.items()
  }
  for key, tuned in (
    ("adam_learning_rate", "training"),
    ("adam_learning_rate_valid", "validation"),
  ):
    lrs = " / ".join(f"{t[key]:.3g}" for t in result["tasks"])
    name = (
      longer_unrolls.TUNED_ADAM if key == "adam_learning_rate" else longer_unrolls.TUNED_ADAM_VALID
    )
    names[f"Adam, lr tuned per task on {tuned} loss ({lrs})"] = name
  assert set(table) == set(names) | {"theta, optimizer"}
  keys = ("mean_minibatch_loss", "train_loss_end", "test_loss_end", "test_loss")
  for label, name in names.items():
    assert table[label] == _summaries(result, name, keys), label
  for name in names.values():
    if name.startswith("L_valid"):
      assert result["theta_dirs"][name] == "pretrained/generated_bn_cnn_valid/theta"


def test_the_readme_and_results_give_the_seed_3_and_seed_1_numbers():
  seed_3, seed_1 = _result("seed_3"), _result("seed_1")

  def end(result, name):
    return _pair(result, lambda task: task["summary"][name]["test_loss_end"]).replace(" ", "")

  valid, adam = end(seed_3, "L_valid, shipped"), end(seed_3, longer_unrolls.TUNED_ADAM_VALID)
  decayed = end(seed_3, "L_train, weight decay from 500")
  with open(os.path.join(testing_utils.REPO, "README.md")) as f:
    readme = f.read()
  assert f"(test loss {valid} against {adam} for Adam tuned on validation loss" in readme
  assert f"the L_train one does not ({end(seed_3, 'L_train, shipped')})" in readme
  assert f"unless decayed past the horizon ({decayed}," in readme
  with open(os.path.join(testing_utils.REPO, "docs", "results.md")) as f:
    results = " ".join(f.read().split())
  assert f"({valid} against {adam} over the last 500 steps)" in results
  seed_1_decayed = end(seed_1, "weight decay 3e-3 from 500")
  seed_1_adam = end(seed_1, longer_unrolls.TUNED_ADAM_VALID)
  assert f"({seed_1_decayed} against {seed_1_adam} on seed 1's, {decayed} against {adam}" in results
