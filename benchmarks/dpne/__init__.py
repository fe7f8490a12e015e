"""The DPNE benchmark's scenario modules; the entry point is ``benchmarks/dpne_bench.py``."""
