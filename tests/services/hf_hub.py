"""A stand-in of the Hugging Face Hub's HTTP API on loopback, reached through HF_ENDPOINT.

    with hub_server({"org/model": HubRepo("model", files), ...}, token="hf_...") as hub:
        env = hub.env          # HF_ENDPOINT (+ HF_HUB_DISABLE_XET: plain HTTP downloads)
        hub.requests           # every request: (method, path, status, body bytes sent)

It answers what huggingface_hub (snapshot_download, hf_hub_download, HfFileSystem) and
datasets' streaming loader ask of the real hub, from files held in memory:

    GET  /api/{models,datasets}/ORG/NAME[/revision/REV]     repo info: sha, siblings
    GET  /api/{models,datasets}/ORG/NAME/tree/REV[/PATH]    listing (?recursive=true)
    POST /api/{models,datasets}/ORG/NAME/paths-info/REV     entries of the given paths
    HEAD/GET /[datasets/]ORG/NAME/resolve/REV/PATH          a file: X-Repo-Commit, ETag,
                                                            Content-Length; Range requests

A gated repo answers 401 with X-Error-Code GatedRepo (what huggingface_hub turns into
GatedRepoError) unless the request carries `Authorization: Bearer <token>`. Anything
else is a 404 with the hub's X-Error-Code (RepoNotFound, EntryNotFound, RevisionNotFound).

And what huggingface_hub's create_repo and upload_folder send (its single-commit path,
the one it takes with HF_HUB_DISABLE_XET=1), each only with the token (else 401):

    POST /api/repos/create                                  a new repo (409 if it exists)
    POST /api/models/ORG/NAME/preupload/REV                 "regular" or "lfs" per file
    POST /ORG/NAME.git/info/lfs/objects/batch               where to PUT each LFS object
    PUT  /lfs-objects/OID                                   the object (its sha256 checked)
    POST /api/models/ORG/NAME/commit/REV                    the commit (ndjson)
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.services._common import serving


@dataclass
class HubRepo:
    kind: str  # "model" or "dataset"
    files: dict[str, bytes]  # path in the repo -> content
    gated: bool = False
    private: bool = False

    @property
    def sha(self) -> str:  # the commit: changes when any file does
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + self.files[name])
        return digest.hexdigest()


@dataclass
class Hub:
    url: str
    repos: dict[str, HubRepo]
    requests: list[tuple[str, str, int, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    lfs: dict[str, bytes] = field(default_factory=dict)  # uploaded LFS objects by sha256

    @property
    def env(self) -> dict[str, str]:
        # Xet is the hub's chunked transfer protocol; without its headers huggingface_hub
        # downloads over plain HTTP, but the switch keeps it from even trying.
        return {"HF_ENDPOINT": self.url, "HF_HUB_DISABLE_XET": "1",
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "0"}  # fmt: skip

    def file_gets(self, repo: str, path: str | None = None) -> int:
        """GETs of a repo's files (of one file when `path` is given) that were served."""
        return sum(
            1
            for method, url, status, _ in self.requests
            if method == "GET" and status in (200, 206) and f"{repo}/resolve/" in url
            and (path is None or url.split("?")[0].endswith("/" + path))
        )  # fmt: skip

    def bytes_served(self, repo: str, prefix: str = "") -> int:
        """Body bytes of the repo's files sent (under `prefix`, a path in the repo)."""
        return sum(
            sent
            for method, url, _, sent in self.requests
            if method == "GET" and re.search(f"{re.escape(repo)}/resolve/[^/]+/{re.escape(prefix)}",
                                             url)
        )  # fmt: skip


