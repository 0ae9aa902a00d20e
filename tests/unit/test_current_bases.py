"""The bases users pull in late 2026 (issue 51): build_image --analyze_only knows each one's
CUDA and Python, states the driver it needs, and never answers no_such_image for a tag
that exists nor suggests a wheel that does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.build_image import build_image

DLC = "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023"
# base, driver on the nodes -> CUDA, Python, the driver the finding names (None: no finding)
CASES = [
    ("pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime", "570.86.10", "12.6", "3.12", None),
    ("pytorch/pytorch:2.14.0-cuda12.6-cudnn9-runtime", "535.104.05", "12.6", "3.12", "560.28.03"),
    ("pytorch/pytorch:2.15.0-cuda13.0-cudnn9-runtime", "570.86.10", "13.0", None, "580"),
    ("pytorch/pytorch:2.15.0-cuda13.2-cudnn9-devel", "595.45.04", "13.2", None, None),
    (DLC, "610.43.02", "13.3", "3.12", None),
    (DLC, "590.48.01", "13.3", "3.12", "610.43.02"),
    (DLC, "570.86.10", "13.3", "3.12", "580"),
]


def _analyze(tmp_path: Path, base: str, driver: str):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM {base}\nRUN echo ok\n")
    return build_image(dockerfile=str(dockerfile), analyze_only=True, driver_version=driver)


@pytest.mark.parametrize(("base", "driver", "cuda", "python", "needs"), CASES)
def test_a_current_base_is_known_with_its_cuda_python_and_driver(
    tmp_path: Path, base: str, driver: str, cuda: str, python: str | None, needs: str | None
):
    result = _analyze(tmp_path, base, driver)
    assert result.resolved is not None
    assert (result.resolved.cuda, result.resolved.python) == (cuda, python)
    codes = {f["code"] for f in result.findings}
    assert "no_such_image" not in codes and "unknown_base" not in codes
    above = [f for f in result.findings if f["code"] == "cuda_above_driver"]
    if needs is None:
        assert not above
    else:
        (finding,) = above
        assert f"CUDA {cuda} needs driver >= {needs}" in finding["explanation"]


def test_the_dlc_on_a_minor_compat_driver_is_told_to_keep_its_base_not_a_missing_wheel(
    tmp_path: Path,
):
    result = _analyze(tmp_path, DLC, "590.48.01")
    (finding,) = [f for f in result.findings if f["code"] == "cuda_above_driver"]
    assert "install" not in finding["fix"]  # no install of a +cu133 wheel
    assert finding["fix"].startswith(f"keep {DLC}: no torch==2.13.0+cu133 wheel exists")
