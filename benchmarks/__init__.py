"""Benchmarks: run `python -m benchmarks` (all) or one module, e.g. `python -m benchmarks.spine`."""