_API = re.compile(
    r"^/api/(models|datasets)/([^/]+/[^/]+)(?:/(revision|tree|paths-info)/([^/]+)(/.*)?)?$"
)
_RESOLVE = re.compile(r"^/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_PREUPLOAD = re.compile(r"^/api/models/([^/]+/[^/]+)/preupload/[^/]+$")
_COMMIT = re.compile(r"^/api/models/([^/]+/[^/]+)/commit/[^/]+$")
_LFS_BATCH = re.compile(r"^/([^/]+/[^/]+)\.git/info/lfs/objects/batch$")
_LFS_OBJECT = re.compile(r"^/lfs-objects/([0-9a-f]{64})$")


def _upload_mode(sample: bytes, size: int) -> str:
    """As the hub decides: binary content or a large file goes through LFS."""
    return "lfs" if b"\0" in sample or size > 10 * 1024 * 1024 else "regular"


def _handler(hub: Hub, token: str | None) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # quiet: tests read hub.requests

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                  head: bool = False) -> None:  # fmt: skip
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)
            with hub.lock:
                hub.requests.append((self.command, self.path, status, 0 if head else len(body)))

        def _error(self, status: int, code: str, message: str, head: bool = False) -> None:
            body = json.dumps({"error": message}).encode()
            headers = {"X-Error-Code": code, "X-Error-Message": message,
                       "Content-Type": "application/json"}  # fmt: skip
            self._send(status, body, headers, head)

        def _json(self, data: object) -> None:
            self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

        def _repo(self, kind: str, name: str, head: bool = False) -> HubRepo | None:
            repo = hub.repos.get(name)
            if repo is None or repo.kind != kind:
                self._error(404, "RepoNotFound", f"Repository Not Found for url: {self.path}", head)
                return None
            if repo.gated and self.headers.get("Authorization") != f"Bearer {token}":
                self._error(
                    401, "GatedRepo",
                    f"Access to {kind} {name} is restricted. You must have access to it "
                    "and be authenticated to access it. Please log in.", head,
                )  # fmt: skip
                return None
            return repo

        def _revision_ok(self, repo: HubRepo, rev: str, head: bool = False) -> bool:
            rev = urllib.parse.unquote(rev)
            if rev in ("main", repo.sha):
                return True
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
            return False

        @staticmethod
        def _entry(repo: HubRepo, path: str) -> dict[str, object]:
            if path in repo.files:
                content = repo.files[path]
                oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
                return {"type": "file", "path": path, "size": len(content), "oid": oid}
            return {"type": "directory", "path": path, "size": 0, "oid": "0" * 40}

        def _dirs(self, repo: HubRepo) -> set[str]:
            return {
                "/".join(name.split("/")[:i])
                for name in repo.files
                for i in range(1, name.count("/") + 1)
            }

        def _api(self, match: re.Match[str]) -> None:
            kinds, name, action, rev, rest = match.groups()
            repo = self._repo(kinds[:-1], name)
            if repo is None:
                return
            if action in (None, "revision"):
                if rev is not None and not self._revision_ok(repo, rev):
                    return
                self._json({
                    "id": name, "_id": repo.sha[:24], "sha": repo.sha, "private": repo.private,
                    "gated": "auto" if repo.gated else False, "disabled": False,
                    "lastModified": "2026-01-01T00:00:00.000Z", "tags": [], "cardData": {},
                    "siblings": [{"rfilename": f} for f in sorted(repo.files)],
                    "downloads": 0, "likes": 0,
                })  # fmt: skip
                return
            if not self._revision_ok(repo, rev):
                return
            dirs = self._dirs(repo)
            if action == "tree":
                base = urllib.parse.unquote((rest or "").strip("/"))
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                recursive = query.get("recursive", ["false"])[0].lower() == "true"
                if base and base not in dirs:
                    self._error(404, "EntryNotFound", f"{base} does not exist on {rev}")
                    return
                prefix = base + "/" if base else ""
                names = sorted(
                    n for n in set(repo.files) | dirs
                    if n.startswith(prefix) and (recursive or "/" not in n[len(prefix):])
                )  # fmt: skip
                self._json([self._entry(repo, n) for n in names])
                return
            # paths-info: a form (paths=a&paths=b) or JSON body
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode()
            if self.headers.get("Content-Type", "").startswith("application/json"):
                paths = json.loads(body).get("paths", [])
            else:
                paths = urllib.parse.parse_qs(body).get("paths", [])
            paths = [paths] if isinstance(paths, str) else paths
            found = [p.strip("/") for p in paths if p.strip("/") in set(repo.files) | dirs]
            self._json([self._entry(repo, p) for p in found])

        def _resolve(self, match: re.Match[str], head: bool) -> None:
            dataset, name, rev, path = match.groups()
            path = urllib.parse.unquote(path.split("?")[0])
            repo = self._repo("dataset" if dataset else "model", name, head)
            if repo is None or not self._revision_ok(repo, rev, head):
                return
            if path not in repo.files:
                self._error(404, "EntryNotFound", f"{path} does not exist on {rev}", head)
                return
            content = repo.files[path]
            etag = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
            headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                       "Content-Type": "application/octet-stream"}  # fmt: skip
            ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
            if ranged:
                start = int(ranged.group(1))
                end = min(int(ranged.group(2) or len(content) - 1), len(content) - 1)
                headers["Content-Range"] = f"bytes {start}-{end}/{len(content)}"
                self._send(206, content[start : end + 1], headers, head)
                return
            self._send(200, content, headers, head)

        def _authorized(self) -> bool:
            if token and self.headers.get("Authorization") == f"Bearer {token}":
                return True
            self._error(401, "Unauthorized", "Invalid credentials in Authorization header")
            return False

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _write(self, path: str) -> bool:
            """The upload routes; False: not one of them."""
            if path == "/api/repos/create":
                if not self._authorized():
                    return True
                asked = json.loads(self._body())
                name = f"{asked.get('organization') or 'user'}/{asked['name']}"
                if name in hub.repos:
                    self._error(409, "RepoExists", "You already created this model repo")
                    return True
                kind = asked.get("type") or "model"
                hub.repos[name] = HubRepo(kind, {}, private=asked.get("visibility") == "private")
                self._json({"url": f"{hub.url}/{name}"})
                return True
            if m := _PREUPLOAD.match(path):
                if self._authorized() and (repo := self._repo("model", m.group(1))):
                    files = json.loads(self._body())["files"]
                    self._json({"files": [
                        {"path": f["path"], "shouldIgnore": False, "oid": None,
                         "uploadMode": _upload_mode(base64.b64decode(f["sample"]), f["size"])}
                        for f in files
                    ], "commitOid": repo.sha})  # fmt: skip
                return True
            if m := _LFS_BATCH.match(path):
                if self._authorized():
                    objects = json.loads(self._body())["objects"]
                    self._json({"transfer": "basic", "objects": [
                        {"oid": o["oid"], "size": o["size"], "authenticated": True,
                         "actions": {"upload": {"href": f"{hub.url}/lfs-objects/{o['oid']}"}}}
                        for o in objects
                    ]})  # fmt: skip
                return True
            if m := _LFS_OBJECT.match(path):
                data = self._body()  # the href is the grant, as S3's presigned URLs are
                if hashlib.sha256(data).hexdigest() != m.group(1):
                    self._error(400, "BadRequest", "sha256 does not match the object")
                    return True
                with hub.lock:
                    hub.lfs[m.group(1)] = data
                self._send(200)
                return True
            if m := _COMMIT.match(path):
                if self._authorized() and (repo := self._repo("model", m.group(1))):
                    self._commit(repo, m.group(1))
                return True
            return False

        def _commit(self, repo: HubRepo, name: str) -> None:
            for line in self._body().decode().splitlines():
                entry = json.loads(line)
                value = entry["value"]
                if entry["key"] == "file":
                    repo.files[value["path"]] = base64.b64decode(value["content"])
                elif entry["key"] == "lfsFile":
                    if value["oid"] not in hub.lfs:
                        self._error(422, "BadRequest", f"LFS object {value['oid']} not uploaded")
                        return
                    repo.files[value["path"]] = hub.lfs[value["oid"]]
            self._json({"commitUrl": f"{hub.url}/{name}/commit/{repo.sha}",
                        "commitOid": repo.sha, "pullRequestUrl": None})  # fmt: skip

        def _route(self, head: bool = False) -> None:
            path = urllib.parse.urlparse(self.path).path
            if self.command in ("POST", "PUT") and self._write(path):
                return
            if (api := _API.match(path)) and not head:
                self._api(api)
            elif resolve := _RESOLVE.match(path):
                self._resolve(resolve, head)
            else:
                self._error(404, "EntryNotFound", f"no route for {path}", head)

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            self._route()

        def do_HEAD(self) -> None:  # noqa: N802
            self._route(head=True)

        def do_POST(self) -> None:  # noqa: N802
            self._route()

        def do_PUT(self) -> None:  # noqa: N802
            self._route()

    return Handler


@contextlib.contextmanager
def hub_server(repos: dict[str, HubRepo], token: str | None = None) -> Iterator[Hub]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(Hub("", repos), token))
    hub = Hub(f"http://127.0.0.1:{server.server_address[1]}", repos)
    server.RequestHandlerClass = _handler(hub, token)
    with serving(server):
        yield hub
