"""Studies that run many outer-trainings as processes: the ablations (Fig. 8) and the theta seeds
(Fig. 5)."""
