"""A custom resource checked as the API server checks it on CREATE, before anything reaches
a cluster: against one version of its CustomResourceDefinition's structural schema
(openAPIV3Schema) and that version's CEL rules (x-kubernetes-validations).

What the API server does, in its order (k8s.io/apiextensions-apiserver, registry/customresource
and pkg/apiserver/schema), and what this module does the same way:

1. Decoding: fields the schema does not declare are unknown. With fieldValidation=Strict
   (what kubectl sends by default) the request is refused with `unknown field "spec.x"`;
   with Ignore/Warn they are pruned and the rest goes on. `field_validation` picks one;
   the default is Strict, because a field the renderer writes that the server would drop
   silently is a bug to report, not to ship. Null values of non-nullable fields are dropped.
2. Defaulting: `default`s fill absent properties (nested defaults too), so rules see the
   object as stored.
3. Create strategy: `status` is dropped when the version has the status subresource.
4. Validation: ObjectMeta (name a DNS-1123 subdomain, label and annotation keys and values),
   the schema (type, x-kubernetes-int-or-string, required, enum, pattern, format date-time,
   min/maxLength (characters), minimum/maximum, min/maxItems, min/maxProperties,
   allOf/anyOf/oneOf/not, x-kubernetes-list-type set/map uniqueness), then the CEL rules,
   unless a schema error blocks them (wrong type, required, enum, too long, too many: the
   server then says "some validation rules were not checked ...", as here).

CEL rules run on cel-python (`celpy`): spec-true string sizes (code points, as cel-go) and
RE2 for `matches` (google-re2, the engine cel-go uses). Each rule binds `self` to the value
of its node (each item of a list, each value of a map), with numbers as doubles and the root's
`metadata` limited to name and generateName, as the server does. Rules that read `oldSelf`
are transition rules: not run on create (the server skips them too). A rule's failure is
worded as the server words it: its `messageExpression` (when it evaluates to a one-line
string), else its `message`, else "failed rule: <rule>", at the node's path plus its
`fieldPath`, typed by its `reason`. No Kubernetes-specific CEL library function
(k8s.io/apiserver/pkg/cel/library) is supplied: none of the vendored CRDs' rules uses one,
and a rule that calls one fails the test that evaluates every vendored rule. The CEL cost
budget is not enforced. Schema `pattern`s run on RE2 too (Go's regexp is RE2).

A CRD file's rules are compiled once (per file, cached); a validate call then walks the
object once and evaluates only the rules whose nodes are present.
"""

from __future__ import annotations

import copy
import datetime
import gzip
import json
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

import re2  # google-re2: cel-python's own engine for matches()
import yaml

from skills.shared.errors import ErrorCode, ToolFailure

FieldValidation = Literal["Strict", "Ignore"]
DEFAULT_HINT = (
    "Fix the field each problem names (details.problems words them as the API server would)."
)
MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes
MAX_PROBLEMS = 20  # in details; the message names the first few
IN_MESSAGE = 3

# field.ErrorType strings (k8s.io/apimachinery/pkg/util/validation/field/errors.go).
INVALID = "Invalid value"
REQUIRED = "Required value"
UNSUPPORTED = "Unsupported value"
FORBIDDEN = "Forbidden"
DUPLICATE = "Duplicate value"
TOO_LONG = "Too long"
TOO_MANY = "Too many"
UNKNOWN = "unknown field"
# x-kubernetes-validations reason -> field error type (apiextensions FieldValueErrorReason).
REASONS = {
    "FieldValueInvalid": INVALID,
    "FieldValueForbidden": FORBIDDEN,
    "FieldValueRequired": REQUIRED,
    "FieldValueDuplicate": DUPLICATE,
}
NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)

# ObjectMeta (k8s.io/apimachinery/pkg/util/validation/validation.go).
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN)  # fullmatch: `$` would let a final newline in
_LABEL = re.compile(DNS1123_LABEL)
_QUALIFIED = re.compile(QUALIFIED_NAME)
TOTAL_ANNOTATION_BYTES = 256 * 1024
_FIELD_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\['([^']*)'\]|\[(\d+)\]")


