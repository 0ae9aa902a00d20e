"""A base image reference, read and rewritten: which known image it is (the official
pytorch/pytorch, nvidia/cuda, an AWS DLC, python), what its tag says (torch, CUDA, cuDNN,
Python, runtime or devel), whatever registry or mirror is in front; and the same
reference retagged to another torch/CUDA combination."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from skills.catalog import cuda as cuda_tables
from skills.catalog.cuda import Combo, Flavor

# --- Base images --------------------------------------------------------------------------

BaseKind = Literal["official", "nvidia", "dlc", "python", "unknown"]
_OFFICIAL_TAG = re.compile(r"^(\d+\.\d+\.\d+)-cuda(\d+\.\d+)-cudnn(\d+)-(runtime|devel)$")
_NVIDIA_TAG = re.compile(
    r"^(\d+\.\d+)(\.\d+)?-(?:(cudnn\d*)-)?(base|runtime|devel)-([a-z]+\d+(?:\.\d+)?)$"
)
_PYTHON_TAG = re.compile(r"^(3\.\d+)")
# nvidia/cuda's "cudnn" (no number) tags came with cuDNN 9; older ones say cudnn8.
_NVIDIA_UNNUMBERED_CUDNN = 9


@dataclass
class BaseImage:
    """A base image reference split into what the tables know about it."""

    image: str
    kind: BaseKind
    prefix: str = ""  # registry / mirror path before the known repository
    repository: str = ""
    tag: str = ""
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    python: str | None = None
    flavor: Literal["runtime", "devel"] | None = None


def _split_ref(image: str) -> tuple[str, str]:
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :]
    return ref, "latest"


def parse_base(image: str) -> BaseImage:
    """Recognise a base by its repository path's suffix, whatever registry or mirror is in
    front (localhost:5000/pytorch/pytorch, <acct>.dkr.ecr.../docker-hub/pytorch/pytorch)."""
    path, tag = _split_ref(image)
    parts = path.split("/")

    def known(n: int, kind: BaseKind) -> BaseImage:
        return BaseImage(image, kind, "/".join(parts[:-n]), "/".join(parts[-n:]), tag)

    if parts[-2:] == ["pytorch", "pytorch"]:
        base = known(2, "official")
        if m := _OFFICIAL_TAG.match(tag):
            base.torch, base.cuda, base.cudnn = m[1], m[2], int(m[3])
            base.python = cuda_tables.official_python(m[1], m[2])
            base.flavor = "devel" if m[4] == "devel" else "runtime"  # the tag's (runtime|devel)
            return base
    elif parts[-2:] == ["nvidia", "cuda"]:
        base = known(2, "nvidia")
        if m := _NVIDIA_TAG.match(tag):
            base.cuda = m[1]
            if m[3]:
                digits = m[3].removeprefix("cudnn")
                base.cudnn = int(digits) if digits else _NVIDIA_UNNUMBERED_CUDNN
            base.flavor = "devel" if m[4] == "devel" else "runtime"
            return base
    elif parts[-1] in (cuda_tables.DLC_TRAINING_REPOSITORY, cuda_tables.DLC_AL2023_REPOSITORY):
        if dlc := cuda_tables.parse_dlc_tag(tag):
            base = known(1, "dlc")
            # DLC training images carry the full CUDA toolkit (nvcc): devel-like.
            base.torch, base.cuda = dlc.torch, dlc.cuda
            base.python = dlc.python or cuda_tables.dlc_python(dlc.torch, dlc.cuda)
            base.flavor = "devel"
            base.cudnn = None
            return base
    elif parts[-1] == "python" and (m := _PYTHON_TAG.match(tag)):
        base = known(1, "python")
        base.python, base.flavor = m[1], "runtime"
        return base
    return BaseImage(image, "unknown", tag=tag)


def render_base(base: BaseImage, target: Combo | None, flavor: Flavor) -> str | None:
    """The base reference rewritten to `target` (mirror prefix kept); None: cannot."""
    pre = base.prefix + "/" if base.prefix else ""
    if base.kind == "official" and target is None and (m := _OFFICIAL_TAG.match(base.tag)):
        return f"{pre}{base.repository}:{m[1]}-cuda{m[2]}-cudnn{m[3]}-{flavor}"
    if base.kind == "official" and target:
        return f"{pre}{base.repository}:{cuda_tables.official_tag(target.torch, target.cuda, target.cudnn, flavor)}"  # noqa: E501
    if base.kind == "dlc" and target and target.tag:
        tag = target.tag
        if base.tag.endswith("-sagemaker") or "-sagemaker" in base.tag:
            tag = tag.replace("-ec2", "-sagemaker") if tag.endswith("-ec2") else tag + "-sagemaker"
        return f"{pre}{base.repository}:{tag}"
    if base.kind == "nvidia":
        m = _NVIDIA_TAG.match(base.tag)
        if not m:
            return None
        cuda = target.cuda if target else m[1]
        # nvidia/cuda tags need a patch; X.Y.0 is published for every CUDA in the tables.
        version = m[1] + (m[2] or "") if cuda == m[1] else f"{cuda}.0"
        cudnn = m[3]
        if cudnn and target and target.cudnn >= _NVIDIA_UNNUMBERED_CUDNN:
            cudnn = "cudnn"
        kind = "devel" if flavor == "devel" else m[4]
        middle = f"{cudnn}-" if cudnn else ""
        return f"{pre}{base.repository}:{version}-{middle}{kind}-{m[5]}"
    return None
