"""Local outer-training: resume exactly, refuse foreign or damaged checkpoints, run the binary."""

import collections
import glob
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import pytest
import tensorflow as tf
import testing_utils
from absl import flags

from task_specific_learned_opt import (
  cards,
  checkpoints,  # noqa: F401
  gin_config,  # noqa: F401
  layout,
  nests,
)
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.distributed import (
  chief_files,
  cluster,
  in_process,
  local,
  loops,
  outer_training,
  progress,
  worker_step,
)
from task_specific_learned_opt.distributed import train_dir as train_dir_lib
from task_specific_learned_opt.learned_optimizers import mlp_lopt
from task_specific_learned_opt.outer import pes, schedules
from task_specific_learned_opt.outer.estimators import base as estimator_base
from task_specific_learned_opt.outer.estimators import persistent_es, registry
from task_specific_learned_opt.tasks import quadratic


def _bind_small(estimator="merged"):
  gin.bind_parameter("outer_training.batch_size", 3)
  gin.bind_parameter("outer_training.estimator", estimator)
  # 4 truncations per inner run: a checkpoint after 2 outer steps (3 samples per worker) falls
  # inside the workers' inner runs, and 4 steps cross a reset.
  gin.bind_parameter("Worker.horizon", 16)
  gin.bind_parameter("Worker.schedule", schedules.FixedLength(4))


# One family and learned optimizer for every run, so the runs share one compiled sampler.
FAMILY, LOPT = quadratic.QuadraticFamily(dim=4), mlp_lopt.MLPLOpt()


def _train(
  train_dir,
  steps,
  lopt=None,
  estimator="merged",
  num_workers=2,
  parallel_samples=1,
  tasks_per_worker=1,
  **experiment,
):
  _bind_small(estimator)
  setup = outer_training.outer_training(
    family=FAMILY, lopt=lopt or LOPT, num_outer_steps=steps, **experiment
  )
  return local.train_local(
    str(train_dir),
    num_workers=num_workers,
    setup=setup,
    parallel_samples=parallel_samples,
    tasks_per_worker=tasks_per_worker,
  )


def _theta(train_dir, lopt=None):
  return checkpoints.load_theta(
    os.path.join(str(train_dir), layout.THETA_DIRNAME), lopt or mlp_lopt.MLPLOpt()
  )


def _records(train_dir):
  return progress.read_records(str(train_dir))


@pytest.mark.integration
@pytest.mark.parametrize("estimator", ["merged", "pes"])
def test_a_resumed_run_continues_exactly(tmp_path, estimator):
  # With PES the checkpoint holds both unrolls' states and xi of every worker's inner run.
  _train(tmp_path / "straight", 4, estimator=estimator)
  _train(tmp_path / "resumed", 2, estimator=estimator)
  # The same command again: resumes at outer step 2.
  _train(tmp_path / "resumed", 4, estimator=estimator)
  straight, resumed = _theta(tmp_path / "straight"), _theta(tmp_path / "resumed")
  for a, b in zip(tf.nest.flatten(straight), tf.nest.flatten(resumed), strict=True):
    np.testing.assert_array_equal(a, b)
  assert [r["outer_step"] for r in _records(tmp_path / "resumed")] == [1, 2, 3, 4]
  assert [r["outer_loss"] for r in _records(tmp_path / "resumed")] == [
    r["outer_loss"] for r in _records(tmp_path / "straight")
  ]
  # Inner steps are counted across the resume: 3 samples of K = 4 per outer step, the samples
  # taken in turn from the 2 workers.
  assert [r["inner_steps"] for r in _records(tmp_path / "resumed")] == [12, 24, 36, 48]
  assert _records(tmp_path / "resumed")[-1]["inner_steps_per_worker"] == {"0": 24, "1": 24}
  assert not np.array_equal(  # theta did move.
    tf.nest.flatten(straight)[0], tf.nest.flatten(mlp_lopt.MLPLOpt().init(0))[0]
  )