@dataclass(frozen=True)
class Problem:
    """One refusal, as a field.Error: the path, its type, the bad value, the detail."""

    path: str
    type: str
    detail: str = ""
    value: Any = None
    shows_value: bool = False
    wrong_type: bool = False  # field.ErrorTypeTypeInvalid (shown as "Invalid value")

    @property
    def blocks_rules(self) -> bool:
        """The schema errors after which the server runs no CEL rule (hasBlockingErr)."""
        return self.wrong_type or self.type in (REQUIRED, UNSUPPORTED, TOO_LONG, TOO_MANY)

    def __str__(self) -> str:
        if self.type == UNKNOWN:
            return f'unknown field "{self.path}"'
        body = self.type
        if self.shows_value:
            body += f": {_shown(self.value)}"
        if self.detail:
            body += f": {self.detail}"
        return f"{self.path or '<nil>'}: {body}"


@dataclass(frozen=True)
class Rule:
    """One compiled x-kubernetes-validations entry of a schema node."""

    rule: str
    schema_path: str  # where in the schema it is declared (for tests and errors)
    program: Any
    message: str
    message_program: Any
    field_path: str
    reason: str
    transition: bool  # reads oldSelf: not run on create

    def failure(
        self, path: str, node: Any, schema: Mapping[str, Any], activation: dict[str, Any]
    ) -> Problem | None:
        """None when the rule holds for `activation`, else the server's wording of why not
        (apiextensions-apiserver pkg/apiserver/schema/cel/validation.go, validateExpressions)."""
        from celpy import celtypes  # noqa: PLC0415  (see _program)

        type_name = _type_name(schema, node)
        try:
            verdict = self.program.evaluate(activation)
        except Exception as exc:  # noqa: BLE001  (celpy raises its own and Python errors)
            detail = f"{_cel_error(exc)} evaluating rule: {self.message or self.rule}"
            return Problem(path, INVALID, detail, type_name, shows_value=True)
        if not isinstance(verdict, (bool, celtypes.BoolType)):
            detail = f"rule did not evaluate to a bool: {verdict!r} (rule: {self.rule})"
            return Problem(path, INVALID, detail, type_name, shows_value=True)
        if verdict:
            return None
        where = _with_field_path(path, self.field_path)
        kind = REASONS.get(self.reason, INVALID)
        # The bad value shown: a scalar's own, none for an object or array (OmitValueType).
        shown = type_name not in ("object", "array")
        if kind == DUPLICATE:
            return Problem(where, kind, "", node, shows_value=shown)
        return Problem(
            where, kind, self._message(activation), node, shows_value=shown and kind == INVALID
        )

    def _message(self, activation: dict[str, Any]) -> str:
        """messageExpression's one-line, non-empty string, else message, else the rule."""
        fallback = self.message.strip() or f"failed rule: {self.rule.strip()}"
        if self.message_program is None:
            return fallback
        try:
            text = self.message_program.evaluate(activation)
        except Exception:  # noqa: BLE001  (the server falls back to message too)
            return fallback
        text = str(text).strip() if isinstance(text, str) else ""
        fits = 0 < len(text.encode()) <= MAX_MESSAGE_BYTES and "\n" not in text
        return text if fits else fallback


