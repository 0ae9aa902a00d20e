"""Static analysis of a Dockerfile against the CUDA/PyTorch tables (cuda_tables.py).

Reads Dockerfiles as people write them (dockerfile-parse for instructions, continuations
and comments; our own ARG/ENV substitution, since FROM sees only the global ARGs): which
image each stage starts from, which torch/CUDA/Python/cuDNN it ends up with, and what pip
installs (pins, `+cuXXX`, PyTorch index URLs, requirements files from the build context).
`analyze()` returns what it resolved and every finding, each with the exact fix.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel

from skills.catalog import cuda as cuda_tables
from skills.catalog import instances
from skills.catalog.cuda import Combo, Flavor
from skills.image_builder import dockerfile_reader
from skills.image_builder.dockerfile_reader import assignments, substitute
from skills.shared.reading import read_text

# A requirements file is a few KiB; a larger "requirements file" is not read.
MAX_REQUIREMENTS_BYTES = 1024 * 1024


class Finding(BaseModel):
    code: str
    severity: Literal["error", "warning"]
    line: int | None
    evidence: str
    explanation: str
    fix: str


class Resolved(BaseModel):
    base_image: str | None
    torch: str | None
    cuda: str | None
    cudnn: str | None
    python: str | None
    flavor: Literal["runtime", "devel"] | None


class Analysis(BaseModel):
    resolved: Resolved
    findings: list[Finding]
    gpu: str | None = None
    driver_version: str | None = None
    # What the built image will say about itself (fsdp-eks.torch/cuda/python): computed
    # from this text, so a base override, a fix or a build arg moves them with the image.
    labels: dict[str, str] = {}

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


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


# --- Parsing --------------------------------------------------------------------------------


@dataclass
class Instruction:
    kind: str
    line: int  # 1-based first line
    end_line: int
    raw: str  # as written (continuations included)
    value: str  # continuation-joined, ARG/ENV substituted


@dataclass
class ImageSource:
    """Where a stage's image reference is written, so a fix edits that place."""

    where: Literal["from", "arg", "build_arg", "override"]
    line: int | None
    raw: str  # the text to replace there
    arg: str | None = None


@dataclass
class Stage:
    index: int
    name: str | None
    from_line: int
    image: str  # resolved reference, or the stage name it builds on
    parent: Stage | None
    source: ImageSource
    instructions: list[Instruction] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # ENV as of the stage's last line

    @property
    def root(self) -> Stage:
        return self.parent.root if self.parent else self

    def chain(self) -> list[Stage]:
        return (self.parent.chain() if self.parent else []) + [self]


@dataclass
class Parsed:
    stages: list[Stage]
    global_args: dict[str, str]
    arg_lines: dict[str, tuple[int, str]]  # global ARG name -> (line, raw default)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(
    text: str, *, build_args: dict[str, str] | None = None, base_image: str | None = None
) -> Parsed:
    build_args = dict(build_args or {})
    if base_image:
        build_args.setdefault("BASE_IMAGE", base_image)
    dockerfile = dockerfile_reader.read(text, build_args)
    global_args, arg_lines = dockerfile.global_args, dockerfile.arg_lines
    stages: list[Stage] = []
    for entry, items in zip(dockerfile.froms, dockerfile.stage_items, strict=True):
        parent = stages[entry.parent] if entry.parent is not None else None
        source = ImageSource("from", entry.line, entry.written)
        if m := re.fullmatch(r"\$\{?(\w+)\}?", entry.written):
            arg = m[1]
            if arg in build_args:
                source = ImageSource("build_arg", None, build_args[arg], arg)
            elif arg in arg_lines:
                source = ImageSource("arg", arg_lines[arg][0], arg_lines[arg][1], arg)
        stage = Stage(entry.index, entry.name, entry.line, entry.image, parent, source)
        stages.append(stage)
        _read_stage(stage, items, dict(parent_env(stages, parent)), build_args, global_args)
    if base_image and stages:
        final = stages[-1]
        if final.source.where == "from" and final.parent is None:
            final.image, final.source = base_image, ImageSource("override", None, base_image)
        elif final.source.where in ("arg", "build_arg") and final.parent is None:
            final.image = base_image
            final.source = ImageSource("override", None, base_image, final.source.arg)
    return Parsed(stages, global_args, arg_lines)


