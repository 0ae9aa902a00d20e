"""Rewrite a Dockerfile to the nearest valid torch/CUDA combination its analysis asks for.

Every edit is listed in `changes` and shown as a unified diff; nothing is written unless
`write_fixed` is called, and then beside the file (`<name>.fixed`) unless write=True.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from pydantic import BaseModel

from skills.catalog import cuda as cuda_tables
from skills.catalog.cuda import Combo
from skills.image_builder.base_image import parse_base, render_base
from skills.image_builder.dockerfile_findings import Analysis
from skills.image_builder.dockerfile_stages import Instruction, Stage, parse
from skills.image_builder.dockerfile_targets import Context, stage_flavor, target_for
from skills.image_builder.pip_installs import FLASH_ATTN
from skills.shared.files import write_new_or_owned

# Findings fixed by aligning a stage's base and pip pins to one torch/CUDA combination.
CUDA_CODES = frozenset(
    {
        "no_such_image",
        "no_such_wheel",
        "wheel_cuda_mismatch",
        "cuda_too_old_for_gpu",
        "cuda_too_new_for_gpu",
        "cuda_above_driver",
        "cudnn_mismatch",
    }
)
_CU_PIN = re.compile(r"(\b(?:torch|torchvision|torchaudio)==[^\s+\"']+)\+cu\d+")
_WHL = re.compile(r"(download\.pytorch\.org/whl/(?:nightly/|test/)?)cu\d+")
_PIP_INSTALL = re.compile(r"\bpip(?:3(?:\.\d+)?)?\s+install\b")


class FixResult(BaseModel):
    text: str
    diff: str
    changes: list[str]


class _Editor:
    """Line edits on the original text, each one recorded as a change."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self.changes: list[str] = []

    def replace(self, first: int, last: int, edit, why: str) -> None:
        old = "".join(self.lines[first - 1 : last])
        new = edit(old)
        if new == old:
            return
        new_lines = new.splitlines(keepends=True)
        self.lines[first - 1 : last] = new_lines
        before, after = " ".join(old.split()), " ".join(new.split())
        self.changes.append(f"line {first}: {before} -> {after} ({why})")

    def note(self, message: str) -> None:
        self.changes.append(message)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _members(stages: list[Stage], root: Stage) -> list[Stage]:
    return [s for s in stages if s.root is root]


def _owns(stages: list[Stage], stage: Stage, line: int | None) -> bool:
    """Whether a finding's line lies in this stage (its FROM up to the next FROM)."""
    nxt = stages[stage.index + 1].from_line if stage.index + 1 < len(stages) else None
    return line is not None and line >= stage.from_line and (nxt is None or line < nxt)


def _set_image(ed: _Editor, root: Stage, new: str, why: str) -> None:
    src = root.source
    if src.where == "from":
        ed.replace(root.from_line, root.from_line, lambda t: t.replace(src.raw, new, 1), why)
    elif src.where == "arg" and src.line:
        ed.replace(
            src.line,
            src.line,
            lambda t: t.replace(f"{src.arg}={src.raw}", f"{src.arg}={new}", 1).replace(
                f'{src.arg}="{src.raw}"', f'{src.arg}="{new}"', 1
            ),
            why,
        )
    else:
        where = f"the {src.arg} build argument" if src.arg else "the base_image argument"
        ed.note(f"the base image comes from {where}: pass {new} instead of {src.raw} ({why})")


def _align_pins(ed: _Editor, ins: Instruction, target: Combo, pinned: str | None) -> None:
    cu = cuda_tables.cu_tag(target.cuda)

    def edit(text: str) -> str:
        text = _CU_PIN.sub(rf"\g<1>+{cu}", text)
        text = _WHL.sub(rf"\g<1>{cu}", text)
        if pinned and cuda_tables.torch_minor(pinned) != cuda_tables.torch_minor(target.torch):
            text = re.sub(rf"\btorch=={re.escape(pinned)}\b", f"torch=={target.torch}", text)
        return text

    ed.replace(ins.line, ins.end_line, edit, f"torch {target.torch} on CUDA {target.cuda}")


