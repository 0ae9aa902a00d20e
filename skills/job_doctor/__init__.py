"""The job doctor: failure signatures, diagnosis, remedies, auto-retry, snapshots."""
