"""Outer-gradient estimators, one module each, chosen by name (registry.py; interface: base.py)."""
