"""Learned optimizers for one family of tasks (Metz et al., ICML 2019).

Packages:
  tasks: inner problems (Task), task families and their data.
  optimizers: hand-designed inner update rules (Optimizer).
  learned_optimizers: the paper's per-parameter MLP optimizer.
  inner_training: graph-mode inner training in one tf.while_loop.
"""
