"""The paper's pathology figures (Sec. 2.3-2.4, Fig. 2, 3, App. A, B, G), one experiment each."""
