"""What a node has for an async save's staged copy: its /dev/shm and its memory (the
trainer decides at its first save, trainer/checkpoint.py choose_staging; a local plan
reads the same here). Not in host_memory.py: its test reads glibc's heap after importing
it, and a bigger module there moves the heap's layout."""

from __future__ import annotations

import os


def shm_free_bytes(path: str = "/dev/shm") -> int:
    """Free bytes of the shared-memory filesystem an async save stages into (0 where
    there is none)."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return 0
    return stats.f_bavail * stats.f_frsize


def available_bytes(meminfo: str = "/proc/meminfo") -> int:
    """The host memory the kernel says can be had without swapping (MemAvailable); 0
    where it does not say."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