@pytest.mark.parametrize("estimator", ["merged", "pes"])
def test_samples_computed_at_once_are_the_samples_computed_one_at_a_time(tmp_path, estimator):
  # 3 workers, batches of 3: 2 at once then 1, or all 3 at once; 5 steps cross inner resets.
  runs = {}
  for parallel in (1, 2, 3):
    train_dir = tmp_path / f"parallel_{parallel}"
    _train(train_dir, 5, estimator=estimator, num_workers=3, parallel_samples=parallel)
    runs[parallel] = (_theta(train_dir), _records(train_dir))
  for parallel in (2, 3):
    for a, b in zip(tf.nest.flatten(runs[1][0]), tf.nest.flatten(runs[parallel][0]), strict=True):
      np.testing.assert_array_equal(a, b)
    for key in ("outer_loss", "rp_variance", "es_variance", "inner_steps"):
      assert [r[key] for r in runs[parallel][1]] == [r[key] for r in runs[1][1]], key


def test_batched_workers_give_the_samples_of_as_many_workers(tmp_path, estimator="merged"):
  # Batches of 4 from 4 workers, or from 2 workers of 2 tasks each (worker ids 0-3 either way,
  # each sample from its own inner run, K fixed so lockstep changes nothing): the chief takes the
  # same samples in the same order, over 5 outer steps that cross the inner runs' reset.
  runs = {}
  for tasks in (1, 2):
    train_dir = tmp_path / f"tasks_{tasks}"
    _train(
      train_dir,
      5,
      estimator=estimator,
      num_workers=4 // tasks,
      tasks_per_worker=tasks,
      batch_size=4,
    )
    runs[tasks] = (_theta(train_dir), _records(train_dir))
  for a, b in zip(tf.nest.flatten(runs[1][0]), tf.nest.flatten(runs[2][0]), strict=True):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)
  for key in ("inner_steps", "inner_steps_per_worker"):
    assert [r[key] for r in runs[2][1]] == [r[key] for r in runs[1][1]], key
  outer_losses = [[r["outer_loss"] for r in runs[tasks][1]] for tasks in (1, 2)]
  np.testing.assert_allclose(outer_losses[1], outer_losses[0], rtol=1e-5)
  assert runs[2][1][-1]["inner_steps_per_worker"] == {str(i): 20 for i in range(4)}


def test_a_batched_run_resumes_exactly_and_refuses_another_batch_size(tmp_path):
  _train(tmp_path / "straight", 5, num_workers=2, tasks_per_worker=2, batch_size=4)
  _train(tmp_path / "resumed", 2, num_workers=2, tasks_per_worker=2, batch_size=4)
  with pytest.raises(train_dir_lib.CheckpointError, match="tasks_per_worker = 2"):
    _train(tmp_path / "resumed", 5, num_workers=2, tasks_per_worker=1, batch_size=4)
  _train(tmp_path / "resumed", 5, num_workers=2, tasks_per_worker=2, batch_size=4)
  straight, resumed = _theta(tmp_path / "straight"), _theta(tmp_path / "resumed")
  for a, b in zip(tf.nest.flatten(straight), tf.nest.flatten(resumed), strict=True):
    np.testing.assert_array_equal(a, b)
  assert [r["outer_step"] for r in _records(tmp_path / "resumed")] == [1, 2, 3, 4, 5]


def test_an_error_while_samples_compute_at_once_changes_no_worker(monkeypatch):
  transport = in_process.InProcessTransport()
  transport.publish_theta(nests.flatten_numpy(LOPT.init(0)), 0)
  worker_loops = [
    loops.WorkerLoop(
      worker_step.Worker(FAMILY, LOPT, worker_id=i, schedule=schedules.FixedLength(4)), transport
    )
    for i in range(2)
  ]
  running = local._WorkersState(worker_loops, transport, batch_size=2, parallel_samples=2)
  step = worker_step.Worker.step

  def fail_for_worker_1(self, *args):
    if self.worker_id == 1:
      raise KeyboardInterrupt  # As Ctrl-C would, while worker 0's sample completes.
    return step(self, *args)

  monkeypatch.setattr(worker_step.Worker, "step", fail_for_worker_1)
  with pytest.raises(KeyboardInterrupt):
    running.next_workers()
  running.close()
  assert transport.queued() == 0 and running.num_samples == 0
  assert all(loop.state.estimator_state is None and loop.num_put == 0 for loop in worker_loops)


