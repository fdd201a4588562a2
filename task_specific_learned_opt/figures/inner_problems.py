"""The inner problems of the pathology figures, and the inner-loss clip they run under (Sec. 2.3).

Fig. 2d-f train a 10-class ReLU MLP (App. E's small MNIST MLP): `mlp_task` makes it on 14x14
MNIST when MNIST is prepared in the TFDS data dir, or on the embedded generated image family
(`tasks/generated.py`, no download), and `data_description` says which in a figure's title.

`inner_training.clip_loss` clips every inner loss at `max_loss` unless gin binds
`clip_loss.max_loss = None`: `loss_clip` reads the clip in force, for a figure's record, and
`check_no_loss_clip` refuses to run an experiment whose losses must not be clipped (the toy loss of
Fig. 2a-c starts above the clip; a diverging run of App. A passes it).
"""

import gin
import numpy as np
import tensorflow as tf
from absl import logging

from task_specific_learned_opt import inner_training
from task_specific_learned_opt.tasks import base as task_base
from task_specific_learned_opt.tasks import families, generated, image_task, networks, tfds_source

DATASETS = ("generated", "mnist", "auto")
DATA_DESCRIPTIONS = {
  "generated": "embedded generated textures (no download)",
  "mnist": "MNIST (TFDS)",
}


@gin.configurable
def mlp_task(
  dataset: str = "generated",
  hidden_sizes: tuple[int, ...] = (32, 32),
  image_size: int = 14,
  batch_size: int = 128,
  task_seed: int = 0,
  data_dir: str | None = None,
) -> image_task.ImageTask:
  """A 10-class ReLU MLP classification task on MNIST or on the embedded generated images.

  Args:
    dataset: "generated" (10 classes drawn with `task_seed` from the outer-train classes of
      `generated.GeneratedClassSource`, no download), "mnist" (the 10 digits of TFDS MNIST, which
      must be prepared in `data_dir`) or "auto" (MNIST if it is prepared, else generated).
    hidden_sizes: ReLU units of each hidden layer ((32, 32): App. E's small MNIST MLP).
    image_size: images are image_size x image_size (MNIST is area-resized; 14 as in App. E).
    batch_size: examples per inner batch.
    task_seed: the seed of the class draw (generated only: MNIST has one 10-class task).
    data_dir: the TFDS data dir (None: TFDS's default).

  Returns:
    The task; its name starts with the source's name ("generated" or "mnist_14x14").

  Raises:
    ValueError: an unknown dataset.
    tfds_source.DatasetNotPreparedError: dataset "mnist" is not prepared in the data dir.
  """
  if dataset not in DATASETS:
    raise ValueError(f"Unknown dataset {dataset!r}; expected one of {DATASETS}.")
  model = networks.MLP(hidden_sizes=hidden_sizes)
  if dataset in ("mnist", "auto"):
    try:
      source = tfds_source.TfdsClassSource("mnist", data_dir=data_dir, image_size=image_size)
      family = families.ClassSubsetFamily(source, model, "all", batch_size=batch_size)
      return family.sample(task_seed)
    except tfds_source.DatasetNotPreparedError:
      if dataset == "mnist":
        raise
      logging.info("MNIST is not prepared in the TFDS data dir; using the generated images.")
  source = generated.GeneratedClassSource(image_size=image_size)
  family = families.ClassSubsetFamily(source, model, "outer_train", batch_size=batch_size)
  return family.sample(task_seed)


def data_description(task: task_base.Task) -> str:
  """A few words saying which data a task of `mlp_task` trains on, for figure titles.

  Args:
    task: a task whose name starts with its source's name.
  """
  for prefix, description in DATA_DESCRIPTIONS.items():
    if task.name.startswith(prefix):
      return description
  return task.name


def loss_clip() -> float | None:
  """The inner-loss clip in force (`inner_training.clip_loss.max_loss`), None when there is none."""
  clipped = float(inner_training.clip_loss(tf.constant(np.inf, tf.float32)))
  return None if np.isinf(clipped) else clipped


def check_no_loss_clip(why: str) -> None:
  """Raises ValueError unless `inner_training.clip_loss` leaves losses unclipped.

  Args:
    why: why the experiment needs unclipped losses, for the error message.

  Raises:
    ValueError: clip_loss.max_loss is not None (bind `clip_loss.max_loss = None` in gin).
  """
  if float(inner_training.clip_loss(tf.constant(1e6))) != 1e6:
    raise ValueError(f"{why}: bind `clip_loss.max_loss = None`.")
