"""Kubeflow Trainer v2.3.0's validating webhook for TrainJobs (pkg/webhooks/trainjob_webhook.go
with the runtime's ValidateObjects, the torch plugin's and the JobSet plugin's Validate),
as kmock admission (tests/services/kube.py `emulator.admission`): a refused TrainJob is
answered as the API server answers a webhook's denial (403 Forbidden, `admission webhook
"validator.trainjob.trainer.kubeflow.org" denied the request: ...`) and is not stored.

What it checks (each from the file named): the runtimeRef names a supported kind
(trainjob_webhook.go) that exists (core/{cluster,}trainingruntime.go ValidateObjects);
no reserved PET_* env in spec.trainer.env (plugins/torch/torch.go); runtimePatches only
name replicated jobs and containers the runtime has, set no env of the node container,
have a domain-prefixed manager, and change only while the TrainJob is suspended before
or after (plugins/jobset/jobset.go). Not checked: torchtune's and the initializers'
rules, the CRD's own schema and CEL rules (the API server's, not the webhook's)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

WEBHOOK = "validator.trainjob.trainer.kubeflow.org"  # manifests/base/webhook/manifests.yaml
GROUP = "trainer.kubeflow.org"
RESERVED_ENV = ("PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NNODES", "PET_NODE_RANK",
                "PET_NPROC_PER_NODE")  # fmt: skip  # constants.TorchRunReservedEnvNames, sorted
NODE_CONTAINERS = ("dataset-initializer", "model-initializer", "node")
# k8s.io/apimachinery validation.IsDomainPrefixedPath: a DNS-1123 subdomain, "/", a path.
_DOMAIN_PATH = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$"
)

Lookup = Callable[[str, str | None, str], dict[str, Any] | None]  # (resource, ns, name)


def _go_env(env: list[dict[str, Any]]) -> str:
    """A []corev1.EnvVar as Go's %#v prints it (field.Invalid's bad value)."""
    items = []
    for item in env:
        source = (
            "(*v1.EnvVarSource)(nil)"
            if "valueFrom" not in item
            else "(*v1.EnvVarSource)(0xc000010000)"
        )
        items.append(
            f'v1.EnvVar{{Name:"{item.get("name", "")}", Value:"{item.get("value", "")}", '
            f"ValueFrom:{source}}}"
        )
    return "[]v1.EnvVar{" + ", ".join(items) + "}"


def trainjob_errors(
    trainjob: dict[str, Any], old: dict[str, Any] | None, lookup: Lookup
) -> list[str]:
    """The field errors the webhook answers for `trainjob` (an update when `old`)."""
    spec = trainjob.get("spec") or {}
    ref = spec.get("runtimeRef") or {}
    group, kind = ref.get("apiGroup", GROUP), ref.get("kind", "ClusterTrainingRuntime")
    if group != GROUP or kind not in ("TrainingRuntime", "ClusterTrainingRuntime"):
        return [f"unsupported runtime: {kind}.{group}"]
    namespace = trainjob["metadata"].get("namespace")
    if kind == "TrainingRuntime":
        runtime = lookup(f"{GROUP}/v1alpha1/trainingruntimes", namespace, ref.get("name", ""))
    else:
        runtime = lookup(f"{GROUP}/v1alpha1/clustertrainingruntimes", None, ref.get("name", ""))
    if runtime is None:
        ref_value = (
            f'v1alpha1.RuntimeRef{{Name:"{ref.get("name", "")}", '
            "APIGroup:(*string)(0xc000010020), Kind:(*string)(0xc000010030)}"
        )
        plural = "trainingRuntime" if kind == "TrainingRuntime" else "clusterTrainingRuntime"
        return [
            f"spec.runtimeRef: Invalid value: {ref_value}: {kind.lower()}s.{GROUP} "
            f'"{ref.get("name", "")}" not found: specified {plural} must be created before '
            "the TrainJob is created"
        ]
    errors: list[str] = []
    env = (spec.get("trainer") or {}).get("env") or []
    reserved = sorted({e.get("name") for e in env} & set(RESERVED_ENV))
    if (runtime["spec"].get("mlPolicy") or {}).get("torch") is not None and reserved:
        errors.append(
            f"spec.trainer.env: Invalid value: {_go_env(env)}: must not have "
            f"reserved envs, invalid envs configured: [{' '.join(reserved)}]"
        )
    errors += _patch_errors(trainjob, old, runtime)
    return errors


def _patch_errors(trainjob: dict[str, Any], old: dict[str, Any] | None, runtime: dict) -> list[str]:
    """plugins/jobset/jobset.go Validate for spec.runtimePatches."""
    patches = trainjob["spec"].get("runtimePatches") or []
    errors: list[str] = []
    if old is not None and (old["spec"].get("runtimePatches") or []) != patches:
        if not old["spec"].get("suspend") and not trainjob["spec"].get("suspend"):
            errors.append(
                "spec.runtimePatches: Forbidden: RuntimePatches can only be modified "
                "when the TrainJob is suspended before or after the update"
            )
    containers: dict[str, set[str]] = {}
    for rjob in runtime["spec"]["template"]["spec"].get("replicatedJobs") or []:
        pod = rjob["template"]["spec"]["template"]["spec"]
        containers[rjob["name"]] = {
            c["name"] for c in [*pod.get("initContainers", []), *pod.get("containers", [])]
        }
    value = "[]v1alpha1.RuntimePatch{...}"
    for patch in patches:
        manager = patch.get("manager", "")
        if not _DOMAIN_PATH.match(manager):
            errors.append(
                f'spec.runtimePatches.manager: Invalid value: "{manager}": must be a '
                'domain-prefixed path (such as "acme.io/foo")'
            )
        template = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        for rjob in (template or {}).get("replicatedJobs") or []:
            names = containers.get(rjob.get("name"))
            if names is None:
                errors.append(
                    f"spec.runtimePatches: Invalid value: {value}: must not have "
                    "replicated job that doesn't exist in the runtime job template"
                )
                continue
            pod = (
                (((rjob.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
            ) or {}
            for c in pod.get("initContainers") or []:
                if c.get("name") not in names:
                    errors.append(
                        f"spec.runtimePatches: Invalid value: {value}: must not have "
                        f"initContainer that doesn't exist in the runtime job {rjob['name']}"
                    )
            for c in pod.get("containers") or []:
                if c.get("name") not in names:
                    errors.append(
                        f"spec.runtimePatches: Invalid value: {value}: must not have "
                        f"container that doesn't exist in the runtime job {rjob['name']}"
                    )
                elif c.get("env") and c["name"] in NODE_CONTAINERS:
                    errors.append(
                        f"spec.runtimePatches: Invalid value: {value}: must not have "
                        "envs for the dataset-initializer, model-initializer, node "
                        "containers"
                    )
    return errors


def denial(errors: list[str]) -> str:
    """The API server's message for the webhook's denial of a field.ErrorList aggregate."""
    body = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return f'admission webhook "{WEBHOOK}" denied the request: {body}'


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what a PATCH with merge-patch+json makes of the object)."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def admission(emulator: Any) -> Callable[[Any], None]:
    """The webhook as a kmock admission hook: TrainJob creates and updates (not the status
    subresource), the runtimes read from the emulator's store."""
    import kmock

    def stored(resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        for (res, ns, obj_name), obj in list(emulator.objects.items()):
            plural = "/".join(filter(None, (res.group, res.version, res.plural)))
            if (plural, ns, obj_name) == (resource, namespace, name) and not obj.deleted:
                return obj.raw
        return None

    def admit(request: Any) -> None:
        resource = request.resource
        if resource is None or (resource.group, resource.plural) != (GROUP, "trainjobs"):
            return
        if request.subresource:
            return
        old = stored(f"{GROUP}/v1alpha1/trainjobs", request.namespace, request.name or "")
        if request.action == kmock.action.CREATE:
            new, old = dict(request.data), None
            new.setdefault("metadata", {}).setdefault("namespace", request.namespace)
        elif old is None:
            return  # kmock answers 404 (or applies a missing object: a create, checked then)
        else:
            patching = request.method == kmock.method.PATCH
            new = merge_patch(old, request.data) if patching else request.data
        if errors := trainjob_errors(new, old, stored):
            name = (new.get("metadata") or {}).get("name", "")
            raise kmock.KubernetesError(
                status=403,
                reason="Forbidden",
                message=denial(errors),
                details={"name": name, "group": GROUP, "kind": "trainjobs"},
            )

    admit.trainer_v2 = True  # type: ignore[attr-defined]  # install() adds it once
    return admit
