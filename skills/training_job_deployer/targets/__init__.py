"""Where a job runs: the abstract Target, the run-directory core, each target, the registry."""
