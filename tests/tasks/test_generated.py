"""The embedded generated family: deterministic, not separable by mean colour, learnable."""

import numpy as np
import pytest

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.tasks import families, generated


def test_images_are_deterministic_in_seed_class_and_split():
  a = generated.generate_images(0, 3, "train", 5)
  np.testing.assert_array_equal(a, generated.generate_images(0, 3, "train", 5))
  assert a.shape == (5, 32, 32, 3) and a.dtype == np.uint8
  for other in (
    generated.generate_images(1, 3, "train", 5),
    generated.generate_images(0, 4, "train", 5),
    generated.generate_images(0, 3, "test", 5),
  ):
    assert not np.array_equal(a, other)


def test_source_serves_1000_classes_split_700_300():
  source = generated.GeneratedClassSource()
  family = families.ClassSubsetFamily(source=source)
  assert source.num_classes == 1000 and source.image_shape == (32, 32, 3)
  assert len(family.class_ids) == 700


def test_mean_colour_does_not_identify_the_class():
  # Nearest class centroid of the per-image mean colour, on 10 classes: chance is 0.1.
  classes = range(10)
  train = [generated.generate_images(0, c, "train", 300).mean(axis=(1, 2)) for c in classes]
  test = [generated.generate_images(0, c, "test", 100).mean(axis=(1, 2)) for c in classes]
  centroids = np.stack([x.mean(axis=0) for x in train])
  correct = [
    np.argmin(((x[:, None, :] - centroids[None]) ** 2).sum(-1), axis=1) == c
    for c, x in enumerate(test)
  ]
  assert np.mean(np.concatenate(correct)) < 0.2


@pytest.mark.integration
def test_the_paper_cnn_learns_a_task_with_adam_in_hundreds_of_steps():
  task = families.ClassSubsetFamily(source=generated.GeneratedClassSource()).sample(0)
  losses = inner_training.train(task, adam.Adam(learning_rate=3e-3), 300, seed=0).losses.numpy()
  chance = np.log(10)
  assert np.mean(losses[:10]) > chance - 0.05  # starts at chance...
  assert np.mean(losses[20:40]) > 2.0  # ...is not solved in a few steps...
  assert np.mean(losses[-20:]) < 0.5 * chance  # ...and is well below chance after 300.
