"""What a failed image build's log says, as data: one table of known failure signatures
(CUDA-AND-FAILURES.md section 5, plus the registry and build-context failures seen
through podman's and Docker's build API), and `classify(log_lines)` that finds the
first signature in a log and returns it with the lines that show it.

Each row: the error class, the message substrings that identify it (regular expressions,
any one matches, case-insensitive), the cause, the standard fix, and whether the build loop asks the
Dockerfile analyzer + fixer for an edit (`auto_fix`). A class with no automatic fix
stops the loop at once with its fix as the hint.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class Signature:
    error_class: str
    patterns: tuple[str, ...]
    cause: str
    fix: str
    auto_fix: bool


# Order matters where one message could match two rows: the more specific row first.
SIGNATURES: tuple[Signature, ...] = (
    # --- the base image -------------------------------------------------------------
    Signature(
        "base_image_not_found",
        (
            r"manifest unknown",  # distribution registry / ECR: MANIFEST_UNKNOWN (404)
            r"name unknown",  # NAME_UNKNOWN: the repository is not in the registry
            r"repository name not known to registry",
            r"manifest for \S+ not found",  # Docker Engine
        ),
        "the base image's tag (or repository) does not exist in its registry",
        "use a tag that exists (snap to a published torch/CUDA/cuDNN combination); check "
        "with a registry manifest request first",
        True,
    ),
    Signature(
        "base_image_access_denied",
        (
            r"unauthorized: authentication required",
            r"requested access to the resource is denied",
            r"pull access denied",
            r"unauthorized: incorrect username or password",
        ),
        "the registry refused the pull: no or wrong credentials for the base image",
        "log in to the registry (`docker login HOST`) or set the mirror's credentials in "
        "the environment",
        False,
    ),
    Signature(
        "registry_unreachable",
        (
            r"pinging container registry",
            r"dial tcp\b.*(no such host|connection refused|i/o timeout)",
            r"server gave http response to https client",
            r"x509: certificate|tls: failed to verify certificate",
        ),
        "the daemon could not reach the base image's registry",
        "pull through a reachable registry mirror (base_mirror / FSDP_EKS_BASE_MIRROR), "
        "or fix the network / the daemon's insecure-registries setting",
        False,
    ),
    # --- CUDA-AND-FAILURES.md section 5 -------------------------------------------------
    Signature(
        "torch_wheel_not_found",
        (
            r"no matching distribution found for torch\b",
            r"could not find a version that satisfies the requirement torch\b",
        ),
        "that torch x CUDA x Python combination does not exist",
        "snap to a listed variant (`pip install torch --index-url "
        "https://download.pytorch.org/whl/cuXXX`); fix Python",
        True,
    ),
    Signature(
        "cuda_version_mismatch",
        (r"the detected cuda version \(.*\) mismatches the version that was used to compile",),
        "an extension built with a CUDA toolkit other than torch.version.cuda",
        "a devel image whose CUDA matches the wheel, or the wheel for the toolkit's CUDA",
        True,
    ),
    Signature(
        "cuda_driver_insufficient",
        (r"cuda driver version is insufficient for cuda runtime version",),
        "the node's driver is older than the CUDA runtime's floor",
        "lower the image/wheel CUDA to what the node driver supports, or a newer AMI",
        True,
    ),
    Signature(
        "nvidia_driver_too_old",
        (r"the nvidia driver on your system is too old",),
        "PyTorch's own driver check failed (11040 = CUDA 11.4)",
        "lower the image/wheel CUDA to what the node driver supports, or a newer AMI",
        True,
    ),
    Signature(
        "cuda_requirement_unsatisfied",
        (r"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=",),
        "the image's NVIDIA_REQUIRE_CUDA is above the host driver (the container never starts)",
        "an older CUDA image or a newer driver",
        True,
    ),
    Signature(
        "no_kernel_image",
        (
            r"is not compatible with the current pytorch installation",
            r"no kernel image is available for execution on the device",
        ),
        "no kernels for this GPU architecture in the installed wheel",
        "a CUDA variant that covers the GPU's sm; TORCH_CUDA_ARCH_LIST for extensions",
        True,
    ),
    Signature(
        "cuda_library_mismatch",
        (
            r"libcudart\.so\.[\d.]+: cannot open shared object file",
            r"libcudnn\w*\.so\.[\d.]+: cannot open shared object file",
        ),
        "packages built for different CUDA/cuDNN majors",
        "align all CUDA packages to one major",
        True,
    ),
    Signature(
        "flash_attn_nvcc_missing",
        (r"nvcc was not found",),
        "flash-attn builds from source on a runtime image (no nvcc)",
        "a -devel base image or a prebuilt flash-attn wheel",
        True,
    ),
    Signature(
        "flash_attn_no_torch",
        (r"no module named '?torch'?(\s|$)",),
        "pip's build isolation hides torch from flash-attn's build",
        "install torch first, then `pip install flash-attn --no-build-isolation`",
        True,
    ),
    Signature(
        "flash_attn_abi_mismatch",
        (r"undefined symbol: _ZN3c105Error",),
        "a flash-attn wheel for another torch or C++ ABI",
        "the wheel matching torchX.Y and cxx11abi, or build from source",
        True,
    ),
    Signature(
        "build_oom_killed",
        (
            r"killed signal terminated program (cc1plus|cicc)",
            r"nvcc.*exit code 137",
            r"^\s*killed\.?\s*$",
        ),
        "too many parallel nvcc jobs for the builder's memory",
        "set MAX_JOBS=4 (ENV MAX_JOBS=4 before the pip install)",
        True,
    ),
    # --- the build context ----------------------------------------------------------------
    Signature(
        "copy_source_missing",
        (
            r"copier: stat:.*no such file or directory",  # podman / buildah
            r"failed to compute cache key: .*not found",  # BuildKit
            r"copy failed: (file not found in build context|stat .*no such file)",  # classic
        ),
        "a COPY/ADD source is not in the build context (or .dockerignore excludes it)",
        "add the file to the context directory, fix the COPY path, or the .dockerignore",
        False,
    ),
    # --- the container runtime itself (before run_step_failed: its final line is the same)
    Signature(
        "docker_unavailable",
        (
            r"lost the docker engine api",  # the builder's own line: the stream broke off
            r"cannot connect to the docker daemon",
            r"is the docker daemon running",
            r"error during connect:",
        ),
        "the container runtime's API (the Docker daemon or podman service) went away mid-build",
        "check that the daemon is running and DOCKER_HOST points at it (`docker info` / "
        "`podman system service`), then build again; nothing in the Dockerfile needs a change",
        False,
    ),
    Signature(
        "container_runtime_failed",
        (
            r"error running container: from \S+ creating container",  # podman: crun/runc
            r"oci runtime (create|exec|start) failed",  # Docker: runc
            r"failed to create (shim )?task for container",
            r"unable to start container process",
            r"cgroups?\b.*\bnot supported",
            r"error creating overlay mount",
            r"failed to register layer",
            r"layer not known",
            r"no space left on device",
            r"database is locked",
        ),
        "the container runtime or its storage failed (the RUN command itself never ran, or "
        "the builder's disk or layer store broke), not the Dockerfile",
        "fix the build host's runtime: `docker info`/`podman info`, its cgroup setup, free "
        "disk for the image store, then build again; or build where containers can run "
        "(CodeBuild: setup_codebuild, then start_codebuild)",
        False,
    ),
    Signature(
        "run_step_failed",
        (r"while running runtime: exit status", r"returned a non-zero code"),
        "a RUN step exited non-zero",
        "read the RUN step's output in the log tail and fix that command",
        False,
    ),
)

BY_CLASS = {row.error_class: row for row in SIGNATURES}

# A classified failure names what it saw; the evidence is capped, lines are cut short.
MAX_EVIDENCE = 5
MAX_LINE = 500


class BuildError(BaseModel):
    """A classified build failure."""

    error_class: str
    cause: str
    fix: str
    auto_fix: bool
    evidence: list[str]


_COMPILED = {
    row.error_class: re.compile("|".join(f"(?:{p})" for p in row.patterns), re.IGNORECASE)
    for row in SIGNATURES
}


def _matches(row: Signature, line: str) -> bool:
    return _COMPILED[row.error_class].search(line) is not None


def classify(log_lines: Iterable[str]) -> BuildError | None:
    """The first table row (in table order) that any log line matches, with every line
    that shows it as evidence; None when no row matches."""
    lines = [line.rstrip("\n") for line in log_lines for line in line.splitlines() or [""]]
    for row in SIGNATURES:
        evidence = [line.strip()[:MAX_LINE] for line in lines if _matches(row, line)]
        if evidence:
            unique = list(dict.fromkeys(evidence))[:MAX_EVIDENCE]
            return BuildError(
                error_class=row.error_class,
                cause=row.cause,
                fix=row.fix,
                auto_fix=row.auto_fix,
                evidence=unique,
            )
    return None
