"""What a plan would cost: on-demand $/hour for instances (the instance table's
`usd_per_hour` column, instances.py, is the one source of GPU prices), regional factors,
spot as a range, and storage per month. Every estimate names PRICE_TABLE_DATE.

An estimate never blocks: an unknown instance type, region or storage tier gives an
estimate without that figure and a note that says so, never an exception.

Sources, us-east-1 list prices: GPU instances, /work/shared/reference/CUDA-AND-FAILURES.md
section 4 (AWS's price list, Aug-Sep 2026, after the June 2025 P4/P5 price cut); the
system node, EKS, FSx for Lustre, S3 and EBS figures are AWS's public price pages.
Older figures (p4d ~ $32-40/h, p5 ~ $98-120/h) are the prices before that cut; FSx for
Lustre's 1.2 TB is $168-720/month here, by deployment type and throughput tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from skills.catalog.instances import SAGEMAKER_PREFIX, instance_spec
from skills.shared.errors import ToolFailure

# The month the figures below (and instances.py's usd_per_hour column) were read.
PRICE_TABLE_DATE = "2026-09"
BASE_REGION = "us-east-1"
HOURS_PER_MONTH = 730  # AWS's own convention for monthly figures

# Spot prices move with each AZ's spare capacity: a range of the on-demand price, not a
# price. 30-70% is what GPU spot has cost against on-demand, which AWS's "up to 90% off"
# bounds from below.
SPOT_FRACTION_RANGE = (0.30, 0.70)

# On-demand instance prices in a region, as a factor of us-east-1's. The US regions that carry
# the GPU families list the same prices; elsewhere the factor is approximate (the GPU
# families' regional list prices over us-east-1's, rounded), and the estimate says so.
# A region not named here is priced at us-east-1's, with a note.
REGION_FACTORS: dict[str, float] = {
    "us-east-1": 1.0,
    "us-east-2": 1.0,
    "us-west-2": 1.0,
    "eu-west-1": 1.1,
    "eu-central-1": 1.2,
    "ap-northeast-1": 1.4,
}
_EXACT_REGIONS = frozenset(r for r, f in REGION_FACTORS.items() if f == 1.0)

# Instances a plan adds that are not GPU instances (eksctl's system node group), and
# the EKS control plane (standard support), us-east-1 on-demand $/hour.
OTHER_USD_PER_HOUR: dict[str, float] = {
    "m5.large": 0.096,
    "m5.xlarge": 0.192,
    "m5.2xlarge": 0.384,
}
EKS_CONTROL_PLANE_USD_PER_HOUR = 0.10

# Storage, us-east-1 $/GB-month (the GB AWS bills is the GiB the file system or volume
# is sized in). FSx for Lustre (SSD) by deployment type and throughput tier (MB/s per
# TiB): these rows are also the tiers the storage action accepts. Checked against
# aws.amazon.com/fsx/lustre/pricing (Nov 2026: the page quotes per GB-month by tier) and
# an independent estimator (c3x.dev: PERSISTENT_2 125 MB/s/TiB ~$0.145/GB-month); issue 29:
# 2400 GiB PERSISTENT_2 at 250 MB/s/TiB is 2400 x 0.210 = $504/month.
FSX_LUSTRE_USD_PER_GIB_MONTH: dict[tuple[str, int | None], float] = {
    ("SCRATCH_2", None): 0.140,
    ("PERSISTENT_1", 50): 0.140,
    ("PERSISTENT_1", 100): 0.190,
    ("PERSISTENT_1", 200): 0.290,
    ("PERSISTENT_2", 125): 0.145,
    ("PERSISTENT_2", 250): 0.210,
    ("PERSISTENT_2", 500): 0.340,
    ("PERSISTENT_2", 1000): 0.600,
}
FSX_DEFAULT = ("PERSISTENT_2", 125)


def fsx_tiers(deployment_type: str) -> tuple[int, ...]:
    """The throughput tiers (MB/s/TiB) the price table has for a persistent type; ()
    for scratch, which has none to choose."""
    return tuple(sorted(t for d, t in FSX_LUSTRE_USD_PER_GIB_MONTH if d == deployment_type and t))


S3_STANDARD_USD_PER_GIB_MONTH = 0.023  # the first 50 TB a month
EBS_GP3_USD_PER_GIB_MONTH = 0.08  # 3,000 IOPS and 125 MB/s included
# Storage prices per region: where a kind costs what it does in us-east-1, and the
# regions' own prices where they differ. Elsewhere us-east-1's, with a note.
STORAGE_BASE_REGIONS: dict[str, frozenset[str]] = {
    "fsx_lustre": frozenset({"us-east-1", "us-east-2", "us-west-2"}),
    "s3": frozenset({"us-east-1", "us-east-2", "us-west-2", "eu-west-1"}),
    "ebs_gp3": frozenset({"us-east-1", "us-east-2", "us-west-2"}),
}
STORAGE_REGION_USD_PER_GIB_MONTH: dict[tuple[str, str], float] = {
    ("s3", "eu-central-1"): 0.0245,
    ("s3", "ap-northeast-1"): 0.025,
    ("ebs_gp3", "eu-west-1"): 0.088,
    ("ebs_gp3", "eu-central-1"): 0.0952,
    ("ebs_gp3", "ap-northeast-1"): 0.096,
}
STORAGE_KINDS = ("fsx_lustre", "s3", "ebs_gp3")


class CostEstimate(BaseModel):
    """A price estimate from the dated table: figures it cannot give are None, and
    `notes` says why (and what the figures assume)."""

    what: str = Field(description="What was priced, e.g. '2 x p5.48xlarge in us-east-1'.")
    usd_per_hour: float | None = Field(default=None, description="On-demand $/hour.")
    usd_per_month: float | None = Field(
        default=None, description=f"$/month ({HOURS_PER_MONTH} h for instances)."
    )
    spot_usd_per_hour_range: tuple[float, float] | None = Field(
        default=None, description="Spot $/hour as a range (it moves), not a price."
    )
    hours: float | None = Field(default=None, description="Hours priced in total_usd.")
    total_usd: float | None = Field(default=None, description="usd_per_hour x hours.")
    price_table_date: str = PRICE_TABLE_DATE
    notes: list[str] = Field(default_factory=list)

    def line(self) -> str:
        """One line for a person: the figures there are, and the table's date."""
        parts = [self.what]
        if self.usd_per_hour is not None:
            parts.append(f"${self.usd_per_hour:,.2f}/h on-demand")
        if self.spot_usd_per_hour_range is not None:
            low, high = self.spot_usd_per_hour_range
            parts.append(f"spot ~${low:,.2f}-{high:,.2f}/h")
        if self.usd_per_month is not None:
            parts.append(f"${self.usd_per_month:,.0f}/month")
        if self.total_usd is not None and self.hours is not None:
            parts.append(f"~${self.total_usd:,.0f} for {self.hours:,.1f} h")
        if self.usd_per_hour is None and self.usd_per_month is None:
            parts.append("no price")
        return ": ".join([parts[0], ", ".join(parts[1:])]) + f" (prices of {self.price_table_date})"


