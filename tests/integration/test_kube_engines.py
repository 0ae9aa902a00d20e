"""Which training engines a cluster serves (skills.kube.engines), asked of the kmock
stand-in's API discovery with the upstream CRDs served or not: PyTorchJob when
kubeflow.org/v1 lists pytorchjobs, TrainJob when trainer.kubeflow.org/v1alpha1 lists
trainjobs AND JobSet's jobset.x-k8s.io/v1alpha2 lists jobsets; two or three small
requests, asked once per client."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path

import pytest
import yaml

from skills.kube.client import KubeJson
from skills.kube.engines import served_engines
from skills.kube.fields import ClusterAccess
from skills.shared.errors import ToolFailure
from tests.services import crds
from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration
VENDORED = Path("skills/training_job_deployer/targets/trainjob/crds")
TRAINER = ("trainer.kubeflow.org_trainjobs", "trainer.kubeflow.org_clustertrainingruntimes",
           "trainer.kubeflow.org_trainingruntimes")  # fmt: skip


@functools.cache
def _crd(stem: str, version: str) -> dict:
    text = gzip.decompress((VENDORED / f"{stem}.{version}.yaml.gz").read_bytes())
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def trainer_crds() -> list[dict]:
    return [_crd(stem, "v2.3.0") for stem in TRAINER]


def jobset_crd() -> dict:
    return _crd("jobset.x-k8s.io_jobsets", "v0.12.0")


def notebooks_crd() -> dict:
    # Kubeflow Notebooks also serve kubeflow.org/v1: the group alone is not the operator.
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "notebooks.kubeflow.org"},
        "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                 "names": {"plural": "notebooks", "kind": "Notebook"},
                 "versions": [{"name": "v1", "served": True, "storage": True}]},
    }  # fmt: skip


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    return kube_api


def _client() -> KubeJson:
    return KubeJson(ClusterAccess().api_client())


CASES = {
    "the training operator alone serves pytorchjob": (True, [], {"pytorchjob"}),
    "nothing installed serves no engine": (False, [], set()),
    "trainer v2 with jobset serves trainjob": (
        False,
        [*trainer_crds(), jobset_crd()],
        {"trainjob"},
    ),
    "trainer v2 without jobset serves no engine": (False, trainer_crds(), set()),
    "jobset alone serves no engine": (False, [jobset_crd()], set()),
    "both installed serve both": (
        True,
        [*trainer_crds(), jobset_crd()],
        {"pytorchjob", "trainjob"},
    ),
    "kubeflow notebooks are not the training operator": (False, [notebooks_crd()], set()),
}


@pytest.mark.parametrize(("operator", "served", "engines"), CASES.values(), ids=CASES.keys())
def test_the_engines_are_what_discovery_serves(kube, operator, served, engines):
    if not operator:
        crds.withdraw(kube.emulator, PYTORCHJOB)
    for crd in served:
        crds.serve(kube.emulator, crd)
    client = _client()
    assert served_engines(client) == engines
    # kubeflow.org/v1 and trainer.kubeflow.org/v1alpha1; JobSet only when trainjobs are served
    trainjobs = any(c["spec"]["names"]["plural"] == "trainjobs" for c in served)
    assert client.calls == (3 if trainjobs else 2), client.paths


def test_the_answer_is_asked_once_per_client_and_again_when_fresh(kube):
    client = _client()
    assert served_engines(client) == {"pytorchjob"}
    calls = client.calls
    assert served_engines(client) == {"pytorchjob"} and client.calls == calls
    for crd in [*trainer_crds(), jobset_crd()]:
        crds.serve(kube.emulator, crd)
    assert served_engines(client) == {"pytorchjob"}  # cached for this client
    assert served_engines(client, fresh=True) == {"pytorchjob", "trainjob"}
    assert served_engines(_client()) == {"pytorchjob", "trainjob"}  # a new client asks


def test_a_crd_applied_through_the_api_is_served_and_deleted_is_not(kube):
    # The stand-in serves what a CRD written through the API declares, as the API server.
    crds.withdraw(kube.emulator, PYTORCHJOB)
    client = _client()
    for crd in [*trainer_crds(), jobset_crd()]:
        client.apply(crd)
    assert served_engines(client, fresh=True) == {"trainjob"}
    client.request("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                   "jobsets.jobset.x-k8s.io")  # fmt: skip
    assert served_engines(client, fresh=True) == frozenset()


def test_a_forbidden_discovery_is_access_denied(kube):
    _ = kube.emulator["get /apis/kubeflow.org/v1"] << 403
    with pytest.raises(ToolFailure) as failure:
        served_engines(_client())
    assert failure.value.code == "access_denied"
