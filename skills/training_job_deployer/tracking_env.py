"""Where a job's experiment tracking goes (trainer/tracking.py): MLflow's server, named
by MLFLOW_TRACKING_URI in the environment the tools run in, as HF_ENDPOINT is, never by
a tool argument (job_env.py refuses it in `env`): a call cannot send a run's data, and
the team's tracking token, anywhere else; and Weights & Biases, enabled by WANDB_API_KEY
there (its server WANDB_BASE_URL, a self-hosted one, by the same rule). A local or
Slurm job inherits the variables; the Kubernetes target copies the plain ones into the
container beside the image's name (a tag of the run), and the credentials (MLflow's
token or user and password, the W&B key) go into the Secret TRACKING_SECRET, a key per
variable, which the container's env references: never a value in a manifest or plan."""

from __future__ import annotations

from collections.abc import Mapping

URI = "MLFLOW_TRACKING_URI"
EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
# The trainer's name for the image it runs in (trainer/tracking.py ENV_IMAGE).
IMAGE = "FSDP_EKS_IMAGE"
# Endpoints a job's variables may not set through a call (their own error text).
ENDPOINTS = frozenset({URI, "HF_ENDPOINT", "WANDB_BASE_URL"})


# Credentials, as each tool's own client reads them (trainer/tracking.py).
MLFLOW_CREDENTIALS = (
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
)
WANDB_KEY = "WANDB_API_KEY"
# W&B's plain settings copied beside the key: project, team, a self-hosted server.
WANDB_SETTINGS = ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_BASE_URL")
# The Kubernetes Secret (per namespace, the suite's) holding the credentials above.
TRACKING_SECRET = "fsdp-eks-tracking"


def tracking_env(environ: Mapping[str, str], image: str) -> dict[str, str]:
    """The container's plain tracking variables: none unless this environment names an
    MLflow server or holds a W&B key (credentials: `tracking_secrets`)."""
    found: dict[str, str] = {}
    if uri := environ.get(URI):
        experiment = environ.get(EXPERIMENT)
        found |= {URI: uri, **({EXPERIMENT: experiment} if experiment else {})}
    if environ.get(WANDB_KEY):
        found |= {name: environ[name] for name in WANDB_SETTINGS if environ.get(name)}
    return {**found, IMAGE: image} if found else {}


def tracking_secrets(environ: Mapping[str, str]) -> list[str]:
    """The credential variables of this environment a job gets from TRACKING_SECRET:
    MLflow's where a server is named, the W&B key (names only, never values)."""
    mlflow = [name for name in MLFLOW_CREDENTIALS if environ.get(URI) and environ.get(name)]
    return mlflow + ([WANDB_KEY] if environ.get(WANDB_KEY) else [])


def secret_values(environ: Mapping[str, str], names: list[str]) -> dict[str, str]:
    """TRACKING_SECRET's data: the named variables' values (submit's, never shown)."""
    return {name: environ[name] for name in names if environ.get(name)}


def tracking_line(environ: Mapping[str, str]) -> str | None:
    """What a plan says of tracking (None: no server named)."""
    uri = environ.get(URI)
    if not uri:
        return None
    experiment = environ.get(EXPERIMENT) or "fsdp-eks"
    return f"MLflow {uri} (MLFLOW_TRACKING_URI), experiment {experiment}"
