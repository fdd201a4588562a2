"""The chief: theta, the outer optimizer, and the update from a batch of samples (App. C, D.3).

  chief = Chief(lopt)
  stats = chief.apply(batch)   # drop stale and non-finite, the estimator's combine, Adam, step += 1
  theta = chief.theta()

State lives in tf.Variables (theta, Adam's m and v, the outer step), so tf.train.Checkpoint
saves and restores it whole. The update itself is the project's hand-written Adam
(optimizers/adam.py) applied to theta as a pure function, compiled once with a dynamic batch
dimension, so batches of any size (after dropping) reuse one trace.

The estimator (outer/estimators/) and the batch size also decide what the workers compute and
how many local mode runs, so they are settings of the experiment (gin `outer_training.estimator`,
`outer_training.batch_size`), handed to the chief by the mode that builds it
(outer_training.make_chief), and not gin parameters of Chief.
"""

import time

import gin
import numpy as np
import tensorflow as tf

from task_specific_learned_opt import checkpoints, nests, tracing
from task_specific_learned_opt.distributed import base
from task_specific_learned_opt.learned_optimizers import base as lopt_base
from task_specific_learned_opt.optimizers import adam
from task_specific_learned_opt.outer import estimates
from task_specific_learned_opt.outer.estimators import registry

LEARNING_RATE_TRAIN = 3e-3  # App. D.3: outer lr for L_train.
LEARNING_RATE_VALID = 3e-4  # App. D.3: outer lr for L_valid.
BETA1 = 0.5  # App. D.3.
BATCH_SIZE = 128  # App. D.3: samples per outer update.
ESTIMATOR = "merged"  # Sec. 3, eq. 1.
# Samples more outer steps old than this are dropped. A healthy cluster of W workers with batches
# of B and the transport's queue of 2 batches sees about 1.2 W / B + 2 (4 for the paper's W = B =
# 128: the steps taken while a sample's truncation runs, K jittered by up to 20%, plus the queue);
# 8 leaves a factor of 2 for slower workers and drops the samples of a worker that fell behind
# (cut off, paused). The authors' code drops none (None here).
MAX_STALENESS = 8


def _mean_over_coordinates(nest: nests.Nest) -> tf.Tensor:
  leaves = [tf.reshape(x, [-1]) for x in tf.nest.flatten(nest)]
  return tf.reduce_mean(tf.concat(leaves, 0))


