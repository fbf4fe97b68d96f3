"""Measurement: typed inputs/results, builders, runners, executors."""
