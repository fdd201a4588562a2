"""Hand-designed inner update rules: the paper's baselines (Sec. 4.4, App. F)."""
