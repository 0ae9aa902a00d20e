"""Issue 29 item 7: persistent FSx priced at the throughput tier it is made with (each
tier a row), and the Kubernetes version of a new cluster a parameter whose default is in
EKS standard support."""

from __future__ import annotations

import pytest

from skills.catalog.pricing import FSX_LUSTRE_USD_PER_GIB_MONTH, estimate_storage, fsx_tiers
from skills.eks_cluster_manager import eksctl, storage
from skills.shared.errors import ToolFailure

# Each tier as AWS's FSx for Lustre price page lists it (us-east-1, SSD, $/GB-month).
TIERS = [
    ("PERSISTENT_1", 50, 0.140),
    ("PERSISTENT_1", 100, 0.190),
    ("PERSISTENT_1", 200, 0.290),
    ("PERSISTENT_2", 125, 0.145),
    ("PERSISTENT_2", 250, 0.210),
    ("PERSISTENT_2", 500, 0.340),
    ("PERSISTENT_2", 1000, 0.600),
]


@pytest.mark.parametrize(("deployment", "tier", "rate"), TIERS)
def test_each_persistent_tier_is_made_and_priced_at_that_tier(deployment, tier, rate):
    spec = storage.StorageSpec(
        fsx_size_gib=2400, fsx_deployment_type=deployment, fsx_throughput=tier
    )
    assert storage.throughput_of(spec) == tier
    cost = storage.storage_cost(spec, "us-east-1")
    assert cost["usd_per_month"] == pytest.approx(2400 * rate)
    assert f"{deployment} {tier} MB/s/TiB" in cost["what"]


def test_every_priced_persistent_row_is_a_tier_the_storage_action_accepts():
    persistent = sorted((d, t) for d, t in FSX_LUSTRE_USD_PER_GIB_MONTH if t)
    assert persistent == sorted((d, t) for d, t, _ in TIERS)
    assert fsx_tiers("PERSISTENT_2") == (125, 250, 500, 1000) and fsx_tiers("SCRATCH_2") == ()


def test_the_issues_2400_gib_persistent_2_at_the_default_tier_is_504_a_month():
    spec = storage.StorageSpec(fsx_size_gib=2400, fsx_deployment_type="PERSISTENT_2")
    assert storage.throughput_of(spec) == storage.THROUGHPUT["PERSISTENT_2"] == 250
    assert storage.storage_cost(spec, "us-east-1")["usd_per_month"] == 504.0
    # PERSISTENT_1 (default 200 MB/s/TiB) now has a price too: 1200 x 0.290.
    p1 = storage.StorageSpec(fsx_deployment_type="PERSISTENT_1")
    assert storage.storage_cost(p1, "us-east-1")["usd_per_month"] == pytest.approx(348.0)
    scratch = storage.storage_cost(storage.StorageSpec(), "us-east-1")
    assert scratch["usd_per_month"] == 168.0
    assert estimate_storage("fsx_lustre", 1200, "us-east-1").usd_per_month == 174.0


@pytest.mark.parametrize(
    ("deployment", "tier"), [("PERSISTENT_2", 200), ("PERSISTENT_1", 125), ("SCRATCH_2", 200)]
)
def test_a_tier_the_type_lacks_is_refused_with_the_ones_it_has(deployment, tier):
    spec = storage.StorageSpec(fsx_deployment_type=deployment, fsx_throughput=tier)
    with pytest.raises(ToolFailure) as caught:
        storage.throughput_of(spec)
    assert caught.value.code == "invalid_input" and caught.value.hint
    assert caught.value.details["problems"][0]["field"] == "fsx_throughput"


def test_the_default_kubernetes_version_is_in_standard_support_today_and_configurable():
    assert eksctl.DEFAULT_KUBERNETES_VERSION == "1.36"
    assert eksctl.support_note("1.36", "2026-12-06") is None
    spec = eksctl.ConfigSpec(cluster_name="c", region="us-east-1",
                             instance_type="p5.48xlarge", nodes=1)  # fmt: skip
    assert eksctl.cluster_config(spec)["metadata"]["version"] == "1.36"
    older = eksctl.ConfigSpec(**{**spec.__dict__, "kubernetes_version": "1.33"})
    assert eksctl.cluster_config(older)["metadata"]["version"] == "1.33"
    assert "left EKS standard support on 2026-07-29" in eksctl.support_note("1.33", "2026-11-25")
    assert "no EKS support dates" in eksctl.support_note("1.40", "2026-11-25")


# EKS's support calendar, written out from endoflife.date/amazon-eks (read 2026-12-06):
# version -> end of standard support; on 2026-12-06 each is in or out of standard support.
EKS_VERSIONS = [
    ("1.32", "2026-03-23", False),
    ("1.33", "2026-07-29", False),
    ("1.34", "2026-12-02", False),
    ("1.35", "2027-03-27", True),
    ("1.36", "2027-08-02", True),
]


@pytest.mark.parametrize(("version", "ends", "supported"), EKS_VERSIONS, ids=lambda v: str(v))
def test_each_eks_version_is_judged_by_its_support_date(version, ends, supported):
    assert eksctl.STANDARD_SUPPORT_ENDS[version] == ends
    assert "read 2026-12-06" in eksctl.STANDARD_SUPPORT[version][1]
    note = eksctl.support_note(version, "2026-12-06")
    assert (note is None) == supported
    if not supported:
        assert note is not None and f"left EKS standard support on {ends}" in note


def test_a_version_without_dates_is_not_said_to_be_refused_by_eksctl():
    # eksctl asks EKS (DescribeClusterVersions) which versions it offers.
    note = eksctl.support_note("1.37", "2026-12-06")
    assert note is not None and "no EKS support dates on record" in note
    assert "refuses" not in note and "describe-cluster-versions" in note
    assert list(eksctl.STANDARD_SUPPORT_ENDS) == [v[0] for v in EKS_VERSIONS]
