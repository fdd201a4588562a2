"""The figures' MLP task (MNIST or the generated images) and the inner-loss clip in force."""

import gin
import pytest

from task_specific_learned_opt import inner_training, nests
from task_specific_learned_opt.figures import inner_problems
from task_specific_learned_opt.tasks import tfds_source


def test_mlp_task_data_and_errors(tmp_path):
  with pytest.raises(ValueError, match="Unknown dataset"):
    inner_problems.mlp_task(dataset="cifar")
  with pytest.raises(tfds_source.DatasetNotPreparedError):
    inner_problems.mlp_task(dataset="mnist", data_dir=str(tmp_path))
  # "auto" falls back to the generated images when MNIST is not prepared.
  gin.bind_parameter("GeneratedClassSource.num_classes", 20)
  gin.bind_parameter("GeneratedClassSource.train_images_per_class", 20)
  gin.bind_parameter("GeneratedClassSource.test_images_per_class", 5)
  task = inner_problems.mlp_task(
    dataset="auto", hidden_sizes=(4, 4), image_size=6, batch_size=3, data_dir=str(tmp_path)
  )
  assert task.name.startswith("generated_outer_train_mlp4x4[")
  assert inner_problems.data_description(task) == "embedded generated textures (no download)"
  assert task.batch("train", 0)["image"].shape == (3, 6, 6, 3)
  assert nests.flatten(task.init_params(0)).shape == (6 * 6 * 3 * 4 + 4 + 4 * 4 + 4 + 50,)
  assert inner_problems.data_description(type("T", (), {"name": "mnist_14x14_all"})()) == (
    "MNIST (TFDS)"
  )


def test_loss_clip_reads_the_binding():
  assert inner_problems.loss_clip() == inner_training.MAX_LOSS
  gin.bind_parameter("clip_loss.max_loss", None)
  assert inner_problems.loss_clip() is None
  gin.bind_parameter("clip_loss.max_loss", 3.5)
  assert inner_problems.loss_clip() == 3.5


def test_check_no_loss_clip_refuses_a_clip():
  with pytest.raises(ValueError, match="the reason: bind `clip_loss.max_loss = None`"):
    inner_problems.check_no_loss_clip("the reason")
  gin.bind_parameter("clip_loss.max_loss", None)
  inner_problems.check_no_loss_clip("the reason")
