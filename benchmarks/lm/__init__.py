"""The LM benchmark's scenario modules; the entry point is ``benchmarks/lm_bench.py``."""
