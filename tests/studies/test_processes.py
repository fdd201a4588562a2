"""The studies' process runner: run dirs, commands, done.json, failures named with their logs."""

import json
import os
import sys

import pytest

from task_specific_learned_opt import files, layout
from task_specific_learned_opt.studies import processes

# A stand-in for bin/train_local: writes progress.jsonl (3 outer steps of 4 inner steps) and
# finished.json in its train dir, or exits with status 1 if the dir's name says "broken".
_FAKE_TRAIN = """
import json, os, sys
train_dir = sys.argv[1]
if "broken" in train_dir:
  sys.exit(1)
with open(os.path.join(train_dir, "progress.jsonl"), "a") as f:
  for step in (1, 2, 3):
    f.write(json.dumps({"outer_step": step, "inner_steps": 4 * step}) + "\\n")
open(os.path.join(train_dir, "finished.json"), "w").write("{}")
print("trained", train_dir)
"""


def test_runs_are_every_configuration_and_seed_with_a_train_dir_each(tmp_path):
  runs = processes.runs_of(str(tmp_path), {"merged": "m.gin", "no_time": "t.gin"}, 2)
  assert [(r.name, r.seed) for r in runs] == [
    ("merged", 0),
    ("merged", 1),
    ("no_time", 0),
    ("no_time", 1),
  ]
  assert runs[3].train_dir == os.path.join(str(tmp_path), "runs", "no_time", "seed_1")


def test_the_command_sets_the_seed_the_budget_and_the_bindings(tmp_path):
  run = processes.runs_of(str(tmp_path), {"merged": "m.gin"}, 2)[1]
  command = processes.command(run, 12, ["Worker.horizon = 8"])
  assert command[0] == sys.executable and command[1].endswith(os.path.join("bin", "train_local"))
  assert command[2:] == [
    "--gin_file=m.gin",
    f"--train_dir={run.train_dir}",
    "--gin_bindings=outer_training.seed = 1",
    "--gin_bindings=outer_training.max_inner_steps = 12",
    "--gin_bindings=train_local.final_evaluation = None",
    "--gin_bindings=Worker.horizon = 8",
  ]
  assert not any("max_inner_steps" in flag for flag in processes.command(run, None))


def test_a_run_is_finished_for_its_budget_and_bindings_only(tmp_path):
  run = processes.runs_of(str(tmp_path), {"merged": "m.gin"}, 1)[0]
  assert not processes.finished(run, 12)
  os.makedirs(run.train_dir)
  files.append_jsonl(
    os.path.join(run.train_dir, layout.PROGRESS_FILENAME),
    [{"outer_step": 1, "inner_steps": 8}, {"outer_step": 2, "inner_steps": 16}],
  )
  with pytest.raises(processes.AblationError, match="stopped before its end"):
    processes._mark_done(run, 12, 1.0)
  files.write_json(os.path.join(run.train_dir, layout.FINISHED_FILENAME), {})
  with pytest.raises(processes.AblationError, match="stopped at 16 of 20 inner steps"):
    processes._mark_done(run, 20, 1.0)
  done = processes._mark_done(run, 12, 2.5, ["a = 1"])
  assert done == {
    "max_inner_steps": 12,
    "bindings": ["a = 1"],
    "inner_steps": 16,
    "outer_steps": 2,
    "seconds": 2.5,
  }
  text = open(os.path.join(run.train_dir, processes.DONE_FILENAME)).read()
  assert text == json.dumps(done)  # One line, as json.dump writes it.
  assert processes.finished(run, 12, ["a = 1"]) and processes.finished(run, 10, ["a = 1"])
  assert not processes.finished(run, 14, ["a = 1"])  # A larger budget resumes it.
  assert not processes.finished(run, 12)  # So do other bindings.


def test_run_all_runs_the_unfinished_and_names_the_failed_ones(tmp_path, monkeypatch):
  monkeypatch.setattr(
    processes,
    "command",
    lambda run, max_inner_steps, bindings=(): [sys.executable, "-c", _FAKE_TRAIN, run.train_dir],
  )
  runs = processes.runs_of(str(tmp_path), {"merged": "m.gin", "broken": "b.gin"}, 2)
  with pytest.raises(processes.AblationError, match="2 runs failed") as failure:
    processes.run_all(runs, 12, num_parallel=2, poll_secs=0.01)
  for run in runs[2:]:
    assert f"{run.train_dir}/{processes.LOG_FILENAME}" in str(failure.value)
  for run in runs[:2]:
    assert processes.finished(run, 12)
    assert processes.read_done(run)["outer_steps"] == 3
    assert "trained" in open(os.path.join(run.train_dir, processes.LOG_FILENAME)).read()
  # Again, without the broken ones: nothing is left to run.
  monkeypatch.setattr(processes.subprocess, "Popen", None)
  processes.run_all(runs[:2], 12, num_parallel=2, poll_secs=0.01)
