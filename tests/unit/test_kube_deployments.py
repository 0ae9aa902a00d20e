"""A Deployment's readiness is read one way (skills.kube.deployments) by the cluster
checks of the Training Operator, Kubeflow Trainer, JobSet and the load balancer
controller: all wanted replicas ready, and at least one."""

from __future__ import annotations

import pytest

from skills.eks_cluster_manager.checks import check_training_operator
from skills.eks_cluster_manager.cluster_snapshot import Snapshot
from skills.eks_cluster_manager.engine_checks import check_trainer_controller
from skills.kube import load_balancer
from skills.kube.deployments import deployment_ready


def _deployment(name: str, replicas: int | None, ready: int | None) -> dict:
    spec = {} if replicas is None else {"replicas": replicas}
    status = {} if ready is None else {"readyReplicas": ready}
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": spec, "status": status}


def _snapshot(deployment: dict) -> Snapshot:
    return Snapshot({}, [], [], [], [deployment], None)


READINESS = [
    (2, 2, True),  # all wanted replicas ready
    (2, 1, False),  # one short
    (2, 3, True),  # more than wanted (a rollout's surge)
    (None, 1, True),  # replicas unset: the API's default of 1
    (None, None, False),  # no readyReplicas: none ready
    (0, 0, False),  # scaled to zero serves nothing
    (1, 0, False),
]


@pytest.mark.parametrize(("replicas", "ready", "expected"), READINESS)
def test_a_deployment_is_ready_when_its_wanted_replicas_are_at_least_one(replicas, ready, expected):
    ok, line = deployment_ready(_deployment("d", replicas, ready))
    want = 1 if replicas is None else replicas
    assert ok is expected
    assert line == f"ns/d: {ready or 0}/{want} ready"


@pytest.mark.parametrize(("replicas", "ready", "expected"), READINESS)
def test_every_check_reads_a_deployment_the_same(replicas, ready, expected):
    operator = _deployment("training-operator", replicas, ready)
    trainer = _deployment("kubeflow-trainer-controller-manager", replicas, ready)
    assert (check_training_operator(_snapshot(operator)).status == "ok") is expected
    assert (check_trainer_controller(_snapshot(trainer)).status == "ok") is expected
    assert load_balancer.ready(_deployment(load_balancer.CONTROLLER, replicas, ready)) is expected
