"""Evaluation: the comparison harness, measurement, rendering, accuracy reports, the pattern checker, testing helpers, the pytest plugin."""
