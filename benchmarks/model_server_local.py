"""The local model server on CPU: start to ready, start to first token, and tokens/s of
the demo model (trained briefly, exported) behind `transformers serve`. Baseline in the
same run: `generate()` on the same export in this process (no HTTP, no server), so the
ratio is what serving costs. Prints one JSON line."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# --quick (the suite runs it, to prove the benchmark runs, not to measure): the checkpoint
# served comes from 1 training step of the trainer's own main in this process, a world
# of one (what the job's rank runs, less the job: its supervisor, torchrun and rank are
# 3 processes and 2 torch starts, and what is measured here is the serving, not the
# job; the full mode still deploys the job), exported in this process (a subprocess is a
# torch start of its own; this one imports torch for the baseline anyway), 4 tokens, once.
QUICK = "--quick" in sys.argv
PROCESSES = 1 if QUICK else 2
NEW_TOKENS = 4 if QUICK else 64
PROMPT = "The model"
REPEATS = 1 if QUICK else 3
TRAIN_STEPS = 1 if QUICK else 20


def post(url: str, body: dict) -> urllib.request.Request:
    data = json.dumps(body).encode()
    return urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})


def first_token_s(endpoint: str, model: str) -> float:
    """Seconds from sending a streaming completion to its first text chunk."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "stream": True}
    start = time.perf_counter()
    with urllib.request.urlopen(post(f"{endpoint}/v1/completions", body), timeout=120) as r:
        for line in r:
            if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                return time.perf_counter() - start
    raise RuntimeError("the stream ended without a chunk")


SERVED_TOKENS: list[int] = []  # what each served completion produced (EOS may end it early)


def served_tokens_per_s(endpoint: str, model: str) -> float:
    body = {"model": model, "prompt": PROMPT, "max_tokens": NEW_TOKENS}
    start = time.perf_counter()
    with urllib.request.urlopen(post(f"{endpoint}/v1/completions", body), timeout=300) as r:
        answer = json.loads(r.read())
    SERVED_TOKENS.append(answer["usage"]["completion_tokens"])
    return SERVED_TOKENS[-1] / (time.perf_counter() - start)


def in_process_tokens_per_s(model: str) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    llm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    rates = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with torch.no_grad():
            out = llm.generate(
                ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False
            )
        rates.append((out.shape[1] - ids.shape[1]) / (time.perf_counter() - start))
    return statistics.median(rates)


def train_here(checkpoints: Path) -> None:
    """`python -m trainer` (the job's argv, 1 step) as a world of one in this process; its
    event lines go to a buffer (this benchmark's stdout is its one JSON line), its thread
    count is put back for the baseline."""
    import contextlib
    import io

    import torch

    from trainer.train import main as trainer_main

    threads = torch.get_num_threads()
    lines = io.StringIO()
    args = ["--model_type", "debug", "--max_steps", str(TRAIN_STEPS), "--seed", "0",
            "--checkpoint_dir", str(checkpoints),
            "--output_dir", str(checkpoints.parent)]  # fmt: skip
    with contextlib.redirect_stdout(lines):
        code = trainer_main(args)
    torch.set_num_threads(threads)
    assert code == 0, lines.getvalue()[-2000:]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    os.environ["FSDP_EKS_STATE_DIR"] = str(work / "state")
    from commands.delete_model_server import delete_model_server
    from commands.deploy_model_server import deploy_model_server

    export = work / "export"
    checkpoints = work / "runs" / "bench" / "checkpoints"
    if QUICK:  # see QUICK
        import torch

        from trainer.export import export as export_checkpoint

        train_here(checkpoints)
        export_checkpoint(str(checkpoints), str(export), torch.float32)
    else:
        from commands.deploy_training_job import deploy_training_job

        job = deploy_training_job(job_name="bench", runs_dir=str(work / "runs"),
                                  max_steps=TRAIN_STEPS, gpu_per_node=PROCESSES)  # fmt: skip
        assert job.status == "succeeded", job.log_tail
        subprocess.run(
            [sys.executable, "-m", "trainer.export", "--checkpoint", str(checkpoints),
             "--out", str(export)],
            cwd=ROOT, check=True, capture_output=True,
        )  # fmt: skip

    start = time.perf_counter()
    server = deploy_model_server(name="bench", model=str(export), device="cpu")
    ready_s = time.perf_counter() - start  # spawn -> /health -> smoke request answered
    try:
        ttft = first_token_s(server.endpoint, server.model)
        served = statistics.median(
            served_tokens_per_s(server.endpoint, server.model) for _ in range(REPEATS)
        )
    finally:
        delete_model_server(name="bench", confirm=True)
    baseline = in_process_tokens_per_s(str(export))
    print(
        json.dumps(
            {
                "bench": "model_server_local",
                "start_to_ready_s": round(ready_s, 2),
                "start_to_first_token_s": round(ready_s + ttft, 2),
                "first_token_after_ready_s": round(ttft, 3),
                "served_tokens_per_s": round(served, 1),
                "in_process_tokens_per_s": round(baseline, 1),
                "served_vs_in_process": round(served / baseline, 2),
                "new_tokens": NEW_TOKENS,
                "served_completion_tokens": SERVED_TOKENS,
            }
        )
    )


if __name__ == "__main__":
    main()