def region_factor(region: str | None) -> tuple[float, list[str]]:
    """The region's factor over us-east-1's instance prices, and what to note."""
    if region is None:
        return 1.0, [f"no region given: {BASE_REGION} prices"]
    if region not in REGION_FACTORS:
        return 1.0, [f"no regional prices for {region}: {BASE_REGION} prices shown"]
    factor = REGION_FACTORS[region]
    if region in _EXACT_REGIONS:
        return factor, []
    return factor, [f"{region}: approximate, {factor:g} x {BASE_REGION} list prices"]


def _hourly(instance_type: str) -> tuple[float | None, str, list[str]]:
    """(us-east-1 on-demand $/hour or None, the name priced, notes)."""
    key = instance_type.strip().lower().removeprefix(SAGEMAKER_PREFIX)
    if key in OTHER_USD_PER_HOUR:
        return OTHER_USD_PER_HOUR[key], key, []
    try:
        spec = instance_spec(instance_type)
    except ToolFailure:
        return None, instance_type, [f"{instance_type} is not in the price table: no price"]
    if spec.usd_per_hour is None:
        return None, spec.name, [f"{spec.name} has no on-demand price (capacity blocks only)"]
    notes = []
    if instance_type.strip().lower().startswith(SAGEMAKER_PREFIX):
        notes.append("priced as the EC2 instance; SageMaker's ml. prices are higher")
    return spec.usd_per_hour, spec.name, notes


