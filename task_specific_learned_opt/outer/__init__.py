"""Outer-training: truncation schedules, the antithetic truncated unroll, gradient estimators."""
