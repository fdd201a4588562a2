"""Runs one figure experiment and writes what it plots: NAME.png, NAME.json, the gin config.

  bin/figure --gin_file gin/figures/fig2_toy_momentum.gin --output_dir runs/fig2_toy_momentum

A figure experiment is an `Experiment` bound in gin (`run_figure.experiment = @ToyTwoMinimum()`).
`compute(panels)` does the work and returns every number the figure plots, as JSON-ready Python
(lists, floats, strings), with the settings that made them; `plot(result)` draws the figure from
that result alone, so a figure can be redrawn from its JSON. Experiments report each finished
panel with `panels.done(...)`, which logs one line with the elapsed time.
"""

import abc
import os
import time

import gin
from absl import logging
from matplotlib import figure

from task_specific_learned_opt import checkpoints, files

JSON_INDENT = 1


class Panels:
  """Logs one line per finished panel of a figure, with the time since the experiment started."""

  def __init__(self, name: str):
    """Starts the clock.

    Args:
      name: the figure's name, which starts every line.
    """
    self.name = name
    self.start = time.time()
    self.finished: list[dict] = []

  def done(self, panel: str, summary: str = "") -> None:
    """Logs that `panel` is finished, with a one-line summary of what it shows.

    Args:
      panel: the panel's label, e.g. "(c) final loss against theta".
      summary: a few numbers from the panel, e.g. "max |dl/dtheta| = 3.1e+08 at T = 1000".
    """
    seconds = time.time() - self.start
    self.finished.append({"panel": panel, "seconds": round(seconds, 3)})
    logging.info("%s: panel %s done after %.1f s. %s", self.name, panel, seconds, summary)


class Experiment(abc.ABC):
  """One figure: compute the numbers, then draw them."""

  @abc.abstractmethod
  def compute(self, panels: Panels) -> dict:
    """Runs the experiment; returns every number the figure plots and the settings (JSON-ready).

    Args:
      panels: where each finished panel is reported.
    """

  @abc.abstractmethod
  def plot(self, result: dict) -> figure.Figure:
    """The figure, drawn from `compute`'s result alone.

    Args:
      result: what `compute` returned (or its JSON, read back).
    """


@gin.configurable
def run_figure(output_dir: str, name: str, experiment: Experiment = gin.REQUIRED) -> dict:
  """Runs `experiment`; writes NAME.json, NAME.png and the operative gin config to output_dir.

  Args:
    output_dir: where the files are written (created if missing).
    name: the figure's name (the gin file's, e.g. "fig2_toy_momentum").
    experiment: the figure experiment, bound in the gin file.

  Returns:
    The result as written to NAME.json: the experiment's numbers plus "figure" (the name),
    "seconds" (wall-clock time of compute) and "panels" (each panel's finishing time).
  """
  os.makedirs(output_dir, exist_ok=True)
  panels = Panels(name)
  result = dict(experiment.compute(panels))
  result.update(figure=name, seconds=round(time.time() - panels.start, 3), panels=panels.finished)
  result = files.to_json(result)
  json_path = files.write_json(os.path.join(output_dir, f"{name}.json"), result, indent=JSON_INDENT)
  png_path = os.path.join(output_dir, f"{name}.png")
  fig = experiment.plot(files.from_json(result))
  fig.savefig(png_path, dpi=110, bbox_inches="tight")
  checkpoints.write_operative_config(output_dir)
  logging.info("%s: wrote %s and %s in %.1f s.", name, png_path, json_path, result["seconds"])
  return result
