"""Static analysis of a Dockerfile against the CUDA/PyTorch tables (cuda_tables.py).

Reads Dockerfiles as people write them (dockerfile-parse for instructions, continuations
and comments; our own ARG/ENV substitution, since FROM sees only the global ARGs): which
image each stage starts from, which torch/CUDA/Python/cuDNN it ends up with, and what pip
installs (pins, `+cuXXX`, PyTorch index URLs, requirements files from the build context).
`analyze()` returns what it resolved and every finding, each with the exact fix.
"""

from __future__ import annotations

from pathlib import Path

from skills.catalog import cuda as cuda_tables
from skills.catalog import instances
from skills.image_builder.base_image import BaseImage, parse_base, render_base
from skills.image_builder.dockerfile_findings import Analysis, Finding, Resolved, finding
from skills.image_builder.dockerfile_stages import Stage, parse
from skills.image_builder.dockerfile_targets import (
    Context,
    stage_flavor,
    stage_torch,
    target_for,
    torch_cuda,
)
from skills.image_builder.image_labels import efa_stack, image_labels
from skills.image_builder.pip_installs import FLASH_ATTN, PipInstall, pip_installs, torch_pin

# --- Checks ---------------------------------------------------------------------------------


def _fix_text(stage: Stage, base: BaseImage, ctx: Context, context_dir: Path | None) -> str:
    target = target_for(stage, base, ctx, context_dir)
    if target is None:
        return "no torch/CUDA combination in the tables fits this GPU and driver"
    flavor = stage_flavor(stage, base, context_dir)
    image = render_base(base, target, flavor)
    wheel = f"torch=={target.torch}+{cuda_tables.cu_tag(target.cuda)}"
    index = f"{cuda_tables.PYTORCH_WHEEL_INDEX}/{cuda_tables.cu_tag(target.cuda)}"
    # Never a wheel download.pytorch.org does not publish (a DLC's CUDA 13.3 has none).
    has_wheel = cuda_tables.wheel_exists(target.torch, target.cuda)
    if image and image != base.image:
        return f"use base image {image}" + (
            f" and install {wheel} from {index}"
            if has_wheel and _pins_torch(stage, context_dir)
            else ""
        )
    if not has_wheel:
        floor = cuda_tables.driver_floor(target.cuda)
        return f"keep {base.image}: no {wheel} wheel exists" + (
            f"; a node driver >= {floor} gives CUDA {target.cuda} every feature" if floor else ""
        )
    return f"install {wheel} from --index-url {index}"


def _pins_torch(stage: Stage, context_dir: Path | None) -> bool:
    return any(torch_pin(p) for s in stage.chain() for p in pip_installs(s, context_dir))


def _check_base(
    stage: Stage, base: BaseImage, ctx: Context, context_dir: Path | None, out: list[Finding]
) -> None:
    line, evidence = stage.from_line, f"FROM {base.image}"
    if "$" in base.image:
        out.append(
            finding(
                "unknown_base",
                line,
                evidence,
                "the base image depends on a build argument that has no value",
                "give the ARG a default or pass it (build_args / base_image)",
                "warning",
            )
        )
        return
    if base.kind == "unknown" or (base.kind in ("official", "nvidia") and base.cuda is None):
        out.append(
            finding(
                "unknown_base",
                line,
                evidence,
                "the tables know pytorch/pytorch, nvidia/cuda, AWS DLC and python images with "
                "versioned tags; this base's CUDA and torch cannot be checked",
                "use a versioned pytorch/pytorch, nvidia/cuda or DLC tag, e.g. "
                f"{cuda_tables.official_image('2.13.0', '13.0', 9, 'runtime')}",
                "warning",
            )
        )
        return
    torch, cuda = base.torch, base.cuda  # official and DLC tags name both
    published = (
        torch is not None
        and cuda is not None
        and cuda_tables.image_published(torch, cuda)
        and any(i.cudnn == base.cudnn for i in cuda_tables.official_images(torch))
        if base.kind == "official"
        else torch is not None
        and any(
            cuda_tables.torch_minor(d.torch) == cuda_tables.torch_minor(torch) and d.cuda == cuda
            for d in cuda_tables.DLC_IMAGES
        )
        if base.kind == "dlc"
        else True
    )
    if not published:
        out.append(
            finding(
                "no_such_image",
                line,
                evidence,
                f"{base.repository} publishes no torch {base.torch} image on CUDA {base.cuda}"
                + (f" with cuDNN {base.cudnn}" if base.cudnn else ""),
                _fix_text(stage, base, ctx, context_dir),
            )
        )