def _pes_loops(transport):
  return [
    loops.WorkerLoop(
      worker_step.Worker(
        FAMILY,
        LOPT,
        worker_id=i,
        schedule=schedules.FixedLength(4),
        horizon=16,
        estimator=registry.get("pes"),
      ),
      transport,
    )
    for i in range(2)
  ]


def test_the_checkpointed_pes_workers_continue_exactly():
  transport = in_process.InProcessTransport()
  transport.publish_theta(nests.flatten_numpy(LOPT.init(0)), 0)
  running = local._WorkersState(_pes_loops(transport))
  for _ in range(5):  # Worker 0: 3 truncations, worker 1: 2; both inside their inner runs.
    running.next_worker()
  saved = running.serialize()
  restored = local._WorkersState(_pes_loops(transport))
  restored.deserialize(saved)
  state = restored.worker_loops[0].state.estimator_state
  assert isinstance(state, persistent_es.PESState)
  assert state.state_minus is not None and int(state.accumulator.num_truncations) == 3
  assert isinstance(state.accumulator.perturbation_sum["hidden"]["w"], np.ndarray)
  transport.take_samples(5)
  for workers in (running, restored):
    for _ in range(6):  # Across the horizon reset of both workers.
      workers.next_worker()
  straight, resumed = transport.take_samples(6), transport.take_samples(6)
  # Bit-identical estimates (the sample counters of a worker loop start again, as in local mode).
  for field in ("g_rp", "g_es", "loss_plus", "loss_minus", "num_steps", "inner_step"):
    np.testing.assert_array_equal(getattr(straight, field), getattr(resumed, field))
  assert straight.inner_step.tolist() == [8, 12, 12, 0, 0, 4]  # Both reset at the horizon, 16.


def test_pes_quickstart_gin_trains_in_local_mode(tmp_path, monkeypatch):
  workers = []
  step = worker_step.Worker.step

  def spied_step(self, *args):
    workers.append(self)
    return step(self, *args)

  monkeypatch.setattr(worker_step.Worker, "step", spied_step)
  gin_config.parse(
    ["gin/pes_quickstart.gin"],
    [
      # The quickstart's machinery on quadratic tasks, which compile in a moment.
      "outer_training.family = @QuadraticFamily()",
      "QuadraticFamily.dim = 4",
      "train_local.num_workers = 2",
      "train_local.final_evaluation = None",
      "outer_training.batch_size = 2",
      "Worker.horizon = 12",
      "LinearCurriculum.min_length = 2",
      "LinearCurriculum.max_length = 4",
      "outer_training.num_outer_steps = 3",
    ],
  )
  stats = local.train_local(str(tmp_path))
  assert stats["outer_step"] == 3 and np.isfinite(stats["outer_loss"])
  assert [r["outer_step"] for r in _records(tmp_path)] == [1, 2, 3]
  assert "outer_training.estimator = 'pes'" in open(tmp_path / "operative_config.gin").read()
  assert workers and all(type(w.estimator) is persistent_es.PersistentES for w in workers)


def test_outputs_are_written(tmp_path):
  _train(tmp_path, 2)
  assert glob.glob(str(tmp_path / "events.out.tfevents.*"))
  assert os.path.getsize(tmp_path / layout.PLOT_FILENAME) > 1000
  assert tf.train.latest_checkpoint(str(tmp_path / layout.CHECKPOINT_DIRNAME)).endswith("-2")
  record = _records(tmp_path)[-1]
  for key in ("outer_loss", "rp_variance", "es_variance", "es_weight", "samples_per_second"):
    assert np.isfinite(record[key])


def test_a_checkpoint_of_another_experiment_is_refused(tmp_path):
  _train(tmp_path, 1)
  with pytest.raises(train_dir_lib.CheckpointError, match="another experiment"):
    _train(tmp_path, 2, lopt=mlp_lopt.MLPLOpt(feature_set="original_code"))


