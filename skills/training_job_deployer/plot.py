"""Loss curves as a picture: one small PNG of one or several jobs (compared on the same
axes), drawn by matplotlib's Agg backend. matplotlib is imported here, on the first
plot, never on the server's start-up path (the cold-start benchmark measures that
path). The PNG is reduced to a small palette (Pillow, matplotlib's own dependency):
a chart of a few flat colours loses nothing and fits any client's result budget."""

from __future__ import annotations

import io
from collections.abc import Sequence

from skills.training_job_deployer.loss_curve import Curves, Thinned

WIDTH_IN, HEIGHT_IN, DPI = 8.0, 5.0, 80  # 640 x 400 pixels
PALETTE_COLORS = 32
PANELS = (
    ("lr", "learning rate"),
    ("tokens_per_s", "tokens/s"),
    ("gpu_util_mean", "GPU util % (mean of ranks)"),
)


def _xy(series: Thinned) -> tuple[list[int], list[float]]:
    return [s for s, _ in series.points], series.values


def plot_png(jobs: Sequence[Curves]) -> bytes:
    """The jobs' loss (and eval loss) on one chart, with the learning rate, tokens/s and
    GPU utilisation beside it where the step lines have them; each job one colour."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # no pyplot: no global figure state
    from PIL import Image

    extra = [(k, title) for k, title in PANELS if any(j.extra[k].points for j in jobs)]
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, layout="constrained")
    grid = fig.add_gridspec(max(1, len(extra)), 2 if extra else 1, width_ratios=None)
    ax_loss = fig.add_subplot(grid[:, 0])
    colors = [f"C{i % 10}" for i in range(len(jobs))]
    for job, color in zip(jobs, colors, strict=True):
        ax_loss.plot(*_xy(job.loss), color=color, linewidth=1.5, label=job.job_name)
        if job.eval_loss.points:
            ax_loss.plot(
                *_xy(job.eval_loss),
                "o--",
                color=color,
                markersize=3,
                linewidth=0.8,
                label=f"{job.job_name} (eval)",
            )
    ax_loss.set_title("loss")
    ax_loss.set_xlabel("step")
    ax_loss.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    for row, (key, title) in enumerate(extra):
        ax = fig.add_subplot(grid[row, 1])
        for job, color in zip(jobs, colors, strict=True):
            if job.extra[key].points:
                ax.plot(*_xy(job.extra[key]), color=color, linewidth=1.2)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    raw = io.BytesIO()
    fig.savefig(raw, format="png", facecolor="white")
    image = Image.open(raw).convert("RGB").quantize(PALETTE_COLORS)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()
