"""Fixtures of the task tests: a guard that fails a test which downloads or reads TFDS data."""

import socket

import pytest
import tensorflow_datasets as tfds


class TfdsGuard:
  """What the guarded code did: forbidden calls made, and the outcomes of builder.as_dataset."""

  def __init__(self):
    self.forbidden_calls = []
    self.as_dataset_outcomes = []


@pytest.fixture
def no_tfds_download_or_read(monkeypatch):
  """Makes every TFDS download, network connection and read of TFDS data fail the test.

  Failing goes through pytest.fail, a BaseException, so that no `except AssertionError` (the
  error TFDS raises for missing data) or `except Exception` can turn it into a passing error.

  builder.as_dataset stays callable: it is how TfdsClassSource asks whether the data is there,
  and on missing data it raises before reading. The guard records whether each call raised or
  returned a dataset; what would read the data once as_dataset found it
  (DatasetBuilder._build_single_dataset) and iterating a dataset (tfds.as_numpy) fail the test.
  """
  guard = TfdsGuard()

  def forbid(what):
    def fail(*args, **kwargs):
      guard.forbidden_calls.append(what)
      pytest.fail(f"{what} was called", pytrace=False)

    return fail

  downloads = [
    (tfds.core.DatasetBuilder, "download_and_prepare"),
    (tfds.download.DownloadManager, "download"),
    (tfds.download.DownloadManager, "download_and_extract"),
    (tfds.download.DownloadManager, "extract"),
    (tfds.download.DownloadManager, "download_kaggle_data"),
    (tfds.download.DownloadManager, "download_checksums"),
    (socket.socket, "connect"),
    (socket.socket, "connect_ex"),
    (socket, "create_connection"),
  ]
  reads = [
    (tfds, "load"),
    (tfds, "data_source"),
    (tfds, "as_numpy"),
    (tfds.core.DatasetBuilder, "as_data_source"),
    (tfds.core.DatasetBuilder, "_build_single_dataset"),
  ]
  for owner, name in downloads + reads:
    monkeypatch.setattr(owner, name, forbid(f"{getattr(owner, '__name__', owner)}.{name}"))

  as_dataset = tfds.core.DatasetBuilder.as_dataset

  def recording_as_dataset(self, *args, **kwargs):
    try:
      ds = as_dataset(self, *args, **kwargs)
    except AssertionError:
      guard.as_dataset_outcomes.append("raised: data not found")
      raise
    guard.as_dataset_outcomes.append("returned a dataset")
    return ds

  monkeypatch.setattr(tfds.core.DatasetBuilder, "as_dataset", recording_as_dataset)
  return guard