def test_a_damaged_checkpoint_is_refused_and_left_in_place(tmp_path):
  _train(tmp_path, 1)
  data_files = glob.glob(str(tmp_path / layout.CHECKPOINT_DIRNAME / "*.data-*"))
  with open(data_files[0], "r+b") as f:
    f.truncate(16)
  before = sorted(os.listdir(tmp_path / layout.CHECKPOINT_DIRNAME))
  with pytest.raises(train_dir_lib.CheckpointError, match="damaged") as raised:
    _train(tmp_path, 2)
  message = str(raised.value)
  assert "is damaged (its files are truncated or corrupt)" in message, message
  assert "another experiment" not in message, message  # Not a guess between two causes.
  assert sorted(os.listdir(tmp_path / layout.CHECKPOINT_DIRNAME)) == before


SMOKE = [
  "GeneratedClassSource.num_classes = 20",
  "GeneratedClassSource.train_images_per_class = 40",
  "GeneratedClassSource.test_images_per_class = 10",
  "paper_cnn.channels = 4",
  "paper_cnn.strides = (2, 2)",
  "ClassSubsetFamily.batch_size = 8",
  "train_local.num_workers = 2",
  "outer_training.batch_size = 2",
  "LinearCurriculum.min_length = 2",
  "LinearCurriculum.max_length = 4",
  # The final evaluation against tuned Adam, shrunk: 6 outer-test classes, 2 learning rates.
  "eval/ClassSubsetFamily.num_classes_per_task = 3",
  "compare_with_tuned_baseline.num_tasks = 2",
  "compare_with_tuned_baseline.num_steps = 6",
  "compare_with_tuned_baseline.num_points = 3",
  "compare_with_tuned_baseline.learning_rates = (1e-3, 1e-1)",
]


@pytest.mark.integration
def test_bin_train_local_main(tmp_path, capsys):
  binary = testing_utils.load_binary("train_local")
  argv = ["train_local", f"--train_dir={tmp_path}", "--num_outer_steps=2"]
  argv += [f"--gin_file={os.path.join(testing_utils.REPO, 'gin/quickstart.gin')}"]
  argv += [f"--gin_bindings={b}" for b in SMOKE]
  flags.FLAGS.unparse_flags()
  flags.FLAGS(argv)
  binary.main(argv[:1])
  assert [r["outer_step"] for r in _records(tmp_path)] == [1, 2]
  assert "outer_training.batch_size = 2" in open(tmp_path / "operative_config.gin").read()
  assert os.path.exists(tmp_path / layout.THETA_DIRNAME / layout.THETA_INFO_FILENAME)
  # It ends with the comparison against learning-rate-tuned Adam on held-out tasks.
  output = capsys.readouterr().out
  assert "learned vs adam (lr tuned per task on train loss) on 2 held-out tasks, 6 steps" in output
  # And the shipped theta beside it, on the same runs.
  assert "shipped vs adam (lr tuned per task on train loss) on 2 held-out tasks, 6 steps" in output
  saved = json.load(open(tmp_path / layout.EVAL_DIRNAME / "evaluation.json"))
  assert len(saved["tuned_learning_rates"]["adam (lr tuned per task on train loss)"]) == 2
  assert os.path.getsize(tmp_path / layout.EVAL_DIRNAME / "curves.png") > 5000
  # The theta's card now says how it did there, from eval/summary.json.
  card = cards.read_card(str(tmp_path / layout.THETA_DIRNAME))
  (result,) = card["results"]
  assert result["scope"] == "in_family" and result["label"] == "learned" and result["tasks"] == 2
  assert "not evaluated yet" not in card["summary"]
  assert "in family mean training loss" in card["summary"], card["summary"]


def _launch(train_dir, steps, extra=()):
  args = [
    sys.executable,
    os.path.join(testing_utils.REPO, "bin", "train_local"),
    f"--train_dir={train_dir}",
    f"--num_outer_steps={steps}",
    f"--gin_file={os.path.join(testing_utils.REPO, 'gin/quickstart.gin')}",
    "--gin_bindings=outer_training.checkpoint_every_secs = 0",  # A checkpoint after every step.
    "--gin_bindings=train_local.final_evaluation = None",
    # The quickstart's machinery on quadratic tasks, which compile in a moment.
    "--gin_bindings=outer_training.family = @QuadraticFamily()",
    "--gin_bindings=QuadraticFamily.dim = 4",
    "--gin_bindings=train_local.num_workers = 2",
    "--gin_bindings=outer_training.batch_size = 2",
    *extra,
  ]
  return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_steps(train_dir, steps, process, timeout=240):
  deadline = time.time() + timeout
  while time.time() < deadline:
    path = os.path.join(str(train_dir), layout.PROGRESS_FILENAME)
    if os.path.exists(path) and len(_records(train_dir)) >= steps:
      return
    assert process.poll() is None, process.stdout.read().decode()[-2000:]
    time.sleep(0.2)
  process.kill()
  raise AssertionError("train_local made no progress in time")


