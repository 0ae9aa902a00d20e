"""What tools/list serves: each tool's input schema cut to what an agent needs, computed
once per version of the sources and cached on disk, so a server start imports no tool
module (a tool's module loads on its first call).

An agent pays for every byte of tools/list in every session. So: an output schema that
types only the result's key field (every client can validate structuredContent against
it; the rest of the data is open), no generated titles, no string grammar and no
sanity ceilings (the tool's own model checks them and a refusal names the rule),
optional inputs typed without their null, and each target's settings as one object per
target instead of flat optional fields (the CLI keeps its flat flags: `unnest` turns the
objects back into them)."""

from __future__ import annotations

import hashlib
import json
import os
import pkgutil
import re
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import commands
from commands import all_tools
from skills.operations.operation_state import OperationState
from skills.shared.errors import ToolFailure, bad_fields
from skills.shared.files import atomic_write_text
from skills.shared.paths import path_fields
from skills.shared.reading import load_json
from skills.shared.tooling import ToolSpec

# The sources a tool's schema comes from; their hash names the cache file.
_ROOT = Path(__file__).resolve().parents[1]
_SOURCE_DIRS = ("commands", "skills", "mcp_server")
CACHE_DIR_ENV = "FSDP_EKS_CACHE_DIR"
# A bound this high is a guard against absurd input, not a choice an agent makes.
_SANITY_CEILING = 1_000
# Inputs named by the standard term for what they are: their name is their doc in the
# listing (the CLI's --help keeps the full text).
SELF_NAMED = frozenset(
    {
        "max_steps",
        "train_batch_size",
        "seq_len",
        "learning_rate",
        "grad_accum_steps",
        "seed",
        "cpu_offload",
        "async_save",
        "checkpoint_freq",
        "keep_last",
        "validation_freq",
        "num_nodes",
        "gpu_per_node",
        "region",
        "dry_run",
        "namespace",
        "include_plan",
        "tag",
        "scan_on_push",
        "immutable_tags",
        "limit",
        "analyze_only",
        "project_name",
        "compute_type",
        "log_retention_days",
        "max_restarts",
        "model_name_or_path",
        "dataset_config_name",
        "tokenizer",
    }
)
_DROPPED = ("title", "pattern", "minLength", "maxLength")
_SUBSCHEMAS = ("items", "additionalProperties", "not")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """{"anyOf": [{"type": T, ...}, {"type": "null"}]} as {"type": [T, "null"], ...}: the
    same rule (keywords like minimum or pattern apply only to their own type), shorter."""
    branches = schema.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches):
        return schema
    (other,) = [b for b in branches if b != {"type": "null"}]
    if not isinstance(other.get("type"), str) or "const" in other:
        return schema
    merged = {**{k: v for k, v in schema.items() if k != "anyOf"}, **other}
    merged["type"] = [other["type"], "null"]
    if "enum" in other:
        merged["enum"] = [*other["enum"], None]
    return merged


