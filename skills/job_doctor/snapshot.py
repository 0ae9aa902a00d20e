"""A PyTorchJob's snapshot as a file that leaves this machine (`redacted`). The snapshot
itself is read live by the Kubernetes target's `snapshot(job_name)` (kube_monitor's
`read_snapshot`): what the pod doctor diagnoses and what `--save_snapshot` writes
(diagnose.py has the format).

One list call per kind (pods by the operator's job-name label, events in the namespace)
plus a log read per pod (and its previous container's, after a restart), never one
call per object otherwise, all through kube_monitor (KubeReader, read_snapshot).
Selectors are applied again there: an API server (or a stand-in) that ignores them
must not bring in other jobs' pods. Objects are kept exactly as the API serves them
(camelCase JSON), so a saved snapshot diagnoses the same as the live state it came
from; logs are masked (skills.shared.secrets.redact) as read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skills.shared.secrets import mask_data


def redacted(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot with every string (logs, env values, messages) masked, for a file
    that leaves this machine (a bug report)."""
    return mask_data(dict(snapshot))


__all__ = ["redacted"]