@pytest.mark.integration
def test_sigkill_then_restart_resumes_from_the_checkpoint(tmp_path):
  straight = _launch(tmp_path / "straight", 5)
  assert straight.wait(timeout=300) == 0
  killed = _launch(tmp_path / "killed", 5)
  _wait_for_steps(tmp_path / "killed", 2, killed)
  killed.send_signal(signal.SIGKILL)
  killed.wait(timeout=30)
  restarted = _launch(tmp_path / "killed", 5)
  assert restarted.wait(timeout=300) == 0
  output = restarted.stdout.read().decode()
  assert "Resumed from" in output
  assert [r["outer_step"] for r in _records(tmp_path / "killed")] == [1, 2, 3, 4, 5]
  for a, b in zip(
    tf.nest.flatten(_theta(tmp_path / "straight")),
    tf.nest.flatten(_theta(tmp_path / "killed")),
    strict=True,
  ):
    np.testing.assert_array_equal(a, b)


@pytest.mark.integration
def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path):
  process = _launch(tmp_path, 1000)
  _wait_for_steps(tmp_path, 2, process)
  process.send_signal(signal.SIGTERM)
  assert process.wait(timeout=120) == 0  # A clean stop, for a supervisor...
  output = process.stdout.read().decode()
  assert output.strip().splitlines()[-1] == "stopped by SIGTERM"
  assert "Traceback" not in output
  last_step = _records(tmp_path)[-1]["outer_step"]
  assert last_step < 1000  # ...before the end...
  latest = tf.train.latest_checkpoint(str(tmp_path / layout.CHECKPOINT_DIRNAME))
  assert latest.endswith(f"-{last_step}")  # ...with the last finished step saved.


def test_a_budget_of_inner_steps_stops_the_run(tmp_path):
  # 12 inner steps per outer step: the budget of 30 is reached after the third batch.
  stats = _train(tmp_path, 100, max_inner_steps=30)
  assert stats["outer_step"] == 3 and stats["inner_steps"] == 36
  assert [r["inner_steps"] for r in _records(tmp_path)] == [12, 24, 36]
  # Resuming a run whose budget is reached takes no step.
  _train(tmp_path, 100, max_inner_steps=30)
  assert len(_records(tmp_path)) == 3


def _workers_per_batch(train_dir):
  return [[sample[0] for sample in r["samples"]] for r in _records(train_dir)]


def test_by_default_every_sample_of_a_batch_comes_from_its_own_inner_run(tmp_path):
  # W defaults to the batch size (3): each batch holds one sample of each worker's inner run.
  _train(tmp_path / "default", 4, num_workers=None, record_samples=True)
  assert [sorted(w) for w in _workers_per_batch(tmp_path / "default")] == [[0, 1, 2]] * 4
  # Fewer workers than samples: a batch holds consecutive truncations of one inner run.
  _train(tmp_path / "two", 4, num_workers=2, record_samples=True)
  assert any(len(set(w)) < len(w) for w in _workers_per_batch(tmp_path / "two"))


def test_a_final_evaluation_that_cannot_be_built_stops_the_run_before_its_first_step(tmp_path):
  gin_config.parse(
    [os.path.join(testing_utils.REPO, "gin", "quickstart.gin")],
    [
      "eval/ClassSubsetFamily.num_classes_per_task = 400",  # The outer-test split has 300.
      "outer_training.num_outer_steps = 1",  # Were it not checked first: one step, then the error.
    ],
  )
  try:
    with pytest.raises(ValueError, match="outer_test"):
      local.train_local(str(tmp_path / "run"))
  finally:
    gin.clear_config()
  assert not (tmp_path / "run").exists()  # Nothing was trained or written.


