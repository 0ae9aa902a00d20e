"""Issue 48 item 1: each rank's GPU through NVML, summed up per log window and gathered to
rank 0's step line. No GPU is on this machine, so `RecordedNvml` stands in for the pynvml
module: the same function names, answering with readings recorded from GPUs (an H100
at work, one power-capped, one whose driver reported XID 79); the decisions made on those
readings are what is tested. The real NVML path runs in the GPU benchmark."""

from __future__ import annotations

import io
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist

from tests.trainer.conftest import spawn
from trainer import gpu_telemetry
from trainer.gpu_telemetry import FIELDS, Sampler, step_fields
from trainer.rank_times import RankTimes


class NotSupported(Exception):
    """pynvml's NVMLError_NotSupported, as a GPU without a field raises it."""


class RecordedNvml:
    """Stands in for pynvml (no GPU here): replays recorded readings, one per sample()."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, readings: list[dict[str, Any]], xids: list[int] | None = None) -> None:
        self.readings, self.xids, self.i = readings, list(xids or []), -1
        self.inited = False

    def _now(self, key: str) -> Any:
        value = self.readings[self.i][key]
        if value is None:
            raise NotSupported(key)
        return value

    def tick(self) -> None:
        self.i += 1

    def nvmlInit(self) -> None:
        self.inited = True

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        assert uuid.startswith("GPU-")
        return uuid

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=self._now("util"), memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return SimpleNamespace(used=self._now("mem_used"), total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._now("power_mw")

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        return self._now("temp")

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        return self._now("sm_mhz")

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._now("reasons")

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, events: Any) -> None:
        assert types == self.nvmlEventTypeXidCriticalError

    def nvmlEventSetWait_v2(self, events: Any, timeout_ms: int) -> Any:
        if not self.xids:
            raise TimeoutError("NVMLError_Timeout")
        return SimpleNamespace(eventData=self.xids.pop(0))

    def nvmlEventSetFree(self, events: Any) -> None:
        pass


# Recorded on an H100 SXM during a training step, and on one held at its power cap.
BUSY = {"util": 97, "mem_used": 61 * 2**30, "power_mw": 612_000, "temp": 71, "sm_mhz": 1980,
        "reasons": 0x0}  # fmt: skip
CAPPED = {**BUSY, "util": 99, "power_mw": 700_000, "sm_mhz": 1410, "reasons": 0x4}
WAITING = {**BUSY, "util": 23, "power_mw": 180_000}


def sampled(readings: list[dict[str, Any]], xids: list[int] | None = None) -> list[float]:
    """One window of a sampler over `readings` (its thread idle: samples taken here)."""
    nvml = RecordedNvml(readings, xids)
    sampler = Sampler(nvml, "GPU-x", interval_s=3600)
    try:
        for _ in readings:
            nvml.tick()
            sampler.sample()
        return sampler.window()
    finally:
        sampler.close()


def test_a_window_sums_up_util_mean_memory_power_temperature_and_clock():
    row = dict(zip(FIELDS, sampled([BUSY, WAITING, CAPPED]), strict=True))
    assert row["util_mean"] == pytest.approx((97 + 23 + 99) / 3)
    assert row["mem_used_mb"] == 61 * 1024 and row["mem_total_mb"] == 80 * 1024
    assert row["power_w"] == 700.0 and row["temp_c"] == 71.0 and row["sm_clock_mhz"] == 1410.0
    assert int(row["throttle"]) == 0x4 and row["xids"] == 0 and math.isnan(row["last_xid"])


def test_a_field_the_gpu_does_not_report_is_left_unknown_not_a_failure():
    row = dict(zip(FIELDS, sampled([{**BUSY, "power_mw": None, "reasons": None}]), strict=True))
    assert math.isnan(row["power_w"]) and row["util_mean"] == 97
    assert "gpu_power_w_max" not in step_fields([list(row.values())])


def test_xid_events_nvml_reports_are_counted_with_the_last_one():
    row = dict(zip(FIELDS, sampled([BUSY, BUSY], xids=[48, 79]), strict=True))
    assert row["xids"] == 2 and row["last_xid"] == 79


def test_rank_0s_line_names_the_idlest_rank_the_throttled_and_the_xid_one():
    rows = [sampled([BUSY]), sampled([WAITING]), sampled([CAPPED]), sampled([BUSY], [79])]
    fields = step_fields(rows)
    assert fields["gpu_util_min"] == 23 and fields["gpu_util_min_rank"] == 1
    assert fields["gpu_util_mean"] == pytest.approx((97 + 23 + 99 + 97) / 4, abs=0.1)
    assert fields["gpu_throttled"] == {"2": ["sw_power_cap"]}
    assert fields["gpu_xid"] == {"3": 79} and fields["gpu_sm_clock_mhz_min"] == 1410


def test_a_rank_without_nvml_sends_nans_and_the_others_are_still_summed():
    rows = [sampled([BUSY]), gpu_telemetry.window_of(None)]
    assert len(rows[1]) == len(FIELDS)
    assert step_fields(rows)["gpu_util_min_rank"] == 0 and step_fields([rows[1]]) == {}


@pytest.mark.parametrize("rows", [[], [[], []]], ids=["no ranks", "cpu ranks gather none"])
def test_ranks_without_gpu_floats_give_no_gpu_fields(rows):
    assert step_fields(rows) == {}


def test_an_nvml_that_cannot_start_means_no_sampler_told_once():
    class NoDriver(RecordedNvml):
        def nvmlInit(self) -> None:
            raise OSError("NVML Shared Library Not Found")

    log = io.StringIO()
    assert gpu_telemetry.start("abc", 0, log=log, nvml=NoDriver([])) is None
    assert log.getvalue().count("NVML unavailable") == 1


def test_the_gpu_is_found_by_the_uuid_cuda_gives_under_visible_devices():
    nvml = RecordedNvml([])
    assert gpu_telemetry.handle_for(nvml, "5a8c-uuid", 3) == "GPU-5a8c-uuid"
    assert gpu_telemetry.handle_for(nvml, None, 3) == 3


def _gather_rank(rank: int, port: int, out: Any) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)  # fmt: skip
    try:
        readings = [WAITING] if rank == 1 else [BUSY]
        row = sampled(readings)
        times = RankTimes(torch.device("cpu"), 0, lambda: row)
        times.window(10)
        out.put((rank, times.extra_rows))
        times.close()
    finally:
        dist.destroy_process_group()


def test_every_ranks_floats_ride_the_step_time_gather_to_every_rank(tmp_path):
    import multiprocessing

    from tests.services._common import free_port

    queue = multiprocessing.get_context("spawn").Manager().Queue()
    spawn(_gather_rank, (free_port(), queue), nprocs=2)
    got = dict(queue.get() for _ in range(2))
    assert step_fields(got[0]) == step_fields(got[1])  # every rank holds every rank's row
    assert step_fields(got[0])["gpu_util_min_rank"] == 1 and len(got[0]) == 2
