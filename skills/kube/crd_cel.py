"""A CRD's CEL rules (x-kubernetes-validations) compiled once and evaluated as the API
server evaluates them on create: `self` bound to the node's value as the server binds it,
a failure worded from the rule's messageExpression, message or source, at its fieldPath,
typed by its reason. cel-python (lark, pendulum: ~0.7 s to import) is imported on first
use, not with this module."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from skills.kube.crd_problems import (
    DUPLICATE,
    INVALID,
    REASONS,
    Problem,
    is_date_time,
    is_integer,
    with_field_path,
)
from skills.shared.errors import ErrorCode, ToolFailure

MAX_MESSAGE_BYTES = 5 * 1024  # celconfig.MaxEvaluatedMessageExpressionSizeBytes


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
        where = with_field_path(path, self.field_path)
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


def compile_rule(entry: Mapping[str, Any], where: str) -> Rule:
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


def rule_nodes(schema: Mapping[str, Any], where: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    """Every schema node (with a where-string) that declares x-kubernetes-validations."""
    if not isinstance(schema, Mapping):
        return
    if schema.get("x-kubernetes-validations"):
        yield schema, where
    for key, sub in (schema.get("properties") or {}).items():
        yield from rule_nodes(sub, f"{where}.{key}")
    for name in ("items", "additionalProperties"):
        if isinstance(schema.get(name), Mapping):
            yield from rule_nodes(schema[name], f"{where}[{name}]")


def to_cel(value: Any, schema: Mapping[str, Any], *, root: bool = False) -> Any:
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
    if schema.get("type") == "number" and is_integer(value):
        return celtypes.DoubleType(float(value))
    if schema.get("format") == "date-time" and isinstance(value, str) and is_date_time(value):
        return celtypes.TimestampType(value)
    return celpy.json_to_cel(value)


def _type_name(schema: Mapping[str, Any], value: Any) -> str:
    """What the server shows as the bad value of a rule's failure: the node's type."""
    if schema.get("type"):
        return str(schema["type"])
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "number"
    )


def _cel_error(exc: Exception) -> str:
    args = getattr(exc, "args", ())
    return str(args[0]) if args else type(exc).__name__
