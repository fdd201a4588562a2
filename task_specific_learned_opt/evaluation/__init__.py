"""Held-out evaluation (paper Sec. 4.4, App. E, F, I): the protocol, running candidates, tuned
baselines, reporting, bin/eval (held_out), the baseline searches and their space, the wall-clock
benchmark and the one-task comparison."""
