"""The local target: torchrun on this host, one supervisor per attempt."""