class CRDValidator:
    """One CRD, its rules compiled: `problems` / `validate` check objects of its kind."""

    def __init__(self, crd: Mapping[str, Any]) -> None:
        self.crd = crd
        spec = crd["spec"]
        self.group: str = spec["group"]
        self.kind: str = spec["names"]["kind"]
        self.name: str = (
            crd.get("metadata", {}).get("name") or f"{spec['names']['plural']}.{self.group}"
        )
        self.namespaced = spec.get("scope", "Namespaced") == "Namespaced"
        self.versions: dict[str, Mapping[str, Any]] = {v["name"]: v for v in spec["versions"]}
        self.storage = next((v["name"] for v in spec["versions"] if v.get("storage")), None)
        self._rules: dict[int, tuple[Rule, ...]] = {}
        self.rules: list[Rule] = []
        self.nodes: list[tuple[Mapping[str, Any], tuple[Rule, ...]]] = []  # schema node, its rules
        for version in spec["versions"]:
            schema = version.get("schema", {}).get("openAPIV3Schema") or {}
            for node, where in _schema_nodes(schema, version["name"]):
                compiled = tuple(
                    _compile(entry, where) for entry in node["x-kubernetes-validations"]
                )
                self._rules[id(node)] = compiled
                self.nodes.append((node, compiled))
                self.rules.extend(compiled)

    def schema(self, version: str) -> Mapping[str, Any]:
        """The openAPIV3Schema of `version`."""
        return self.versions[version].get("schema", {}).get("openAPIV3Schema") or {}

    def problems(
        self,
        obj: Mapping[str, Any],
        version: str | None = None,
        *,
        field_validation: FieldValidation = "Strict",
    ) -> list[Problem]:
        """Every refusal the API server would give `obj` on create (empty: accepted)."""
        problems = self._identity_problems(obj, version)
        if problems:
            return problems
        name = version or str(obj["apiVersion"]).rpartition("/")[2]
        schema = self.schema(name)
        walk = _Walk(self, top=obj)
        unknown: list[str] = []
        has_status = "status" in self.versions[name].get("subresources", {})
        if has_status and "status" in obj:
            # The create strategy drops status before validating; a strict decode of the
            # body still refuses its unknown fields, so only those are looked for.
            status = _Walk(self, top=obj)
            status.visit(
                obj["status"], (schema.get("properties") or {}).get("status") or {}, "status"
            )
            unknown = status.unknown
            obj = {key: item for key, item in obj.items() if key != "status"}
        value = walk.visit(obj, schema, "")
        unknown = walk.unknown + unknown
        if unknown and field_validation == "Strict":
            return [Problem(path, UNKNOWN) for path in unknown]
        if has_status and isinstance(value, dict):
            value.pop("status", None)  # a status default, applied on decode, dropped too
        meta = value.get("metadata") if isinstance(value, dict) else None
        problems = _object_meta_problems(meta, self.namespaced) + walk.problems
        if any(p.blocks_rules for p in problems):
            return [*problems, Problem("", INVALID, NOT_CHECKED, None, shows_value=True)]
        for rules, node_value, path, schema in walk.pending:
            activation = {"self": _to_cel(node_value, schema, root=path == "")}
            for rule in rules:
                if rule.transition:
                    continue  # needs oldSelf: the server runs it on update only
                failure = rule.failure(path, node_value, schema, activation)
                if failure is not None:
                    problems.append(failure)
        return problems

    def validate(
        self,
        obj: Mapping[str, Any],
        version: str | None = None,
        *,
        field_validation: FieldValidation = "Strict",
        hint: str = DEFAULT_HINT,
    ) -> None:
        """Raise ToolFailure(manifest_invalid) naming each refusal, or return: accepted."""
        problems = self.problems(obj, version, field_validation=field_validation)
        if not problems:
            return
        name = (obj.get("metadata") or {}).get("name") if isinstance(obj, Mapping) else None
        shown = "; ".join(str(p) for p in problems[:IN_MESSAGE])
        more = f" (and {len(problems) - IN_MESSAGE} more)" if len(problems) > IN_MESSAGE else ""
        raise ToolFailure(
            ErrorCode.MANIFEST_INVALID,
            f"The {self.kind} {name!r} is refused by the {self.name} CRD's validation: "
            f"{shown}{more}",
            hint,
            {
                "crd": self.name,
                "problems": [
                    {"path": p.path, "problem": str(p)[:500]} for p in problems[:MAX_PROBLEMS]
                ],
            },
        )

    def _identity_problems(self, obj: Mapping[str, Any], version: str | None) -> list[Problem]:
        """apiVersion and kind name this CRD and a served version."""
        if not isinstance(obj, Mapping):
            return [
                Problem("", INVALID, "the object is not a JSON object", type(obj).__name__, True)
            ]
        if not obj.get("apiVersion") or not obj.get("kind"):
            missing = [key for key in ("apiVersion", "kind") if not obj.get(key)]
            return [Problem(key, REQUIRED) for key in missing]
        api_version = str(obj["apiVersion"])
        group, _, named = api_version.rpartition("/")
        wanted = version or named
        problems = []
        if api_version and group != self.group:
            problems.append(
                Problem(
                    "apiVersion", INVALID, f"this CRD serves group {self.group}", api_version, True
                )
            )
        if wanted not in self.versions or not self.versions[wanted].get("served", True):
            served = [n for n, v in self.versions.items() if v.get("served", True)]
            problems.append(Problem("apiVersion", UNSUPPORTED, _supported(served), wanted, True))
        if obj.get("kind") != self.kind:
            problems.append(
                Problem("kind", UNSUPPORTED, _supported([self.kind]), obj.get("kind"), True)
            )
        return problems


