"""Dockerfile analysis and its fixes: one case per finding code (code, line, fix text and
the fixer's diff), the parsing people's Dockerfiles need, and the project's own Dockerfile."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills.image_builder.dockerfile_analyzer import analyze
from skills.image_builder.dockerfile_fixer import fix, write_fixed
from skills.shared.errors import ErrorCode, ToolFailure

ROOT = Path(__file__).resolve().parents[2]
IDX = "https://download.pytorch.org/whl"

# (code, Dockerfile, analyze kwargs, line, fix text, diff lines removed, diff lines added)
FINDINGS = [
    (
        "no_such_wheel",
        "FROM python:3.11-slim\nRUN pip install torch==2.5.1+cu126\n",
        {},
        2,
        "install torch==2.5.1+cu124 from --index-url https://download.pytorch.org/whl/cu124",
        ["RUN pip install torch==2.5.1+cu126"],
        ["RUN pip install torch==2.5.1+cu124"],
    ),
    (
        "no_such_image",
        "FROM pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime\n",
        {},
        1,
        "use base image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
        ["FROM pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime"],
        ["FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"],
    ),
    (
        "wheel_cuda_mismatch",
        "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\n"
        f"RUN pip install torch==2.5.1 --index-url {IDX}/cu121\n",
        {},
        2,
        "install torch==2.5.1+cu124 from --index-url https://download.pytorch.org/whl/cu124",
        [f"RUN pip install torch==2.5.1 --index-url {IDX}/cu121"],
        [f"RUN pip install torch==2.5.1 --index-url {IDX}/cu124"],
    ),
    (
        "cuda_too_old_for_gpu",
        "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04\n"
        f"RUN pip install torch==2.6.0 --index-url {IDX}/cu124\n",
        {"instance_type": "p6-b200.48xlarge"},
        1,
        "use base image nvidia/cuda:12.8.0-runtime-ubuntu22.04 and install torch==2.7.1+cu128",
        [
            "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04",
            f"RUN pip install torch==2.6.0 --index-url {IDX}/cu124",
        ],
        [
            "FROM nvidia/cuda:12.8.0-runtime-ubuntu22.04",
            f"RUN pip install torch==2.7.1 --index-url {IDX}/cu128",
        ],
    ),
    (
        "cuda_too_new_for_gpu",
        "FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime\n",
        {"instance_type": "ml.p3.2xlarge"},
        1,
        "use base image pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime",
        ["FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"],
        ["FROM pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime"],
    ),
    (
        "cuda_above_driver",
        "ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.2-cudnn9-runtime\nFROM ${BASE_IMAGE}\n",
        {"driver_version": "570.86.10"},
        2,
        # torch 2.13 has a CUDA 12.6 image (issue 51): the user's torch is kept.
        "use base image pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime",
        ["ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda13.2-cudnn9-runtime"],
        ["ARG BASE_IMAGE=pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"],
    ),
    (
        "flash_attn_runtime_image",
        "FROM localhost:5000/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n"
        "RUN pip install --no-build-isolation flash-attn==2.6.3\n",
        {},
        2,
        "use the devel base localhost:5000/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel",
        ["FROM localhost:5000/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"],
        ["FROM localhost:5000/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"],
    ),
    (
        "flash_attn_build_isolation",
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel\nRUN pip install \\\n    flash-attn\n",
        {},
        2,
        "install torch first, then pip install --no-build-isolation flash-attn",
        ["RUN pip install \\"],
        ["RUN pip install --no-build-isolation \\"],
    ),
    (
        "cudnn_mismatch",
        "FROM nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04\nRUN pip install torch==2.5.1+cu121\n",
        {},
        2,
        "use base image nvidia/cuda:12.4.0-cudnn-devel-ubuntu22.04 and install torch==2.5.1+cu124",
        ["FROM nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04", "RUN pip install torch==2.5.1+cu121"],
        ["FROM nvidia/cuda:12.4.0-cudnn-devel-ubuntu22.04", "RUN pip install torch==2.5.1+cu124"],
    ),
]


@pytest.mark.parametrize(
    ("code", "text", "kwargs", "line", "fix_text", "removed", "added"),
    FINDINGS,
    ids=[f[0] for f in FINDINGS],
)
def test_finding_and_its_fix(code, text, kwargs, line, fix_text, removed, added):
    analysis = analyze(text, **kwargs)
    finding = next(f for f in analysis.findings if f.code == code)
    assert (finding.severity, finding.line) == ("error", line)
    assert fix_text in finding.fix
    assert not analysis.ok
    result = fix(text, analysis)
    assert result is not None and result.changes
    diff = result.diff.splitlines()
    assert diff[:2] == ["--- a/Dockerfile", "+++ b/Dockerfile"]
    assert [d[1:] for d in diff[2:] if d.startswith("-")] == removed
    assert [d[1:] for d in diff[2:] if d.startswith("+")] == added
    assert analyze(result.text, **kwargs).ok, "the fixed Dockerfile still has errors"


def test_unknown_base_is_a_warning_with_no_fix():
    analysis = analyze("FROM ubuntu:22.04\nRUN echo hi\n")
    [finding] = analysis.findings
    assert (finding.code, finding.severity, finding.line) == ("unknown_base", "warning", 1)
    assert "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime" in finding.fix
    assert analysis.ok and fix("FROM ubuntu:22.04\n", analysis) is None


def test_unknown_instance_type_is_invalid_input():
    with pytest.raises(ToolFailure) as err:
        analyze("FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n", instance_type="p9.big")
    assert err.value.code == ErrorCode.INVALID_INPUT and "p5.48xlarge" in err.value.hint


def test_driver_between_minor_floor_and_shipped_is_a_warning():
    analysis = analyze(
        "FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime\n", driver_version="550.54.15"
    )
    [finding] = analysis.findings
    assert (finding.code, finding.severity) == ("cuda_above_driver", "warning")
    assert analysis.ok
    # The floor it names is the one for every feature (the driver 12.8 ships with).
    assert "CUDA 12.8 needs driver >= 570.26 for every feature" in finding.explanation


def test_avoid_images_is_never_chosen():
    text = "FROM pytorch/pytorch:2.13.0-cuda12.8-cudnn9-devel\n"
    analysis = analyze(text)
    result = fix(
        text, analysis, avoid_images=frozenset({"pytorch/pytorch:2.13.0-cuda13.2-cudnn9-devel"})
    )
    assert result is not None and "2.13.0-cuda13.0-cudnn9-devel" in result.text


# --- parsing ------------------------------------------------------------------------------


def test_multi_stage_follows_the_final_stage_chain():
    text = (
        "FROM nvidia/cuda:12.4.1-devel-ubuntu22.04 AS builder\n"
        "RUN pip install --no-build-isolation flash-attn\n"
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime AS base\n"
        "FROM base AS final\n"
        "COPY --from=builder /wheels /wheels\n"
    )
    analysis = analyze(text)
    assert analysis.resolved.base_image == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    assert (analysis.resolved.torch, analysis.resolved.cuda) == ("2.5.1", "12.4")
    assert analysis.findings == []  # flash-attn is built in the devel stage


def test_arg_substitution_build_args_and_base_image_override():
    text = (
        "ARG TORCH=2.5.1\nARG CUDA=12.4\n"
        "ARG BASE_IMAGE=pytorch/pytorch:${TORCH}-cuda${CUDA}-cudnn9-runtime\n"
        "FROM $BASE_IMAGE\nARG TORCH\nRUN pip install torch==${TORCH}+cu124\n"
    )
    assert analyze(text).resolved.base_image == "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
    assert analyze(text).ok
    over = analyze(text, build_args={"CUDA": "12.8"})
    assert over.resolved.cuda == "12.8"
    assert {f.code for f in over.findings} >= {"no_such_image", "wheel_cuda_mismatch"}
    dlc = (
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:"
        "2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
    )
    resolved = analyze(text, base_image=dlc).resolved
    assert (resolved.base_image, resolved.python, resolved.flavor) == (dlc, "3.11", "devel")


def test_continuations_and_extra_index_url():
    text = (
        "FROM pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime\n"
        "RUN apt-get update && \\\n    pip install --upgrade \\\n      numpy \\\n"
        f"      torch==2.6.0 --extra-index-url={IDX}/cu124\n"
    )
    [finding] = analyze(text).findings
    assert (finding.code, finding.line) == ("wheel_cuda_mismatch", 2)


def test_requirements_file_copied_into_the_build(tmp_path: Path):
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "train.txt").write_text(
        f"--extra-index-url {IDX}/cu118\ntorch==2.5.1  # pinned\nflash-attn==2.6.3\n"
    )
    text = (
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel\nWORKDIR /app\n"
        "COPY reqs/train.txt /app/requirements.txt\nRUN pip install -r requirements.txt\n"
    )
    codes = {(f.code, f.line) for f in analyze(text, context_dir=tmp_path).findings}
    assert codes == {("wheel_cuda_mismatch", 4), ("flash_attn_build_isolation", 4)}
    assert analyze(text).findings == []  # without the context nothing can be read


def test_dlc_public_and_al2023_repositories():
    pub = (
        "public.ecr.aws/deep-learning-containers/pytorch-training:"
        "2.7.1-gpu-py312-cu128-ubuntu22.04-sagemaker"
    )
    assert analyze(f"FROM {pub}\n", instance_type="p6-b200.48xlarge").findings == []
    al = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch:2.13.0-cu133-amzn2023"
    assert analyze(f"FROM {al}\n").resolved.cuda == "13.3"


def test_docker_hub_mirror_prefix_is_recognised():
    image = (
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/docker-hub/pytorch/pytorch:"
        "2.5.1-cuda12.8-cudnn9-runtime"
    )
    [finding] = analyze(f"FROM {image}\n").findings
    assert finding.code == "no_such_image"
    assert "docker-hub/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime" in finding.fix


# --- the project's Dockerfile ---------------------------------------------------------------


def test_project_dockerfile_analyzes_clean():
    text = (ROOT / "Dockerfile").read_text()
    analysis = analyze(
        text, instance_type="g6e.xlarge", driver_version="580.65.06", context_dir=ROOT
    )
    assert analysis.findings == []
    assert (analysis.resolved.torch, analysis.resolved.cuda) == ("2.13.0", "13.0")
    assert fix(text, analysis) is None
    # On an EFA instance its pytorch/pytorch base lacks the EFA user space (issue 29): the
    # one finding names the DLC base of the same torch that has it, and that build is clean.
    p5 = analyze(text, instance_type="p5.48xlarge", driver_version="580.65.06", context_dir=ROOT)
    (efa,) = p5.findings
    assert efa.code == "efa_missing" and efa.severity == "warning" and efa.line == 5
    dlc = "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023"
    assert efa.fix.endswith(f"base_image={dlc}")
    on_dlc = analyze(text, base_image=dlc, instance_type="p5.48xlarge", context_dir=ROOT)
    assert on_dlc.findings == [] and on_dlc.labels["fsdp-eks.efa"] == "true"


def test_write_fixed_beside_unless_asked(tmp_path: Path):
    path = tmp_path / "Dockerfile"
    text = "FROM pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime\n"
    path.write_text(text)
    result = fix(text, analyze(text))
    assert result is not None
    beside = write_fixed(path, result)
    assert beside == tmp_path / "Dockerfile.fixed" and path.read_text() == text
    assert write_fixed(path, result, write=True) == path and path.read_text() == result.text


# --- the labels build_image sets (issue 21: labels that cannot lie) ------------------------

PROJECT = (ROOT / "Dockerfile").read_text()
CU128 = "pytorch/pytorch:2.11.0-cuda12.8-cudnn9-runtime"


def _labels(torch: str, cuda: str, efa: str = "false") -> dict[str, str]:
    # fsdp-eks.efa: a pytorch/pytorch base has no libfabric/aws-ofi-nccl (issue 29).
    return {"fsdp-eks.torch": torch, "fsdp-eks.cuda": cuda, "fsdp-eks.efa": efa}


def test_labels_follow_the_base_image_override():
    assert analyze(PROJECT, context_dir=ROOT).labels == _labels("2.13.0", "13.0")
    over = analyze(PROJECT, base_image=CU128, context_dir=ROOT)
    assert over.labels == _labels("2.11.0", "12.8")
    # The project's Dockerfile has no version defaults to contradict them.
    assert "ARG CUDA_VERSION=" not in PROJECT and "ARG TORCH_VERSION=" not in PROJECT


def test_labels_follow_a_build_arg():
    assert analyze(PROJECT, build_args={"BASE_IMAGE": CU128}).labels == _labels("2.11.0", "12.8")
    text = "ARG CUDA=12.4\nFROM pytorch/pytorch:2.5.1-cuda${CUDA}-cudnn9-runtime\n"
    assert analyze(text, build_args={"CUDA": "12.1"}).labels == _labels("2.5.1", "12.1")


def test_labels_follow_the_fixers_edit():
    text = "FROM pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime\n"  # never published
    fixed = fix(text, analyze(text))
    assert fixed is not None
    assert analyze(fixed.text).labels == _labels("2.5.1", "12.4")


def test_labels_follow_pip_pins_and_index_urls():
    pinned = (
        "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\nRUN pip install torch==2.4.1+cu121\n"
    )
    assert analyze(pinned).labels == _labels("2.4.1", "12.1")
    index = (
        "FROM nvidia/cuda:12.6.3-cudnn-runtime-ubuntu22.04\n"
        f"RUN pip install torch==2.6.0 --index-url {IDX}/cu126\n"
    )
    assert analyze(index).labels == _labels("2.6.0", "12.6")
    dlc = (
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:"
        "2.5.1-gpu-py311-cu124-ubuntu22.04-ec2"
    )
    assert analyze(f"FROM {dlc}\n").labels == {
        **_labels("2.5.1", "12.4", efa="true"),  # AWS DLCs ship libfabric + aws-ofi-nccl
        "fsdp-eks.python": "3.11",
    }
    # What the analysis does not know is not labelled (no guess).
    assert analyze("FROM scratch\n").labels == {}


def test_label_build_args_only_where_a_label_alone_reads_them():
    from skills.image_builder.image_labels import label_build_args

    labels = _labels("2.11.0", "12.8")
    assert label_build_args(PROJECT, labels) == {"TORCH_VERSION": "2.11.0", "CUDA_VERSION": "12.8"}
    assert label_build_args(PROJECT, labels, {"CUDA_VERSION": "x"}) == {"TORCH_VERSION": "2.11.0"}
    # An ARG that picks the base, or a pip index, would change the image: never passed.
    feeds_from = (
        "ARG CUDA_VERSION=12.4\nFROM nvidia/cuda:${CUDA_VERSION}.1-runtime-ubuntu22.04\n"
        "ARG CUDA_VERSION\nLABEL fsdp-eks.cuda=$CUDA_VERSION\n"
    )
    assert label_build_args(feeds_from, labels) == {}
    feeds_pip = (
        "FROM python:3.11\nARG TORCH_VERSION\nRUN pip install torch==${TORCH_VERSION}\n"
        "LABEL fsdp-eks.torch=$TORCH_VERSION\n"
    )
    assert label_build_args(feeds_pip, labels) == {}