def _read_stage(
    stage: Stage,
    items: Sequence[Mapping[str, Any]],
    env: dict[str, str],
    build_args: dict[str, str],
    global_args: dict[str, str],
) -> None:
    """The stage's instructions with its ARG/ENV substituted as Docker would."""
    for item in items:
        kind, line, end = item["instruction"], item["startline"] + 1, item["endline"] + 1
        value = item["value"]
        if kind == "ARG":
            for arg, default in assignments(value):
                chosen = build_args.get(
                    arg, default if default is not None else global_args.get(arg)
                )
                if chosen is not None:
                    env[arg] = substitute(chosen, env)
        elif kind == "ENV":
            for key, val in assignments(value):
                if val is not None:
                    env[key] = substitute(val, env)
        if kind not in ("COMMENT",):
            stage.instructions.append(
                Instruction(kind, line, end, item["content"], substitute(value, env))
            )
            stage.env = dict(env)


def parent_env(stages: list[Stage], parent: Stage | None) -> dict[str, str]:
    return dict(parent.env) if parent else {}


# --- pip installs ---------------------------------------------------------------------------

_PIP = re.compile(r"(?:^|/)pip(?:3(?:\.\d+)?)?$")
_VALUE_OPTIONS = {
    "-i",
    "--index-url",
    "--extra-index-url",
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--prefix",
    "--root",
    "--python-version",
    "--platform",
    "--implementation",
    "--abi",
    "--src",
    "--cache-dir",
    "--trusted-host",
    "--progress-bar",
    "-e",
    "--editable",
}
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*(.*)$")
_WHL_CUDA = re.compile(r"download\.pytorch\.org/whl/(?:nightly/|test/)?(cu\d{2,}|cpu)\b")
FLASH_ATTN = {"flash-attn", "flash_attn"}


@dataclass
class Requirement:
    name: str  # normalised: lower case, "_" -> "-"
    version: str | None  # the == pin without its local part
    cuda: str | None  # from a +cuXXX local version
    text: str


@dataclass
class PipInstall:
    line: int
    evidence: str
    requirements: list[Requirement]
    index_cuda: str | None
    no_build_isolation: bool
    requirement_files: list[str]


def parse_requirement(text: str) -> Requirement | None:
    text = text.split(";", 1)[0].strip()
    if not text or text.startswith("-") or "://" in text or text.endswith(".whl"):
        return None
    m = _REQ.match(text)
    if not m:
        return None
    name = m[1].lower().replace("_", "-")
    version = cuda = None
    if pin := re.match(r"===?\s*([^\s,]+)", m[3]):
        version, _, local = pin[1].partition("+")
        version = _comparable(version)
        if re.fullmatch(r"cu\d{2,}", local):  # cu1 names no CUDA (major + minor digit)
            cuda = cuda_tables.cuda_from_cu(local)
    return Requirement(name, version, cuda, text)


def _comparable(version: str) -> str | None:
    """A pin the tables can compare: "2" is "2.0" (PEP 440 pads a release); a pin that is
    not a release number ("x", "2.*") is left unread (None) rather than guessed at."""
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        return None
    return version if "." in version else f"{version}.0"


def _index_cuda(url: str) -> str | None:
    m = _WHL_CUDA.search(url)
    return cuda_tables.cuda_from_cu(m[1]) if m and m[1] != "cpu" else None


def _pip_commands(run: str) -> list[list[str]]:
    commands = []
    for part in re.split(r"&&|\|\||;|\|", run):
        if "install" not in part or "pip" not in part:
            continue  # no pip install here: no tokenizing (a 50k-line RUN stays linear)
        try:
            tokens = shlex.split(part, comments=True)
        except ValueError:
            tokens = part.split()
        for k in range(1, len(tokens)):
            if tokens[k] == "install" and _PIP.search(tokens[k - 1]):
                commands.append(tokens[k + 1 :])
                break
    return commands


