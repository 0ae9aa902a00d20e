"""The gate before a PyTorchJob is submitted: can the image's CUDA run on the nodes it
will land on? The image says its torch and CUDA in its labels (`fsdp-eks.torch`,
`fsdp-eks.cuda`: build_image computes them from the Dockerfile it built); each node says
its driver and GPU (skills.kube.gpu_nodes). A driver too old for the CUDA (even with
minor-version compatibility) or a GPU the CUDA does not support refuses the submit with
the build_image call that fixes it (a NextStep; following it, then push and deploy,
passes). GPU nodes whose image cannot be read, or says no CUDA, refuse too: the gate is
skipped only by skip_gate=true. No GPU node (yet) or no driver label: a warning."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from skills.catalog.cuda import (
    CUDA_LABEL,
    EFA_LABEL,
    PYTORCH_WHEEL_INDEX,
    TORCH_LABEL,
    cu_tag,
    cuda_problem_for_gpu,
    dlc_efa_image,
    driver_supports,
    max_cuda_for_driver,
    newest_official_image,
    official_image,
    official_images,
    torch_minor,
    vtuple,
    wheel_cudas,
)
from skills.catalog.instances import GPUS, gpu_for_instance, instance_spec
from skills.cloud.clients import aws_session
from skills.cloud.registry_credentials import (
    ECR_HOST,
    ECR_REGISTRY_HOST_ENV,
    EcrToken,
    ecr_login,
    normalize_host,
)
from skills.cloud.registry_http import AnswerTooLarge
from skills.cloud.registry_images import parse_image, registry_get_as
from skills.kube.gpu_nodes import NodeGpuFacts
from skills.shared.error_mapping import failure_from_exception
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep

__all__ = [
    "CUDA_LABEL",
    "TORCH_LABEL",
    "GateResult",
    "ImageCuda",
    "LabelRead",
    "check",
    "enforce",
    "gate",
    "image_cuda",
    "read_image_labels",
]

NO_GPU_NODE = (
    "no GPU node of this instance type yet (the autoscaler may add one): the image's CUDA "
    "was not checked against a driver"
)


@dataclass(frozen=True)
class ImageCuda:
    torch: str | None
    cuda: str
    # fsdp-eks.efa: whether the image has libfabric + aws-ofi-nccl (None: it does not say).
    efa: bool | None = None


def image_cuda(labels: dict[str, str] | None) -> ImageCuda | None:
    """The image's torch and CUDA from its labels; None when it does not say."""
    labels = labels or {}
    cuda, torch = labels.get(CUDA_LABEL), labels.get(TORCH_LABEL)
    if not isinstance(cuda, str) or not re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d{1,3})?", cuda):
        return None
    efa_text = labels.get(EFA_LABEL)
    efa = {"true": True, "false": False}.get(efa_text) if isinstance(efa_text, str) else None
    return ImageCuda(torch if isinstance(torch, str) and torch else None, cuda, efa)


def _gpu_name(node: NodeGpuFacts, instance_type: str | None) -> str | None:
    for name in (node.instance_type, instance_type):
        if name:
            try:
                return gpu_for_instance(name).name
            except ToolFailure:
                continue
    if node.compute_capability is not None:
        return next((g.name for g in GPUS if g.sm == node.compute_capability), None)
    return None


@dataclass
class GateResult:
    problems: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The build_image call that fixes the problems, and its CLI line.
    next_step: NextStep | None = None
    fix: str | None = None


def gpu_nodes_for(nodes: list[NodeGpuFacts], instance_type: str | None) -> list[NodeGpuFacts]:
    """The GPU nodes the job can land on: of its instance type (or unlabelled), else all."""
    gpu_nodes = [n for n in nodes if n.gpus_allocatable or n.driver_version]
    if instance_type:
        gpu_nodes = [n for n in gpu_nodes if n.instance_type in (None, instance_type)]
    return gpu_nodes