@gin.configurable(denylist=["estimator", "batch_size"])
class Chief:
  """Holds theta and applies merged gradient estimates to it with Adam.

  Note: samples more than `max_staleness` (8) outer steps old are dropped by default; the
  authors' code drops none (docs/deviations.md)."""

  def __init__(
    self,
    lopt: lopt_base.LearnedOptimizer,
    seed: int = 0,
    learning_rate: float = LEARNING_RATE_TRAIN,
    beta1: float = BETA1,
    beta2: float = 0.999,
    epsilon: float = 1e-8,
    estimator: str = ESTIMATOR,
    clip_value: float | None = None,
    gradient_scale: float = 1.0,
    batch_size: int = BATCH_SIZE,
    max_staleness: int | None = MAX_STALENESS,
    initial_theta: str | None = None,
  ):
    """Makes the chief with theta = lopt.init(seed).

    Args:
      lopt: the learned optimizer whose theta is trained.
      seed: seed of theta's initialisation.
      learning_rate: Adam's learning rate on theta (3e-3 for L_train, 3e-4 for L_valid).
      beta1: Adam's beta1 (0.5 in the paper).
      beta2: Adam's beta2.
      epsilon: Adam's epsilon.
      estimator: the name of the estimator whose `combine` makes the gradient from a batch
        (outer/estimators/registry.py): "merged" (eq. 1), "rp" or "es" (the Fig. 8 ablations),
        "pes" or "pes_merged" (docs/pes.md), "backprop" (Sec. 2.4's truncated backpropagation).
        gin: `outer_training.estimator`.
      clip_value: clip the gradient to +-clip_value before Adam (the authors' code: 0.1).
      gradient_scale: multiplies the merged gradient before the clip and Adam. 1 is the
        paper's estimates, g_rp = d(L+ + L-)/2 and g_es = (L+ - L-)/2 e / sigma^2. The authors'
        code forms both at twice that scale (it sums L+ and L- and does not halve their
        difference) and clips the merged gradient, so its clip at 0.1 acts as gradient_scale =
        2 with clip_value = 0.1 here (gin/original_code/valid_objective.gin). The merge's
        weights do not depend on the scale, and Adam's step hardly does (only through epsilon).
      batch_size: samples per update (128). gin: `outer_training.batch_size`.
      max_staleness: drop samples computed with a theta more than this many outer steps old
        (counted as num_stale); None keeps them all, as the authors' code does. The default
        (MAX_STALENESS) never drops a sample of a healthy cluster and drops those of a worker
        that fell behind (docs/cluster.md, staleness).
      initial_theta: None (theta = lopt.init(seed)), or a theta export to start from instead
        (e.g. a shipped pretrained/<name>/theta): outer-training warm-started from it.
    """
    self.lopt = lopt
    self.estimator = estimator
    self._estimator = registry.get(estimator)  # Raises on an unknown name.
    self.clip_value = clip_value
    self.gradient_scale = float(gradient_scale)
    self.batch_size = int(batch_size)
    self.max_staleness = None if max_staleness is None else int(max_staleness)
    self.optimizer = adam.Adam(
      learning_rate=learning_rate, beta1=beta1, beta2=beta2, epsilon=epsilon
    )
    if initial_theta is None:
      start = lopt.init(seed)
    else:
      start = checkpoints.load_theta(initial_theta, lopt)
    initial = self.optimizer.init(start)
    self.variables = tf.nest.map_structure(
      lambda x: tf.Variable(x, trainable=False), initial._asdict()
    )
    self.outer_step = tf.Variable(0, dtype=tf.int64, trainable=False)
    self._structure = tf.nest.map_structure(np.asarray, initial.params)
    signature = tf.nest.map_structure(
      lambda x: tf.TensorSpec([None, *x.shape], tf.float32), initial.params
    )
    # Traced once per chief; a process that makes several (a seed study, the tests) traces the
    # same code once each, which TensorFlow's retracing detector would report.
    self._apply = tracing.traces_per_variant(
      tf.function(
        self._apply_batch,
        input_signature=[signature, signature, tf.TensorSpec([None]), tf.TensorSpec([None])],
        autograph=False,
      )
    )

  def theta(self) -> nests.Theta:
    """The current theta, a nest of tensors."""
    return tf.nest.map_structure(tf.convert_to_tensor, self.variables["params"])

  def theta_numpy(self) -> nests.Theta:
    """The current theta, a nest of numpy arrays."""
    return tf.nest.map_structure(lambda v: v.numpy(), self.variables["params"])

  @property
  def step(self) -> int:
    """The outer step: updates applied so far."""
    return int(self.outer_step.numpy())

  def checkpoint_items(self) -> dict:
    """What a tf.train.Checkpoint must hold to resume the chief exactly."""
    return {"theta_and_adam": self.variables, "outer_step": self.outer_step}

  def _apply_batch(
    self,
    g_rp: nests.Nest,
    g_es: nests.Nest,
    loss_plus: tf.Tensor,
    loss_minus: tf.Tensor,
  ) -> dict[str, tf.Tensor]:
    keep = estimates.finite_mask(g_rp, g_es, loss_plus, loss_minus)
    num_kept = tf.reduce_sum(tf.cast(keep, tf.int32))
    g_rp, g_es = (
      tf.nest.map_structure(lambda x: tf.boolean_mask(x, keep), nest) for nest in (g_rp, g_es)
    )
    gradient = self._estimator.combine(g_rp, g_es)
    merge = estimates.merge_inverse_variance(g_rp, g_es)  # The diagnostics, for any estimator.
    if self.gradient_scale != 1.0:
      gradient = tf.nest.map_structure(lambda g: self.gradient_scale * g, gradient)
    gradient = estimates.clip_by_value(gradient, self.clip_value)
    state = adam.AdamState(**tf.nest.map_structure(tf.convert_to_tensor, self.variables))

    def update() -> tf.Tensor:
      new_state = self.optimizer.update(state, gradient)
      for var, value in zip(
        tf.nest.flatten(self.variables), tf.nest.flatten(new_state._asdict()), strict=True
      ):
        var.assign(value)
      self.outer_step.assign_add(1)
      return tf.constant(True)

    applied = tf.cond(num_kept > 0, update, lambda: tf.constant(False))
    kept_plus, kept_minus = tf.boolean_mask(loss_plus, keep), tf.boolean_mask(loss_minus, keep)
    return {
      "applied": applied,
      "num_kept": num_kept,
      "num_dropped": tf.size(keep) - num_kept,
      "outer_loss": tf.reduce_mean(tf.concat([kept_plus, kept_minus], 0)),
      "loss_plus": tf.reduce_mean(kept_plus),
      "loss_minus": tf.reduce_mean(kept_minus),
      "rp_variance": _mean_over_coordinates(merge.rp_variance),
      "es_variance": _mean_over_coordinates(merge.es_variance),
      "es_weight": _mean_over_coordinates(merge.es_weight),
      # Per coordinate, the variance of one sample's merged estimate: w_rp^2 v_rp + w_es^2 v_es
      # = v_rp v_es / (v_rp + v_es) = v_es * w_es (the batch mean's is this over N). Written
      # with v_es, which stays finite when v_rp explodes (Fig. 4).
      "merged_variance": _mean_over_coordinates(
        tf.nest.map_structure(tf.multiply, merge.es_variance, merge.es_weight)
      ),
      "gradient_norm": tf.linalg.global_norm(tf.nest.flatten(gradient)),
    }

  def apply(self, batch: base.SampleBatch) -> dict[str, bool | int | float]:
    """Drops stale and non-finite samples, merges the rest, takes one Adam step on theta.

    If every sample is dropped, theta and the outer step are left as they were.

    Args:
      batch: samples stacked along axis 0 (base.stack), estimates flattened as theta is.

    Returns:
      Statistics of the update as Python numbers: applied, num_kept, num_dropped (non-finite),
      num_stale, outer_loss, loss_plus, loss_minus, rp_variance, es_variance (mean
      per-coordinate variances of the samples' two estimates), es_weight (mean ES weight of
      the merge), merged_variance (mean per-coordinate variance of a sample's merged estimate,
      v_rp v_es / (v_rp + v_es)), gradient_norm,
      mean_num_steps, mean_inner_step, max_staleness, mean_staleness, seconds.

    Raises:
      ValueError: an empty batch.
    """
    if len(batch.loss_plus) == 0:
      raise ValueError("Chief.apply needs at least one sample.")
    start = time.time()
    staleness = self.step - np.asarray(batch.theta_version, np.int64)
    num_stale = 0
    if self.max_staleness is not None:
      fresh = staleness <= self.max_staleness
      num_stale = int(np.sum(~fresh))
      batch = base.select(batch, fresh)
    stats = self._apply(
      base.unflatten(np.asarray(batch.g_rp, np.float32), self._structure),
      base.unflatten(np.asarray(batch.g_es, np.float32), self._structure),
      np.asarray(batch.loss_plus, np.float32),
      np.asarray(batch.loss_minus, np.float32),
    )
    stats = {k: v.numpy().item() for k, v in stats.items()}
    num_steps = np.asarray(batch.num_steps, np.float64)
    inner_steps = np.asarray(batch.inner_step, np.float64)
    stats.update(
      num_stale=num_stale,
      mean_num_steps=float(np.mean(num_steps)) if len(num_steps) else 0.0,
      mean_inner_step=float(np.mean(inner_steps)) if len(inner_steps) else 0.0,
      max_staleness=int(np.max(staleness)),
      mean_staleness=float(np.mean(staleness)),
      seconds=time.time() - start,
    )
    return stats