def _read_requirements(path: Path, seen: set[Path], root: Path) -> tuple[list[str], str | None]:
    """The requirement lines of a requirements file (and those it includes) + its index
    CUDA. Only files inside `root` (the build context) are read, through the bounded
    reader: `-r ../../outside.txt` or a link out of the context is not followed."""
    if path in seen or not path.is_file() or not _within(path, root):
        return [], None
    seen.add(path)
    text = read_text(
        path,
        what="requirements file",
        max_bytes=MAX_REQUIREMENTS_BYTES,
        errors="replace",
        within=root,
    )
    lines, cuda = [], None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        opt = re.match(r"^(-r|--requirement|-i|--index-url|--extra-index-url)[ =]\s*(\S+)", line)
        if opt and opt[1] in ("-r", "--requirement"):
            more, more_cuda = _read_requirements(path.parent / opt[2], seen, root)
            lines += more
            cuda = cuda or more_cuda
        elif opt:
            cuda = cuda or _index_cuda(opt[2])
        else:
            lines.append(line)
    return lines, cuda


def _within(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return False


def _context_file(ref: str, copies: list[tuple[list[str], str]], context_dir: Path) -> Path:
    """The build-context file that a path inside the image came from (via COPY/ADD)."""
    name = PurePosixPath(ref).name
    for sources, dest in reversed(copies):
        if len(sources) == 1 and not dest.endswith("/") and PurePosixPath(dest).name == name:
            return context_dir / sources[0]  # COPY a.txt /app/requirements.txt
        for src in sources:
            if PurePosixPath(src).name == name:
                return context_dir / src
            if src in (".", "./"):
                return context_dir / ref.lstrip("/")
    return context_dir / ref


def pip_installs(stage: Stage, context_dir: Path | None) -> list[PipInstall]:
    copies: list[tuple[list[str], str]] = []
    found = []
    for ins in stage.instructions:
        if ins.kind in ("COPY", "ADD"):
            tokens = [t for t in ins.value.split() if not t.startswith("--")]
            if len(tokens) >= 2:
                copies.append((tokens[:-1], tokens[-1]))
        if ins.kind != "RUN":
            continue
        for args in _pip_commands(ins.value):
            reqs, files, index_cuda, i = [], [], None, 0
            while i < len(args):
                arg = args[i]
                opt, eq, inline = arg.partition("=")
                if arg.startswith("-") and (opt in _VALUE_OPTIONS):
                    val = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
                    i += 1 if eq else 2
                    if opt in ("-i", "--index-url", "--extra-index-url"):
                        index_cuda = index_cuda or _index_cuda(val)
                    elif opt in ("-r", "--requirement"):
                        files.append(val)
                    continue
                if not arg.startswith("-") and (req := parse_requirement(arg)):
                    reqs.append(req)
                i += 1
            for ref in files:
                if context_dir is not None:
                    lines, cuda = _read_requirements(
                        _context_file(ref, copies, context_dir), set(), context_dir
                    )
                    reqs += [r for r in map(parse_requirement, lines) if r]
                    index_cuda = index_cuda or cuda
            found.append(
                PipInstall(
                    ins.line,
                    " ".join(ins.raw.split()),
                    reqs,
                    index_cuda,
                    "--no-build-isolation" in args,
                    files,
                )
            )
    return found


def torch_pin(pip: PipInstall) -> tuple[Requirement, str | None] | None:
    """pip's torch requirement and the CUDA its wheel will have (+cuXXX, else the index)."""
    for req in pip.requirements:
        if req.name == "torch":
            return req, req.cuda or pip.index_cuda
    return None


# --- Targets (shared with the fixer) --------------------------------------------------------


@dataclass
class Context:
    gpu: str | None
    driver_version: str | None


def needs_devel(stage: Stage, context_dir: Path | None) -> bool:
    return any(
        r.name in FLASH_ATTN for p in pip_installs(stage, context_dir) for r in p.requirements
    )


def torch_cuda(stage: Stage, base: BaseImage, context_dir: Path | None) -> str | None:
    """The CUDA the stage's torch is built for: the last pip install of torch (its +cuXXX
    or PyTorch index), else the base's CUDA (the torch it ships, or its toolkit)."""
    last = None
    for s in stage.chain():
        for p in pip_installs(s, context_dir):
            if pin := torch_pin(p):
                last = pin
    if last is not None and last[1]:
        return last[1]
    return base.cuda


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
    return _finding(
        "efa_missing",
        stage.from_line,
        f"FROM {base.image}",
        f"{instance_type} has EFA, but this image has no libfabric/aws-ofi-nccl: NCCL falls "
        "back to TCP sockets between nodes",
        fix,
        "warning",
    )


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


def stage_torch(stage: Stage, base: BaseImage, context_dir: Path | None) -> str | None:
    pins = [
        pin[0].version
        for s in stage.chain()
        for p in pip_installs(s, context_dir)
        if (pin := torch_pin(p)) and pin[0].version
    ]
    return pins[-1] if pins else base.torch


def target_for(
    stage: Stage,
    base: BaseImage,
    ctx: Context,
    context_dir: Path | None,
    *,
    avoid: frozenset[str] = frozenset(),
    torch: str | None = None,
) -> Combo | None:
    """The one torch/CUDA combination a stage should be aligned to: the nearest valid one
    for its base's kind. For a CUDA base that ships no torch, the base's own CUDA when a
    wheel exists for it (the smallest edit), else the newest valid wheel CUDA."""
    torch = stage_torch(stage, base, context_dir) or torch
    flavor = "devel" if base.flavor == "devel" or needs_devel(stage, context_dir) else "runtime"
    common = {"gpu_name": ctx.gpu, "driver_version": ctx.driver_version, "avoid": avoid}
    if base.kind == "official":
        return cuda_tables.nearest_valid(torch, source="official", flavor=flavor, **common)
    if base.kind == "dlc":
        repo = base.repository
        return cuda_tables.nearest_valid(torch, source="dlc", dlc_repository=repo, **common)
    python = base.python
    if (
        torch
        and base.cuda
        and cuda_tables.wheel_exists(torch, base.cuda, python)
        and (base.cudnn is None or base.cudnn == cuda_tables.expected_cudnn(torch))
        and (ctx.gpu is None or cuda_tables.cuda_ok_for_gpu(base.cuda, ctx.gpu))
        and (
            ctx.driver_version is None or cuda_tables.driver_supports(ctx.driver_version, base.cuda)
        )
    ):
        return Combo(torch, base.cuda, cuda_tables.expected_cudnn(torch), None)
    return cuda_tables.nearest_valid(torch, source="wheel", python=python, **common)


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


def stage_flavor(stage: Stage, base: BaseImage, context_dir: Path | None) -> Flavor:
    return (
        "devel"
        if base.flavor == "devel" or needs_devel(stage, context_dir)
        else (base.flavor or "runtime")
    )


# --- Checks ---------------------------------------------------------------------------------


def _finding(
    code: str,
    line: int | None,
    evidence: str,
    explanation: str,
    fix: str,
    severity: Literal["error", "warning"] = "error",
) -> Finding:
    return Finding(
        code=code,
        severity=severity,
        line=line,
        evidence=evidence.strip(),
        explanation=explanation,
        fix=fix,
    )


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
            _finding(
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
            _finding(
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
            _finding(
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
                    _finding(
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
                    _finding(
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
        out.append(_finding("no_such_wheel", pip.line, pip.evidence, missing, fix))
    if cuda and base.cuda and cuda != base.cuda and base.kind != "python":
        out.append(
            _finding(
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
            _finding(
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
                _finding(
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
                _finding(
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
            _finding(
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
