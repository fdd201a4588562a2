"""scikit-learn's handwritten digits as a ClassSource (tasks/digits_source.py): App. E's problems
on real digits without a download."""

import numpy as np
import pytest

from task_specific_learned_opt.tasks import digits_source, families, networks

sklearn_datasets = pytest.importorskip("sklearn.datasets")


def test_every_digit_is_served_once_resized_and_split():
  source = digits_source.DigitsClassSource(image_size=14, test_fraction=0.2)
  digits = sklearn_datasets.load_digits()
  for c in range(10):
    train, test = source.images("train", c), source.images("test", c)
    assert train.shape[1:] == (14, 14, 1) and train.dtype == np.uint8
    count = int(np.sum(digits.target == c))
    assert len(train) + len(test) == count  # every image of the digit, in one split only
    assert len(test) == round(0.2 * count)
    assert train.max() > 200 and train.min() == 0  # 0..16 scaled to 0..255
  # Each image is one of the digit's own: at 8x8 (no resize) it equals an original exactly.
  same_size = digits_source.DigitsClassSource(image_size=8)
  originals = {np.round(x * 255 / 16).astype(np.uint8).tobytes() for x in digits.images}
  for c in (0, 7):
    for image in same_size.images("train", c)[:20, ..., 0]:
      assert image.tobytes() in originals


def test_splits_are_disjoint_and_fixed_by_the_seed():
  a = digits_source.DigitsClassSource(image_size=8, seed=0)
  b = digits_source.DigitsClassSource(image_size=8, seed=0)
  c = digits_source.DigitsClassSource(image_size=8, seed=1)
  np.testing.assert_array_equal(a.images("test", 5), b.images("test", 5))
  assert not np.array_equal(a.images("test", 5), c.images("test", 5))
  train = {x.tobytes() for x in a.images("train", 5)}
  assert not train & {x.tobytes() for x in a.images("test", 5)}


def test_a_family_of_the_one_ten_digit_task_trains_the_papers_mlp():
  source = digits_source.DigitsClassSource(image_size=14)
  family = families.ClassSubsetFamily(
    source=source, model=networks.mnist_mlp_2x32(), class_split="all", batch_size=32
  )
  task = family.sample(0)
  assert sorted(int(c) for c in family.sample_classes(0)) == list(range(10))
  assert task.num_examples("train") + task.num_examples("valid") + task.num_examples("test") == 1797
  params = task.init_params(0)
  loss = float(task.loss(params, task.batch("train", [0, 1])))
  assert 1.5 < loss < 4.0  # near ln 10 at init


def test_an_unknown_split_is_named():
  with pytest.raises(ValueError, match="valid"):
    digits_source.DigitsClassSource().images("valid", 0)