def _no_build_isolation(ed: _Editor, ins: Instruction) -> None:
    def edit(text: str) -> str:
        name = re.search(r"flash[-_]attn", text)
        installs = [m for m in _PIP_INSTALL.finditer(text) if name and m.end() <= name.start()]
        if not installs:
            return text
        at = installs[-1].end()
        return text[:at] + " --no-build-isolation" + text[at:]

    ed.replace(ins.line, ins.end_line, edit, "flash-attn builds against the installed torch")


def fix(
    text: str,
    analysis: Analysis,
    *,
    path_label: str = "Dockerfile",
    avoid_images: frozenset[str] = frozenset(),
) -> FixResult | None:
    """The Dockerfile with every error it knows how to fix fixed; None: nothing to do."""
    errors = [f for f in analysis.findings if f.severity == "error"]
    if not errors:
        return None
    parsed = parse(text)
    if (
        parsed.stages
        and analysis.resolved.base_image
        and parsed.final.root.image != analysis.resolved.base_image
    ):
        parsed = parse(text, base_image=analysis.resolved.base_image)  # it came from an override
    ctx = Context(analysis.gpu, analysis.driver_version)
    ed = _Editor(text)
    for root in [s for s in parsed.stages if s.parent is None]:
        members = _members(parsed.stages, root)
        codes = {f.code for f in errors if any(_owns(parsed.stages, s, f.line) for s in members)}
        if not codes:
            continue
        leaf, base = members[-1], parse_base(root.image)
        # Any stage built on this root that compiles flash-attn needs the devel flavor.
        flavors = {stage_flavor(s, base, None) for s in members}
        flavor: cuda_tables.Flavor = "devel" if "devel" in flavors else "runtime"
        new_image = None
        if codes & CUDA_CODES:
            is_final = leaf is parsed.final
            target = target_for(
                leaf,
                base,
                ctx,
                None,
                avoid=avoid_images,
                torch=analysis.resolved.torch if is_final else None,
            )
            if target is None:
                ed.note(
                    f"no torch/CUDA combination in the tables fits stage {root.index + 1} "
                    f"(GPU {ctx.gpu or 'any'}, driver {ctx.driver_version or 'any'})"
                )
                continue
            new_image = render_base(base, target, flavor)
            for stage in members:
                for ins in stage.instructions:
                    if ins.kind in ("RUN", "ARG", "ENV"):
                        pinned = re.search(r"\btorch==([\w.]+?)(?=\+|\s|$|['\"])", ins.value)
                        _align_pins(ed, ins, target, pinned[1] if pinned else None)
        elif "flash_attn_runtime_image" in codes:
            new_image = render_base(base, None, "devel")
        if new_image and new_image != base.image:
            if any(new_image == a or new_image.endswith("/" + a) for a in avoid_images):
                ed.note(f"{new_image} is in avoid_images; base left as {base.image}")
            else:
                _set_image(ed, root, new_image, "; ".join(sorted(codes)))
        elif "flash_attn_runtime_image" in codes:
            ed.note(
                f"{base.image} has no devel variant: use a -devel CUDA base or a "
                "prebuilt flash-attn wheel"
            )
        if "flash_attn_build_isolation" in codes:
            for stage in members:
                for ins in stage.instructions:
                    if (
                        ins.kind == "RUN"
                        and any(n in ins.value for n in FLASH_ATTN)
                        and "--no-build-isolation" not in ins.value
                    ):
                        _no_build_isolation(ed, ins)
    if not ed.changes:
        return None
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            ed.text.splitlines(keepends=True),
            fromfile=f"a/{path_label}",
            tofile=f"b/{path_label}",
        )
    )
    return FixResult(text=ed.text, diff=diff, changes=ed.changes)


def write_fixed(path: Path, result: FixResult, *, write: bool = False) -> Path:
    """Write the fixed text beside `path` as `<name>.fixed`, or over it when write=True
    (SymlinkDestination for a link at either place)."""
    target = path if write else path.with_name(path.name + ".fixed")
    # `.fixed` is this tool's own name, so it is rewritten; write=True is the caller's
    # request to replace the Dockerfile. Neither is written through a link.
    return write_new_or_owned(target, result.text, overwrite=True)
