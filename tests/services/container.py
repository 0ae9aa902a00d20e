"""Run what an image holds as a container runtime would, where `podman run` cannot
(crun here: setrlimit / "cgroups in hybrid mode not supported").

    with mounted_container(cli, "fsdp-eks-trainer:t") as box:
        proc = box.start(["--nproc_per_node=2", "-m", "trainer"], env={"AWS_...": ...})

`podman create` + `podman mount` give the container's own writable root (the image's
layers plus an upper layer, as `run` would). `start` then enters it the way a runtime
does, from the image's config (`podman image inspect`): in a new mount and UTS namespace
(unshare) with /proc, /sys, /dev, a private /dev/shm and runtime-written /etc/hosts,
/etc/hostname and /etc/resolv.conf mounted in, the hostname the container's short id;
then `chroot --userspec` with the image's USER (and its groups and HOME, read from the
image's /etc/passwd and /etc/group), its ENV plus the caller's, its WORKDIR, ENTRYPOINT and
the caller's arguments in place of CMD. The network is the host's (as --network host),
so services on 127.0.0.1 (moto) are reachable.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .podman import PodmanCli

# The mounts a runtime gives every container; `{root}` is the container's root.
_ENTER = """set -e
root="$1"; shift
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mkdir -p "$root/dev/shm" && mount -t tmpfs -o mode=1777,size=1g shm "$root/dev/shm"
for f in hosts hostname resolv.conf; do
  [ -e "$root/etc/$f" ] || touch "$root/etc/$f"
  mount --bind "$RUNTIME_FILES/$f" "$root/etc/$f"
done
hostname "$CONTAINER_HOSTNAME"
exec chroot --userspec="$USERSPEC" --groups="$GROUPS_SPEC" "$root" "$@"
"""


@dataclass
class Container:
    cid: str
    root: Path  # the mounted root filesystem
    config: dict  # the image's Config (Env, User, WorkingDir, Entrypoint, Cmd, Labels)
    runtime_files: Path

    @property
    def hostname(self) -> str:
        return self.cid[:12]

    def user(self) -> tuple[int, int, list[int], str]:
        """(uid, gid, supplementary gids, home) of the image's USER, as a runtime reads them."""
        spec = self.config.get("User") or "0"
        name, _, group = spec.partition(":")
        passwd = [line.split(":") for line in self._etc("passwd")]
        entry = next((p for p in passwd if name in (p[0], p[2])), None)
        uid = int(entry[2]) if entry else int(name)
        gid = int(entry[3]) if entry and not group else None
        if group:
            groups = [line.split(":") for line in self._etc("group")]
            match = next((g for g in groups if group in (g[0], g[2])), None)
            gid = int(match[2]) if match else int(group)
        gid = gid if gid is not None else uid
        member_of = [
            int(g[2]) for g in (line.split(":") for line in self._etc("group"))
            if entry and entry[0] in g[3].split(",")
        ]  # fmt: skip
        home = entry[5] if entry else "/"
        return uid, gid, sorted({gid, *member_of}), home

    def _etc(self, name: str) -> list[str]:
        path = self.root / "etc" / name
        return [line for line in path.read_text().splitlines() if line and ":" in line]

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The container's environment: the image's ENV, HOSTNAME and HOME (from the
        user's passwd entry unless ENV sets it), then the caller's."""
        env = dict(item.split("=", 1) for item in self.config.get("Env") or [])
        env.setdefault("HOME", self.user()[3])
        env["HOSTNAME"] = self.hostname
        return {**env, **(extra or {})}

    def argv(
        self, args: Sequence[str] | None = None, entrypoint: Sequence[str] | None = None
    ) -> list[str]:
        """ENTRYPOINT (or `entrypoint`, as --entrypoint) + (args, or else the image's CMD
        when the entrypoint is the image's own)."""
        if args is None:
            args = list(self.config.get("Cmd") or []) if entrypoint is None else []
        own = self.config.get("Entrypoint") or []
        return [*(own if entrypoint is None else entrypoint), *args]

    def start(
        self,
        args: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        entrypoint: Sequence[str] | None = None,
        **popen,
    ) -> subprocess.Popen[str]:
        """The container's process, started (stdout/stderr as `popen` says)."""
        uid, gid, groups, _ = self.user()
        workdir = self.config.get("WorkingDir") or "/"
        # In the chroot, `cd WORKDIR && exec ENTRYPOINT...` by the image's own /bin/sh.
        inner = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', workdir, *self.argv(args, entrypoint)]
        runtime_env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "RUNTIME_FILES": str(self.runtime_files),
            "CONTAINER_HOSTNAME": self.hostname,
            "USERSPEC": f"{uid}:{gid}",
            "GROUPS_SPEC": ",".join(map(str, groups)),
        }
        # The runtime's own variables are gone once chroot execs: `env -i` + the container's.
        container_env = [f"{k}={v}" for k, v in self.env(env).items()]
        enter = ["unshare", "--mount", "--uts", "--propagation", "private", "--fork", "--"]
        enter += ["sh", "-c", _ENTER, "enter", str(self.root)]
        chrooted = ["/usr/bin/env", "-i", *container_env, *inner]
        return subprocess.Popen([*enter, *chrooted], env=runtime_env, text=True, **popen)


def _runtime_files(where: Path, hostname: str) -> None:
    """/etc/hosts, /etc/hostname, /etc/resolv.conf as a runtime writes them (host network)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "hostname").write_text(hostname + "\n")
    (where / "hosts").write_text(
        f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.0.1\t{hostname}\n"
    )
    resolv = Path("/etc/resolv.conf")
    (where / "resolv.conf").write_text(resolv.read_text() if resolv.is_file() else "")


@contextlib.contextmanager
def mounted_container(cli: PodmanCli, image: str) -> Iterator[Container]:
    """`podman create` + `podman mount`; unmounted and removed after the block."""
    (inspected,) = json.loads(cli("image", "inspect", image).stdout)
    cid = cli("create", image).stdout.strip().splitlines()[-1]
    try:
        root = Path(cli("mount", cid).stdout.strip())
        with tempfile.TemporaryDirectory(prefix="fsdp-runtime-") as tmp:
            files = Path(tmp)
            _runtime_files(files, cid[:12])
            yield Container(cid, root, inspected.get("Config") or {}, files)
    finally:
        cli("umount", cid, check=False)
        cli("rm", "--force", cid, check=False)
