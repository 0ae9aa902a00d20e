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

import gzip
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml

from skills.kube.crd_cel import Rule, compile_rule, rule_nodes, to_cel
from skills.kube.crd_object_meta import object_meta_problems
from skills.kube.crd_problems import (
    INVALID,
    NOT_CHECKED,
    REQUIRED,
    UNKNOWN,
    UNSUPPORTED,
    Problem,
    supported,
)
from skills.kube.crd_schema_walk import SchemaWalk
from skills.shared.errors import ErrorCode, ToolFailure

FieldValidation = Literal["Strict", "Ignore"]
DEFAULT_HINT = (
    "Fix the field each problem names (details.problems words them as the API server would)."
)
MAX_PROBLEMS = 20  # in details; the message names the first few
IN_MESSAGE = 3


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
            for node, where in rule_nodes(schema, version["name"]):
                compiled = tuple(
                    compile_rule(entry, where) for entry in node["x-kubernetes-validations"]
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
        walk = SchemaWalk(self._rules, top=obj)
        unknown: list[str] = []
        has_status = "status" in self.versions[name].get("subresources", {})
        if has_status and "status" in obj:
            # The create strategy drops status before validating; a strict decode of the
            # body still refuses its unknown fields, so only those are looked for.
            status = SchemaWalk(self._rules, top=obj)
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
        problems = object_meta_problems(meta, self.namespaced) + walk.problems
        if any(p.blocks_rules for p in problems):
            return [*problems, Problem("", INVALID, NOT_CHECKED, None, shows_value=True)]
        for rules, node_value, path, schema in walk.pending:
            activation = {"self": to_cel(node_value, schema, root=path == "")}
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
            problems.append(Problem("apiVersion", UNSUPPORTED, supported(served), wanted, True))
        if obj.get("kind") != self.kind:
            problems.append(
                Problem("kind", UNSUPPORTED, supported([self.kind]), obj.get("kind"), True)
            )
        return problems


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
