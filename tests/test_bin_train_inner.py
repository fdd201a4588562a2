"""bin/train_inner end to end through its main(), with a small config."""

import json
import os

import pytest
import testing_utils
from absl import flags

SMOKE = [
  "GeneratedClassSource.num_classes = 20",
  "GeneratedClassSource.train_images_per_class = 40",
  "GeneratedClassSource.test_images_per_class = 10",
  "paper_cnn.channels = 8",
  "ClassSubsetFamily.batch_size = 16",
  "inner_comparison.run.log_every = 10",
  "inner_comparison.run.num_eval_batches = 2",
]


def _run_main(argv):
  binary = testing_utils.load_binary("train_inner")
  flags.FLAGS.unparse_flags()
  flags.FLAGS(argv)
  return binary.main(argv[:1])


@pytest.mark.integration
def test_main_trains_adam_and_the_learned_optimizer(tmp_path, capsys):
  argv = ["train_inner", f"--output_dir={tmp_path}", "--num_steps=30"]
  argv += [f"--gin_bindings={b}" for b in SMOKE]
  argv.append(f"--gin_file={os.path.join(testing_utils.REPO, 'gin/inner/generated_cnn.gin')}")
  _run_main(argv)
  results = json.load(open(tmp_path / "inner_comparison.json"))
  assert set(results["results"]) == {"adam", "mlp_lopt"}
  for result in results["results"].values():
    assert len(result["train_losses"]) == 30 and result["steps_per_second"] > 0
    # A mean over 2 evaluation batches of 16 examples (the accuracy itself is checked against
    # the task's in evaluation/test_single_task.py): a multiple of 1/32 in [0, 1].
    for split in ("train", "test"):
      accuracy = result["final"][split]["accuracy"]
      assert 0 <= accuracy <= 1 and 32 * accuracy == pytest.approx(round(32 * accuracy), abs=1e-4)
  assert os.path.getsize(tmp_path / "inner_comparison.png") > 1000
  assert "paper_cnn.channels = 8" in open(tmp_path / "operative_config.gin").read()
  out = capsys.readouterr().out
  assert "adam:" in out and "mlp_lopt:" in out


@pytest.mark.integration
def test_bad_binding_exits_with_one_line(tmp_path):
  with pytest.raises(SystemExit) as exit_info:
    _run_main(["train_inner", f"--output_dir={tmp_path}", "--gin_bindings=Adam.lr = 1"])
  message = str(exit_info.value.code)
  assert message.startswith("error: Bad gin configuration") and "lr" in message
  assert "\n" not in message
