"""Benchmarks built on the same path as ``snapkv ask``: synthetic long-context tasks and speed runs."""