def check(
    image: ImageCuda | None, nodes: list[NodeGpuFacts], instance_type: str | None = None
) -> GateResult:
    """Problems of this image on these nodes (those of the job's instance type, or every
    GPU node), and the build_image call that fixes them."""
    result = GateResult()
    if image is None:
        result.warnings.append(
            "the image has no fsdp-eks.cuda label: its CUDA was not checked against the nodes"
        )
        return result
    gpu_nodes = gpu_nodes_for(nodes, instance_type)
    if not gpu_nodes:
        result.warnings.append(NO_GPU_NODE)
    drivers = sorted({n.driver_version for n in gpu_nodes if n.driver_version}, key=vtuple)
    gpus = sorted({g for n in gpu_nodes if (g := _gpu_name(n, instance_type))})
    if gpu_nodes and not drivers:
        result.warnings.append("the nodes do not label their NVIDIA driver version")
    for driver in drivers:
        if not driver_supports(driver, image.cuda, minor_compat=True):
            result.problems.append(
                {
                    "problem": "driver_too_old",
                    "driver_version": driver,
                    "image_cuda": image.cuda,
                    "max_cuda": max_cuda_for_driver(driver, minor_compat=True),
                    "max_cuda_full_features": max_cuda_for_driver(driver),
                    "message": f"driver {driver} cannot run CUDA {image.cuda} ({_runs(driver)})",
                }
            )
    for gpu in gpus:
        if problem := cuda_problem_for_gpu(image.cuda, gpu):
            result.problems.append(
                {
                    "problem": f"cuda_{problem}_for_gpu",
                    "gpu": gpu,
                    "image_cuda": image.cuda,
                    "message": f"CUDA {image.cuda} is {problem.replace('_', ' ')} for {gpu}",
                }
            )
    if result.problems:
        result.next_step = rebuild_step(image, drivers, gpus, instance_type)
        result.fix = result.next_step.cli_line() if result.next_step else None
    _check_efa(image, instance_type, result)
    return result


def _check_efa(image: ImageCuda, instance_type: str | None, result: GateResult) -> None:
    """efa_missing: an EFA instance and an image whose label says it has no EFA user space
    (libfabric + aws-ofi-nccl), so NCCL falls back to TCP sockets between nodes. A warning
    with the DLC rebuild that has it, not a refusal: a one-node job never leaves NVLink,
    and a slow multi-node job still trains. An image that does not say: a warning too."""
    try:
        efa = bool(instance_type) and instance_spec(instance_type or "").efa
    except ToolFailure:
        return
    if not efa or image.efa is True:
        return
    if image.efa is None:
        result.warnings.append(
            f"the image has no {EFA_LABEL} label: whether it has libfabric/aws-ofi-nccl for "
            f"{instance_type}'s EFA was not checked"
        )
        return
    text = (
        f"efa_missing: {instance_type} has EFA, but the image has no libfabric/aws-ofi-nccl "
        f"({EFA_LABEL}=false): NCCL falls back to TCP sockets between nodes"
    )
    if dlc := dlc_efa_image(image.torch):
        step = NextStep(
            tool="build_image",
            why="rebuild with EFA",
            arguments={"base_image": dlc, "instance_type": instance_type},
        )
        text += f"; rebuild on the AWS DLC PyTorch image that has it: `{step.cli_line()}`"
    result.warnings.append(text)


def _runs(driver: str) -> str:
    """What a driver runs, in the words the remedy uses: the newest CUDA through
    minor-version compatibility (what the gate accepts) and with every feature."""
    compat, full = max_cuda_for_driver(driver, minor_compat=True), max_cuda_for_driver(driver)
    if compat is None:
        return "it runs no CUDA in the table"
    if compat == full:
        return f"newest it runs: {compat}"
    return (
        f"newest it runs: {compat} through minor-version compatibility, "
        f"{full or 'none'} with every feature"
    )


def rebuild_step(
    image: ImageCuda, drivers: list[str], gpus: list[str], instance_type: str | None
) -> NextStep | None:
    """The build_image call that makes an image these nodes run: the official pytorch
    image of the image's torch on the newest CUDA every driver and GPU here runs; when
    that torch has no such image, the nearest torch that has one (and the why says so).
    None when no official image fits."""
    found = newest_official_image(image.torch, drivers=drivers, gpus=gpus)
    if found is None:
        return None
    base = official_image(found.torch, found.cuda, found.cudnn, "runtime")
    arguments: dict[str, Any] = {"base_image": base}
    if drivers:
        arguments["driver_version"] = drivers[0]  # the oldest: it bounds the CUDA
    if instance_type:
        arguments["instance_type"] = instance_type
    runs = f"driver {drivers[0]}" if drivers else ", ".join(gpus) or "these nodes"
    why = (
        f"rebuild on pytorch/pytorch torch {found.torch} CUDA {found.cuda}: the newest CUDA "
        f"{runs} runs among torch {torch_minor(found.torch)}'s images"
    )
    if image.torch and torch_minor(found.torch) != torch_minor(image.torch):
        published = ", ".join(i.cuda for i in official_images(image.torch)) or "none"
        wheels = ", ".join(wheel_cudas(image.torch)) or "none"
        why += (
            f"; torch changes from {image.torch} to {found.torch}, the nearest torch with an "
            f"image that runs here: the rebuild swaps the base image, and pytorch/pytorch "
            f"publishes torch {image.torch} only on CUDA {published} (its wheels: {wheels})"
        )
        if keep := _wheel_that_runs(image.torch, drivers, gpus):
            why += (
                f"; to keep torch {image.torch} instead, install it in the Dockerfile: "
                f"pip install torch=={image.torch} --index-url {PYTORCH_WHEEL_INDEX}/"
                f"{cu_tag(keep)}"
            )
    return NextStep(
        tool="build_image",
        arguments=arguments,
        why=why + "; then push_to_ecr and deploy the pushed image_uri again",
    )


