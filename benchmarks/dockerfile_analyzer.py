"""Dockerfile analyzer: speed and accuracy.

Speed, both measured in this run, median of 5 fresh processes: a process that imports the
analyzer and analyzes the project's Dockerfile, against a bare `python -c pass`; plus the
in-process time of one analyze() call (median of 200). Accuracy: 10 broken Dockerfiles
(each a different mistake, the finding code expected) and 5 valid ones (no error
expected): how many are flagged right.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skills.image_builder.dockerfile_analyzer import analyze  # noqa: E402

QUICK = "--quick" in sys.argv  # one process each, 5 calls (the test suite runs it)
RUNS = 1 if QUICK else 5
CALLS = 5 if QUICK else 200
IDX = "https://download.pytorch.org/whl"

# (mistake, Dockerfile, analyze kwargs, the finding code that must be raised)
BROKEN = [
    ("torch 2.5 has no cu126 wheel", "FROM python:3.11-slim\nRUN pip install torch==2.5.1+cu126\n",
     {}, "no_such_wheel"),
    ("torch 2.1 on Python 3.12", "FROM python:3.12\nRUN pip install torch==2.1.2\n", {},
     "no_such_wheel"),
    ("unpublished pytorch/pytorch tag", "FROM pytorch/pytorch:2.6.0-cuda12.8-cudnn9-devel\n", {},
     "no_such_image"),
    ("cu121 wheel on a CUDA 12.4 base",
     f"FROM nvidia/cuda:12.4.1-devel-ubuntu22.04\nRUN pip3 install torch==2.5.1 -i {IDX}/cu121\n",
     {}, "wheel_cuda_mismatch"),
    ("CUDA 12.4 on B200", "FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n",
     {"instance_type": "p6-b200.48xlarge"}, "cuda_too_old_for_gpu"),
    ("CUDA 13 on V100", "FROM pytorch/pytorch:2.10.0-cuda13.0-cudnn9-runtime\n",
     {"instance_type": "p3.16xlarge"}, "cuda_too_new_for_gpu"),
    ("CUDA 13.0 on a 570 driver",
     "ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda13.0-cudnn9-runtime\nFROM ${BASE_IMAGE}\n",
     {"driver_version": "570.124.06"}, "cuda_above_driver"),
    ("flash-attn on a runtime image",
     "FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime\n"
     "RUN pip install --no-build-isolation flash-attn\n", {}, "flash_attn_runtime_image"),
    ("flash-attn with build isolation",
     "FROM pytorch/pytorch:2.7.1-cuda12.8-cudnn9-devel\nRUN pip install \\\n  flash_attn==2.7.4\n",
     {}, "flash_attn_build_isolation"),
    ("cuDNN 8 base for torch 2.5",
     "FROM nvidia/cuda:12.1.1-cudnn8-runtime-ubuntu22.04\nRUN pip install torch==2.5.1+cu121\n",
     {}, "cudnn_mismatch"),
]

VALID = [
    ("official image, p5", "FROM pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime\n",
     {"instance_type": "p5.48xlarge", "driver_version": "580.65.06"}),
    ("nvidia devel + matching wheel + flash-attn",
     "FROM nvidia/cuda:12.8.0-devel-ubuntu22.04\n"
     f"RUN pip install torch==2.7.1 --index-url {IDX}/cu128 && \\\n"
     "    pip install --no-build-isolation flash-attn\n", {"instance_type": "g6e.12xlarge"}),
    ("DLC with mirror-free public ECR",
     "FROM public.ecr.aws/deep-learning-containers/pytorch-training:"
     "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2\n", {"instance_type": "ml.p4d.24xlarge"}),
    ("multi-stage: build on devel, run on runtime",
     "FROM pytorch/pytorch:2.6.0-cuda12.6-cudnn9-devel AS build\n"
     "RUN pip install --no-build-isolation flash-attn\n"
     "FROM pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime\nCOPY --from=build /opt /opt\n",
     {"instance_type": "p3.2xlarge"}),
    ("python base + cu126 wheel",
     "ARG PY=3.12\nFROM python:${PY}-slim\nRUN pip install torch==2.7.1+cu126 numpy\n",
     {"driver_version": "560.35.03"}),
]


def _median_s(argv: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, check=True, cwd=ROOT)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    dockerfile = (ROOT / "Dockerfile").read_text()
    bare = _median_s([sys.executable, "-c", "pass"])
    ours = _median_s([sys.executable, "-c",
                      "from pathlib import Path; "
                      "from skills.image_builder.dockerfile_analyzer import analyze; "
                      "analyze(Path('Dockerfile').read_text(), context_dir=Path('.'))"])
    calls = []
    for _ in range(CALLS):
        start = time.perf_counter()
        analyze(dockerfile, instance_type="p5.48xlarge", context_dir=ROOT)
        calls.append(time.perf_counter() - start)
    print(f"process: import + analyze(Dockerfile) {ours * 1000:.0f} ms vs python -c pass "
          f"{bare * 1000:.0f} ms -> {ours / bare:.1f}x (median of {RUNS})")
    per_call = statistics.median(calls) * 1000
    print(f"in-process analyze(Dockerfile): {per_call:.2f} ms (median of {CALLS})")

    right = 0
    for name, text, kwargs, code in BROKEN:
        codes = {f.code for f in analyze(text, **kwargs).findings if f.severity == "error"}
        ok = code in codes
        right += ok
        print(f"  {'ok ' if ok else 'MISS'} broken: {name}: expected {code}, got {sorted(codes)}")
    for name, text, kwargs in VALID:
        codes = [f.code for f in analyze(text, **kwargs).findings if f.severity == "error"]
        ok = not codes
        right += ok
        print(f"  {'ok ' if ok else 'MISS'} valid: {name}: {codes or 'no errors'}")
    total = len(BROKEN) + len(VALID)
    print(f"accuracy: {right}/{total} flagged right ({len(BROKEN)} broken, {len(VALID)} valid)")
    return 0 if right == total else 1


if __name__ == "__main__":
    sys.exit(main())
