"""A job's pods' CPU and memory from the metrics API (skills/kube/pod_metrics.py): the
quantities as the metrics-server writes them, read by the kubernetes client's parser,
and a summary whose size does not grow with the job."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from skills.kube.pod_metrics import parse_quantity, pod_usage, summary, usage_text
from skills.training_job_deployer.models import JobState

MIB = 2**20


@pytest.mark.parametrize(
    ("quantity", "value"),
    [
        pytest.param("250m", Decimal("0.25"), id="millicores are thousandths of a core"),
        pytest.param(
            "1500n", Decimal("0.0000015"), id="nanocores, as the metrics-server reports CPU"
        ),
        pytest.param("2", Decimal(2), id="a plain number is whole cores"),
        pytest.param("1.5", Decimal("1.5"), id="a decimal number is cores too"),
        pytest.param("123Mi", Decimal(123 * MIB), id="Mi is binary mebibytes"),
        pytest.param("1Gi", Decimal(2**30), id="Gi is binary gibibytes"),
        pytest.param("2048Ki", Decimal(2 * MIB), id="Ki, the kubelet's usual memory unit"),
        pytest.param("1G", Decimal(10**9), id="G is decimal gigabytes"),
        pytest.param("1048576", Decimal(MIB), id="plain bytes"),
        pytest.param("1e3", Decimal(1000), id="an exponent"),
    ],
)
def test_a_quantity_reads_as_the_api_server_means_it(quantity, value):
    assert parse_quantity(quantity) == value


def test_a_quantity_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        parse_quantity("lots")


def metrics(name: str, *containers: tuple[str, str]) -> dict:
    return {
        "metadata": {"name": name},
        "window": "15s",
        "containers": [
            {"name": f"c{i}", "usage": {"cpu": cpu, "memory": memory}}
            for i, (cpu, memory) in enumerate(containers)
        ],
    }


def test_a_pods_use_is_its_containers_summed():
    cpu, memory = pod_usage(metrics("p", ("1500m", "1Gi"), ("250000000n", "512Mi")))
    assert (cpu, memory) == (1.75, 1536.0)


def test_no_pod_measured_is_no_summary():
    assert summary([]) is None


def test_a_4096_pod_job_is_summed_up_in_a_few_hundred_bytes_with_its_heaviest_pods():
    pods = [metrics(f"job-worker-{i}", (f"{i % 97}m", f"{1000 + i}Mi")) for i in range(4096)]
    found = summary(pods)
    assert found is not None and found["pods"] == 4096
    assert [p["pod"] for p in found["top"]] == [f"job-worker-{i}" for i in (4095, 4094, 4093)]
    assert found["memory_mib"] == {"total": float(sum(1000 + i for i in range(4096))),
                                   "min": 1000.0, "max": 5095.0}  # fmt: skip
    assert found["cpu_cores"]["min"] == 0.0 and found["cpu_cores"]["max"] == 0.096
    assert len(json.dumps(found)) < 600, found
    line = usage_text(found)
    assert line.startswith("4096 pods: CPU ") and "job-worker-4095" in line, line


def test_the_state_shows_the_use_or_the_note_in_one_row():
    state = JobState(job_name="j", target="kubernetes", status="running",
                     pod_usage=summary([metrics("j-master-0", ("2", "3Gi"))]))  # fmt: skip
    rows = dict(state.summary_rows())
    assert rows["pod use"].startswith("1 pod: CPU 2 cores"), rows
    noted = JobState(job_name="j", target="kubernetes", status="running",
                     pod_usage={"note": "pod CPU/memory: install the metrics-server"})  # fmt: skip
    assert dict(noted.summary_rows())["pod use"] == "pod CPU/memory: install the metrics-server"