def _wheel_that_runs(torch: str, drivers: list[str], gpus: list[str]) -> str | None:
    """The newest CUDA of `torch`'s wheels that every driver and GPU here runs."""
    ok = [
        cuda
        for cuda in wheel_cudas(torch)
        if all(driver_supports(d, cuda, minor_compat=True) for d in drivers)
        and not any(cuda_problem_for_gpu(cuda, g) for g in gpus)
    ]
    return max(ok, key=vtuple) if ok else None


def enforce(result: GateResult, image_uri: str) -> None:
    """Refuse the submit when the gate found a problem."""
    if not result.problems:
        return
    first = result.problems[0]["message"]
    if result.next_step is not None:
        remedy = f"{result.next_step.why}: `{result.next_step.cli_line()}`"
    else:
        remedy = "no pytorch/pytorch image in the tables fits these nodes: pick other nodes"
    raise ToolFailure(
        ErrorCode.CUDA_INCOMPATIBLE,
        f"The image {image_uri} cannot run on the cluster's GPU nodes: {first}.",
        f"{remedy}; or pass skip_gate=true to submit anyway.",
        {"problems": result.problems, "fix": result.fix},
        next_step=result.next_step,
    )


def gate(image_uri: str, nodes: list[NodeGpuFacts], instance_type: str | None) -> GateResult:
    """Read the image's labels (when there are GPU nodes to check them against), check,
    and refuse: a CUDA the nodes cannot run, or an image that does not say its CUDA."""
    if not gpu_nodes_for(nodes, instance_type):  # nothing to check against: no read
        return GateResult(warnings=[NO_GPU_NODE])
    read = read_image_labels(image_uri)
    image = image_cuda(read.labels)
    if image is None:
        raise _unverified(image_uri, read)
    result = check(image, nodes, instance_type)
    enforce(result, image_uri)
    return result


def _unverified(image_uri: str, read: LabelRead) -> ToolFailure:
    why = read.problem or (
        f"it has no {CUDA_LABEL} label (an image build_image did not build, or built "
        "before it labelled images)"
    )
    step = NextStep(
        tool="build_image",
        arguments={},
        why="build the image with build_image (it labels the torch and CUDA it built), "
        "then push_to_ecr and deploy the pushed image_uri",
    )
    rebuild = read.problem is None or read.rebuild
    remedy = read.hint or "Build it with build_image (it labels the torch and CUDA it built)"
    if rebuild:
        remedy += f": `{step.cli_line()}`, then push_to_ecr and deploy the image_uri it returns"
    return ToolFailure(
        ErrorCode.CUDA_UNVERIFIED,
        f"The CUDA gate cannot check the image {image_uri}: {why}.",
        f"{remedy}; or pass skip_gate=true to submit without the check.",
        {"image": image_uri, "registry": read.registry, "credentials": read.credentials},
        next_step=step if rebuild else None,
    )


# --- reading the labels -----------------------------------------------------------------


@dataclass
class LabelRead:
    """An image's labels as its registry serves them, or why they could not be read."""

    labels: dict[str, str] | None
    registry: str = ""
    credentials: str = "anonymous"
    problem: str | None = None
    hint: str | None = None
    rebuild: bool = False  # whether building (and pushing) the image is the remedy


def ecr_token(region: str) -> EcrToken:
    """The account's ECR login in `region` (get_authorization_token). The password only
    goes where skills.cloud.registry_credentials allows."""

    try:
        return ecr_login(aws_session(region=region).client("ecr"))
    except Exception as exc:  # noqa: BLE001 - an SDK error becomes the typed one it maps to
        raise failure_from_exception(exc) or exc from None