class _Walk:
    """One pass over an object and its schema: prune, default, check, and collect the rule
    nodes met (evaluated after, when no schema error blocks them)."""

    def __init__(self, validator: CRDValidator, top: Any) -> None:
        self.validator = validator
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
        rules = None if value is None else self.validator._rules.get(id(schema))
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
            self.problems.append(_type_problem(path, value, expected))
            return False
        if _int_or_string(schema):
            if isinstance(value, str) or _is_integer(value):
                return True
            self.problems.append(_type_problem(path, value, "integer or string"))
            return False
        expected = schema.get("type")
        if not expected or _JSON_TYPES[expected](value):
            return True
        self.problems.append(_type_problem(path, value, expected))
        return False

    def _value_checks(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        add = self.problems.append
        if "enum" in schema and value not in schema["enum"]:
            add(Problem(path, UNSUPPORTED, _supported(schema["enum"]), value, True))
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
                    path, TOO_LONG, f"may not be more than {_count(schema['maxLength'], 'byte')}"
                )
            )
        if "minLength" in schema and len(value) < schema["minLength"]:
            detail = f"{path} in body should be at least {schema['minLength']} chars long"
            add(Problem(path, INVALID, detail, value, True))
        if "pattern" in schema and not _pattern(schema["pattern"]).search(value):
            detail = f"{path} in body should match '{schema['pattern']}'"
            add(Problem(path, INVALID, detail, value, True))
        if schema.get("format") == "date-time" and not _is_date_time(value):
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
        probe = _Walk(self.validator, self.top)
        probe.validator = _NO_RULES
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
            where = _child(path, key)
            if root_meta and key == "metadata":
                out[key] = self._root_metadata(item, props.get("metadata") or {})
            elif path == "" and key in ("apiVersion", "kind"):
                out[key] = item  # checked against the CRD by _identity_problems
            elif key in props:
                if item is None and not props[key].get("nullable"):
                    continue  # the server drops a null of a non-nullable field
                out[key] = self.visit(item, props[key], where)
            elif isinstance(extra, Mapping):
                out[key] = self.visit(item, extra, _key(path, key))
            elif keep_unknown or not (props or extra is False or schema.get("type") == "object"):
                out[key] = item
            else:
                self.unknown.append(where)
        for key, sub in props.items():
            if key not in out and "default" in sub and not (path == "" and key == "metadata"):
                out[key] = self.visit(copy.deepcopy(sub["default"]), sub, _child(path, key))
        for key in schema.get("required") or ():
            if key not in out:
                self.problems.append(Problem(_child(path, key), REQUIRED))
        if "maxProperties" in schema and len(out) > schema["maxProperties"]:
            detail = f"must have at most {_count(schema['maxProperties'], 'item')}"
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
            detail = f"must have at most {_count(schema['maxItems'], 'item')}"
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


def _object_meta_problems(meta: Any, namespaced: bool) -> list[Problem]:
    """ValidateObjectMetaAccessor for a custom resource (names are DNS-1123 subdomains)."""
    if not isinstance(meta, Mapping):
        return [Problem("metadata.name", REQUIRED, "name or generateName is required")]
    problems = []
    name, generate = meta.get("name"), meta.get("generateName")
    if not name and not generate:
        problems.append(Problem("metadata.name", REQUIRED, "name or generateName is required"))
    if name:
        problems.extend(_subdomain_problems("metadata.name", str(name)))
    namespace = meta.get("namespace")
    if namespace and not namespaced:
        problems.append(Problem("metadata.namespace", FORBIDDEN, "not allowed on this type"))
    elif namespace and not (_LABEL.fullmatch(str(namespace)) and len(str(namespace)) <= 63):
        detail = _DNS_LABEL_DETAIL
        problems.append(Problem("metadata.namespace", INVALID, detail, namespace, True))
    for key, value in (meta.get("labels") or {}).items():
        problems.extend(_qualified_name_problems("metadata.labels", str(key)))
        if (
            not isinstance(value, str)
            or len(value) > 63
            or (value and not _QUALIFIED.fullmatch(value))
        ):
            problems.append(Problem("metadata.labels", INVALID, _LABEL_VALUE_DETAIL, value, True))
    annotations = meta.get("annotations") or {}
    for key in annotations:
        problems.extend(_qualified_name_problems("metadata.annotations", str(key)))
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > TOTAL_ANNOTATION_BYTES:
        detail = f"may not be more than {TOTAL_ANNOTATION_BYTES} bytes"
        problems.append(Problem("metadata.annotations", TOO_LONG, detail))
    return problems


_SUBDOMAIN_DETAIL = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character "
    f"(e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN}')"
)
_DNS_LABEL_DETAIL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character "
    f"(e.g. 'my-name', or '123-abc', regex used for validation is '{DNS1123_LABEL}')"
)
_LABEL_VALUE_DETAIL = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
    "or '.', and must start and end with an alphanumeric character (at most 63 characters)"
)


