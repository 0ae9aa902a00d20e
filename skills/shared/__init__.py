"""The tool contract every tool follows: tooling, errors, results, progress, secrets."""
