"""The figure runner: what it writes, and JSON that survives non-finite numbers."""

import glob
import json
import math
import os

import gin
import numpy as np
import pytest
import testing_utils
from absl import app
from matplotlib import figure

from task_specific_learned_opt import files, gin_config
from task_specific_learned_opt.cli import configurables  # noqa: F401
from task_specific_learned_opt.figures import runner


class _Line(runner.Experiment):
  """y = slope * x on a few points, with a NaN where x is 0 (a diverged run)."""

  def __init__(self, slope):
    self.slope = slope

  def compute(self, panels):
    x = np.arange(4.0)
    y = self.slope * x
    y[0] = np.nan
    panels.done("(a) the line", f"y[-1] = {y[-1]}")
    return {"slope": self.slope, "x": x, "y": y, "count": np.int64(4)}

  def plot(self, result):
    fig = figure.Figure()
    fig.add_subplot().plot(result["x"], result["y"])
    return fig


def test_run_figure_writes_png_json_and_config(tmp_path):
  result = runner.run_figure(str(tmp_path), "line", _Line(2.5))
  written = json.load(open(tmp_path / "line.json"))
  assert written == result
  assert written["figure"] == "line" and written["slope"] == 2.5 and written["count"] == 4
  assert written["x"] == [0.0, 1.0, 2.0, 3.0] and written["y"][1:] == [2.5, 5.0, 7.5]
  assert written["y"][0] == "nan"  # Standard JSON has no NaN.
  assert [p["panel"] for p in written["panels"]] == ["(a) the line"]
  assert written["seconds"] >= written["panels"][0]["seconds"] >= 0
  assert os.path.getsize(tmp_path / "line.png") > 1000
  assert os.path.exists(tmp_path / "operative_config.gin")
  assert not glob.glob(str(tmp_path / "*.tmp"))


def test_json_round_trip_of_non_finite_numbers():
  value = {"a": [1.0, float("nan"), float("inf"), -float("inf")], "b": np.float32(0.5)}
  text = json.dumps(files.to_json(value), allow_nan=False)
  back = files.from_json(json.loads(text))
  assert back["b"] == 0.5 and back["a"][0] == 1.0 and math.isnan(back["a"][1])
  assert back["a"][2:] == [math.inf, -math.inf]


def test_run_figure_needs_an_experiment(tmp_path):
  with pytest.raises(Exception, match="experiment"):
    runner.run_figure(str(tmp_path), "nothing")


@pytest.mark.parametrize(
  "path", sorted(glob.glob(os.path.join(testing_utils.REPO, "gin", "figures", "*.gin")))
)
def test_every_figure_gin_file_binds_an_experiment(path):
  gin_config.parse([path])
  experiment = gin.query_parameter("run_figure.experiment")
  assert isinstance(experiment, gin.config.ConfigurableReference)
  assert issubclass(experiment.configurable.wrapped, runner.Experiment)


def test_theta_dir_flag_binds_the_experiments_theta(tmp_path, monkeypatch):
  seen = {}
  monkeypatch.setattr(
    runner,
    "run_figure",
    lambda d, n: seen.update(theta=gin.query_parameter("OuterLossSlices.theta_dir"), name=n),
  )
  gin_file = os.path.join(testing_utils.REPO, "gin/figures/fig2ef_outer_loss_slices.gin")
  testing_utils.run_main(
    "figure",
    ["figure", f"--gin_file={gin_file}", f"--theta_dir={tmp_path}", f"--output_dir={tmp_path}"],
  )
  assert seen == {"theta": str(tmp_path), "name": "fig2ef_outer_loss_slices"}


def test_theta_dir_flag_is_refused_by_an_experiment_without_theta(tmp_path):
  gin_file = os.path.join(testing_utils.REPO, "gin/figures/fig2_toy_momentum.gin")
  with pytest.raises(app.UsageError, match="ToyTwoMinimum does not take a theta"):
    argv = ["figure", f"--gin_file={gin_file}", f"--theta_dir={tmp_path}"]
    testing_utils.run_main("figure", argv)
