"""Test rigs, outside the library: a private test network and a cluster of real processes on it.

`netns` makes hosts of a loopback-only network on one machine (network namespaces joined by veth
links); `hosts` runs bin/chief and bin/worker processes on them, injects faults and checks the
train dir's invariants. The tests (pyproject's pythonpath has the repository root) and the fault
benchmarks (benchmarks/soak.py, benchmarks/fault_injection.py) import them; the package does not.
"""
