"""Learned optimizers for one family of tasks (Metz et al., ICML 2019).

Foundation modules (the package root):
  errors: UserError, the one base class of the mistakes a user can fix.
  files: the project root, JSON and JSON lines, atomic writes.
  nests: the type aliases of nests of tensors (Params, Theta, ...) and flattening.
  random_seeds: explicit, stateless seeds and their named streams.
  layout: a train dir's layout, the name of every file and directory in it.
  checkpoints: the theta export and the operative config: I/O; the theta shape check.
  cards: each theta's card, and the shipped thetas by name.
  tracing: functions traced once per task variant on purpose.
  plots: the curves of outer training and evaluations (the figures draw their own).
  gin_config: gin parsing, thread settings, the gin config of a spawned process.
  inner_training: graph-mode inner training in one tf.while_loop (Sec. 2.1); the one train
    function (make_train_fn) of evaluation and the wall-clock benchmark.

Subpackages, from the lowest layer up:
  tasks: inner problems (Task), task families and their data (Sec. 4.2, App. E).
  optimizers: hand-designed inner update rules (Optimizer), the baselines (Sec. 4.4).
  learned_optimizers: the paper's per-parameter MLP optimizer (App. D.1).
  keras: a trained theta as a Keras 3 optimizer (model.fit, custom loops).
  outer: truncation schedules, recomputation, the truncated unroll, the antithetic truncation,
    gradient estimators (Sec. 3), Persistent ES.
  distributed: the chief/worker split of outer-training, local mode and the cluster (App. C).
  evaluation: held-out evaluation against tuned baselines, their searches, the wall-clock
    benchmark, one task under several optimizers (Sec. 4.4, App. I).
  studies: many outer-trainings as processes: the ablations (Fig. 8), theta seeds (Fig. 5).
  figures: the pathology experiments (Sec. 2.3-2.4, Fig. 2, 3, App. A, B, G).
  cli: what the binaries share: a quiet start, flags, one-line user errors, every gin
    registration.
"""
