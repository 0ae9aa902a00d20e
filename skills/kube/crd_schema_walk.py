"""One pass over a custom resource and its CRD's structural schema, as the API server
makes it on create: unknown fields found (or pruned), defaults applied, the schema's
value checks made (type, enum, pattern, lengths, bounds, allOf/anyOf/oneOf/not, list
uniqueness), and the nodes whose CEL rules are to run collected."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping
from functools import cache
from typing import Any

import re2  # google-re2: the server's Go regexp speaks RE2's syntax

from skills.kube.crd_cel import Rule
from skills.kube.crd_problems import (
    DUPLICATE,
    INVALID,
    REQUIRED,
    TOO_LONG,
    TOO_MANY,
    UNSUPPORTED,
    Problem,
    child_path,
    counted,
    is_date_time,
    is_integer,
    key_path,
    supported,
    type_problem,
)


class SchemaWalk:
    """One pass over an object and its schema: prune, default, check, and collect the rule
    nodes met (evaluated after, when no schema error blocks them)."""

    def __init__(self, rules: Mapping[int, tuple[Rule, ...]], top: Any) -> None:
        self.rules = rules  # by id() of the schema node that declares them
        self.top = top
        self.problems: list[Problem] = []
        self.unknown: list[str] = []
        self.pending: list[tuple[tuple[Rule, ...], Any, str, Mapping[str, Any]]] = []

    def visit(self, value: Any, schema: Mapping[str, Any], path: str) -> Any:
        """`value` pruned and defaulted; problems and rule nodes recorded on the way."""
        if not self._type_ok(value, schema, path):
            return value
        self._value_checks(value, schema, path)
        # No rule runs on a null (validation.go: `obj == nil` returns early).
        rules = None if value is None else self.rules.get(id(schema))
        slot = len(self.pending)
        if rules:
            self.pending.append((rules, None, path, schema))  # filled below: rules run top-down
        if isinstance(value, dict):
            value = self._object(value, schema, path)
        elif isinstance(value, list):
            value = self._array(value, schema, path)
        if rules:
            self.pending[slot] = (rules, value, path, schema)
        return value

    def _type_ok(self, value: Any, schema: Mapping[str, Any], path: str) -> bool:
        if value is None:
            if schema.get("nullable") or not (schema.get("type") or _int_or_string(schema)):
                return True
            expected = "integer or string" if _int_or_string(schema) else schema["type"]
            self.problems.append(type_problem(path, value, expected))
            return False
        if _int_or_string(schema):
            if isinstance(value, str) or is_integer(value):
                return True
            self.problems.append(type_problem(path, value, "integer or string"))
            return False
        expected = schema.get("type")
        if not expected or _JSON_TYPES[expected](value):
            return True
        self.problems.append(type_problem(path, value, expected))
        return False

    def _value_checks(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        add = self.problems.append
        if "enum" in schema and value not in schema["enum"]:
            add(Problem(path, UNSUPPORTED, supported(schema["enum"]), value, True))
        if isinstance(value, str):
            self._string_checks(value, schema, path)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._number_checks(value, schema, path)
        for name in ("allOf", "anyOf", "oneOf"):
            if name in schema:
                passing = [not self._fails(value, sub, path) for sub in schema[name]]
                ok = {"allOf": all, "anyOf": any, "oneOf": lambda p: sum(p) == 1}[name](passing)
                if not ok:
                    detail = f"{path or 'body'} in body must validate {_COMBINERS[name]}"
                    add(Problem(path, INVALID, detail, value, True))
        if "not" in schema and not self._fails(value, schema["not"], path):
            add(
                Problem(
                    path, INVALID, f"{path} in body must not validate the schema (not)", value, True
                )
            )

    def _string_checks(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        add = self.problems.append
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            add(
                Problem(
                    path, TOO_LONG, f"may not be more than {counted(schema['maxLength'], 'byte')}"
                )
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            detail = f"{path} in body should be at least {schema['minLength']} chars long"
            add(Problem(path, INVALID, detail, value, True))
        if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            detail = f"{path} in body should match '{schema['pattern']}'"
            add(Problem(path, INVALID, detail, value, True))
        if schema.get("format") == "date-time" and not is_date_time(value):
            detail = f"{path} in body must be of type date-time: {json.dumps(value)}"
            add(Problem(path, INVALID, detail, value, True, wrong_type=True))

    def _number_checks(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        add = self.problems.append
        if "minimum" in schema:
            low, exclusive = schema["minimum"], schema.get("exclusiveMinimum") is True
            if value < low or (exclusive and value == low):
                word = "greater than" if exclusive else "greater than or equal to"
                add(Problem(path, INVALID, f"{path} in body should be {word} {low}", value, True))
        if "maximum" in schema:
            high, exclusive = schema["maximum"], schema.get("exclusiveMaximum") is True
            if value > high or (exclusive and value == high):
                word = "less than" if exclusive else "less than or equal to"
                add(Problem(path, INVALID, f"{path} in body should be {word} {high}", value, True))
        if "multipleOf" in schema and not math.isclose(value / schema["multipleOf"] % 1, 0):
            detail = f"{path} in body should be a multiple of {schema['multipleOf']}"
            add(Problem(path, INVALID, detail, value, True))

    def _fails(self, value: Any, schema: Mapping[str, Any], path: str) -> bool:
        """Whether `value` breaks a value-validation sub-schema (allOf/anyOf/oneOf/not),
        checked without pruning, defaulting or rules, as structural schemas allow there."""
        probe = SchemaWalk({}, self.top)
        probe.visit(value, _without_structure(schema), path)  # visit never changes its input
        return bool(probe.problems)

    def _object(
        self, value: dict[str, Any], schema: Mapping[str, Any], path: str
    ) -> dict[str, Any]:
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = schema.get("x-kubernetes-preserve-unknown-fields") is True or extra is True
        root_meta = path == "" and isinstance(value.get("metadata"), dict)
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = child_path(path, key)
            if root_meta and key == "metadata":
                out[key] = self._root_metadata(item, props.get("metadata") or {})
            elif path == "" and key in ("apiVersion", "kind"):
                out[key] = item  # checked against the CRD by _identity_problems
            elif key in props:
                if item is None and not props[key].get("nullable"):
                    continue  # the server drops a null of a non-nullable field
                out[key] = self.visit(item, props[key], where)
            elif isinstance(extra, Mapping):
                out[key] = self.visit(item, extra, key_path(path, key))
            elif keep_unknown or not (props or extra is False or schema.get("type") == "object"):
                out[key] = item
            else:
                self.unknown.append(where)
        for key, sub in props.items():
            if key not in out and "default" in sub and not (path == "" and key == "metadata"):
                out[key] = self.visit(copy.deepcopy(sub["default"]), sub, child_path(path, key))
        for key in schema.get("required") or ():
            if key not in out:
                self.problems.append(Problem(child_path(path, key), REQUIRED))
        if "maxProperties" in schema and len(out) > schema["maxProperties"]:
            detail = f"must have at most {counted(schema['maxProperties'], 'item')}"
            self.problems.append(Problem(path, TOO_MANY, detail, len(out), True))
        if "minProperties" in schema and len(out) < schema["minProperties"]:
            detail = f"{path} in body should have at least {schema['minProperties']} properties"
            self.problems.append(Problem(path, INVALID, detail, len(out), True))
        return out

    def _root_metadata(self, meta: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
        """ObjectMeta is the server's (checked by _object_meta_problems), kept whole; a CRD's
        schema may only constrain name and generateName."""
        props: Mapping[str, Any] = schema.get("properties") or {}
        for key in ("name", "generateName"):
            if key in props and key in meta:
                self.visit(meta[key], props[key], f"metadata.{key}")
        return meta

    def _array(self, value: list[Any], schema: Mapping[str, Any], path: str) -> list[Any]:
        items = schema.get("items")
        out = (
            value
            if not isinstance(items, Mapping)
            else [self.visit(item, items, f"{path}[{i}]") for i, item in enumerate(value)]
        )
        if "maxItems" in schema and len(out) > schema["maxItems"]:
            detail = f"must have at most {counted(schema['maxItems'], 'item')}"
            self.problems.append(Problem(path, TOO_MANY, detail, len(out), True))
        if "minItems" in schema and len(out) < schema["minItems"]:
            detail = f"{path} in body should have at least {schema['minItems']} items"
            self.problems.append(Problem(path, INVALID, detail, len(out), True))
        self.problems.extend(_list_type_problems(out, schema, path))
        return out


def _list_type_problems(items: list[Any], schema: Mapping[str, Any], path: str) -> list[Problem]:
    """x-kubernetes-list-type set: no two equal items; map: no two items with the same keys."""
    kind = schema.get("x-kubernetes-list-type")
    if kind not in ("set", "map"):
        return []
    keys = schema.get("x-kubernetes-list-map-keys") or []
    seen: set[str] = set()
    problems = []
    for i, item in enumerate(items):
        if kind == "map" and isinstance(item, dict):
            identity: Any = {k: item.get(k) for k in keys}
        else:
            identity = item
        marker = json.dumps(identity, sort_keys=True, default=str)
        if marker in seen:
            problems.append(Problem(f"{path}[{i}]", DUPLICATE, "", identity, True))
        seen.add(marker)
    return problems


_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": is_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}
_COMBINERS = {
    "allOf": "all schemas (allOf)",
    "anyOf": "at least one schema (anyOf)",
    "oneOf": "exactly one schema (oneOf)",
}


def _int_or_string(schema: Mapping[str, Any]) -> bool:
    return schema.get("x-kubernetes-int-or-string") is True


def _without_structure(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """A value-validation branch: its types are checked, never pruned against."""
    return {**schema, "x-kubernetes-preserve-unknown-fields": True}


@cache
def _pattern(pattern: str) -> Any:
    """A schema `pattern`, compiled by RE2: the server's Go regexp speaks RE2's syntax."""
    return re2.compile(pattern)
