"""Inner problems (paper Sec. 2.1, 4.2, App. E, I): Task, task families, data sources, networks."""
