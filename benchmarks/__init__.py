"""Benchmarks: measured against the targets of the issues; results in benchmarks/results/."""
