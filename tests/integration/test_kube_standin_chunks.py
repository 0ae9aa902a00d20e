"""The Kubernetes stand-in (tests/services/kube.py) chunks a LIST as the API server
does, and reads a chunk by key range as etcd does: the objects one chunk looks at do
not grow with the kind's size (issue 49: the stand-in's scan per chunk, not the
product, made the Kubernetes list's wall time grow faster than the namespace)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, config

from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration


def seed(kube, count: int, namespace: str = "default", label: str = "a") -> None:
    for i in range(count):
        name = f"cm-{i:05d}"
        kube.emulator.objects["v1/configmaps", namespace, name] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"team": label if i % 2 else "b"}},
        }  # fmt: skip


def api(kube) -> Any:
    """The kubernetes client's core API on the stand-in (Any: its answers are read
    loosely here, as dicts of what the API server sent)."""
    return client.CoreV1Api(config.new_client_from_config(str(kube.kubeconfig), "kmock"))


def every_chunk(list_call, **kwargs: Any) -> tuple[list[str], list[Any]]:
    """(names in the order served, each chunk's remainingItemCount)."""
    names, remaining, token = [], [], None
    while True:
        got = list_call(**kwargs, _continue=token) if token else list_call(**kwargs)
        names += [f"{o.metadata.namespace}/{o.metadata.name}" for o in got.items]
        remaining.append(got.metadata.remaining_item_count)
        token = got.metadata._continue
        if not token:
            return names, remaining


def test_chunks_serve_every_object_once_in_key_order_with_the_rest_counted(kube_api):
    kube_api.reset()
    seed(kube_api, 25, "ns-b")
    seed(kube_api, 10, "ns-a")
    core = api(kube_api)
    names, remaining = every_chunk(core.list_config_map_for_all_namespaces, limit=10)
    expected = sorted([f"ns-a/cm-{i:05d}" for i in range(10)] +
                      [f"ns-b/cm-{i:05d}" for i in range(25)])  # fmt: skip
    assert names == expected
    assert remaining == [25, 15, 5, None]
    names, _ = every_chunk(core.list_namespaced_config_map, namespace="ns-b", limit=7)
    assert names == [n for n in expected if n.startswith("ns-b/")]


def test_a_selector_chunk_holds_matches_only_and_leaves_the_count_out(kube_api):
    kube_api.reset()
    seed(kube_api, 30)
    names, remaining = every_chunk(
        api(kube_api).list_namespaced_config_map,
        namespace="default",
        limit=4,
        label_selector="team=a",
    )
    assert names == [f"default/cm-{i:05d}" for i in range(1, 30, 2)]
    assert set(remaining) == {None}


def test_objects_created_deleted_and_set_between_chunks_are_seen_as_the_api_server_sees_them(
    kube_api,
):
    kube_api.reset()
    seed(kube_api, 6)
    core = api(kube_api)
    first = core.list_namespaced_config_map("default", limit=3)
    core.delete_namespaced_config_map("cm-00004", "default")
    core.create_namespaced_config_map("default", {"metadata": {"name": "cm-00003x"}})
    kube_api.emulator.objects["v1/configmaps", "default", "cm-00000a"] = {
        "metadata": {"name": "cm-00000a", "namespace": "default"}
    }  # before the token: not served again
    rest = core.list_namespaced_config_map("default", limit=3, _continue=first.metadata._continue)
    assert [o.metadata.name for o in rest.items] == ["cm-00003", "cm-00003x", "cm-00005"]
    assert not rest.metadata._continue


@pytest.mark.parametrize("count", [100, 1600])
def test_a_chunk_looks_at_as_many_objects_at_1600_as_at_100(kube_api, count):
    """A chunk of 10 from the middle of the kind, beside another kind's objects, looks
    at its 10 objects and the one that shows more follow (on main the stand-in scanned
    every object of every kind and sorted the kind per chunk)."""
    kube_api.reset()
    seed(kube_api, count)
    for i in range(count):
        kube_api.emulator.objects[PYTORCHJOB, "default", f"job-{i}"] = {"metadata": {}}
    core = api(kube_api)
    first = core.list_namespaced_config_map("default", limit=count // 2)
    store = kube_api.emulator.objects._objects
    store.examined = 0
    core.list_namespaced_config_map("default", limit=10, _continue=first.metadata._continue)
    assert store.examined == 11
