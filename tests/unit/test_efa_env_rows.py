"""Issue 29 item 2: the NCCL-over-EFA variables are data, one row per instance family
(skills/catalog/instances.py EFA_ENV_BY_FAMILY), each checked here against the guidance
it cites (aws-ofi-nccl doc/efa-env-var.md): what each variable is for, where it must not
be set, and that every EFA instance of the catalogue has its family's row."""

from __future__ import annotations

import pytest

from skills.catalog.instances import EFA_ENV_BY_FAMILY, INSTANCES, efa_env_of, family
from skills.kube.efa import efa_env_for

# What the cheatsheet says to leave out with current software (or never to use).
NEVER = ("FI_EFA_FORK_SAFE", "NCCL_PROTO", "NCCL_MIN_CHANNELS", "NCCL_BUFFSIZE",
         "RDMAV_FORK_SAFE", "FI_EFA_ENABLE_SHM_TRANSFER", "NCCL_SOCKET_NTHREADS",
         "NCCL_NSOCKS_PERTHREAD")  # fmt: skip
# The families whose EFA has RDMA read, by the EC2 pages (p4, p5, p6) and AWS's EFA guide
# (g6, g6e: Nitro v4, issue 51); no others.
RDMA_FAMILIES = {"p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "g6", "g6e"}


@pytest.mark.parametrize(("name", "env"), sorted(EFA_ENV_BY_FAMILY.items()))
def test_each_familys_row_follows_the_cheatsheet(name, env):
    members = [i for i in INSTANCES if family(i.name) == name and i.efa]
    assert members, f"{name}: no EFA instance of the catalogue is of this family"
    # RDMA read: FI_EFA_USE_DEVICE_RDMA=1 where the device has it (aws-ofi-nccl 1.6.x needs
    # it, later ones ignore it), never elsewhere (libfabric aborts).
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) is (name in RDMA_FAMILIES)
    assert all(i.rdma is (name in RDMA_FAMILIES) for i in members)
    # aws-ofi-nccl<=1.5 needs the provider pinned; newer ones accept it.
    assert env["FI_PROVIDER"] == "efa"
    # The trainer's dataloader workers fork: huge pages off, the cheatsheet's fix.
    assert env["FI_EFA_USE_HUGE_PAGE"] == "0"
    assert not set(NEVER) & set(env) and not any(k.startswith("RDMAV_") for k in env)
    assert set(env) <= {"FI_PROVIDER", "FI_EFA_USE_HUGE_PAGE", "FI_EFA_USE_DEVICE_RDMA"}


@pytest.mark.parametrize("spec", INSTANCES, ids=lambda s: s.name)
def test_every_instance_gets_its_familys_row_and_none_without_efa(spec):
    if spec.efa:
        assert efa_env_of(spec) == EFA_ENV_BY_FAMILY[family(spec.name)]
        assert efa_env_for(f"ml.{spec.name}") == efa_env_for(spec.name)  # HyperPod names
    else:
        assert efa_env_of(spec) == {} == efa_env_for(spec.name)
