"""What the binaries share: a quiet start (quiet_start.py), their flags and one-line user errors
(common.py), and the gin registrations (configurables.py)."""
