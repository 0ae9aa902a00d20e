"""The gate before a PyTorchJob is submitted: can the image's CUDA run on the nodes it
will land on? The image says its torch and CUDA in its labels (the project's
Dockerfile writes `fsdp-eks.torch` and `fsdp-eks.cuda`); each node says its driver and
GPU (skills.kube.gpu_nodes). A driver too old for the CUDA (even with minor-version
compatibility) or a GPU the CUDA does not support refuses the submit with the exact
build_image call that fixes it. Nothing known (no labels, no driver label): a warning,
not a refusal."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from skills.catalog.cuda import (
    cuda_problem_for_gpu,
    driver_supports,
    max_cuda_for_driver,
    nearest_valid,
    official_image,
    vtuple,
)
from skills.catalog.instances import GPUS, gpu_for_instance
from skills.kube.gpu_nodes import NodeGpuFacts
from skills.shared.errors import ErrorCode, ToolFailure

TORCH_LABEL = "fsdp-eks.torch"
CUDA_LABEL = "fsdp-eks.cuda"


@dataclass(frozen=True)
class ImageCuda:
    torch: str | None
    cuda: str


def image_cuda(labels: dict[str, str] | None) -> ImageCuda | None:
    """The image's torch and CUDA from its labels; None when it does not say."""
    labels = labels or {}
    cuda = labels.get(CUDA_LABEL)
    if not cuda or not re.fullmatch(r"\d{1,2}\.\d{1,2}(\.\d{1,3})?", cuda):
        return None
    return ImageCuda(labels.get(TORCH_LABEL) or None, cuda)


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
    fix: str | None = None


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
    gpu_nodes = [n for n in nodes if n.gpus_allocatable or n.driver_version]
    if instance_type:
        gpu_nodes = [n for n in gpu_nodes if n.instance_type in (None, instance_type)]
    if not gpu_nodes:
        result.warnings.append(
            "no GPU node of this instance type yet (the autoscaler may add one): the "
            "image's CUDA was not checked against a driver"
        )
    drivers = sorted({n.driver_version for n in gpu_nodes if n.driver_version}, key=vtuple)
    gpus = sorted({g for n in gpu_nodes if (g := _gpu_name(n, instance_type))})
    if gpu_nodes and not drivers:
        result.warnings.append("the nodes do not label their NVIDIA driver version")
    for driver in drivers:
        if not driver_supports(driver, image.cuda, minor_compat=True):
            newest = max_cuda_for_driver(driver)
            result.problems.append(
                {
                    "problem": "driver_too_old",
                    "driver_version": driver,
                    "image_cuda": image.cuda,
                    "max_cuda": newest,
                    "message": f"driver {driver} cannot run CUDA {image.cuda} "
                    f"(newest it runs: {newest or 'none in the table'})",
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
        result.fix = fix_call(image, drivers[0] if drivers else None, gpus, instance_type)
    return result


def fix_call(
    image: ImageCuda, driver: str | None, gpus: list[str], instance_type: str | None
) -> str:
    """The build_image call (CLI form) that makes an image these nodes run: the official
    pytorch image nearest the image's torch that fits the oldest driver and the GPUs."""
    combo = None
    for gpu in gpus or [None]:
        combo = nearest_valid(image.torch, source="official", gpu_name=gpu, driver_version=driver)
        if combo is None:
            break
    args = ["python", "commands/build_image.py"]
    if combo is not None and combo.tag:
        args += ["--base_image", official_image(combo.torch, combo.cuda, combo.cudnn, "runtime")]
    if driver:
        args += ["--driver_version", driver]
    if instance_type:
        args += ["--instance_type", instance_type]
    return " ".join(args)


def enforce(result: GateResult, image_uri: str) -> None:
    """Refuse the submit when the gate found a problem."""
    if not result.problems:
        return
    first = result.problems[0]["message"]
    raise ToolFailure(
        ErrorCode.CUDA_INCOMPATIBLE,
        f"The image {image_uri} cannot run on the cluster's GPU nodes: {first}.",
        f"Rebuild on a matching base: `{result.fix}` (then push_to_ecr), or pass "
        "skip_gate=true to submit anyway.",
        {"problems": result.problems, "fix": result.fix},
    )


def read_image_labels(image_uri: str) -> dict[str, str] | None:
    """The image's labels from its registry (manifest, then config blob), with the
    registry credentials the environment or docker config gives; None when they cannot
    be read (no access, an index without this platform, no labels)."""
    from skills.image_builder.registry_check import parse_image, registry_get

    try:
        ref = parse_image(image_uri)
        status, body, _ = registry_get(ref.registry, ref.repository, f"manifests/{ref.reference}")
        if status != 200:
            return None
        manifest = json.loads(body)
        if "manifests" in manifest:  # an index: take the linux/amd64 image
            entry = next(
                (
                    m
                    for m in manifest["manifests"]
                    if (m.get("platform") or {}).get("architecture") in (None, "amd64")
                ),
                None,
            )
            if entry is None:
                return None
            status, body, _ = registry_get(
                ref.registry, ref.repository, f"manifests/{entry['digest']}"
            )
            if status != 200:
                return None
            manifest = json.loads(body)
        digest = manifest["config"]["digest"]
        status, body, _ = registry_get(ref.registry, ref.repository, f"blobs/{digest}")
        if status != 200:
            return None
        config = json.loads(body)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (config.get("config") or {}).get("Labels") or {}