def _check_pip(
    stage: Stage, base: BaseImage, ctx: Context, context_dir: Path | None, out: list[Finding]
) -> None:
    for pip in pip_installs(stage, context_dir):
        if pin := torch_pin(pip):
            req, cuda = pin
            if req.version:
                _check_wheel(stage, base, ctx, context_dir, pip, req.version, cuda, out)
        for req in pip.requirements:
            if req.name not in FLASH_ATTN:
                continue
            if not pip.no_build_isolation:
                out.append(
                    finding(
                        "flash_attn_build_isolation",
                        pip.line,
                        pip.evidence,
                        "pip builds flash-attn in an isolated environment without torch "
                        "(\"No module named 'torch'\")",
                        "install torch first, then pip install --no-build-isolation flash-attn",
                    )
                )
            if base.flavor == "runtime":
                devel = render_base(base, None, "devel")
                out.append(
                    finding(
                        "flash_attn_runtime_image",
                        pip.line,
                        pip.evidence,
                        f"{base.image} is a runtime image: no nvcc to compile flash-attn "
                        '("nvcc was not found")',
                        f"use the devel base {devel}"
                        if devel and devel != base.image
                        else "use a -devel CUDA base image or install a prebuilt flash-attn wheel",
                    )
                )


def _check_wheel(
    stage: Stage,
    base: BaseImage,
    ctx: Context,
    context_dir: Path | None,
    pip: PipInstall,
    torch: str,
    cuda: str | None,
    out: list[Finding],
) -> None:
    fix = _fix_text(stage, base, ctx, context_dir)
    rel = cuda_tables.release(torch)
    missing = None
    if rel is None:
        missing = f"torch {torch} is not in the compatibility table"
    elif cuda and cuda not in rel.wheel_cudas:
        missing = (
            f"torch {torch} has no CUDA {cuda} wheel (it has "
            f"{', '.join(cuda_tables.cu_tag(c) for c in rel.wheel_cudas)})"
        )
    elif base.python and not cuda_tables.python_ok(torch, base.python):
        missing = (
            f"torch {torch} has no wheel for Python {base.python} "
            f"({rel.python_min}-{rel.python_max})"
        )
    if missing:
        out.append(finding("no_such_wheel", pip.line, pip.evidence, missing, fix))
    if cuda and base.cuda and cuda != base.cuda and base.kind != "python":
        out.append(
            finding(
                "wheel_cuda_mismatch",
                pip.line,
                pip.evidence,
                f"pip installs a CUDA {cuda} torch on a CUDA {base.cuda} base image (extension "
                'builds fail: "The detected CUDA version mismatches")',
                fix,
            )
        )
    if base.cudnn and base.cudnn != cuda_tables.expected_cudnn(torch):
        out.append(
            finding(
                "cudnn_mismatch",
                pip.line,
                pip.evidence,
                f"torch {torch} expects cuDNN {cuda_tables.expected_cudnn(torch)}; the base has "
                f'cuDNN {base.cudnn} ("libcudnn.so.{base.cudnn}" errors)',
                fix,
            )
        )


def _runtime_cudas(
    stage: Stage, base: BaseImage, context_dir: Path | None
) -> list[tuple[str, int, str]]:
    """Every CUDA the final image runs: (cuda, line, evidence) from its base and pip pins."""
    found = []
    if base.cuda:
        found.append((base.cuda, stage.root.from_line, f"FROM {base.image}"))
    for s in stage.chain():
        for pip in pip_installs(s, context_dir):
            if (pin := torch_pin(pip)) and pin[1] and pin[1] != base.cuda:
                found.append((pin[1], pip.line, pip.evidence))
    return found