def _where(registry: str) -> tuple[str, EcrToken | None]:
    """The host to read from and the ECR login that host may receive. An image on the
    account's own ECR is read with its token, from ECR's data plane (the host
    FSDP_EKS_ECR_REGISTRY_HOST names, where pushes go, else ECR itself)."""
    import os

    m = ECR_HOST.match(normalize_host(registry))
    if m is None:
        return registry, None
    token = ecr_token(m["region"])
    if normalize_host(token.endpoint_host) != normalize_host(registry):
        return registry, token  # another account's ECR: the policy gives it nothing
    mapped = os.environ.get(ECR_REGISTRY_HOST_ENV, "").strip()
    return (normalize_host(mapped) if mapped else registry), token


def read_image_labels(image_uri: str) -> LabelRead:
    """The image's labels from its registry (manifest, then config blob) with the
    credentials the one policy gives that host (the ECR token for the account's ECR)."""

    host = ""
    try:
        ref = parse_image(image_uri)
        host = ref.registry
        host, token = _where(ref.registry)

        def get(path: str) -> tuple[int, bytes, str]:
            status, body, _, sent = registry_get_as(host, ref.repository, path, ecr=token)
            return status, body, sent

        status, body, sent = get(f"manifests/{ref.reference}")
        read = LabelRead(None, host, sent)
        if status != 200:
            return _refused(read, image_uri, status)
        manifest = _object(body, "manifest")
        if "manifests" in manifest:  # an index: take the linux/amd64 image
            entries = manifest["manifests"]
            entry = next(
                (
                    m
                    for m in (entries if isinstance(entries, list) else ())
                    if isinstance(m, dict)
                    and (_mapping(m.get("platform")).get("architecture") in (None, "amd64"))
                ),
                None,
            )
            if entry is None:
                read.problem = "its index has no linux/amd64 image"
                read.hint = "Build and push a linux/amd64 image"
                return read
            status, body, _ = get(f"manifests/{_digest(entry.get('digest'))}")
            if status != 200:
                return _refused(read, image_uri, status)
            manifest = _object(body, "manifest")
        status, body, _ = get(f"blobs/{_digest(_mapping(manifest.get('config')).get('digest'))}")
        if status != 200:
            return _refused(read, image_uri, status)
        labels = _mapping(_object(body, "image config").get("config")).get("Labels")
        # Only text labels count (a numeric one says nothing the gate can check).
        read.labels = {k: v for k, v in _mapping(labels).items() if isinstance(v, str)}
    except ToolFailure as failure:  # no AWS credentials for the ECR token, and the like
        return LabelRead(
            None, host, problem=failure.message.rstrip("."), hint=failure.hint.rstrip(".")
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        # Unreachable, an answer too large or too slow, not JSON, not the shape a
        # registry serves: the gate cannot tell, whatever the registry sent.
        detail = str(exc)[:200] if isinstance(exc, (AnswerTooLarge, _Shape)) else ""
        return LabelRead(
            None,
            host,
            problem=f"its registry {host} could not be read "
            f"({type(exc).__name__}{': ' + detail if detail else ''})",
            hint="Check that the registry is reachable from here and serves this image",
        )
    read.rebuild = True
    return read


class _Shape(ValueError):
    """A registry answer that is JSON, but not the object a registry serves there."""


def _object(body: bytes, what: str) -> dict[str, Any]:
    found = json.loads(body)
    if not isinstance(found, dict):
        raise _Shape(f"its {what} is a JSON {type(found).__name__}, not an object")
    return found


def _mapping(value: Any) -> dict[str, Any]:
    """A field that should hold an object: an absent one is empty; any other is a shape
    error."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Shape(f"a field holds a {type(value).__name__} where an object belongs")
    return value


def _digest(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z0-9]+:[a-f0-9]{32,128}", value):
        raise _Shape("a digest that is not algorithm:hex")
    return value


def _refused(read: LabelRead, image_uri: str, status: int) -> LabelRead:
    if status in (401, 403):
        read.problem = (
            f"its registry {read.registry} refused the read (HTTP {status}, credentials: "
            f"{read.credentials})"
        )
        read.hint = (
            "Deploy an image from this account's ECR (push_to_ecr), or give the registry's "
            "credentials (REGISTRY_HOST with REGISTRY_USERNAME/REGISTRY_PASSWORD, or docker login)"
        )
    elif status == 404:
        read.problem = f"{read.registry} has no such image (HTTP 404)"
        read.hint = "Build and push it (push_to_ecr returns the image_uri to deploy)"
        read.rebuild = True
    else:
        read.problem = f"its registry {read.registry} answered HTTP {status}"
        read.hint = "Retry; if it persists, check the registry"
    return read
