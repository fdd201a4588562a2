"""A trained learned optimizer in Keras 3: `optimizer.LearnedOptimizer` for model.fit and custom
loops, and the learned-optimizer options a theta export is matched against (lopt_options.py)."""
