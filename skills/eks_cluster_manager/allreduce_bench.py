"""All-reduce bandwidth test, run under torchrun in every pod of the NCCL test job (this
file goes into a ConfigMap). Rank 0 prints the table in nccl-tests' all_reduce_perf
format, so one parser reads both: size, count, type, redop, root, then time (us),
algbw and busbw (GB/s) and #wrong, out-of-place and in-place; busbw = algbw * 2(n-1)/n.

Environment: NCCL_TEST_MIN_BYTES, NCCL_TEST_MAX_BYTES, NCCL_TEST_FACTOR, NCCL_TEST_ITERS,
NCCL_TEST_WARMUP. With no GPU it runs on CPU with gloo (for a dry run of the pipeline).
"""

import os
import socket
import time
from typing import Any

import torch
import torch.distributed as dist


def _env(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def main():
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    seen: list[Any] = [None] * world  # all_gather_object fills in each rank's tuple
    dist.all_gather_object(seen, (rank, socket.gethostname(), local, name, os.getpid()))
    lo, hi = _env("NCCL_TEST_MIN_BYTES", 1 << 20), _env("NCCL_TEST_MAX_BYTES", 1 << 32)
    factor, iters, warmup = (
        _env("NCCL_TEST_FACTOR", 2),
        _env("NCCL_TEST_ITERS", 20),
        _env("NCCL_TEST_WARMUP", 5),
    )
    if rank == 0:
        print(
            f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: {factor}(factor) "
            f"warmup iters: {warmup} iters: {iters} agg iters: 1 validation: 1 graph: 0"
        )
        print("#\n# Using devices")
        for r, host, dev, gpu, pid in seen:
            print(
                f"#  Rank {r:2d} Group  0 Pid {pid:6d} on {host:>10} device {dev:2d} [0x00] {gpu}"
            )
        print(
            "#\n#                                                              out-of-place"
            "                       in-place          "
        )
        print(
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong"
        )
        print(
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
            "          (us)  (GB/s)  (GB/s)       "
        )
    size, total_busbw, count_rows = lo, 0.0, 0
    while size <= hi:
        count = max(size // 4, 1)
        results = []
        for in_place in (False, True):
            data = torch.ones(count, dtype=torch.float32, device=device)
            out = data if in_place else data.clone()
            for _ in range(warmup):
                dist.all_reduce(out)
                out.fill_(1)
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(out)
            if cuda:
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / iters
            algbw = count * 4 / seconds / 1e9
            busbw = algbw * 2 * (world - 1) / world
            out.fill_(1)
            dist.all_reduce(out)
            wrong = int((out != world).sum().item())
            results.append((seconds * 1e6, algbw, busbw, wrong))
        if rank == 0:
            cells = "".join(f" {t:8.1f} {a:7.2f} {b:7.2f} {w:6d}" for t, a, b, w in results)
            print(f"{count * 4:12d}  {count:12d}     float     sum      -1{cells}", flush=True)
        total_busbw += results[0][2]
        count_rows += 1
        size *= factor
    if rank == 0:
        print("# Out of bounds values : 0 OK")
        print(f"# Avg bus bandwidth    : {total_busbw / max(count_rows, 1):.4f} ")
        print("#")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
