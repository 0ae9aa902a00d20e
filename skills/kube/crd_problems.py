"""A custom resource's refusals as the API server words them (field.Error: a path, an
error type, the bad value, a detail), and the JSON-value and field-path helpers the
schema walk and the CEL rules word them with."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from typing import Any

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


def type_problem(path: str, value: Any, expected: str) -> Problem:
    actual = _json_type(value)
    detail = f"{path} in body must be of type {expected}: {json.dumps(actual)}"
    return Problem(path, INVALID, detail, value, True, wrong_type=True)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if is_integer(value):
        return "integer"
    return {dict: "object", list: "array", str: "string", float: "number"}.get(
        type(value), type(value).__name__
    )


def is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def is_date_time(value: str) -> bool:
    try:
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in value.upper()


def child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def key_path(path: str, key: str) -> str:
    return f"{path}[{key}]"


def with_field_path(path: str, field_path: str) -> str:
    """A rule's fieldPath (`.a.b`, `['k']`, `[0]`) appended to its node's path."""
    for name, key, index in _FIELD_PATH_STEP.findall(field_path):
        path = child_path(path, name) if name else key_path(path, key or index)
    return path


def supported(values: list[Any]) -> str:
    return "supported values: " + ", ".join(_shown(v) for v in values)


def counted(limit: int, unit: str) -> str:
    """field.TooLong / TooMany's wording (it says bytes where go-openapi counts characters)."""
    return f"{limit} {unit}{'' if limit == 1 else 's'}"


def _shown(value: Any) -> str:
    """A bad value as field.Error shows it: quoted strings, bare numbers, JSON otherwise."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else f"{text[:77]}..."
