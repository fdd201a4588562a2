"""The paper's figure experiments, one each: the pathologies (Sec. 2.3-2.4, Fig. 2, 3, App. A, B,
G) and App. H's longer unrolls."""