def _subdomain_problems(path: str, name: str) -> list[Problem]:
    problems = []
    if len(name) > 253:
        problems.append(Problem(path, INVALID, "must be no more than 253 characters", name, True))
    if not _SUBDOMAIN.fullmatch(name):
        problems.append(Problem(path, INVALID, _SUBDOMAIN_DETAIL, name, True))
    return problems


def _qualified_name_problems(path: str, key: str) -> list[Problem]:
    prefix, slash, name = key.rpartition("/")
    bad = (slash and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix))) or (
        not name or len(name) > 63 or not _QUALIFIED.fullmatch(name)
    )
    if not bad:
        return []
    detail = (
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
        "and end with an alphanumeric character (at most 63), with an optional DNS subdomain "
        "prefix and '/' (e.g. 'example.com/MyName')"
    )
    return [Problem(path, INVALID, detail, key, True)]


def _compile(entry: Mapping[str, Any], where: str) -> Rule:
    """One x-kubernetes-validations entry compiled (ToolFailure when CEL refuses it)."""
    env = _environment()
    rule = str(entry["rule"])
    if entry.get("optionalOldSelf"):
        raise _rule_failure(where, rule, "optionalOldSelf rules are not supported")
    program, ast = _program(env, rule, where)
    message_program = None
    if entry.get("messageExpression"):
        message_program, _ = _program(env, str(entry["messageExpression"]), where)
    return Rule(
        rule=rule,
        schema_path=where,
        program=program,
        message=str(entry.get("message") or ""),
        message_program=message_program,
        field_path=str(entry.get("fieldPath") or ""),
        reason=str(entry.get("reason") or "FieldValueInvalid"),
        transition="oldSelf" in _identifiers(ast),
    )


def _program(env: Any, source: str, where: str) -> tuple[Any, Any]:
    from celpy.celparser import CELParseError  # noqa: PLC0415  (lark + pendulum: ~0.7 s)

    try:
        ast = env.compile(source)
        return env.program(ast), ast
    except CELParseError as exc:
        raise _rule_failure(where, source, f"does not compile: {exc}") from None


def _identifiers(ast: Any) -> set[str]:
    """The variables an expression reads: `ident` nodes of the parse tree (not words in
    strings, not field names after a dot)."""
    return {str(token) for node in ast.find_data("ident") for token in node.children}


@cache
def _environment() -> Any:
    import celpy  # noqa: PLC0415  (see _program)

    return celpy.Environment()


def _rule_failure(where: str, rule: str, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.MANIFEST_INVALID,
        f"The CEL rule at {where} {why}",
        "The CRD's rules must compile before objects are checked against it.",
        {"rule": rule, "schema_path": where},
    )


def _schema_nodes(schema: Mapping[str, Any], where: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Every schema node (with a where-string) that declares x-kubernetes-validations."""
    if not isinstance(schema, Mapping):
        return
    if schema.get("x-kubernetes-validations"):
        yield schema, where
    for key, sub in (schema.get("properties") or {}).items():
        yield from _schema_nodes(sub, f"{where}.{key}")
    for name in ("items", "additionalProperties"):
        if isinstance(schema.get(name), Mapping):
            yield from _schema_nodes(schema[name], f"{where}[{name}]")


def _to_cel(value: Any, schema: Mapping[str, Any], *, root: bool = False) -> Any:
    """The CEL value the server binds to `self`: JSON types, `number` fields as doubles,
    date-time strings as timestamps, and at the root only metadata's name and generateName."""
    import celpy  # noqa: PLC0415  (see _program)
    from celpy import celtypes  # noqa: PLC0415

    if root and isinstance(value, dict) and isinstance(value.get("metadata"), dict):
        meta = {k: v for k, v in value["metadata"].items() if k in ("name", "generateName")}
        value = {**value, "metadata": meta}
    return _typed(value, schema, celpy, celtypes)


def _typed(value: Any, schema: Mapping[str, Any] | None, celpy: Any, celtypes: Any) -> Any:
    schema = schema if isinstance(schema, Mapping) else {}
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        extra = extra if isinstance(extra, Mapping) else None
        return celtypes.MapType(
            {
                celtypes.StringType(k): _typed(v, props.get(k, extra), celpy, celtypes)
                for k, v in value.items()
            }
        )
    if isinstance(value, list):
        items = schema.get("items")
        return celtypes.ListType([_typed(v, items, celpy, celtypes) for v in value])
    if schema.get("type") == "number" and _is_integer(value):
        return celtypes.DoubleType(float(value))
    if schema.get("format") == "date-time" and isinstance(value, str) and _is_date_time(value):
        return celtypes.TimestampType(value)
    return celpy.json_to_cel(value)


def _type_name(schema: Mapping[str, Any], value: Any) -> str:
    """What the server shows as the bad value of a rule's failure: the node's type."""
    if schema.get("type"):
        return str(schema["type"])
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )


