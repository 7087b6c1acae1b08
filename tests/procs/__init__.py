"""Processor modules for worker subprocesses started by tests (importable with cwd = tests/)."""
