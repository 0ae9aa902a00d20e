"""The trainer image this package ships, for a project without a Dockerfile of its own.

trainer_image/ holds the image's Dockerfile, pyproject.toml and README.md (in the source
tree links to the checkout's own files, so there is one Dockerfile; a wheel carries
copies: package data). `trainer_context` assembles them with the packages the Dockerfile
copies (trainer, skills, commands, mcp_server, from wherever they are installed) into
one build context, named by a hash of its content: a second build of the same sources
reuses it, a changed source gets a new one."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

PACKAGED_DIR = Path(__file__).resolve().parent / "trainer_image"
TOP_FILES = ("Dockerfile", "pyproject.toml", "README.md")
# What the Dockerfile COPYs besides TOP_FILES.
PACKAGES = ("trainer", "skills", "commands", "mcp_server")
_SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.fixed", ".dockerfile.fsdp-eks.*")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # found, not imported: the trainer needs torch
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise FileNotFoundError(f"package {name} is not installed")
    return Path(locations[0]).resolve()


def _sources() -> list[tuple[str, Path]]:
    """(path in the context, file here) for every file the image is built from."""
    files = [(name, PACKAGED_DIR / name) for name in TOP_FILES]
    for package in PACKAGES:
        root = _package_dir(package)
        for dirpath, dirnames, filenames in os.walk(root):
            ignored = _SKIPPED(dirpath, [*dirnames, *filenames])
            dirnames[:] = sorted(d for d in dirnames if d not in ignored)
            for filename in sorted(f for f in filenames if f not in ignored):
                path = Path(dirpath) / filename
                files.append(((Path(package) / path.relative_to(root)).as_posix(), path))
    return files


def trainer_context(cache: Path) -> Path:
    """The build context of the packaged trainer image under `cache` (its Dockerfile at
    <context>/Dockerfile), made once per content."""
    files = _sources()
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    context = cache / f"trainer-context-{digest.hexdigest()[:16]}"
    if (context / "Dockerfile").is_file():
        return context
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=cache, prefix=".trainer-context."))
    try:
        for name, path in files:
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)  # a link's content, never the link
        os.replace(staging, context)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (context / "Dockerfile").is_file():  # another build made it first: fine
            raise
    return context