@dataclass(frozen=True)
class Billing:
    """What a job or a model server runs on that is paid by the hour: `nodes` instances
    of one type (None: not named) in `region` (None: not known)."""

    instance_type: str | None
    nodes: int
    region: str | None


def estimate_billing(billing: Billing, hours: float | None = None) -> CostEstimate:
    """The estimate for what a job's plan or a model server holds (the one way from
    Billing to a cost), with the total for `hours` when given."""
    return estimate_instances(billing.instance_type, billing.nodes, billing.region, hours)


def estimate_instances(
    instance_type: str | None, count: int, region: str | None, hours: float | None = None
) -> CostEstimate:
    """`count` instances on demand in `region`: $/hour, $/month, spot as a range, and
    the total for `hours` when given."""
    if instance_type is None:
        return CostEstimate(
            what=f"{count} x (no instance type)",
            notes=["no instance type named: nothing to price"],
        )
    hourly, name, notes = _hourly(instance_type)
    where = region or BASE_REGION
    what = f"{count} x {name} in {where}"
    if hourly is None:
        return CostEstimate(what=what, hours=hours, notes=notes)
    factor, region_notes = region_factor(region)
    per_hour = hourly * factor * count
    low, high = SPOT_FRACTION_RANGE
    notes = [
        *notes,
        *region_notes,
        f"spot: a range ({low:.0%}-{high:.0%} of on-demand), not a price",
    ]
    return CostEstimate(
        what=what,
        usd_per_hour=round(per_hour, 3),
        usd_per_month=round(per_hour * HOURS_PER_MONTH, 2),
        spot_usd_per_hour_range=(round(per_hour * low, 2), round(per_hour * high, 2)),
        hours=hours,
        total_usd=None if hours is None else round(per_hour * hours, 2),
        notes=notes,
    )


def estimate_storage(
    kind: str,
    size_gib: float,
    region: str | None,
    *,
    deployment_type: str | None = None,
    throughput_mbps_per_tib: int | None = None,
) -> CostEstimate:
    """`size_gib` of storage for a month. kind: fsx_lustre (by deployment type and
    throughput tier; default PERSISTENT_2 at 125 MB/s/TiB), s3 (Standard) or ebs_gp3."""
    notes: list[str] = []
    if kind == "fsx_lustre":
        deployment = (deployment_type or FSX_DEFAULT[0]).upper()
        tier = None if deployment.startswith("SCRATCH") else throughput_mbps_per_tib
        if tier is None and deployment == FSX_DEFAULT[0]:
            tier = FSX_DEFAULT[1]
        rate = FSX_LUSTRE_USD_PER_GIB_MONTH.get((deployment, tier))
        label = deployment if tier is None else f"{deployment} {tier} MB/s/TiB"
        what = f"FSx for Lustre {label}, {size_gib:,.0f} GiB"
        if rate is None:
            known = ", ".join(f"{d} {t}" if t else d for d, t in FSX_LUSTRE_USD_PER_GIB_MONTH)
            notes.append(f"FSx for Lustre {label} is not in the price table ({known}): no price")
    elif kind == "s3":
        rate, what = S3_STANDARD_USD_PER_GIB_MONTH, f"S3 Standard, {size_gib:,.0f} GiB"
        notes.append("S3: storage only; requests and transfer out are extra")
    elif kind == "ebs_gp3":
        rate, what = EBS_GP3_USD_PER_GIB_MONTH, f"EBS gp3, {size_gib:,.0f} GiB"
        notes.append("EBS gp3: IOPS over 3,000 and throughput over 125 MB/s are extra")
    else:
        return CostEstimate(
            what=f"{kind}, {size_gib:,.0f} GiB",
            notes=[f"storage kind {kind!r} is not one of {', '.join(STORAGE_KINDS)}: no price"],
        )
    if rate is None:
        return CostEstimate(what=what, notes=notes)
    where = region or BASE_REGION
    if region is None:
        notes.append(f"no region given: {BASE_REGION} prices")
    elif (kind, region) in STORAGE_REGION_USD_PER_GIB_MONTH:
        rate = STORAGE_REGION_USD_PER_GIB_MONTH[(kind, region)]
    elif region not in STORAGE_BASE_REGIONS[kind]:
        notes.append(f"no {kind} price for {region} in the table: {BASE_REGION}'s shown")
    return CostEstimate(
        what=f"{what} in {where}",
        usd_per_month=round(rate * size_gib, 2),
        notes=notes,
    )


