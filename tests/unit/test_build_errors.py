"""Each row of the build-failure table is found in a realistic log, with its evidence."""

from __future__ import annotations

import pytest

from skills.image_builder.build_errors import BY_CLASS, SIGNATURES, classify

# (error class, a log as a build prints it, the line that must be the evidence)
LOGS: list[tuple[str, str, str]] = [
    (
        "base_image_not_found",  # podman's build API, against the distribution registry
        "STEP 1/2: FROM localhost:5000/pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime\n"
        "Trying to pull localhost:5000/pytorch/pytorch:2.5.1-cuda12.8-cudnn9-runtime...\n"
        "creating build container: initializing source docker://localhost:5000/pytorch/pytorch:"
        "2.5.1-cuda12.8-cudnn9-runtime: reading manifest 2.5.1-cuda12.8-cudnn9-runtime in "
        "localhost:5000/pytorch/pytorch: manifest unknown: manifest unknown",
        "reading manifest 2.5.1-cuda12.8-cudnn9-runtime in localhost:5000/pytorch/pytorch",
    ),
    (
        "base_image_access_denied",
        "Step 1/4 : FROM private.example.com/team/base:1\n"
        "Error response from daemon: pull access denied for private.example.com/team/base, "
        "repository does not exist or may require 'docker login': denied: requested access "
        "to the resource is denied",
        "pull access denied for private.example.com/team/base",
    ),
    (
        "registry_unreachable",  # podman here, with no route to Docker Hub
        "STEP 1/1: FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\n"
        "creating build container: initializing source docker://pytorch/pytorch:2.5.1-cuda12.4-"
        'cudnn9-runtime: pinging container registry registry-1.docker.io: Get "https://registry'
        '-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io on 10.0.0.2:53: no such host',
        "pinging container registry registry-1.docker.io",
    ),
    (
        "torch_wheel_not_found",
        "Step 5/9 : RUN pip install torch==2.5.1+cu128 --index-url https://download.pytorch.org/"
        "whl/cu128\n ---> Running in 3f2a\n"
        "ERROR: Could not find a version that satisfies the requirement torch==2.5.1+cu128 "
        "(from versions: 2.7.0+cu128, 2.7.1+cu128)\n"
        "ERROR: No matching distribution found for torch==2.5.1+cu128",
        "ERROR: No matching distribution found for torch==2.5.1+cu128",
    ),
    (
        "cuda_version_mismatch",
        "Building wheel for apex (setup.py): started\n"
        "RuntimeError: \nThe detected CUDA version (12.1) mismatches the version that was used "
        "to compile PyTorch (11.8). Please make sure to use the same CUDA versions.",
        "The detected CUDA version (12.1) mismatches the version that was used to compile",
    ),
    (
        "cuda_driver_insufficient",
        "Traceback (most recent call last):\n"
        "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    (
        "nvidia_driver_too_old",
        "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old "
        "(found version 11040). Please update your GPU driver by downloading and installing a "
        "new version from the URL: http://www.nvidia.com/Download/index.aspx",
        "The NVIDIA driver on your system is too old (found version 11040)",
    ),
    (
        "cuda_requirement_unsatisfied",
        "Error: failed to create containerd task: OCI runtime create failed: "
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
        "update your driver to a newer version, or use an earlier cuda container: unknown",
        "unsatisfied condition: cuda>=12.8",
    ),
    (
        "no_kernel_image",
        "UserWarning: NVIDIA B200 with CUDA capability sm_100 is not compatible with the current "
        "PyTorch installation.\nThe current PyTorch install supports CUDA capabilities sm_50 "
        "sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.\n"
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "sm_100 is not compatible with the current PyTorch installation",
    ),
    (
        "cuda_library_mismatch",
        '  File "/opt/conda/lib/python3.11/ctypes/__init__.py", line 376, in __init__\n'
        "OSError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
        "OSError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
    ),
    (
        "flash_attn_nvcc_missing",
        "Building wheel for flash-attn (setup.py): finished with status 'error'\n"
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
        "root.\nRuntimeError: FlashAttention is only supported on CUDA 11.7 and above.  Note: "
        "make sure nvcc has a supported version by running nvcc -V.\n"
        "error: nvcc was not found.  Are you sure your environment has nvcc available?",
        "error: nvcc was not found.",
    ),
    (
        "flash_attn_no_torch",
        "Collecting flash-attn\n  Getting requirements to build wheel: finished with status "
        "'error'\n      ModuleNotFoundError: No module named 'torch'\n"
        "  error: subprocess-exited-with-error",
        "ModuleNotFoundError: No module named 'torch'",
    ),
    (
        "flash_attn_abi_mismatch",
        ">>> import flash_attn\nImportError: /usr/local/lib/python3.10/dist-packages/"
        "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
        "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocation",
    ),
    (
        "build_oom_killed",
        "  Building wheel for flash-attn (setup.py): still running...\n"
        "  g++: fatal error: Killed signal terminated program cc1plus\n"
        "  compilation terminated.",
        "g++: fatal error: Killed signal terminated program cc1plus",
    ),
    (
        "copy_source_missing",  # podman's build API (seen here)
        'STEP 3/3: COPY nothere /x\nbuilding at STEP "COPY nothere /x": checking on sources '
        'under "/var/tmp/libpod_builder384296853/build": copier: stat: "/nothere": no such '
        "file or directory",
        'copier: stat: "/nothere": no such file or directory',
    ),
    (
        "docker_unavailable",  # the builder's line when the API stream breaks off
        "STEP 2/3: COPY weights.bin /w\nlost the Docker Engine API mid-build: "
        "ChunkedEncodingError: Connection broken: IncompleteRead(0 bytes read)",
        "lost the Docker Engine API mid-build",
    ),
    (
        # podman's build API (seen here: RUN cannot run in this sandbox): the runtime
        # could not create the container, so the command never ran.
        "container_runtime_failed",
        "STEP 2/2: RUN echo hi\nerror running container: from /usr/bin/crun creating "
        "container for [/bin/sh -c echo hi]: cgroups in hybrid mode not supported\n"
        ': exit status 1\nbuilding at STEP "RUN echo hi": while running runtime: exit status 1',
        "error running container: from /usr/bin/crun creating container",
    ),
    (
        "run_step_failed",  # the command ran and failed (podman, where containers run)
        "STEP 2/2: RUN pip install nosuchpkg\nERROR: No matching distribution found for "
        'nosuchpkg\nError: building at STEP "RUN pip install nosuchpkg": while running '
        "runtime: exit status 1",
        "while running runtime: exit status 1",
    ),
]


