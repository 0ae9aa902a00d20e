"""The Kubernetes stand-in's managedFields (tests/services/kube.py) follow the API
server's rules for Update operations, which the quarantine release reads to tell whose a
node's cordon is: a changed field becomes the patching manager's alone, a removed field
nobody's, and a field set to the value it had keeps its owner."""

from __future__ import annotations

import pytest

from tests.services.kube import managed_fields


def owners(entries: list[dict]) -> dict[str, dict]:
    return {e["manager"]: e["fieldsV1"] for e in entries}


def cordoned_by(manager: str) -> dict:
    entries = managed_fields({"spec": {}}, {"spec": {"unschedulable": True}}, manager, "v1")
    return {"spec": {"unschedulable": True}, "metadata": {"managedFields": entries}}


@pytest.mark.parametrize(
    ("old", "patch", "manager", "expected"),
    [
        ({"spec": {}}, {"spec": {"unschedulable": True}}, "fsdp-eks",
         {"fsdp-eks": {"f:spec": {"f:unschedulable": {}}}}),
        (cordoned_by("fsdp-eks"), {"spec": {"unschedulable": True}}, "kubectl",
         {"fsdp-eks": {"f:spec": {"f:unschedulable": {}}}}),
        (cordoned_by("fsdp-eks"), {"spec": {"unschedulable": None}}, "kubectl", {}),
        (cordoned_by("fsdp-eks"), {"spec": {"taints": [{"key": "k"}]}}, "kubectl",
         {"fsdp-eks": {"f:spec": {"f:unschedulable": {}}},
          "kubectl": {"f:spec": {"f:taints": {}}}}),
        (cordoned_by("fsdp-eks"), {"metadata": {"resourceVersion": "9"}}, "kubectl",
         {"fsdp-eks": {"f:spec": {"f:unschedulable": {}}}}),
    ],
    ids=[
        "a field a patch sets is its manager's",
        "setting the value a field has keeps its owner",
        "a removed field is nobody's",
        "another field changes hands alone",
        "the resourceVersion a patch carries is no field of anyone's",
    ],
)  # fmt: skip
def test_managed_fields_follow_update_ownership(old, patch, manager, expected):
    assert owners(managed_fields(old, patch, manager, "v1")) == expected
