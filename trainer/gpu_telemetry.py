"""Each rank's GPU as NVML sees it, on rank 0's step lines.

On CUDA every rank samples its own GPU through NVML (`nvidia-ml-py`, the pynvml module
NVIDIA keeps) from a daemon thread, once per SAMPLE_S: utilisation, memory used/total,
power, temperature, SM clock, the clocks' throttle reasons, and XID events where the
driver reports them to NVML. The training thread never calls NVML: on a log step it
takes the window's summary, a few floats (`Sampler.window`), which go to rank 0 in the
all_gather that already carries the per-rank step times (trainer/rank_times.py); rank 0
turns every rank's floats into the step line's gpu_* fields (`step_fields`).

A sampling call that fails (a field the GPU does not support, NVML gone) leaves that
field out; an NVML that cannot start (no driver, no pynvml in an older image) means no
sampler at all, told once on stderr. Off CUDA nothing is created.
"""

from __future__ import annotations

import statistics
import sys
import threading
from collections.abc import Callable
from typing import Any, TextIO

SAMPLE_S = 1.0
# The window's summary, one float each, in this order (NaN: not known).
FIELDS = (
    "util_mean",
    "mem_used_mb",
    "mem_total_mb",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "throttle",
    "xids",
    "last_xid",
)
NAN = float("nan")
# NVML's clocks-event (throttle) reasons that say the GPU is held back (nvml.h,
# nvmlClocksEventReason*). GpuIdle, ApplicationsClocksSetting, SyncBoost and
# DisplayClockSetting are not throttling.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
# The median rank's utilisation under this on a log step: the GPUs mostly wait.
IDLE_UTIL_PCT = 50.0


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


class Sampler:
    """A daemon thread sampling one GPU through `nvml` (the pynvml module; a test hands
    in recorded readings instead), summed up per window between two `window()` calls."""

    def __init__(self, nvml: Any, handle: Any, interval_s: float = SAMPLE_S) -> None:
        self.nvml, self.handle, self.interval_s = nvml, handle, interval_s
        self._lock = threading.Lock()
        self._reset()
        self._events = self._xid_events()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
        self._thread.start()

    def _reset(self) -> None:
        self.utils: list[float] = []
        self.mem_used = self.mem_total = self.power = self.temp = NAN
        self.sm_clock = NAN
        self.throttle = 0
        self.xids: list[int] = []

    def _xid_events(self) -> Any:
        """An NVML event set for XID errors on this GPU (None where it is not supported)."""
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(self.handle, nvml.nvmlEventTypeXidCriticalError, events)
            return events
        except Exception:  # noqa: BLE001 (not supported: no XIDs from NVML)
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        """One reading of every field; each that fails is left as it was."""
        nvml, h = self.nvml, self.handle
        readings: dict[str, Any] = {}
        calls: dict[str, Callable[[], Any]] = {
            "util": lambda: float(nvml.nvmlDeviceGetUtilizationRates(h).gpu),
            "mem": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
            "power": lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "temp": lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
            "sm": lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            "throttle": lambda: int(nvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
        }
        for name, call in calls.items():
            try:
                readings[name] = call()
            except Exception:  # noqa: BLE001 (a field this GPU does not report)
                continue
        xids = self._poll_xids()
        with self._lock:
            if "util" in readings:
                self.utils.append(readings["util"])
            if "mem" in readings:
                mem = readings["mem"]
                self.mem_used = _max(self.mem_used, mem.used / 2**20)
                self.mem_total = mem.total / 2**20
            if "power" in readings:
                self.power = _max(self.power, readings["power"])
            if "temp" in readings:
                self.temp = _max(self.temp, readings["temp"])
            if "sm" in readings:
                self.sm_clock = _min(self.sm_clock, readings["sm"])
            self.throttle |= readings.get("throttle", 0)
            self.xids += xids

    def _poll_xids(self) -> list[int]:
        if self._events is None:
            return []
        found: list[int] = []
        while True:
            try:
                data = self.nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # noqa: BLE001 (NVMLError_Timeout: none waiting)
                return found
            found.append(int(data.eventData))

    def window(self) -> list[float]:
        """The summary since the last call, as FIELDS' floats; a new window begins."""
        with self._lock:
            util = statistics.fmean(self.utils) if self.utils else NAN
            row = [
                util,
                self.mem_used,
                self.mem_total,
                self.power,
                self.temp,
                self.sm_clock,
                float(self.throttle),
                float(len(self.xids)),
                float(self.xids[-1]) if self.xids else NAN,
            ]
            self._reset()
        return row

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * self.interval_s)
        try:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
        except Exception:  # noqa: BLE001 (shutting down anyway)
            pass


