"""Shared setup of the studies' tests: a small outer-training experiment as a gin file."""

import pytest


@pytest.fixture
def write_config(tmp_path):
  """A function (name, extra bindings) -> the path of a small quadratic experiment's gin file."""

  def write(name, extra=()):
    path = tmp_path / f"{name}.gin"
    path.write_text(
      "\n".join(
        [
          "outer_training.family = @QuadraticFamily()",
          "QuadraticFamily.dim = 4",
          "outer_training.lopt = @MLPLOpt()",
          "train_local.num_workers = 2",
          "outer_training.batch_size = 2",
          "Worker.horizon = 12",
          "Worker.stagger = True",
          "Worker.schedule = @FixedLength()",
          "FixedLength.length = 3",
          "outer_training.num_outer_steps = 1000",
          "configure_threads.inter_op_threads = 1",
          *extra,
        ]
      )
    )
    return str(path)

  return write
