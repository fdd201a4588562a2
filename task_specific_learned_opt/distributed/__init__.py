"""The chief/worker split of outer-training (paper App. C): samples, transports, worker, chief."""