def compact_schema(schema: Any, drop: tuple[str, ...] = _DROPPED) -> Any:
    """The schema without the annotation keywords in `drop` at any depth (property
    names are left alone), nullable types written short, sanity ceilings left out."""
    if not isinstance(schema, dict):
        return schema
    schema = _nullable(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in drop and not isinstance(value, (dict, list)):
            continue
        if key == "maximum" and isinstance(value, (int, float)) and value >= _SANITY_CEILING:
            continue
        if key == "minimum" and value in (0, 1) and schema.get("type") == "integer":
            continue  # a count: its type says as much
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            value = {name: compact_schema(sub, drop) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            value = [compact_schema(sub, drop) for sub in value]
        elif key in _SUBSCHEMAS:
            value = compact_schema(value, drop)
        out[key] = value
    return out


def one_line(text: str) -> str:
    """A parameter doc's first clause: what it is, without the parenthesised defaults and
    the asides after a semicolon (the CLI's --help keeps them)."""
    head = re.split(r" \(|; ", text, maxsplit=1)[0].strip().rstrip(".")
    return head or text


def _brief(schema: dict[str, Any], describe: bool = True) -> dict[str, Any]:
    """A property with a one-line doc (none with describe=False), and no `false` default
    on a flag (left out is off)."""
    out = {k: v for k, v in schema.items() if not (k == "default" and v is False)}
    if "description" in out:
        if describe:
            out["description"] = one_line(out["description"])
        else:
            del out["description"]
    return out


def _optional(schema: dict[str, Any]) -> dict[str, Any]:
    """An input that may be left out, without its null: leaving it out means None, and
    `"default": null` says nothing more. The tool's model still accepts an explicit null."""
    out = {k: v for k, v in schema.items() if not (k == "default" and v is None)}
    kind = out.get("type")
    if isinstance(kind, list) and "null" in kind:
        rest = [k for k in kind if k != "null"]
        out["type"] = rest[0] if len(rest) == 1 else rest
    if isinstance(out.get("enum"), list):
        out["enum"] = [v for v in out["enum"] if v is not None]
    return out


def input_schema(spec: ToolSpec) -> dict[str, Any]:
    """The tool's input schema as listed: compact, each target's settings nested."""
    schema = compact_schema(spec.params.model_json_schema())
    required = set(schema.get("required", ()))
    properties = {
        name: _brief(sub if name in required else _optional(sub), name not in SELF_NAMED)
        for name, sub in schema.get("properties", {}).items()
    }
    for group in spec.groups:
        if group.discriminator is None:
            continue
        nested = {
            # Its name says which target (`target`'s enum lists them). Closed, as the
            # server's instructions say (unnest refuses another key by name): an
            # additionalProperties per object would cost the listing ~0.8 KB.
            key: {
                "type": "object",
                "properties": {
                    # bare: a target's setting is named by the standard term and its
                    # default is the target's (runs/, namespace "default"), as the CLI says
                    n: {k: v for k, v in _brief(properties[n], False).items() if k != "default"}
                    for n in model.model_fields
                    if n != group.discriminator
                },
            }
            for key, model in group.members.items()
            if len(model.model_fields) > 1
        }
        for name in group.fields - {group.discriminator}:
            properties.pop(name, None)
        properties.update(nested)
    # additionalProperties: false says what a refusal says better (it names the key).
    rest = {k: v for k, v in schema.items() if k != "additionalProperties"}
    return {**rest, "properties": properties}


def unnest(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """MCP arguments with each target's settings as one object, as the tool's flat inputs
    ({"kubernetes": {"cluster_name": "c"}} -> {"target": "kubernetes", "cluster_name": "c"}).
    Flat settings are still accepted; a setting given twice must agree."""
    out = dict(arguments)
    for group in spec.groups:
        if group.discriminator is None:
            continue
        given = [key for key in group.members if key in out and key not in spec.params.model_fields]
        for key in given:
            settings = out.pop(key)
            if settings is None:
                continue
            if not isinstance(settings, dict):
                raise bad_fields([{"field": key, "problem": "must be an object"}], spec.name)
            allowed = set(group.members[key].model_fields) - {group.discriminator}
            problems = [
                {"field": f"{key}.{name}", "problem": f"is not a setting of target {key!r}"}
                for name in settings
                if name not in allowed
            ] + [
                {"field": f"{key}.{name}", "problem": "given twice with different values"}
                for name, value in settings.items()
                if name in out and out[name] != value
            ]
            if problems:
                raise bad_fields(problems, spec.name)
            out.update(settings)
        if group.discriminator not in out and len(given) == 1:
            out[group.discriminator] = given[0]
    return out


def nest(spec: ToolSpec, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The inverse of `unnest`: flat arguments with each target's settings as the one
    object tools/list shows ({"target": "kubernetes", "cluster_name": "c"} ->
    {"target": "kubernetes", "kubernetes": {"cluster_name": "c"}}), for a next step an
    agent calls as given."""
    out = dict(arguments)
    for group in spec.groups:
        if group.discriminator is None:
            continue
        flat = [name for name in out if name in group.fields and name != group.discriminator]
        key = out.get(group.discriminator)
        if key is None:  # implied by the settings: the first member that has them all
            key = next(
                (k for k, m in group.members.items() if set(flat) <= set(m.model_fields)), None
            )
        if not flat or not isinstance(key, str) or key not in group.members:
            continue
        model = group.members[key]
        if len(model.model_fields) > 1:
            out[key] = {name: out.pop(name) for name in flat if name in model.model_fields}
    return out


def listed_description(doc: str) -> str:
    """A tool's docstring as tools/list shows it: its first paragraph, on one line (the
    paragraphs after it are the CLI's --help)."""
    return " ".join(doc.split("\n\n", 1)[0].split())


def _annotations(spec: ToolSpec) -> dict[str, bool]:
    """Only the hints that say something: destructive and idempotent mean nothing for a
    read-only tool, and idempotentHint's default is false."""
    if spec.read_only:
        return {"readOnlyHint": True}
    hints = {"readOnlyHint": False, "destructiveHint": spec.destructive}
    return {**hints, "idempotentHint": True} if spec.idempotent else hints


WRITES_KEY = "writes"


# A result's fields worth typing in its outputSchema, in the order one is chosen.
KEY_FIELDS = ("status", "jobs", "servers", "operations", "action", "source", "job_name")


def output_schema(spec: ToolSpec) -> dict[str, Any]:
    """What every structuredContent of the tool holds: an object with its key field
    typed (an operation tool's detached answer is an OperationState: a field both have).
    Other fields are open: the result's model says them and the text summarises them."""
    shapes = [spec.result.model_json_schema()]
    if spec.operation:
        shapes.append(OperationState.model_json_schema())
    for name in KEY_FIELDS:
        kinds = {_json_type(shape, name) for shape in shapes}
        if len(kinds) == 1 and None not in kinds:
            (kind,) = kinds
            return {"type": "object", "properties": {name: {"type": kind}}, "required": [name]}
    return {"type": "object"}


def _json_type(shape: dict[str, Any], name: str) -> str | None:
    """The field's one JSON type when the model requires it, else None."""
    if name not in shape.get("required", ()):
        return None
    kind = shape.get("properties", {}).get(name, {}).get("type")
    return kind if isinstance(kind, str) else None


def tool_entry(spec: ToolSpec) -> dict[str, Any]:
    """The tool as tools/list lists it (JSON, wire names)."""
    return {
        "name": spec.name,
        "description": listed_description(spec.description),
        "inputSchema": input_schema(spec),
        "outputSchema": output_schema(spec),
        "annotations": _annotations(spec),
        # Not listed: the parameters that write a file (a read-only server hides them).
        WRITES_KEY: writing_parameters(spec),
    }


def writing_parameters(spec: ToolSpec) -> list[str]:
    """The tool's parameters that name a file it writes (LocalPath(writable=True))."""
    return [name for name, marker in path_fields(spec.params).items() if marker.writable]


def sources_hash() -> str:
    """A hash of every source a schema may come from, and the versions that shape it."""
    digest = hashlib.sha256()
    for package in ("mcp", "pydantic"):
        digest.update(f"{package}={metadata.version(package)}\n".encode())
    for folder in _SOURCE_DIRS:
        for path in sorted((_ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def _cache_dir() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fsdp-eks"


# The listing is ~25 KB; a file far bigger in the cache's place is not one we wrote.
_CACHE_MAX_BYTES = 1 << 20
_ENTRY_FIELDS = {
    "name": str,
    "description": str,
    "inputSchema": dict,
    "annotations": dict,
    WRITES_KEY: list,
}


def cache_document(entries: list[dict[str, Any]]) -> str:
    """The cache file's text: the entries and the SHA-256 of their JSON, which a read
    checks (a cache edited, cut short or left half-written is rebuilt, not served)."""
    return json.dumps({"sha256": _digest(entries), "entries": entries}, separators=(",", ":"))


def _digest(entries: Any) -> str:
    body = json.dumps(entries, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _tool_modules() -> set[str]:
    """The tools' names as the commands package's public modules say, without importing
    one (commands.tool_names imports them all, which the cache exists to avoid)."""
    return {m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")}


def _read_cache(path: Path) -> list[dict[str, Any]] | None:
    """The entries in the cache file, or None when there is none we can trust: read by
    the bounded no-link reader (a link, FIFO or device in its place is no cache), then
    its hash, every entry's shape and the set of tool names checked."""
    try:
        document = load_json(
            path, what="listing cache", max_bytes=_CACHE_MAX_BYTES, follow_links=False
        )
    except ToolFailure:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("entries"), list):
        return None
    entries = document["entries"]
    if document.get("sha256") != _digest(entries):
        return None  # edited, or not a cache this server wrote
    shaped = all(
        isinstance(e, dict)
        and all(isinstance(e.get(k), t) for k, t in _ENTRY_FIELDS.items())
        and isinstance(e["annotations"].get("readOnlyHint"), bool)
        for e in entries
    )
    if not shaped or sorted(e["name"] for e in entries) != sorted(_tool_modules()):
        return None
    return entries


def cached_entries(write: bool = True) -> list[dict[str, Any]]:
    """Every registered tool's entry, from the cache when the sources are unchanged and
    the cache checks out (_read_cache), else computed (importing every tool module) and,
    with `write` (not on a read-only server), cached for the next start: written to a
    temporary file and renamed, never through a link."""
    path = _cache_dir() / f"tools-{sources_hash()}.json"
    cached = _read_cache(path)
    if cached is not None:
        return cached

    entries = entries_of(all_tools())
    if write:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, cache_document(entries))
        except (OSError, ToolFailure):  # a read-only home, a link in its place: uncached
            pass
    return entries


def entries_of(specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    return [tool_entry(spec) for spec in specs]
