"""The options of the paper's learned optimizer (App. D.1), written once.

`MLPLOptOptions` is the record of every option of `mlp_lopt.MLPLOpt`: its fields, their defaults
and what they mean. The rest is read from it:
  - `MLPLOpt(**options)` takes exactly these fields as keywords (gin_config.takes_fields_of gives
    it their signature, so gin checks bindings such as `MLPLOpt.hidden_size = 32` against them)
    and keeps the record as `lopt.options`;
  - fast_update.py's kernel reads the record itself;
  - a Keras `LearnedOptimizer` stores `as_dict(options)` in its config (keras/lopt_options.py);
  - a shipped theta's card pins a subset of the names (cards.PINNED_OPTIONS).
"""

import dataclasses
from collections.abc import Sequence

from task_specific_learned_opt.learned_optimizers import features

FEATURE_SETS = ("paper", "original_code")
IMPLEMENTATIONS = ("fast", "reference")
STEP_SCALE = 1e-3  # lambda_lin and lambda_exp, App. D.1.


@dataclasses.dataclass(frozen=True)
class MLPLOptOptions:
  """The options of App. D.1's learned optimizer; the defaults are the paper's.

  Attributes:
    hidden_size: ReLU units of the hidden layer (32).
    decays: momentum decays d of m_d <- d * m_d + (1 - d) * g (0.5, 0.9, 0.99, 0.999, 0.9999).
    time_scales: eta of the time features tanh(t / eta - 1); 9 log-spaced in [3, 3e5]. Stored
      empty when use_time is False.
    feature_set: "paper" (7 normalised columns) or "original_code" (22, the authors' code).
    use_momentum: False drops the momentum columns ("No Mom" ablation; paper features only).
    use_time: False drops the time features ("No Time" ablation).
    step_scale_lin: lambda_lin in w - lambda_lin * o_dir * exp(lambda_exp * o_mag).
    step_scale_exp: lambda_exp.
    normalizer_epsilon: epsilon of the second-moment normaliser (1e-5).
    implementation: what `opt_fn` returns: "fast" (the folded update of fast_update.py) or
      "reference" (the same update written out per tensor, to time or check against).
    time_max_step: None (the paper) or the step the time features stop at: they read
      min(t, time_max_step), e.g. the horizon the optimizer was outer-trained on, so that a
      longer run keeps the time features of its last trained step (docs/longer_unrolls.md).
    weight_decay: 0 (the paper), or lambda of a decoupled weight decay added to the learned
      step, w_t+1 = w_t - step - lambda * w_t (docs/longer_unrolls.md).
    weight_decay_start: the first step t the weight decay acts at.
    output_init_scale: multiplies the initial output layer's stddev (1: the paper). 0 starts
      from theta whose steps are all zero.
    momentum_init: None (the paper), or c: theta starts as normalised momentum SGD, o_dir =
      c * m_0.9 / rms(m_0.9): hidden units 0 and 1 read +m_0.9 and -m_0.9 alone and the output
      reads c * (unit 0 - unit 1); the other units start as the paper's with their output
      weights scaled by output_init_scale. Paper features with momentum only.
    gate_growth: False (the paper), or True: an element's step that would grow |w| is zeroed
      unless the gradient points that way (step * w < 0 and g * w >= 0; fast_update.gate_growth).
    max_step_rms: None (the paper), or the largest root mean square of a tensor's step; a
      larger step is scaled down to it (fast_update.step_rms_factor).
    max_relative_step: None (the paper), or r: a tensor's step is scaled down to a root mean
      square of r * max(rms(w), RELATIVE_STEP_FLOOR) when it is larger, so that no step changes
      a tensor by more than the fraction r of its scale, whatever the problem's weight scale
      (fast_update.relative_step_factor).
    step_weight_decay: 0 (the paper), or kappa of a decoupled weight decay that scales with the
      learned step, as AdamW's scales with the learning rate: each tensor also loses
      kappa * rms(step) / max(rms(w), RELATIVE_STEP_FLOOR) * w, a pull toward zero of kappa times
      its step's size, w_t+1 = w_t - step - kappa * rms(step) / rms(w_t) * w_t. A tensor's norm can
      then grow only by the part of its step that points outward by more than kappa of the step,
      and one kappa suits thetas whose steps differ in size (a fixed weight_decay stalls the slow
      ones). Applied after every other option of the step, from the first step.
    max_weight_rms: None (the paper), or c: after the step (and any decay), a kernel (a tensor of
      rank 2 or more) whose root mean square is above c / sqrt(fan_in) is scaled back to it,
      fan_in being the product of all its dimensions but the last (Srivastava et al.'s max-norm
      constraint, per tensor): the weights cannot grow past a few times their initial scale
      whatever the step does (Glorot-uniform kernels start at 0.5-1.4 / sqrt(fan_in)). Vectors
      (biases, batch norm's scales and offsets) are left alone.

  Raises:
    ValueError: an unknown feature set or implementation, an ablation of the original-code
      feature set, or momentum_init without the paper's momentum features.
  """

  hidden_size: int = 32
  decays: Sequence[float] = features.MOMENTUM_DECAYS
  time_scales: Sequence[float] = features.PAPER_TIME_SCALES
  feature_set: str = "paper"
  use_momentum: bool = True
  use_time: bool = True
  step_scale_lin: float = STEP_SCALE
  step_scale_exp: float = STEP_SCALE
  normalizer_epsilon: float = features.NORMALIZER_EPSILON
  implementation: str = "fast"
  time_max_step: int | None = None
  weight_decay: float = 0.0
  weight_decay_start: int = 0
  output_init_scale: float = 1.0
  momentum_init: float | None = None
  gate_growth: bool = False
  max_step_rms: float | None = None
  max_relative_step: float | None = None
  step_weight_decay: float = 0.0
  max_weight_rms: float | None = None

  def __post_init__(self) -> None:
    if self.feature_set not in FEATURE_SETS:
      raise ValueError(f"Unknown feature_set {self.feature_set!r}; expected one of {FEATURE_SETS}.")
    if self.implementation not in IMPLEMENTATIONS:
      raise ValueError(
        f"Unknown implementation {self.implementation!r}; expected one of {IMPLEMENTATIONS}."
      )
    if self.feature_set == "original_code" and not self.use_momentum:
      raise ValueError("use_momentum=False is an ablation of feature_set='paper' only.")
    normalized = {
      "hidden_size": int(self.hidden_size),
      "decays": tuple(float(d) for d in self.decays),
      "time_scales": tuple(float(t) for t in self.time_scales) if self.use_time else (),
      "use_momentum": bool(self.use_momentum),
      "use_time": bool(self.use_time),
      "step_scale_lin": float(self.step_scale_lin),
      "step_scale_exp": float(self.step_scale_exp),
      "normalizer_epsilon": float(self.normalizer_epsilon),
      "time_max_step": _optional(int, self.time_max_step),
      "weight_decay": float(self.weight_decay),
      "weight_decay_start": int(self.weight_decay_start),
      "output_init_scale": float(self.output_init_scale),
      "momentum_init": _optional(float, self.momentum_init),
      "gate_growth": bool(self.gate_growth),
      "max_step_rms": _optional(float, self.max_step_rms),
      "max_relative_step": _optional(float, self.max_relative_step),
      "step_weight_decay": float(self.step_weight_decay),
      "max_weight_rms": _optional(float, self.max_weight_rms),
    }
    for name, value in normalized.items():
      object.__setattr__(self, name, value)  # A frozen record normalises its own fields.
    if self.momentum_init is not None and (self.feature_set != "paper" or not self.use_momentum):
      raise ValueError("momentum_init needs feature_set='paper' with use_momentum=True.")
    if self.step_weight_decay < 0:
      raise ValueError(f"step_weight_decay must be >= 0, got {self.step_weight_decay}.")
    if self.max_weight_rms is not None and self.max_weight_rms <= 0:
      raise ValueError(f"max_weight_rms must be > 0 or None, got {self.max_weight_rms}.")


def _optional(cast: type, value: object) -> object:
  return None if value is None else cast(value)


# The option names, in the order of the record's fields (and of MLPLOpt's keywords).
NAMES = tuple(field.name for field in dataclasses.fields(MLPLOptOptions))


def as_dict(options: MLPLOptOptions) -> dict:
  """The options as a JSON-serialisable dict (sequences as lists): MLPLOpt(**as_dict(options)).

  Args:
    options: the record.

  Returns:
    {name: value} for every name of NAMES.
  """
  values = {name: getattr(options, name) for name in NAMES}
  values["decays"] = list(values["decays"])
  values["time_scales"] = list(values["time_scales"])  # [] when use_time is False.
  return values


def describe(options: MLPLOptOptions) -> str:
  """MLPLOpt(...) with the options that differ from the defaults, e.g. "MLPLOpt(use_time=False)".

  Args:
    options: the record.
  """
  default, values = as_dict(MLPLOptOptions()), as_dict(options)
  changed = [f"{k}={v!r}" for k, v in values.items() if v != default[k] and k != "time_scales"]
  return f"MLPLOpt({', '.join(changed)})"
