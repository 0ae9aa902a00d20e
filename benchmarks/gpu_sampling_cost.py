"""What sampling each rank's GPU through NVML costs the training loop
(trainer/gpu_telemetry.py): the step time of a bare loop (forward, backward, AdamW of a
small model on this device) with and without the sampler's thread running, in the same
process, alternating, and the log step's `window()` every --every steps. goal <= 1.01x

On a CUDA host the sampler reads the real GPU through pynvml. Without one (this dev
machine) it reads RECORDED: readings of an H100, answered by Python functions that hold
the GIL for the whole call (a real NVML call is a ctypes call that releases it), so the
CPU figure is an upper bound of the thread's cost. --interval 0.01 samples 100x as
often as the trainer does (SAMPLE_S = 1 s), to see the cost at all.

    python benchmarks/gpu_sampling_cost.py [--steps 200] [--repeats 5] [--interval 1.0]
        [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer import gpu_telemetry  # noqa: E402


class RecordedNvml:
    """Stands in for pynvml where no GPU is (an H100's readings during a step)."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, nvmlEventTypeXidCriticalError = 0, 1, 8

    def nvmlInit(self) -> None: ...
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        return SimpleNamespace(used=61 * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return 612_000

    def nvmlDeviceGetTemperature(self, h: Any, s: int) -> int:
        return 71

    def nvmlDeviceGetClockInfo(self, h: Any, c: int) -> int:
        return 1980

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return 0

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, h: Any, t: int, e: Any) -> None: ...
    def nvmlEventSetWait_v2(self, e: Any, timeout_ms: int) -> Any:
        raise TimeoutError("NVMLError_Timeout")

    def nvmlEventSetFree(self, e: Any) -> None: ...


def loop(device: torch.device, steps: int, every: int, sampler: Any) -> float:
    """Seconds per step of `steps` steps (after 5 of warm-up)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 512, device=device)
    start = 0.0
    for step in range(steps + 5):
        if step == 5:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sampler is not None and step % every == 0:
            sampler.window()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def per_call_s(call: Any, n: int = 2000) -> float:
    """The best of 5 means of `n` calls (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, (time.perf_counter() - start) / n)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--interval", type=float, default=gpu_telemetry.SAMPLE_S)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="10 steps, once (the tests)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 10, 1
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if not cuda:
        torch.set_num_threads(1)  # the trainer's CPU ranks share the cores the same way
    if cuda:
        import pynvml

        pynvml.nvmlInit()
        nvml: Any = pynvml
        handle = gpu_telemetry.handle_for(nvml, None, 0)
    else:
        nvml, handle = RecordedNvml(), 0
    runs: dict[str, list[float]] = {"bare": [], "sampled": []}
    for _ in range(args.repeats):  # alternate, so drift in load hits both sides
        runs["bare"].append(loop(device, args.steps, args.every, None))
        sampler = gpu_telemetry.Sampler(nvml, handle, args.interval)
        try:
            runs["sampled"].append(loop(device, args.steps, args.every, sampler))
        finally:
            sampler.close()
    med = {k: statistics.median(v) for k, v in runs.items()}
    # The load-proof figure: what the thread and the log step's window() take, per step
    # of the bare loop's time (the wall-clock ratio above moves with the machine's load).
    probe = gpu_telemetry.Sampler(nvml, handle, 3600)
    try:
        sample_s, window_s = per_call_s(probe.sample), per_call_s(probe.window)
    finally:
        probe.close()
    step_s = min(runs["bare"])
    bound = 1 + sample_s / args.interval + window_s / (args.every * step_s)
    result = {
        "step_time_ratio_bound": bound,
        "sample_us": sample_s * 1e6,
        "window_us": window_s * 1e6,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (recorded NVML readings)",
        "step_time_ratio_sampled": med["sampled"] / med["bare"],
        "medians_s": med,
        "interval_s": args.interval,
        "runs_s": runs,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['device']}, {args.steps} steps x {args.repeats}, sampling every "
          f"{args.interval} s, window every {args.every} steps")  # fmt: skip
    print(
        f"step time  bare {med['bare'] * 1e3:.2f} ms  sampled {med['sampled'] * 1e3:.2f} ms"
        f"  ratio {result['step_time_ratio_sampled']:.4f}x (wall clock, load-sensitive)"
    )
    print(f"sample() {sample_s * 1e6:.1f} us, window() {window_s * 1e6:.1f} us: cost per step "
          f"{bound:.6f}x of the bare step (goal <= 1.01)")  # fmt: skip


if __name__ == "__main__":
    main()
