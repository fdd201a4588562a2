"""The learned optimizer's options are written once: every place that names them agrees."""

import dataclasses
import inspect

import gin
import pytest

from task_specific_learned_opt import cards
from task_specific_learned_opt.keras import lopt_options
from task_specific_learned_opt.learned_optimizers import mlp_lopt, mlp_options


def test_the_constructor_takes_exactly_the_options_with_their_defaults():
  parameters = dict(inspect.signature(mlp_lopt.MLPLOpt).parameters)
  fields = {field.name: field.default for field in dataclasses.fields(mlp_options.MLPLOptOptions)}
  assert {name: p.default for name, p in parameters.items()} == fields
  assert tuple(parameters) == mlp_options.NAMES


def test_every_option_is_documented_on_the_record():
  doc = mlp_options.MLPLOptOptions.__doc__
  missing = [name for name in mlp_options.NAMES if f"    {name}: " not in doc]
  assert not missing, missing


def test_the_lopt_reads_its_options_and_the_kernel_reads_the_same_record():
  lopt = mlp_lopt.MLPLOpt(hidden_size=8, use_time=False, max_step_rms=0.5)
  assert lopt.options == mlp_options.MLPLOptOptions(hidden_size=8, use_time=False, max_step_rms=0.5)
  assert lopt.options.time_scales == () and lopt.time_scales == ()
  assert lopt.hidden_size == 8 and lopt.max_step_rms == 0.5
  kernel = lopt.opt_fn(lopt.init(0))._kernel
  assert kernel.config is lopt.options
  with pytest.raises(AttributeError):
    lopt.no_such_option  # noqa: B018


def test_keras_and_cards_name_the_same_options():
  assert lopt_options.LOPT_OPTIONS == mlp_options.NAMES
  options = lopt_options.lopt_options(mlp_lopt.MLPLOpt())
  assert tuple(options) == mlp_options.NAMES
  assert set(cards.PINNED_OPTIONS) | set(cards.UNPINNED_OPTIONS) == set(mlp_options.NAMES)
  assert not set(cards.PINNED_OPTIONS) & set(cards.UNPINNED_OPTIONS)


def test_gin_binds_every_option_and_refuses_an_unknown_one():
  gin.clear_config()
  try:
    gin.parse_config("MLPLOpt.hidden_size = 4\nMLPLOpt.gate_growth = True")
    lopt = mlp_lopt.MLPLOpt()
    assert (lopt.hidden_size, lopt.gate_growth) == (4, True)
    with pytest.raises(ValueError, match="hidden_sise"):
      gin.parse_config("MLPLOpt.hidden_sise = 4")
  finally:
    gin.clear_config()


def test_unknown_or_invalid_options_are_refused():
  with pytest.raises(TypeError):
    mlp_lopt.MLPLOpt(hidden_sise=4)
  with pytest.raises(ValueError, match="feature_set"):
    mlp_lopt.MLPLOpt(feature_set="mine")
  with pytest.raises(ValueError, match="momentum_init"):
    mlp_lopt.MLPLOpt(momentum_init=1.0, use_momentum=False)
