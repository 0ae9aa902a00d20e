"""Issue 48's done-when on this host: the demo job (`make demo`: the local target's
default job, fewer steps) deployed from an environment whose MLFLOW_TRACKING_URI names a
real MLflow server appears there with its loss curve, its TensorBoard event files hold
the same values, get_training_job names both, and `plot` returns a PNG that a real MCP
client receives as image content and that decodes to a drawn curve; the CLI writes it."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp_types import ImageContent, TextContent
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from mcp_server import build_server
from skills.training_job_deployer.trainer_log import parse_events
from tests.services.mlflow_server import mlflow_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEMO = {"max_steps": 12, "validation_freq": 6}  # the demo's job, shorter
PNG_MAX_BYTES = 40_000  # the whole MCP result is capped at 40 KB (result_cap.py)


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory):
    """Two demo jobs tracked in one MLflow experiment (the second one to compare)."""
    runs_dir = tmp_path_factory.mktemp("runs")
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as server:
        saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")}
        os.environ["MLFLOW_TRACKING_URI"] = server.uri  # as the user exports it
        os.environ["MLFLOW_EXPERIMENT_NAME"] = "demo-runs"
        try:
            demo = deploy_training_job(job_name="demo", runs_dir=str(runs_dir), **DEMO)
            other = deploy_training_job(
                job_name="demo-lr", runs_dir=str(runs_dir), learning_rate=1e-3, **DEMO
            )
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        yield server, runs_dir, demo, other


def _step_losses(runs_dir: Path, job: str) -> dict[int, float]:
    text = "".join(p.read_text() for p in sorted((runs_dir / job / "logs").glob("*.log")))
    return {e["step"]: e["loss"] for e in parse_events(text) if e["event"] == "step"}


def test_the_demo_job_appears_in_mlflow_with_its_loss_curve(tracked):
    server, runs_dir, demo, _ = tracked
    assert demo.status == "succeeded", demo.log_tail
    runs = {r["info"]["run_name"]: r for r in server.runs("demo-runs")}
    run = runs["demo"]
    assert run["info"]["status"] == "FINISHED"
    history = server.history(run["info"]["run_id"], "loss")
    losses = _step_losses(runs_dir, "demo")
    assert len(losses) >= 3 and {m["step"]: m["value"] for m in history} == losses


def test_its_tensorboard_events_hold_the_same_values_and_the_job_names_both(tracked):
    server, runs_dir, _, _ = tracked
    state = get_training_job(job_name="demo", runs_dir=str(runs_dir))
    assert state.tracking is not None
    assert state.tracking["mlflow"].startswith(server.uri + "/#/experiments/")
    acc = EventAccumulator(state.tracking["tensorboard"])
    acc.Reload()
    scalars = {e.step: e.value for e in acc.Scalars("loss")}
    assert scalars == pytest.approx(_step_losses(runs_dir, "demo"))
    assert state.loss_sparkline and set(state.loss_sparkline) <= set("▁▂▃▄▅▆▇█")


def _drawn_columns(png: bytes) -> int:
    """Columns of the loss panel (the left half) with a pixel of the first series'
    colour (matplotlib's C0, #1f77b4), give or take the palette's rounding."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    width, height = image.size
    pixels = image.load()
    assert pixels is not None
    columns = 0
    for x in range(width // 2):
        for y in range(height):
            r, g, b = pixels[x, y]  # type: ignore[misc]
            if abs(r - 0x1F) < 40 and abs(g - 0x77) < 40 and abs(b - 0xB4) < 40:
                columns += 1
                break
    return columns


def test_a_real_mcp_client_receives_the_plot_as_image_content(tracked):
    _, runs_dir, _, other = tracked
    assert other.status == "succeeded", other.log_tail

    async def scenario():
        async with Client(build_server()) as client:
            return await client.call_tool(
                "get_training_job",
                {"job_name": "demo", "runs_dir": str(runs_dir), "plot": True,
                 "compare": ["demo-lr"]},
            )  # fmt: skip

    result = anyio.run(scenario)
    assert not result.is_error
    texts = [c for c in result.content if isinstance(c, TextContent)]
    images = [c for c in result.content if isinstance(c, ImageContent)]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    assert png.startswith(b"\x89PNG") and len(png) < PNG_MAX_BYTES
    assert _drawn_columns(png) > 150  # a curve across the loss panel, not a blank chart
    assert "tracked (mlflow)" in texts[0].text
    assert "image" not in str(result.structured_content)  # the picture is not the data


def test_the_cli_writes_the_png_and_prints_its_path(tracked, tmp_path):
    _, runs_dir, _, _ = tracked
    proc = subprocess.run(
        [sys.executable, "commands/get_training_job.py", "--job_name", "demo",
         "--runs_dir", str(runs_dir), "--plot"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "FSDP_EKS_WORKSPACE": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("plot: ")]
    path = Path(line.removeprefix("plot: "))
    assert path.name == "demo.loss.png" and _drawn_columns(path.read_bytes()) > 150
