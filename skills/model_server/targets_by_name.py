"""The model-server targets: one line per target. The tools take `target` and its
settings through `ServerTargetSettings` (flattened into their inputs, as the job tools
do) and never branch on a name. A target's module is imported on first use, so a
local call never loads the Kubernetes client."""

from __future__ import annotations

import importlib
from typing import Annotated, Any, Union

from pydantic import Field

from skills.model_server.base import ServerSettings, ServerTarget
from skills.model_server.kubernetes.settings import (
    KubernetesServerAccess,
    KubernetesServerSettings,
)
from skills.model_server.local import LocalServerAccess, LocalServerSettings
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.tooling import Flatten

# target name -> (deploy's settings, the access part get/list/delete take, "module:class"
# of its ServerTarget)
TARGETS: dict[str, tuple[type[ServerSettings], type[ServerSettings], str]] = {
    "local": (
        LocalServerSettings,
        LocalServerAccess,
        "skills.model_server.local:LocalServerTarget",
    ),
    "kubernetes": (
        KubernetesServerSettings,
        KubernetesServerAccess,
        "skills.model_server.kubernetes.target:KubernetesServerTarget",
    ),
}


def _one_of(models: list[type[ServerSettings]]) -> Any:
    """A union of the settings models, told apart by `target`."""
    return Annotated[Union[tuple(models)], Field(discriminator="target")]  # noqa: UP007


# A tool parameter: `target` plus each target's own settings as flat inputs (deploy).
ServerTargetSettings = Annotated[
    _one_of([settings for settings, _, _ in TARGETS.values()]),
    Flatten("target", description="Where it is served (default: local):"),
]
# The same, only what reaches a target's servers (get, list, delete).
ServerTargetAccess = Annotated[
    _one_of([access for _, access, _ in TARGETS.values()]),
    Flatten("target", description="Where it is served (default: local):"),
]


def get_server_target(settings: ServerSettings) -> ServerTarget[Any, Any]:
    """The target its settings name."""
    name: str = settings.target  # type: ignore[attr-defined]
    module, _, cls = TARGETS[name][2].partition(":")
    try:
        target = getattr(importlib.import_module(module), cls)
    except ModuleNotFoundError as exc:
        if exc.name is None or not module.startswith(exc.name):
            raise  # a dependency of the target is missing: not this case
        raise ToolFailure(
            ErrorCode.UNSUPPORTED_FOR_TARGET,
            f"Model servers on target {name!r} are not available in this build.",
            "Use target 'local', or update fsdp-eks.",
            {"target": name},
        ) from None
    return target()
