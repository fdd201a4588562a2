"""MLPLOpt's options as data: rebuilding an MLPLOpt, and naming the options that read a theta."""

import pytest

from task_specific_learned_opt import checkpoints
from task_specific_learned_opt.keras import lopt_options
from task_specific_learned_opt.learned_optimizers import mlp_lopt


def test_options_rebuild_the_optimizer():
  lopt = mlp_lopt.MLPLOpt(hidden_size=8, use_time=False, feature_set="original_code")
  rebuilt = lopt_options.as_lopt(lopt_options.lopt_options(lopt))
  assert lopt_options.lopt_options(rebuilt) == lopt_options.lopt_options(lopt)
  assert isinstance(lopt_options.as_lopt(None), mlp_lopt.MLPLOpt)
  assert lopt_options.as_lopt(lopt) is lopt


def test_describe_names_only_the_changed_options():
  assert lopt_options.describe(mlp_lopt.MLPLOpt()) == "MLPLOpt()"
  assert lopt_options.describe(mlp_lopt.MLPLOpt(use_time=False)) == "MLPLOpt(use_time=False)"


@pytest.mark.parametrize(
  "options, expected",
  [
    ({"use_time": False}, "MLPLOpt(use_time=False)"),
    ({"hidden_size": 8, "use_momentum": False}, "MLPLOpt(hidden_size=8, use_momentum=False)"),
  ],
)
def test_advice_names_the_options_a_theta_was_trained_with(options, expected):
  shapes = checkpoints.theta_shapes(mlp_lopt.MLPLOpt(**options).init(0))
  assert expected in lopt_options.matching_options(shapes, mlp_lopt.MLPLOpt())
  reader, fix = lopt_options.advice(mlp_lopt.MLPLOpt(), shapes)
  assert reader == "MLPLOpt()" and fix.startswith("it fits ") and expected in fix


def test_advice_without_a_match_points_at_the_operative_config():
  shapes = {"hidden/w": [3, 3]}
  assert lopt_options.matching_options(shapes, mlp_lopt.MLPLOpt()) == []
  _, fix = lopt_options.advice(mlp_lopt.MLPLOpt(), shapes)
  assert "operative_config.gin" in fix
