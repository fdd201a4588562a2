"""What to do about a TFDS dataset that is not prepared or is damaged: the messages that say it.

TfdsClassSource (Sec. 4.2, 4.4) never downloads. When its dataset is not prepared in the data dir,
`not_prepared_message` gives the command that prepares it (and, for ImageNet 32x32, the files to
fetch by hand first); when a prepared file is truncated, corrupted or missing, `damaged_message`
names the file, what is wrong with it, and how to prepare the dataset again.
"""

import os
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_datasets as tfds


def prepare_command(dataset: str, data_dir: str) -> str:
  """The shell command that downloads and prepares `dataset` into `data_dir`.

  `tfds build` and `tensorflow_datasets.scripts.download_and_prepare` both import apache_beam at
  start-up, which these datasets do not otherwise need, so the command calls the builder directly.

  Args:
    dataset: a TFDS name, e.g. "cifar100" or "imagenet_resized/32x32".
    data_dir: the TFDS data dir to prepare it in.

  Returns:
    A one-line `python -c ...` command.
  """
  return (
    f'python -c "import tensorflow_datasets as tfds; '
    f'tfds.builder({dataset!r}, data_dir={data_dir!r}).download_and_prepare()"'
  )


def not_prepared_message(
  dataset: str, builder: tfds.core.DatasetBuilder, manual_files: Sequence[str]
) -> str:
  """Says that `dataset` is not prepared, and how to prepare it (several lines).

  Args:
    dataset: the TFDS name.
    builder: its builder in the data dir that was searched.
    manual_files: files that must be downloaded by hand first (DatasetSpec.manual_files).
  """
  data_dir = os.fspath(builder.data_dir_root)
  lines = [
    f"TFDS dataset {dataset!r} is not prepared: no data in {builder.data_dir} "
    f"(searched data dir {data_dir}). This code never downloads. Prepare it once with:",
    f"  {prepare_command(dataset, data_dir)}",
  ]
  if manual_files:
    manual_dir = os.path.join(data_dir, "downloads", "manual")
    lines.append(
      f"{dataset} needs the ImageNet files {', '.join(manual_files)}: TFDS fetches them from "
      "image-net.org, which requires an ImageNet account, and its builder has no manual download "
      "instructions. Download them by hand (image-net.org, downsampled ImageNet 32x32) and put "
      f"them in {manual_dir}/ before running the command; TFDS uses files found there instead "
      "of downloading."
    )
  return "\n".join(lines)


def _damage(path: str) -> str | None:
  """What is wrong with one TFRecord file of a dataset (None: it reads to the end)."""
  if not tf.io.gfile.exists(path):
    return "missing"
  try:
    for _ in tf.data.TFRecordDataset(path):
      pass
  except tf.errors.DataLossError as e:
    message = " ".join(str(e).split())
    if "truncated" in message:
      return "truncated (a record ends past the end of the file)"
    if "corrupted" in message or "checksum" in message.lower():
      return "corrupted (a record's checksum does not match its bytes)"
    return f"unreadable ({message[:200]})"
  return None


def damaged_message(
  dataset: str, builder: tfds.core.DatasetBuilder, tfds_split: str, error: Exception
) -> str:
  """One line naming the damaged file of a split that failed to read, and the fix.

  Args:
    dataset: the TFDS name.
    builder: its builder.
    tfds_split: the TFDS split whose read failed.
    error: what the read raised (quoted when no file of the split is found damaged).
  """
  try:
    paths = [os.fspath(p) for p in builder.info.splits[tfds_split].filepaths]
  except Exception:  # noqa: BLE001 - the dataset info itself may be what is damaged.
    paths = []
  found = [(path, what) for path in paths if (what := _damage(path)) is not None][:1]
  if found:
    what = f"{found[0][0]} is {found[0][1]}"
  else:
    what = f"reading it failed: {' '.join(str(error).split())[:200]}"
  return (
    f"TFDS dataset {dataset!r} ({tfds_split} split) is damaged: {what}. Delete the "
    f"prepared version ({builder.data_dir}) and prepare it again: "
    f"{prepare_command(dataset, os.fspath(builder.data_dir_root))}"
  )
