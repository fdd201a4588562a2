"""The learned optimizer (paper Sec. 4.1, App. D.1): interface, features, the MLP and its kernel."""
