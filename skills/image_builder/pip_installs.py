"""What a stage's RUN lines install with pip: requirements (pins, `+cuXXX` local
versions), PyTorch index URLs, requirements files read from the build context (never
outside it), and the torch pin among them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from skills.catalog import cuda as cuda_tables
from skills.image_builder.dockerfile_stages import Stage
from skills.shared.reading import read_text

# A requirements file is a few KiB; a larger "requirements file" is not read.
MAX_REQUIREMENTS_BYTES = 1024 * 1024


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
