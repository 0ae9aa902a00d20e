"""A custom resource's ObjectMeta checked as the API server checks it on create
(ValidateObjectMetaAccessor: the name a DNS-1123 subdomain, the namespace a label, label
and annotation keys and values, the annotations' total size)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from skills.kube.crd_problems import FORBIDDEN, INVALID, REQUIRED, TOO_LONG, Problem

# ObjectMeta (k8s.io/apimachinery/pkg/util/validation/validation.go).
DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN)  # fullmatch: `$` would let a final newline in
_LABEL = re.compile(DNS1123_LABEL)
_QUALIFIED = re.compile(QUALIFIED_NAME)
TOTAL_ANNOTATION_BYTES = 256 * 1024


def object_meta_problems(meta: Any, namespaced: bool) -> list[Problem]:
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