def test_every_row_has_a_log_here():
    assert [row.error_class for row in SIGNATURES] == [case[0] for case in LOGS]


@pytest.mark.parametrize(("error_class", "log", "evidence"), LOGS, ids=[c[0] for c in LOGS])
def test_a_realistic_log_is_classified_with_its_evidence(error_class, log, evidence):
    found = classify(log.splitlines())
    assert found is not None and found.error_class == error_class
    assert any(evidence in line for line in found.evidence), found.evidence
    row = BY_CLASS[error_class]
    assert (found.cause, found.fix, found.auto_fix) == (row.cause, row.fix, row.auto_fix)
    assert found.fix and found.cause


def test_a_log_with_no_known_signature_is_none():
    log = ["STEP 1/2: FROM scratch", "STEP 2/2: LABEL a=b", "Error: something else broke"]
    assert classify(log) is None


def test_registry_and_context_failures_have_no_automatic_fix():
    no_fix = {row.error_class for row in SIGNATURES if not row.auto_fix}
    assert no_fix == {
        "base_image_access_denied",
        "registry_unreachable",
        "copy_source_missing",
        "docker_unavailable",
        "container_runtime_failed",
        "run_step_failed",
    }


@pytest.mark.parametrize(
    "line",
    [
        "docker: Error response from daemon: OCI runtime create failed: runc create failed: "
        'unable to start container process: exec: "/bin/sh": permission denied',
        "failed to create shim task: OCI runtime create failed: cgroup mountpoint does not exist",
        "Error: committing container for step {Env:[] Command:run}: no space left on device",
        "error creating overlay mount to /var/lib/containers/storage/overlay/x/merged",
        "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker "
        "daemon running?",
    ],
)
def test_a_runtime_failure_is_not_a_failed_run_step(line):
    log = ["STEP 2/2: RUN make", line, 'building at STEP "RUN make": while running runtime: '
           "exit status 1"]  # fmt: skip
    found = classify(log)
    assert found is not None
    assert found.error_class in ("container_runtime_failed", "docker_unavailable")
    assert "fix that command" not in found.fix and "runtime" in found.cause + found.fix
