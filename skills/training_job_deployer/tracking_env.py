"""Where a job's experiment tracking goes (trainer/tracking.py): MLflow's server, named
by MLFLOW_TRACKING_URI in the environment the tools run in, as HF_ENDPOINT is, never by
a tool argument (job_env.py refuses it in `env`): a call cannot send a run's data, and
the team's tracking token, anywhere else. A local or Slurm job inherits the variables;
the Kubernetes target copies them into the container beside the image's name (a tag
of the run)."""

from __future__ import annotations

from collections.abc import Mapping

URI = "MLFLOW_TRACKING_URI"
EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
# The trainer's name for the image it runs in (trainer/tracking.py ENV_IMAGE).
IMAGE = "FSDP_EKS_IMAGE"
# Endpoints a job's variables may not set through a call (their own error text).
ENDPOINTS = frozenset({URI, "HF_ENDPOINT", "WANDB_BASE_URL"})


def tracking_env(environ: Mapping[str, str], image: str) -> dict[str, str]:
    """The container's tracking variables: none unless this environment names a server."""
    uri = environ.get(URI)
    if not uri:
        return {}
    experiment = environ.get(EXPERIMENT)
    return {URI: uri, **({EXPERIMENT: experiment} if experiment else {}), IMAGE: image}


def tracking_line(environ: Mapping[str, str]) -> str | None:
    """What a plan says of tracking (None: no server named)."""
    uri = environ.get(URI)
    if not uri:
        return None
    experiment = environ.get(EXPERIMENT) or "fsdp-eks"
    return f"MLflow {uri} (MLFLOW_TRACKING_URI), experiment {experiment}"
