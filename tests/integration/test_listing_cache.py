"""Issue 30 items 14 and 19: the MCP server's tools/list cache.

14: whatever stands where the cache file should be (`[1]`, `{}`, an edited listing, a
    dangling link, a FIFO, a link to /dev/zero, a deep document) is not served: the
    server starts and lists every tool, rebuilt from the sources.
19: a --read-only server writes no cache file."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from commands import tool_names
from mcp_server import build_server, listing

pytestmark = pytest.mark.integration


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    path.mkdir()
    monkeypatch.setenv(listing.CACHE_DIR_ENV, str(path))
    return path


def listed_tools(read_only: bool = False) -> list[str]:
    async def go() -> list[str]:
        async with Client(build_server(read_only=read_only)) as client:
            return sorted(tool.name for tool in (await client.list_tools()).tools)

    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = anyio.run(go)
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the server did not start (a hang on its cache)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def _plant(path: Path, kind: str) -> None:
    if kind == "[1]":
        path.write_text("[1]")
    elif kind == "{}":
        path.write_text("{}")
    elif kind == "an edited listing":  # one tool, as main's cache format held it
        path.write_text(json.dumps([{"name": "get_operation", "description": "x",
                                     "inputSchema": {}, "annotations": {"readOnlyHint": True},
                                     "writes": []}]))  # fmt: skip
    elif kind == "a dangling link":
        path.symlink_to(path.with_name("gone.json"))
    elif kind == "a FIFO":
        os.mkfifo(path)
    elif kind == "a link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif kind == "a deep document":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        raise AssertionError(kind)


KINDS = ["[1]", "{}", "an edited listing", "a dangling link", "a FIFO",
         "a link to /dev/zero", "a deep document"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_a_bad_listing_cache_is_rebuilt_not_served(cache_dir, kind):
    path = cache_dir / f"tools-{listing.sources_hash()}.json"
    _plant(path, kind)
    assert listed_tools() == sorted(tool_names())


def test_a_cache_with_one_tool_less_is_not_served(cache_dir):
    """Hash and shape right, a tool missing: the names are checked too."""
    path = cache_dir / f"tools-{listing.sources_hash()}.json"
    listed_tools()  # written
    entries = json.loads(path.read_text())["entries"][1:]
    path.write_text(listing.cache_document(entries))
    assert listed_tools() == sorted(tool_names())


def test_a_read_only_server_writes_no_cache_file(cache_dir):
    tools = listed_tools(read_only=True)
    assert tools and set(tools) < set(tool_names())  # the writing tools hidden
    assert list(cache_dir.iterdir()) == []
    listed_tools()  # a writing server does write it
    assert [p.name for p in cache_dir.iterdir()] == [f"tools-{listing.sources_hash()}.json"]