def _max(a: float, b: float) -> float:
    return b if a != a else max(a, b)  # a != a: NaN, nothing yet


def _min(a: float, b: float) -> float:
    return b if a != a else min(a, b)


def _known(value: float) -> bool:
    return value == value


def step_fields(rows: list[list[float]]) -> dict[str, Any]:
    """Rank 0's step-line fields from every rank's window (rows[rank] = FIELDS' floats):
    utilisation mean and the lowest rank's, the highest memory, power and temperature,
    the lowest SM clock, and which ranks were throttled (why) or saw XIDs."""
    if not rows or any(len(r) != len(FIELDS) for r in rows):
        return {}  # CPU ranks gather no GPU floats
    fields: dict[str, Any] = {}
    utils = [(r[0], rank) for rank, r in enumerate(rows) if _known(r[0])]
    if utils:
        fields["gpu_util_mean"] = round(statistics.fmean(u for u, _ in utils), 1)
        low, low_rank = min(utils)
        fields["gpu_util_min"], fields["gpu_util_min_rank"] = round(low, 1), low_rank
    for index, name, pick in (
        (1, "gpu_mem_used_mb_max", max),
        (2, "gpu_mem_total_mb", max),
        (3, "gpu_power_w_max", max),
        (4, "gpu_temp_c_max", max),
        (5, "gpu_sm_clock_mhz_min", min),
    ):
        known = [r[index] for r in rows if _known(r[index])]
        if known:
            fields[name] = round(pick(known), 1)
    reasons = [throttle_names(int(r[6]) if _known(r[6]) else 0) for r in rows]
    throttled = {str(rank): names for rank, names in enumerate(reasons) if names}
    if throttled:
        fields["gpu_throttled"] = throttled
    xids = {str(rank): int(r[8]) for rank, r in enumerate(rows) if _known(r[7]) and r[7] > 0}
    if xids:
        fields["gpu_xid"] = xids  # rank -> the last XID in the window
    return fields


def handle_for(nvml: Any, uuid: str | None, index: int) -> Any:
    """This rank's GPU in NVML: by the UUID CUDA gives (right under CUDA_VISIBLE_DEVICES,
    where CUDA's index is not NVML's), else by index."""
    if uuid:
        return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return nvml.nvmlDeviceGetHandleByIndex(index)


def start(
    uuid: str | None, index: int, log: TextIO | None = None, nvml: Any = None
) -> Sampler | None:
    """A sampler of this rank's GPU, or None (NVML cannot start here: told once)."""
    try:
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py; only on a CUDA rank
        nvml.nvmlInit()
        return Sampler(nvml, handle_for(nvml, uuid, index))
    except Exception as exc:  # noqa: BLE001 (no driver, no library: no telemetry)
        print(
            f"gpu telemetry: NVML unavailable ({type(exc).__name__}: {exc}"[:300]
            + "); step lines carry no gpu_* fields",
            file=log or sys.stderr,
            flush=True,
        )
        return None


def for_device(device: Any) -> Sampler | None:
    """The sampler of this rank's torch device: None off CUDA."""
    if device.type != "cuda":
        return None
    import torch

    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "") or None
    return start(uuid, device.index or 0)


def window_of(sampler: Sampler | None) -> list[float]:
    """What a CUDA rank contributes to the gather: its window, or NaNs without a sampler
    (every rank sends the same number of floats, whatever NVML did on it)."""
    return sampler.window() if sampler is not None else [NAN] * len(FIELDS)
