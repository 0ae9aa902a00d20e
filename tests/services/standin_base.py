"""A faithful stand-in of the trainer image's base (pytorch/pytorch), built once per machine.

    base = standin_base("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", torch="2.13.0")
    base.store   # a podman image store holding it under that name (an additional image store)

No public image can be pulled here, so the base is made the way the real one is laid out
(pytorch's own Dockerfile, `official` stage): a distribution root filesystem (Debian, from
the mirror apt on this machine is configured for, by mmdebstrap) with Python, pip, numpy,
pyyaml and torch of the base's version in /opt/conda (python, pip and torchrun in
/opt/conda/bin), and the base's ENV/WORKDIR/LABEL. torch is the CPU wheel this machine's pip
finds (its own config: find-links, indexes, constraints), downloaded by the host's pip and
installed offline in the root filesystem. Differences from the real base, on purpose: Debian
instead of Ubuntu, a venv instead of conda, no CUDA libraries (no GPU here).

It is large (about 1.2 GB) and takes minutes, so it is kept per machine, keyed by its
recipe (this file, the name, the versions, the mirror and the CA certificates): a later
session, or a parallel one, reuses it; a changed recipe builds a new one. A lock makes
parallel sessions wait for one build instead of racing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ._common import MissingBinary, find_binary

APT_PACKAGE = "mmdebstrap"
# What the real base adds to its distribution (ca-certificates) plus what its conda brings
# (python, pip); passwd: Ubuntu's base has useradd, Debian's minbase does not.
DEBIAN_PACKAGES = ("python3", "python3-venv", "ca-certificates", "passwd")
# What pytorch's Dockerfile installs into /opt/conda besides torch (`conda install
# ... pyyaml numpy`), so the stand-in hides a missing dependency no more than the real one.
CONDA_PACKAGES = ("numpy", "pyyaml")
PATH = (
    "/usr/local/nvidia/bin:/usr/local/cuda/bin:/opt/conda/bin:"
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)
# Local CA certificates this machine trusts (a TLS-inspecting egress on some hosts): the
# stand-in trusts them too, and its pip uses the system store for them, as the host's pip
# does, so the image's `pip install` reaches PyPI from here as from a user's machine.
LOCAL_CAS = Path("/usr/local/share/ca-certificates")
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


def check() -> str:
    """mmdebstrap, or MissingBinary with the apt hint (podman is checked by its own module).
    Root too: the root filesystem is made, and the image later run, by chroot."""
    if os.geteuid() != 0:
        raise MissingBinary("the stand-in base and the chroot run need root (as CI runs)")
    return find_binary("mmdebstrap", apt=APT_PACKAGE)


@dataclass
class StandinBase:
    name: str  # the real base's name, e.g. pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime
    store: Path  # podman image store (graphroot) that holds it; use as an additional store
    key: str
    build_seconds: float | None  # how long the build took (when this machine made it)
    reused: bool  # True: an earlier session had built it


def _suite() -> str:
    """The host's Debian release: its python is the one the downloaded wheels are for."""
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return "bookworm"


def _local_cas() -> list[Path]:
    return sorted(LOCAL_CAS.glob("*.crt")) if LOCAL_CAS.is_dir() else []