def _check_hardware(
    stage: Stage, base: BaseImage, ctx: Context, context_dir: Path | None, out: list[Finding]
) -> None:
    for cuda, line, evidence in _runtime_cudas(stage, base, context_dir):
        fix = None
        if ctx.gpu and (problem := cuda_tables.cuda_problem_for_gpu(cuda, ctx.gpu)):
            spec = instances.gpu(ctx.gpu)
            fix = _fix_text(stage, base, ctx, context_dir)
            why = (
                f"{ctx.gpu} (sm_{spec.sm}) needs CUDA >= {spec.min_cuda}"
                if problem == "too_old"
                else f"CUDA {cuda} dropped {ctx.gpu} (sm_{spec.sm}): newest is {spec.max_cuda}"
            )
            out.append(
                finding(
                    f"cuda_{problem}_for_gpu",
                    line,
                    evidence,
                    f'{why}; "no kernel image is available for execution"',
                    fix,
                )
            )
        drv = ctx.driver_version
        if drv and not cuda_tables.driver_supports(drv, cuda):
            hard = not cuda_tables.driver_supports(drv, cuda, minor_compat=True)
            floor = cuda_tables.driver_floor(cuda, minor_compat=hard) or "a newer driver"
            out.append(
                finding(
                    "cuda_above_driver",
                    line,
                    evidence,
                    f"CUDA {cuda} needs driver >= {floor}"
                    + ("" if hard else " for every feature")
                    + f"; the nodes have {drv}"
                    + (
                        ' ("CUDA driver version is insufficient")'
                        if hard
                        else ": only minor-version compatibility (limited features, no PTX JIT)"
                    ),
                    fix or _fix_text(stage, base, ctx, context_dir),
                    "error" if hard else "warning",
                )
            )


def efa_finding(
    stage: Stage, base: BaseImage, torch: str | None, instance_type: str | None
) -> Finding | None:
    """efa_missing: the image is for an EFA instance and has no EFA user space, so NCCL
    would fall back to TCP sockets there (a fraction of the bandwidth the job pays for)."""
    if not instance_type or not instances.instance_spec(instance_type).efa:
        return None
    if efa_stack(stage, base) is not False:
        return None
    dlc = cuda_tables.dlc_efa_image(torch)
    fix = (
        f"build on the AWS DLC PyTorch image, which ships libfabric and aws-ofi-nccl: "
        f"base_image={dlc}"
        if dlc
        else "install the EFA installer (efa_installer.sh -y --skip-kmod) or use an AWS DLC base"
    )
    return finding(
        "efa_missing",
        stage.from_line,
        f"FROM {base.image}",
        f"{instance_type} has EFA, but this image has no libfabric/aws-ofi-nccl: NCCL falls "
        "back to TCP sockets between nodes",
        fix,
        "warning",
    )


def analyze(
    text: str,
    *,
    base_image: str | None = None,
    instance_type: str | None = None,
    driver_version: str | None = None,
    build_args: dict[str, str] | None = None,
    context_dir: Path | None = None,
) -> Analysis:
    """Resolve a Dockerfile's final image and check every stage against the tables.
    An unknown `instance_type` is the caller's input: ToolFailure(INVALID_INPUT)."""
    gpu = instances.gpu_for_instance(instance_type).name if instance_type else None
    ctx = Context(gpu, driver_version)
    parsed = parse(text, build_args=build_args, base_image=base_image)
    findings: list[Finding] = []
    if not parsed.stages:
        findings.append(
            finding(
                "unknown_base",
                None,
                "",
                "no FROM instruction",
                "start the Dockerfile with FROM <base image>",
                "warning",
            )
        )
        return Analysis(
            resolved=Resolved(
                base_image=None, torch=None, cuda=None, cudnn=None, python=None, flavor=None
            ),
            findings=findings,
            gpu=gpu,
            driver_version=driver_version,
        )
    for stage in parsed.stages:
        base = parse_base(stage.root.image)
        if stage.parent is None:
            _check_base(stage, base, ctx, context_dir, findings)
        _check_pip(stage, base, ctx, context_dir, findings)
    final = parsed.final
    base = parse_base(final.root.image)
    _check_hardware(final, base, ctx, context_dir, findings)
    torch = stage_torch(final, base, context_dir)
    wheel = [c for c, _, _ in _runtime_cudas(final, base, context_dir)]
    unique: dict[tuple[str, int | None], Finding] = {}
    for f in findings:
        unique.setdefault((f.code, f.line), f)
    resolved = Resolved(
        base_image=final.root.image,
        torch=torch,
        cuda=base.cuda or (wheel[-1] if wheel else None),
        cudnn=str(base.cudnn) if base.cudnn else None,
        python=base.python,
        flavor=base.flavor,
    )
    efa = efa_finding(final, base, torch, instance_type)
    if efa is not None:
        unique.setdefault((efa.code, efa.line), efa)
    labels = image_labels(resolved, torch_cuda(final, base, context_dir), efa_stack(final, base))
    return Analysis(
        resolved=resolved,
        findings=list(unique.values()),
        gpu=gpu,
        driver_version=driver_version,
        labels=labels,
    )
