"""The dated price table (skills/catalog/pricing.py), a test per row class: GPU instances
on demand against the instance table's column and the reference's figures, regions,
spot as a range, storage per month, estimates that never block, a sum, and the step
time a trainer log measures (the hours for max_steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skills.catalog import pricing
from skills.catalog.instances import INSTANCES, instance_spec
from skills.catalog.pricing import (
    CostEstimate,
    combine,
    estimate_instances,
    estimate_storage,
)
from skills.training_job_deployer.trainer_log import measured_step_time

# The reference's us-east-1 on-demand figures (CUDA-AND-FAILURES.md section 4, Aug-Sep
# 2026), typed here again rather than read from the table under test.
REFERENCE_USD_PER_HOUR = {
    "p4d.24xlarge": 21.96,
    "p4de.24xlarge": 27.45,
    "p5.48xlarge": 55.04,
    "p5en.48xlarge": 63.30,
    "g5.xlarge": 1.006,
    "g5.12xlarge": 5.672,
    "g5.48xlarge": 16.288,
}
RECORDED_RUN = Path(__file__).parents[1] / "services" / "data" / "trainer_run.jsonl"


@pytest.mark.parametrize(("name", "usd"), REFERENCE_USD_PER_HOUR.items())
def test_gpu_instances_on_demand_against_the_reference(name, usd):
    for count in (1, 4):
        estimate = estimate_instances(name, count, "us-east-1")
        assert estimate.usd_per_hour == pytest.approx(usd * count)
        assert estimate.usd_per_month == pytest.approx(usd * count * 730, abs=0.01)
        assert estimate.price_table_date == pricing.PRICE_TABLE_DATE
        assert estimate.total_usd is None and estimate.hours is None  # per hour only
        assert not any("approximate" in n for n in estimate.notes)


@pytest.mark.parametrize("spec", [s for s in INSTANCES if s.usd_per_hour], ids=lambda s: s.name)
def test_every_priced_instance_row_is_the_one_column(spec):
    # One source: the estimate is the instance table's usd_per_hour, SageMaker names too.
    assert estimate_instances(spec.name, 1, "us-east-1").usd_per_hour == spec.usd_per_hour
    sagemaker = estimate_instances(f"ml.{spec.name}", 1, "us-east-1")
    assert sagemaker.usd_per_hour == spec.usd_per_hour
    assert any("SageMaker" in n for n in sagemaker.notes)


def test_p5_costs_more_than_p4d_and_g5_less():
    p4d, p5, g5 = (estimate_instances(n, 1, "us-east-1").usd_per_hour
                   for n in ("p4d.24xlarge", "p5.48xlarge", "g5.12xlarge"))  # fmt: skip
    assert g5 is not None and p4d is not None and p5 is not None
    assert g5 < p4d < p5


def test_a_region_that_differs_is_priced_by_its_factor_and_says_approximate():
    base = estimate_instances("p5.48xlarge", 2, "us-east-1")
    same = estimate_instances("p5.48xlarge", 2, "us-west-2")
    assert same.usd_per_hour == base.usd_per_hour and same.notes == base.notes
    for region in ("eu-west-1", "eu-central-1", "ap-northeast-1"):
        other = estimate_instances("p5.48xlarge", 2, region)
        factor = pricing.REGION_FACTORS[region]
        assert factor > 1
        assert other.usd_per_hour == pytest.approx(2 * 55.04 * factor)
        assert any(n.startswith(f"{region}: approximate") for n in other.notes)
        assert region in other.what


def test_an_unknown_or_missing_region_is_us_east_1_with_a_note():
    for region in ("sa-east-1", None):
        estimate = estimate_instances("g5.xlarge", 1, region)
        assert estimate.usd_per_hour == 1.006
        assert any("us-east-1 prices" in n for n in estimate.notes)


def test_spot_is_a_range_of_the_on_demand_price_not_a_price():
    estimate = estimate_instances("p4d.24xlarge", 3, "us-east-1")
    low, high = estimate.spot_usd_per_hour_range or (0, 0)
    on_demand = 3 * 21.96
    assert (low, high) == (round(on_demand * 0.3, 2), round(on_demand * 0.7, 2))
    assert low < high < on_demand
    assert any("range" in n and "not a price" in n for n in estimate.notes)


def test_hours_give_a_total():
    estimate = estimate_instances("p5.48xlarge", 4, "us-east-1", hours=12.5)
    assert estimate.hours == 12.5 and estimate.total_usd == pytest.approx(4 * 55.04 * 12.5)
    assert "for 12.5 h" in estimate.line() and "(prices of 2026-09)" in estimate.line()


@pytest.mark.parametrize(
    ("deployment", "tier", "usd_per_gib_month"),
    [
        ("SCRATCH_2", None, 0.140),
        ("PERSISTENT_1", 50, 0.140),
        ("PERSISTENT_1", 200, 0.290),
        ("PERSISTENT_2", 125, 0.145),
        ("PERSISTENT_2", 250, 0.210),
        ("PERSISTENT_2", 500, 0.340),
        ("PERSISTENT_2", 1000, 0.600),
    ],
)
def test_fsx_lustre_per_month_by_deployment_type(deployment, tier, usd_per_gib_month):
    estimate = estimate_storage("fsx_lustre", 1200, "us-east-1", deployment_type=deployment,
                                throughput_mbps_per_tib=tier)  # fmt: skip
    assert estimate.usd_per_month == pytest.approx(1200 * usd_per_gib_month)
    assert estimate.usd_per_hour is None and estimate.spot_usd_per_hour_range is None
    assert deployment in estimate.what


def test_fsx_default_is_persistent_2_at_125_and_an_unknown_tier_has_no_price():
    default = estimate_storage("fsx_lustre", 2400, "us-east-1")
    assert default.usd_per_month == pytest.approx(2400 * 0.145)
    assert "PERSISTENT_2 125 MB/s/TiB" in default.what
    odd = estimate_storage("fsx_lustre", 1200, "us-east-1", deployment_type="PERSISTENT_2",
                           throughput_mbps_per_tib=300)  # fmt: skip
    assert odd.usd_per_month is None and any("not in the price table" in n for n in odd.notes)


def test_s3_and_ebs_gp3_per_month_with_regional_rows():
    assert estimate_storage("s3", 1000, "us-east-1").usd_per_month == pytest.approx(23.0)
    assert estimate_storage("s3", 1000, "eu-west-1").usd_per_month == pytest.approx(23.0)
    assert estimate_storage("s3", 1000, "ap-northeast-1").usd_per_month == pytest.approx(25.0)
    assert estimate_storage("ebs_gp3", 500, "us-east-1").usd_per_month == pytest.approx(40.0)
    assert estimate_storage("ebs_gp3", 500, "eu-west-1").usd_per_month == pytest.approx(44.0)
    fsx_abroad = estimate_storage("fsx_lustre", 1200, "eu-west-1")
    assert fsx_abroad.usd_per_month == pytest.approx(1200 * 0.145)
    assert any("us-east-1's shown" in n for n in fsx_abroad.notes)


def test_an_estimate_never_blocks():
    unknown = estimate_instances("x9.mega", 2, "us-east-1")
    assert unknown.usd_per_hour is None and "no price" in unknown.line()
    assert any("not in the price table" in n for n in unknown.notes)
    blocks_only = estimate_instances("p5e.48xlarge", 1, "us-east-1")
    assert instance_spec("p5e.48xlarge").usd_per_hour is None
    assert blocks_only.usd_per_hour is None and "capacity blocks" in blocks_only.notes[0]
    unnamed = estimate_instances(None, 2, "us-east-1")
    assert unnamed.usd_per_hour is None and unnamed.notes
    kind = estimate_storage("nfs", 10, "us-east-1")
    assert kind.usd_per_month is None and "fsx_lustre" in kind.notes[0]


def test_a_sum_names_what_it_could_not_price():
    parts = [
        estimate_instances("g5.xlarge", 2, "us-east-1", hours=10),
        estimate_instances("x9.mega", 1, "us-east-1", hours=10),
        estimate_storage("ebs_gp3", 100, "us-east-1"),
    ]
    total = combine("mix", parts)
    assert total.usd_per_hour == pytest.approx(2.01, abs=0.01)
    assert total.usd_per_month == pytest.approx(2 * 1.006 * 730 + 8.0, abs=0.01)
    assert total.total_usd == pytest.approx(20.12) and total.hours == 10
    assert total.notes[0] == "partial: no price for 1 x x9.mega in us-east-1"
    assert len(total.notes) == len(set(total.notes))  # each note once
    assert CostEstimate.model_validate(total.model_dump(mode="json")) == total
    assert pricing.cost_comment(total.model_dump()).startswith("# cost: mix: $2.01/h")
    assert pricing.cost_comment(None) == ""


def test_step_time_from_a_recorded_trainer_log():
    text = RECORDED_RUN.read_text()
    steps = [json.loads(line) for line in text.splitlines() if '"event": "step"' in line]
    first, last = steps[0], steps[-1]
    expected = (last["elapsed_s"] - first["elapsed_s"]) / (last["step"] - first["step"])
    measured = measured_step_time(text)
    assert measured is not None
    assert measured.seconds == pytest.approx(expected) and measured.steps == 5
    # A second attempt (torchrun restarted the workers) is the one measured.
    restart = [
        {"event": "start", "world_size": 4, "max_steps": 100},
        {"event": "step", "step": 7, "loss": 5.0, "elapsed_s": 3.0},
        {"event": "step", "step": 17, "loss": 4.0, "elapsed_s": 8.0},
    ]
    again = measured_step_time(text + "".join(json.dumps(e) + "\n" for e in restart))
    assert again is not None and (again.seconds, again.steps, again.world_size) == (0.5, 10, 4)
    assert measured_step_time("no trainer lines here\n") is None
    one = '{"event": "step", "step": 1, "loss": 1.0, "elapsed_s": 0.5}\n'
    assert measured_step_time(one) is None  # one step line measures nothing
