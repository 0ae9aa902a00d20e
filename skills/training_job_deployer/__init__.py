"""JobSpec -> launch plan on a target (local torchrun now), submit, monitor, logs, cancel."""
