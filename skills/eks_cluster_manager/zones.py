"""Where a new cluster's nodes go (action=create_config), read from EC2, never guessed:
the GPU node group in one zone where it must be (EFA wants one; a capacity reservation
is one zone's), the cluster in at least two (eksctl's minimum). The zone is the
reservation's (DescribeCapacityReservations), else the first available zone where EC2
offers the instance type (DescribeAvailabilityZones, DescribeInstanceTypeOfferings).

read_placement asks EC2; for_reservation and for_offerings decide from its answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skills.cloud.clients import aws_error_code
from skills.shared.errors import ErrorCode, ToolFailure

CLUSTER_ZONES = 3  # eksctl's own default count
MIN_CLUSTER_ZONES = 2  # eksctl refuses fewer
# A reservation in these states holds no capacity (EC2's CapacityReservation.State).
ENDED_STATES = ("expired", "cancelled", "failed", "payment-failed", "unsupported")


@dataclass(frozen=True)
class Placement:
    cluster_zones: tuple[str, ...]  # the ClusterConfig's availabilityZones
    gpu_zones: tuple[str, ...] | None  # the GPU node group's (None: the cluster's)
    why: str  # where the GPU zone came from, in a few words


def read_placement(
    ec2: Any, instance_type: str, reservation_id: str | None, one_zone: bool
) -> Placement:
    """The placement from EC2 in the client's region; `one_zone`: the GPU group needs
    one zone (EFA)."""
    region = ec2.meta.region_name
    zones = available_zones(ec2)
    if reservation_id:
        reservation = read_reservation(ec2, reservation_id)
        return for_reservation(region, instance_type, reservation, zones)
    return for_offerings(region, instance_type, offered_zones(ec2, instance_type), zones, one_zone)


def available_zones(ec2: Any) -> list[str]:
    """The region's available Availability Zones (no Local or Wavelength Zones), by name."""
    found = ec2.describe_availability_zones(
        Filters=[
            {"Name": "state", "Values": ["available"]},
            {"Name": "zone-type", "Values": ["availability-zone"]},
        ]
    )["AvailabilityZones"]
    return sorted(z["ZoneName"] for z in found)


def offered_zones(ec2: Any, instance_type: str) -> set[str]:
    """The zones where EC2 offers the instance type."""
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    return {o["Location"] for page in pages for o in page["InstanceTypeOfferings"]}


def read_reservation(ec2: Any, reservation_id: str) -> dict[str, Any]:
    """The capacity reservation as EC2 describes it; an unknown id is not_found."""
    import botocore.exceptions

    try:
        found = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])
    except botocore.exceptions.ClientError as exc:
        if is_unknown_reservation(exc):
            raise unknown_reservation(reservation_id, ec2.meta.region_name) from None
        raise
    reservations = found.get("CapacityReservations") or []
    if not reservations:
        raise unknown_reservation(reservation_id, ec2.meta.region_name)
    return reservations[0]


def is_unknown_reservation(exc: Any) -> bool:
    """EC2's answer for an id it does not have (or that is not an id) in this region."""
    return aws_error_code(exc).startswith("InvalidCapacityReservationId")


def unknown_reservation(reservation_id: str, region: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.NOT_FOUND,
        f"No capacity reservation {reservation_id} in {region}.",
        "A reservation belongs to one region and account: check the id and the region "
        f"(`aws ec2 describe-capacity-reservations --region {region}` lists them), or "
        "leave capacity_reservation_id out.",
        {"field": "capacity_reservation_id", "region": region},
    )


def for_reservation(
    region: str, instance_type: str, reservation: dict[str, Any], zones: list[str]
) -> Placement:
    """The GPU group in the reservation's zone; the cluster there and in others."""
    rid = reservation.get("CapacityReservationId", "the reservation")
    held = reservation.get("InstanceType")
    if held != instance_type:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"Capacity reservation {rid} holds {held}, not {instance_type}.",
            f"Use instance_type={held}, or a reservation of {instance_type}.",
            {"field": "capacity_reservation_id", "instance_type": held},
        )
    state = reservation.get("State")
    if state in ENDED_STATES:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"Capacity reservation {rid} is {state}: it holds no capacity.",
            "Use an active reservation, or leave capacity_reservation_id out.",
            {"field": "capacity_reservation_id", "state": state},
        )
    zone = str(reservation["AvailabilityZone"])
    return Placement(
        cluster_zones=_cluster_zones(region, zone, zones, preferred=set()),
        gpu_zones=(zone,),
        why=f"capacity reservation {rid} is in {zone}",
    )


def for_offerings(
    region: str, instance_type: str, offered: set[str], zones: list[str], one_zone: bool
) -> Placement:
    """The GPU group in the first available zone that offers the instance type (only
    there when it needs one zone, else in every cluster zone that offers it)."""
    usable = [z for z in zones if z in offered]
    if not usable:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"EC2 offers {instance_type} in no available zone of {region}.",
            "Pick a region (or an instance type) that has it: "
            "`aws ec2 describe-instance-type-offerings --location-type availability-zone` "
            "lists where each type is offered.",
            {"field": "instance_type", "region": region},
        )
    cluster = _cluster_zones(region, usable[0], zones, preferred=set(usable))
    spread = tuple(z for z in cluster if z in offered)
    gpu_zones = (usable[0],) if one_zone else (None if spread == cluster else spread)
    return Placement(
        cluster_zones=cluster,
        gpu_zones=gpu_zones,
        why=f"EC2 offers {instance_type} in {', '.join(usable)}",
    )


def _cluster_zones(
    region: str, first: str, zones: list[str], preferred: set[str]
) -> tuple[str, ...]:
    """`first`, then other available zones (those in `preferred` before the rest), up
    to CLUSTER_ZONES; fewer than two is a failure (eksctl needs two)."""
    others = sorted((z for z in zones if z != first), key=lambda z: (z not in preferred, z))
    chosen = (first, *others[: CLUSTER_ZONES - 1])
    if len(chosen) < MIN_CLUSTER_ZONES:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{region} has {len(zones)} available zone(s); an EKS cluster needs two.",
            "Pick another region.",
            {"field": "region", "zones": zones},
        )
    return chosen
