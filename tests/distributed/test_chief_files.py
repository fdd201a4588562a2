"""The chief's files: a train dir resumes only its own experiment, and keeps theta's lineage."""

import hashlib
import json
import os

import gin
import pytest

from task_specific_learned_opt import layout
from task_specific_learned_opt.cli import configurables  # noqa: F401 - registers the gin names.
from task_specific_learned_opt.distributed import chief_files, outer_training
from task_specific_learned_opt.distributed import train_dir as train_dir_lib
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.tasks import quadratic

FAMILY = quadratic.QuadraticFamily(dim=4)


def _files(directory, bindings="", steps=0, lopt=None, **kwargs):
  """ChiefFiles under `bindings`, its chief moved on by `steps` and saved."""
  gin.clear_config()
  gin.parse_config(bindings)
  setup = outer_training.outer_training(family=FAMILY, lopt=lopt or mlp_lopt.MLPLOpt())
  chief = outer_training.make_chief(setup)
  files = chief_files.ChiefFiles(str(directory), chief, setup, "test", **kwargs)
  files.lineage.begin(len(files.lineage.past) + 1)
  if steps:
    files.chief.outer_step.assign_add(steps)
    files.recorded_step = files.chief.step  # As if each step had been recorded.
    files.save()
  return files


def _snapshot(directory):
  snapshot = {}
  for root, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(root, name)
      with open(path, "rb") as f:
        snapshot[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
  return snapshot


def test_a_train_dir_refuses_another_experiment_and_changes_nothing(tmp_path):
  _files(tmp_path, "Chief.learning_rate = 0.003\nouter_training.batch_size = 4", steps=3)
  saved = json.load(open(tmp_path / layout.EXPERIMENT_FILENAME))
  assert saved["bindings"]["Chief.learning_rate"] == "0.003"
  before = _snapshot(tmp_path)
  with pytest.raises(train_dir_lib.ExperimentChangedError) as error:
    _files(tmp_path, "Chief.learning_rate = 0.0003\nouter_training.batch_size = 4")
  message = str(error.value)
  assert "holds another experiment: gin bindings differ: Chief.learning_rate" in message
  assert "0.003 there, 0.0003 here" in message
  assert "--train_dir" in message and "--resume_changed_experiment" in message
  assert _snapshot(tmp_path) == before  # Nothing was overwritten.


def test_how_long_how_often_and_how_fast_may_change_on_resume(tmp_path):
  _files(tmp_path, "outer_training.batch_size = 4\nouter_training.num_outer_steps = 5", steps=2)
  resumable = (
    "outer_training.batch_size = 4\n"
    "outer_training.num_outer_steps = 50\n"
    "outer_training.checkpoint_every_secs = 1.0\n"
    "configure_threads.inter_op_threads = 1\n"
    "run_chief.linger_secs = 3.0\n"
    "MLPLOpt.implementation = 'reference'"
  )
  files = _files(tmp_path, resumable)
  assert files.chief.step == 2
  assert not os.path.exists(tmp_path / layout.EXPERIMENT_CHANGES_FILENAME)


def test_a_changed_experiment_resumes_on_purpose_and_is_recorded(tmp_path):
  _files(tmp_path, "Chief.learning_rate = 0.003", steps=4)
  files = _files(tmp_path, "Chief.learning_rate = 0.001", resume_changed_experiment=True)
  assert files.chief.step == 4
  changes = [json.loads(line) for line in open(tmp_path / "experiment_changes.jsonl")]
  assert changes[0]["until_outer_step"] == 4
  assert changes[0]["experiment"]["bindings"]["Chief.learning_rate"] == "0.003"
  now = json.load(open(tmp_path / layout.EXPERIMENT_FILENAME))
  assert now["bindings"]["Chief.learning_rate"] == "0.001"
  _files(tmp_path, "Chief.learning_rate = 0.001")  # The new experiment is the train dir's now.


def test_other_theta_shapes_are_refused_even_on_purpose(tmp_path):
  _files(tmp_path, steps=1)
  with pytest.raises(train_dir_lib.ExperimentChangedError, match="theta's shapes differ"):
    _files(tmp_path, lopt=mlp_lopt.MLPLOpt(hidden_size=8), resume_changed_experiment=True)


def test_an_unreadable_experiment_record_is_named(tmp_path):
  _files(tmp_path, steps=1)
  (tmp_path / layout.EXPERIMENT_FILENAME).write_text("{not json")
  with pytest.raises(train_dir_lib.CheckpointError, match="Cannot read .*experiment.json"):
    _files(tmp_path)


def test_the_lineage_of_theta_survives_restarts(tmp_path):
  first = _files(tmp_path, steps=5)  # Incarnation 1: versions 0..5, saved at 5.
  assert first.lineage.ranges() == [(1, 0, None)]
  second = _files(tmp_path, steps=2)  # Incarnation 2 resumed 5, saved at 7.
  assert second.lineage.ranges() == [(1, 0, 5), (2, 5, None)]
  third = _files(tmp_path)  # Incarnation 3 resumes 7.
  assert third.lineage.ranges() == [(1, 0, 5), (2, 5, 7), (3, 7, None)]


def test_a_train_dir_recorded_under_the_chiefs_old_binding_names_resumes(tmp_path):
  _files(tmp_path, "outer_training.batch_size = 4\nouter_training.estimator = 'es'", steps=2)
  path = tmp_path / layout.EXPERIMENT_FILENAME
  saved = json.load(open(path))
  for name in ("batch_size", "estimator"):  # As a run before the settings moved wrote it.
    saved["bindings"][f"Chief.{name}"] = saved["bindings"].pop(f"outer_training.{name}")
  path.write_text(json.dumps(saved))
  files = _files(tmp_path, "outer_training.batch_size = 4\nouter_training.estimator = 'es'")
  assert files.chief.step == 2 and files.chief.batch_size == 4 and files.chief.estimator == "es"
  with pytest.raises(train_dir_lib.ExperimentChangedError, match="outer_training.batch_size"):
    _files(tmp_path, "outer_training.batch_size = 8\nouter_training.estimator = 'es'")


def test_experiment_json_is_written_as_before(tmp_path):
  _files(tmp_path, "outer_training.batch_size = 4")
  text = (tmp_path / layout.EXPERIMENT_FILENAME).read_text()
  record = json.loads(text)
  assert text == json.dumps(record, indent=1, sort_keys=True)
  assert record["bindings"]["outer_training.batch_size"] == "4"


def test_a_checkpoints_data_is_on_the_disk_before_an_index_names_it(tmp_path, monkeypatch):
  # A disk that fails at any moment of a save keeps an index naming a whole checkpoint: when
  # ckpt-N's files are flushed, the index does not name it yet; a failure there keeps ckpt-M.
  files = _files(tmp_path, steps=2)
  index = tmp_path / layout.CHECKPOINT_DIRNAME / layout.CHECKPOINT_INDEX_FILENAME
  flushed = []

  def sync(*paths):
    data = [p for p in paths if os.path.basename(p).startswith("ckpt-5.")]
    if data:
      flushed.append((sorted(os.path.basename(p) for p in data), index.read_text()))
      raise OSError(30, "Read-only file system")  # The disk fails as ckpt-5's data is flushed.

  monkeypatch.setattr(chief_files.files, "sync", sync)
  files.chief.outer_step.assign_add(3)
  files.recorded_step = files.chief.step
  with pytest.raises(Exception) as raised:
    files.save()
  ((names, index_then),) = flushed
  assert any(n.endswith(".index") for n in names) and any(".data-" in n for n in names), names
  assert 'model_checkpoint_path: "ckpt-2"' in index_then, index_then
  assert 'model_checkpoint_path: "ckpt-2"' in index.read_text()  # The index was never moved on.
  assert files.manager.latest_checkpoint.endswith("ckpt-2")
  assert "The last complete checkpoint, ckpt-2 (outer step 2), is intact" in str(raised.value)


def _failed_save_three_steps_on(files):
  """The message of a save three outer steps after the last, which must fail."""
  files.chief.outer_step.assign_add(3)
  files.recorded_step = files.chief.step
  with pytest.raises(Exception) as raised:
    files.save()
  return str(raised.value)


def test_a_disk_failing_before_the_new_index_is_flushed_names_both_checkpoints(
  tmp_path, monkeypatch
):
  files = _files(tmp_path, steps=2)

  def sync(*paths):
    if any(os.path.basename(p) == layout.CHECKPOINT_INDEX_FILENAME for p in paths):
      raise OSError(30, "Read-only file system")

  monkeypatch.setattr(chief_files.files, "sync", sync)
  message = _failed_save_three_steps_on(files)
  assert "ckpt-5 (outer step 5; or ckpt-2 if the disk lost the index naming ckpt-5), is intact" in (
    message
  ), message


def test_a_disk_turning_read_only_after_the_index_was_flushed_names_both_checkpoints(
  tmp_path, monkeypatch
):
  # ext4 remounted read-only by an error returns from an fsync without writing: the index's
  # flush "succeeds", the theta export after it fails, and the disk may keep the old index.
  files = _files(tmp_path, steps=2)

  def save_theta(*args, **kwargs):
    raise OSError(30, "Read-only file system", str(tmp_path / "theta"))

  monkeypatch.setattr(chief_files.checkpoints, "save_theta", save_theta)
  message = _failed_save_three_steps_on(files)
  assert "ckpt-5 (outer step 5; or ckpt-2 if the disk lost the index naming ckpt-5), is intact" in (
    message
  ), message
  monkeypatch.undo()
  files.save()  # The same step again, to the end: its index is known to be on the disk.
  assert files.kept() == "The last complete checkpoint, ckpt-5 (outer step 5), is intact"


def test_the_records_up_to_a_checkpoint_are_on_the_disk_before_its_index_names_it(
  tmp_path, monkeypatch
):
  # Otherwise a disk failing after the new index reached it, and before the records did, resumes
  # from ckpt-N with records missing below N: a hole in progress.jsonl.
  files = _files(tmp_path, steps=2)
  index = tmp_path / layout.CHECKPOINT_DIRNAME / layout.CHECKPOINT_INDEX_FILENAME
  records = {files.recorder.path, str(tmp_path / layout.EXPERIMENT_FILENAME)}
  named_when_synced = {}

  def sync(*paths):
    for path in set(paths) & records:
      named_when_synced[path] = index.read_text().splitlines()[0]

  monkeypatch.setattr(chief_files.files, "sync", sync)
  files.chief.outer_step.assign_add(3)
  files.recorded_step = files.chief.step
  files.save()
  assert set(named_when_synced) == records
  assert all(v == 'model_checkpoint_path: "ckpt-2"' for v in named_when_synced.values()), (
    named_when_synced
  )
  assert index.read_text().splitlines()[0] == 'model_checkpoint_path: "ckpt-5"'


def test_the_words_after_a_failed_save_follow_the_disk(tmp_path):
  # The manager recorded ckpt-5, but the index on the disk still names ckpt-2 (a rename of the
  # index lost by the disk): a restart resumes from ckpt-2, so the words name it too.
  files = _files(tmp_path, steps=2)
  files.chief.outer_step.assign_add(3)
  files.recorded_step = files.chief.step
  files.save()
  assert files.kept() == "The last complete checkpoint, ckpt-5 (outer step 5), is intact"
  index = tmp_path / "checkpoints" / layout.CHECKPOINT_INDEX_FILENAME
  index.write_text(
    index.read_text().replace(
      'model_checkpoint_path: "ckpt-5"', ('model_checkpoint_path: "ckpt-2"')
    )
  )
  assert files.kept() == (
    "The last complete checkpoint, ckpt-5 (outer step 5; or ckpt-2 if the disk lost the index "
    "naming ckpt-5), is intact"
  )
  # ckpt-5's data did not reach the disk: it is not named at all.
  for data in (tmp_path / "checkpoints").glob("ckpt-5.data-*"):
    data.unlink()
  assert files.kept() == "The last complete checkpoint, ckpt-2 (outer step 2), is intact"
  for path in (tmp_path / "checkpoints").glob("ckpt-2.*"):
    path.unlink()
  assert files.kept() == "No complete checkpoint is on the disk"
