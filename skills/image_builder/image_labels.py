"""The labels build_image sets on an image (fsdp-eks.torch/cuda/python/efa), from what
the analysis knows, and the build args that make a Dockerfile's own LABELs agree."""

from __future__ import annotations

import re
from collections.abc import Mapping

from skills.catalog import cuda as cuda_tables
from skills.image_builder import dockerfile_reader
from skills.image_builder.base_image import BaseImage
from skills.image_builder.dockerfile_findings import Resolved
from skills.image_builder.dockerfile_reader import assignments
from skills.image_builder.dockerfile_stages import Stage, parse


def image_labels(resolved: Resolved, cuda: str | None, efa: bool | None = None) -> dict[str, str]:
    """The labels build_image sets: only what the analysis knows (no label, not a guess)."""
    known = {
        cuda_tables.TORCH_LABEL: resolved.torch,
        cuda_tables.CUDA_LABEL: cuda,
        cuda_tables.PYTHON_LABEL: resolved.python,
        cuda_tables.EFA_LABEL: None if efa is None else str(efa).lower(),
    }
    return {name: value for name, value in known.items() if value}


# A RUN that installs the EFA user space NCCL uses: the EFA installer (it bundles libfabric
# and, since 1.29, aws-ofi-nccl; AWS's DLC Dockerfiles run it so), or libfabric and the
# aws-ofi-nccl plugin installed by hand.
_EFA_INSTALLER = re.compile(r"efa_installer\.sh|aws-efa-installer")
_OFI_NCCL = re.compile(r"aws-ofi-nccl|libnccl-net")
_LIBFABRIC = re.compile(r"libfabric|/opt/amazon/efa")


def efa_stack(stage: Stage, base: BaseImage) -> bool | None:
    """Whether the stage's image has libfabric + aws-ofi-nccl: an AWS DLC base (they ship
    both), or a RUN that installs them; None when the base is unknown (it may have them)."""
    if base.kind == "dlc":
        return True
    runs = " ".join(i.value for s in stage.chain() for i in s.instructions if i.kind == "RUN")
    if _EFA_INSTALLER.search(runs) or (_OFI_NCCL.search(runs) and _LIBFABRIC.search(runs)):
        return True
    return None if base.kind == "unknown" else False


def label_build_args(
    text: str, labels: Mapping[str, str], build_args: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Build args that make a Dockerfile's own `LABEL fsdp-eks.cuda="${CUDA_VERSION}"`
    agree with `labels`: TORCH_VERSION, CUDA_VERSION, PYTHON_VERSION, each only when the
    final stage declares it, the caller did not pass it, no global ARG of that name feeds
    a FROM, and nothing but a LABEL reads it (so passing it changes no layer)."""
    wanted = {
        "TORCH_VERSION": labels.get(cuda_tables.TORCH_LABEL),
        "CUDA_VERSION": labels.get(cuda_tables.CUDA_LABEL),
        "PYTHON_VERSION": labels.get(cuda_tables.PYTHON_LABEL),
    }
    parsed = parse(text, build_args=dict(build_args or {}))
    if not parsed.stages:
        return {}
    final = parsed.final
    declared = {
        name
        for ins in final.instructions
        if ins.kind == "ARG"
        for name, _ in assignments(ins.raw.split(None, 1)[-1])
    }
    read = dockerfile_reader.read(text, dict(build_args or {}))
    # What a FROM reads: its own text and the global ARG defaults it may expand.
    froms = [e.written for e in read.froms] + [default for _, default in read.arg_lines.values()]
    out = {}
    for name, value in wanted.items():
        if not value or name not in declared or name in (build_args or {}):
            continue
        use = re.compile(rf"\$(?:{name}\b|\{{{name}\b)")
        readers = froms + [
            ins.raw for ins in final.instructions if ins.kind not in ("ARG", "LABEL")
        ]
        if not any(use.search(reader) for reader in readers):
            out[name] = value
    return out
