"""Efficiency benchmarks: timing primitives, the `avey-b bench` loop, power-law fits and plots."""