def _type_problem(path: str, value: Any, expected: str) -> Problem:
    actual = _json_type(value)
    detail = f"{path} in body must be of type {expected}: {json.dumps(actual)}"
    return Problem(path, INVALID, detail, value, True, wrong_type=True)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if _is_integer(value):
        return "integer"
    return {dict: "object", list: "array", str: "string", float: "number"}.get(
        type(value), type(value).__name__
    )


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


_JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_integer,
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


class _NoRules:
    _rules: dict[int, tuple[Rule, ...]] = {}  # noqa: RUF012  (read-only)


_NO_RULES: Any = _NoRules()


@cache
def _pattern(pattern: str) -> Any:
    """A schema `pattern`, compiled by RE2: the server's Go regexp speaks RE2's syntax."""
    return re2.compile(pattern)


def _is_date_time(value: str) -> bool:
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in value.upper()


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _key(path: str, key: str) -> str:
    return f"{path}[{key}]"


def _with_field_path(path: str, field_path: str) -> str:
    """A rule's fieldPath (`.a.b`, `['k']`, `[0]`) appended to its node's path."""
    for name, key, index in _FIELD_PATH_STEP.findall(field_path):
        path = _child(path, name) if name else _key(path, key or index)
    return path


def _supported(values: list[Any]) -> str:
    return "supported values: " + ", ".join(_shown(v) for v in values)


def _count(limit: int, unit: str) -> str:
    """field.TooLong / TooMany's wording (it says bytes where go-openapi counts characters)."""
    return f"{limit} {unit}{'' if limit == 1 else 's'}"


def _shown(value: Any) -> str:
    """A bad value as field.Error shows it: quoted strings, bare numbers, JSON otherwise."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _cel_error(exc: Exception) -> str:
    args = getattr(exc, "args", ())
    return str(args[0]) if args else type(exc).__name__


@cache
def _validator_for_file(path: str) -> CRDValidator:
    return CRDValidator(_read_crd(Path(path)))


def _read_crd(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(data, Loader=loader)  # noqa: S506 (a safe loader)
    if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
        raise ToolFailure(
            ErrorCode.MANIFEST_INVALID,
            f"{path.name} is not a CustomResourceDefinition.",
            "Give the path of a CRD manifest (YAML, optionally gzipped).",
            {"path": str(path)},
        )
    return crd


def crd_validator(crd: Mapping[str, Any] | str | Path) -> CRDValidator:
    """The compiled validator of a CRD file (.yaml or .yaml.gz; compiled once per file,
    cached) or of a parsed CRD (compiled once per object for as long as it lives)."""
    if isinstance(crd, (str, Path)):
        return _validator_for_file(str(Path(crd).resolve()))
    held = _BY_OBJECT.get(id(crd))
    if held is None or held[0] is not crd:
        held = (crd, CRDValidator(crd))
        if len(_BY_OBJECT) >= 16:
            _BY_OBJECT.pop(next(iter(_BY_OBJECT)))
        _BY_OBJECT[id(crd)] = held
    return held[1]


_BY_OBJECT: dict[int, tuple[Mapping[str, Any], CRDValidator]] = {}


def load_crd(path: str | Path) -> Mapping[str, Any]:
    """The CRD in a file (.yaml or gzipped .yaml.gz), parsed once and cached: read-only."""
    return crd_validator(path).crd


def validate_against_crd(
    obj: Mapping[str, Any],
    crd: Mapping[str, Any] | str | Path,
    version: str | None = None,
    *,
    field_validation: FieldValidation = "Strict",
    hint: str = DEFAULT_HINT,
) -> None:
    """Check `obj` as the API server would on CREATE against `crd` (a parsed CRD or the
    path of a .yaml / .yaml.gz file): raise ToolFailure(manifest_invalid) whose message and
    details.problems carry each refusal (a CEL rule's own message, at its field path).
    `version`: the CRD version (default: the one obj's apiVersion names). `obj` is not
    changed (pruning and defaulting happen on a copy)."""
    crd_validator(crd).validate(obj, version, field_validation=field_validation, hint=hint)
