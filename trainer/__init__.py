"""A minimal FSDP2 trainer for Llama-style models: `python -m trainer --help`."""
