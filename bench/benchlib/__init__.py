"""Harness internals of bench/run.py: private Redis, peer environments, phases, report."""