def _key(name: str, torch: str) -> str:
    """The recipe: what goes in, how, and from where (not this file's prose)."""
    recipe = {
        "name": name,
        "torch": torch,
        "suite": _suite(),
        "python": sys.version.split()[0],
        "debian": DEBIAN_PACKAGES,
        "conda": CONDA_PACKAGES,
        "hooks": _hooks(Path("WHEELS"), Path("CAS"), torch, bool(_local_cas())),
        "config": _config(torch),
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    for path in [DEBIAN_SOURCES, *_local_cas()]:
        if path.is_file():
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    explicit = os.environ.get("FSDP_EKS_TEST_CACHE")
    base = (
        Path(explicit)
        if explicit
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fsdp-eks-tests"
    )
    return base / "base-standin"


def standin_base(name: str, *, torch: str, timeout: float = 1800) -> StandinBase:
    """The stand-in of `name` in a per-machine image store, built here if none is yet."""
    from filelock import FileLock

    check()
    podman = find_binary("podman", apt="podman")
    key = _key(name, torch)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    home = root / key
    done = home / "ready.json"
    with FileLock(str(root / f"{key}.lock"), timeout=timeout):
        if done.is_file():
            return StandinBase(name, home / "store", key, None, reused=True)
        started = time.monotonic()
        tarball = home / "rootfs.tar"
        if not (home / "rootfs.ok").is_file():  # kept across a failed import
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            with tempfile.TemporaryDirectory(prefix="fsdp-standin-", dir=root) as tmp:
                _rootfs(Path(tmp), torch, tarball)
            (home / "rootfs.ok").write_text("")
        shutil.rmtree(home / "store", ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="fsdp-si-") as tmp:  # podman: runroot < 50 chars
            _import(podman, tarball, name, torch, store=home / "store", run=Path(tmp))
        tarball.unlink()
        seconds = round(time.monotonic() - started, 1)
        done.write_text(json.dumps({"name": name, "torch": torch, "build_seconds": seconds}))
        return StandinBase(name, home / "store", key, seconds, reused=False)


def qualified(name: str) -> str:
    """The name podman stores: `pytorch/pytorch:1` -> `docker.io/pytorch/pytorch:1`."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if rest else f"docker.io/library/{name}"


def _host_env() -> dict[str, str]:
    # The host's pip settings (PIP_FIND_LINKS=...) are the host's: inside the root
    # filesystem only its own config applies.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}


def _rootfs(tmp: Path, torch: str, tarball: Path) -> None:
    wheels = tmp / "wheels"
    # The host's pip and its config choose the files: the same torch `make setup` installs.
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels),
         f"torch=={torch}", *CONDA_PACKAGES],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    cas = tmp / "cas"
    cas.mkdir()
    for ca in _local_cas():
        shutil.copy(ca, cas / ca.name)
    hooks = _hooks(wheels, cas, torch, bool(_local_cas()))
    command = ["mmdebstrap", "--variant=minbase", "--include=" + ",".join(DEBIAN_PACKAGES)]
    command += [f"--customize-hook={hook}" for hook in hooks]
    command += [_suite(), str(tarball)]
    if DEBIAN_SOURCES.is_file():
        command.append(str(DEBIAN_SOURCES))  # apt's own mirror (a file: pasted as sources)
    log = tmp / "mmdebstrap.log"
    with log.open("wb") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=_host_env(),
                              timeout=1500, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"mmdebstrap failed ({done.returncode}):\n{log.read_text()[-4000:]}")


def _hooks(wheels: Path, cas: Path, torch: str, with_cas: bool) -> list[str]:
    inside = 'chroot "$1" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8'
    # Hooks run on the host with the root filesystem in "$1"; `inside` runs in it.
    hooks = [
        f"{inside} python3 -m venv /opt/conda",
        f'cp -r "{wheels}" "$1/tmp/wheels"',
        f"{inside} /opt/conda/bin/pip install -q --no-cache-dir --no-index"
        f" --find-links /tmp/wheels torch=={torch} {' '.join(CONDA_PACKAGES)}",
        'rm -rf "$1/tmp/wheels"',
        'mkdir -p "$1/workspace"',
    ]
    if with_cas:
        hooks += [
            f'cp "{cas}"/*.crt "$1/usr/local/share/ca-certificates/"',
            f"{inside} update-ca-certificates",
            "printf '[global]\\ncert = %s\\n' /etc/ssl/certs/ca-certificates.crt"
            ' > "$1/etc/pip.conf"',
        ]
    return hooks


def _config(torch: str) -> list[str]:
    """The real base's config (pytorch's Dockerfile: ENV PATH/NVIDIA_*/LD_LIBRARY_PATH/
    PYTORCH_VERSION, WORKDIR, LABEL), as `podman import --change` lines."""
    return [
        f"ENV PATH={PATH}",
        "ENV NVIDIA_VISIBLE_DEVICES=all",
        "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
        "ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64",
        f"ENV PYTORCH_VERSION={torch}",
        "WORKDIR /workspace",
        "LABEL com.nvidia.volumes.needed=nvidia_driver",
    ]


def _import(podman: str, rootfs: Path, name: str, torch: str, *, store: Path, run: Path) -> None:
    """`podman import` under the real name, with the real base's config."""
    changes = _config(torch)
    command = [podman, "--root", str(store), "--runroot", str(run / "run"),
               "--tmpdir", str(run / "libpod"), "--storage-driver", "overlay",
               "--events-backend", "file", "--cgroup-manager", "cgroupfs", "import"]  # fmt: skip
    for change in changes:
        command += ["--change", change]
    command += [str(rootfs), qualified(name)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"podman import failed ({done.returncode}): {done.stderr[-3000:]}")