@pytest.mark.integration
def test_one_intra_op_thread_computes_the_same_outer_training_to_float_tolerance(tmp_path):
  # The quickstart runs one intra-op thread (docs/performance.md): the CNN's ops then sum in
  # another order than with TensorFlow's default pool, so the numbers may differ in their last
  # bits, never more. Each setting in its own process (thread pools are set once per process).
  records = {}
  for threads in (0, 1):
    train_dir = tmp_path / f"intra_{threads}"
    bindings = [*SMOKE, f"configure_threads.intra_op_threads = {threads}"]
    process = subprocess.run(
      [
        sys.executable,
        os.path.join(testing_utils.REPO, "bin", "train_local"),
        f"--train_dir={train_dir}",
        "--num_outer_steps=4",
        f"--gin_file={os.path.join(testing_utils.REPO, 'gin/quickstart.gin')}",
        "--gin_bindings=train_local.final_evaluation = None",
        *[f"--gin_bindings={b}" for b in bindings],
      ],
      capture_output=True,
      text=True,
      timeout=600,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    records[threads] = _records(train_dir)
  # The outer losses to 1e-4; the merged gradient, whose g_rp is a second derivative through
  # the unroll (which amplifies the last bits), to 1e-2 (measured: 8e-4).
  for key, rtol in [("outer_loss", 1e-4), ("loss_plus", 1e-4), ("loss_minus", 1e-4)] + [
    ("gradient_norm", 1e-2)
  ]:
    a, b = [r[key] for r in records[0]], [r[key] for r in records[1]]
    np.testing.assert_allclose(a, b, rtol=rtol, err_msg=key)
  assert [r["inner_steps"] for r in records[0]] == [r["inner_steps"] for r in records[1]]
  # theta: the two runs differ by under 1% of how far the 4 Adam steps moved it.
  theta_0, theta_1 = _theta(tmp_path / "intra_0"), _theta(tmp_path / "intra_1")
  flat = [np.concatenate([np.ravel(x) for x in tf.nest.flatten(t)]) for t in (theta_0, theta_1)]
  start = np.concatenate([np.ravel(x) for x in tf.nest.flatten(mlp_lopt.MLPLOpt().init(0))])
  moved = np.max(np.abs(flat[1] - start))
  assert moved > 1e-3
  assert np.max(np.abs(flat[0] - flat[1])) < 0.01 * moved


def test_worker_states_written_under_the_old_module_name_are_read(monkeypatch):
  """Checkpoints written before distributed/worker.py became worker_step.py name WorkerState by
  the old module; a run resumes from them."""
  state = worker_step.WorkerState(task_index=3, truncation_index=7, estimator_state=None)
  old_name = "task_specific_learned_opt.distributed.worker"
  with monkeypatch.context() as patch:  # Pickled as the old version did.
    patch.setattr(worker_step.WorkerState, "__module__", old_name)
    patch.setitem(sys.modules, old_name, worker_step)
    string_value = pickle.dumps({"states": [state], "num_samples": 7, "counts": [(5, 0)]})
  assert old_name.encode() + b"\x94" in string_value
  with pytest.raises(ModuleNotFoundError):  # What pickle alone does with it now.
    pickle.loads(string_value)
  loaded = local.load_workers_state(string_value)
  assert loaded["states"][0] == state and isinstance(loaded["states"][0], worker_step.WorkerState)
  assert loaded["counts"] == [(5, 0)]


# worker_step.WorkerState as checkpoints held it before the estimators were classes.
_WORKER_STATE_BEFORE_ESTIMATORS = collections.namedtuple(
  "WorkerState",
  ["task_index", "truncation_index", "inner_state", "minus_state", "accumulator"],
  defaults=[None, None],
)


@pytest.mark.parametrize("persistent", [False, True])
def test_worker_states_of_the_layout_before_estimators_load_as_the_estimators_state(
  monkeypatch, persistent
):
  inner = {"params": np.arange(3.0), "iteration": np.int32(8)}
  minus = {"params": np.arange(3.0) - 1, "iteration": np.int32(8)}
  accumulator = pes.Accumulator({"w": np.ones(2, np.float32)}, np.int32(2))
  fields = (inner, minus, accumulator) if persistent else (inner,)
  old = _WORKER_STATE_BEFORE_ESTIMATORS
  states = [old(3, 7, *fields), old(4, 9, None)]
  with monkeypatch.context() as patch:  # Pickled under the name the old version used.
    patch.setattr(old, "__module__", worker_step.__name__)
    patch.setattr(worker_step, "WorkerState", old)
    string_value = pickle.dumps({"states": states, "num_samples": 2})
  loaded = local.load_workers_state(string_value)["states"]
  expected = (
    persistent_es.PESState(inner, minus, accumulator)
    if persistent
    else estimator_base.UnrollState(inner)
  )
  assert all(isinstance(state, worker_step.WorkerState) for state in loaded)
  assert loaded[0][:2] == (3, 7) and loaded[1] == worker_step.WorkerState(4, 9, None)
  assert type(loaded[0].estimator_state) is type(expected)
  for a, b in zip(
    tf.nest.flatten(loaded[0].estimator_state), tf.nest.flatten(expected), strict=True
  ):
    np.testing.assert_array_equal(a, b)


def test_worker_states_that_would_call_a_foreign_function_are_refused():
  class Calls:
    def __reduce__(self):
      return (os.getcwd, ())

  string_value = pickle.dumps({"states": [Calls()], "num_samples": 0, "counts": []})
  with pytest.raises(train_dir_lib.CheckpointError, match="posix.getcwd|os.getcwd"):
    local.load_workers_state(string_value)


def test_a_checkpoint_without_worker_states_resumes_with_new_workers(tmp_path):
  """bin/chief and launch_local's chief save no local workers: train_local resumes their train
  dir with workers that start new inner runs, and their samples are applied."""
  _train(tmp_path, 2)
  _bind_small()
  setup = outer_training.outer_training(family=FAMILY, lopt=LOPT, num_outer_steps=2)
  chief_only = chief_files.ChiefFiles(str(tmp_path), outer_training.make_chief(setup), setup, "t")
  assert chief_only.chief.step == 2
  directory = layout.checkpoint_dir(str(tmp_path))
  shutil.rmtree(directory)
  tf.train.CheckpointManager(chief_only.checkpoint, directory, 1).save(checkpoint_number=2)
  names = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(directory)}
  assert "workers" not in names and "theta_and_adam" in names
  theta = nests.flatten(chief_only.chief.theta_numpy())

  _train(tmp_path, 4)
  records = _records(tmp_path)
  assert [r["outer_step"] for r in records] == [1, 2, 3, 4]
  assert [r["num_kept"] for r in records[2:]] == [3, 3]
  assert not any(r["num_duplicate"] for r in records)
  resumed = nests.flatten(_theta(tmp_path))
  assert any(not np.array_equal(a, b) for a, b in zip(theta, resumed, strict=True))


def _batched_workers_bound(option):
  """Local mode's two batched workers and bin/worker's (cluster.make_worker), with the
  BatchedWorker `option` bound True."""
  gin.bind_parameter(f"BatchedWorker.{option}", True)
  _bind_small()
  setup = outer_training.outer_training(family=FAMILY, lopt=LOPT, num_outer_steps=1)
  transport = in_process.InProcessTransport()
  batched = [loop.worker for loop in local._worker_loops(setup, 2, transport, 2)]
  return [*batched, cluster.make_worker(setup, 0, 0, tasks_per_worker=2)]


def test_group_models_reaches_every_batched_worker_and_a_family_it_cannot_group_is_refused():
  batched = _batched_workers_bound("group_models")
  assert [w.group_models for w in batched] == [True] * 3
  # Quadratics have no networks to group: the first step says so and names the binding.
  worker = batched[0]
  with pytest.raises(ValueError, match="Leave BatchedWorker.group_models False"):
    worker.step(LOPT.init(0), 0, worker.initial_state())


def test_vectorize_updates_reaches_every_batched_worker():
  batched = _batched_workers_bound("vectorize_updates")
  assert [w.vectorize_updates for w in batched] == [True] * 3
  assert not any(w.group_models for w in batched)
