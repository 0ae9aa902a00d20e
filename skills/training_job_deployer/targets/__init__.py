"""Where a job runs: the abstract Target, the run-directory core, each target, and the
table of them by name (by_name.py)."""