def estimate_eks_control_plane(region: str | None, hours: float | None = None) -> CostEstimate:
    """One EKS cluster's control plane (standard support; the same in every region)."""
    per_hour = EKS_CONTROL_PLANE_USD_PER_HOUR
    return CostEstimate(
        what=f"EKS control plane in {region or BASE_REGION}",
        usd_per_hour=per_hour,
        usd_per_month=round(per_hour * HOURS_PER_MONTH, 2),
        hours=hours,
        total_usd=None if hours is None else round(per_hour * hours, 2),
        notes=["EKS extended support (an older Kubernetes version): $0.60/h"],
    )


def combine(what: str, parts: list[CostEstimate]) -> CostEstimate:
    """The sum of estimates. A figure some part lacks is the sum of those that have it,
    and a note names what is missing; storage (monthly only) adds to the month."""

    def total(field: str, digits: int = 2) -> float | None:
        values = [getattr(p, field) for p in parts if getattr(p, field) is not None]
        return round(sum(values), digits) if values else None

    unpriced = [p.what for p in parts if p.usd_per_hour is None and p.usd_per_month is None]
    spot = [p for p in parts if p.spot_usd_per_hour_range is not None]
    spot_range = None
    if spot:
        # The parts without spot (control plane, storage) are paid in full either way.
        fixed = sum(p.usd_per_hour or 0.0 for p in parts if p.spot_usd_per_hour_range is None)
        low = sum(p.spot_usd_per_hour_range[0] for p in spot if p.spot_usd_per_hour_range)
        high = sum(p.spot_usd_per_hour_range[1] for p in spot if p.spot_usd_per_hour_range)
        spot_range = (round(low + fixed, 2), round(high + fixed, 2))
    notes = list(dict.fromkeys(n for p in parts for n in p.notes))  # each once, in order
    if unpriced:
        notes.insert(0, "partial: no price for " + ", ".join(unpriced))
    hours = {p.hours for p in parts if p.hours is not None}
    return CostEstimate(
        what=what,
        usd_per_hour=total("usd_per_hour", 3),
        usd_per_month=total("usd_per_month"),
        spot_usd_per_hour_range=spot_range,
        hours=hours.pop() if len(hours) == 1 else None,
        total_usd=total("total_usd"),
        notes=notes,
    )


def cost_rows(cost: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A result's `cost` (an estimate's model_dump) as summary rows: the line, then
    each note."""
    if not cost:
        return []
    estimate = CostEstimate.model_validate(cost)
    return [("cost", estimate.line()), *(("  cost note", n) for n in estimate.notes)]


def cost_comment(cost: dict[str, Any] | None) -> str:
    """A result's `cost` as comment lines ('# ...') to follow a script or YAML that
    the CLI prints as it is (still valid to run or apply); '' without one."""
    return "".join(f"# {key.strip()}: {value}\n" for key, value in cost_rows(cost))
