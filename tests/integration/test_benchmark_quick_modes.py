"""Every benchmark's quick mode (`--quick`) runs here, each to its ratio lines, so a
benchmark that stops working fails a test instead of rotting unseen (`make bench` runs
them all at full size). A quick mode proves the benchmark runs, it measures nothing: the
same code paths at their cheapest (the smallest model and shape, 1-3 steps, one round,
the fewest sizes and launches): a launch of torch is most of what is left. A row
per benchmark: the services it starts itself (a missing one skips, or fails under
CI=true) and the lines its output must hold.
The list comes from the directory, so a new benchmark is run here once it is there; one
without a row fails until it has one."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.benchmark_runs import run_quick
from tests.services import podman, slurm
from tests.services import registry as registry_service
from tests.services._common import require

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Run by the tests of their own area, with asserts of their own (issue 35's benchmarks).
RUN_ELSEWHERE = {
    "fleet_history_and_logs": "tests/integration/test_long_logs.py",
    "fleet_scale": "tests/integration/test_fleet_scale_bench.py",
    "gpu_bench": "tests/unit/test_gpu_bench.py",
    "http_many_agents": "tests/unit/test_shared_reads.py",
}
NUMBER = r"[\d.]+"


@dataclass(frozen=True)
class Row:
    lines: tuple[str, ...]  # regexes its stdout must match (multiline): its ratio lines
    services: tuple[Callable[[], object], ...] = ()  # checks of the services it starts
    # Session fixtures it runs on instead of starting its own (found through the standard
    # environment they set), and the arguments that tell the benchmark so.
    fixtures: tuple[str, ...] = ()
    args: tuple[str, ...] = ()


REGISTRY_AND_PODMAN = (registry_service.check, podman.check)
# The worker's moto, registry and podman (docker_api needs the other two), shared with the
# image tests: none of their own (benchmarks/_services.py).
ON_THE_SESSIONS = (("docker_api",), ("--services-in-env",))
ROWS = {
    "codebuild_setup": Row((r"first run: \w+, \d+ API calls",
                            r"second run: \w+, \d+ API calls, 0 writes")),
    "demo_wall_time": Row((r"demo job end to end .*x baseline\)", r"status succeeded")),
    "dockerfile_analyzer": Row((rf"-> {NUMBER}x \(median of 1\)",
                                r"accuracy: (\d+)/\1 flagged right")),
    "ecr_push": Row((rf"tool / podman push: {NUMBER}",), REGISTRY_AND_PODMAN, *ON_THE_SESSIONS),
    "eks_validate": Row((r"^\s+4(\s+[\d.]+){6}$",)),  # the 4-node row, every column
    "family_bench": Row((rf"^\| \w+ \| [\d,]+ \| .* = {NUMBER}x \| .* = {NUMBER}x \|$",)),
    "fleet_records": Row((rf"operations, status matching none: k -?{NUMBER}",
                          rf"running local jobs, a page of 20: k -?{NUMBER}",
                          rf"running local jobs, failed matching none .*: k -?{NUMBER}",
                          rf"running local jobs, succeeded matching none .*: k -?{NUMBER}",
                          rf"Slurm jobs, failed matching none: k -?{NUMBER}",
                          # 64 running local jobs: failed and succeeded read no record,
                          # no log; 64 ended Slurm jobs: failed read no record
                          r"^\s+64 \|(\s+\S+ \|){6}\s+0 \|\s+0 \|\s+0$",
                          r"^\s+64 \|(\s+\S+ \|){7}\s+0$")),
    "gpu_mfu": Row((rf"trainer / bare tokens/s: {NUMBER}x",)),
    "gpu_sampling_cost": Row((rf"cost per step {NUMBER}x of the bare step \(goal <= 1.01\)",)),
    "image_rebuild": Row((rf"rebuild / clean: {NUMBER}",), REGISTRY_AND_PODMAN, *ON_THE_SESSIONS),
    "job_record_write": Row((rf"ratio {NUMBER}x \(median of 1 rounds x 20 deploys\)",)),
    "k8s_submit": Row((rf"ratio tool / bare: {NUMBER}x", r"poll of a 2-pod job: \d+ API requests"),
                      (registry_service.check,)),
    # A page of 20 over 62 of the suite's jobs: 23 requests (keys, jobs, pods, 20 logs),
    # 60 whole objects (the page's jobs and pods), each job's metadata; the filter: 1.
    # +1 request each since TrainJobs: a LIST of the other engine's kind, which finds none.
    "kube_list_scale": Row((r"^\s+62 \|\s+434 \|\s+page \|\s+24 \|\s+60 \|\s+62 \|",
                            r"^\s+62 \|\s+434 \|\s+none \|\s+2 \|\s+62 \|\s+0 \|")),
    "mcp_cold_start": Row((rf"ours / bare MCP server\s*:\s*{NUMBER}x",
                           r"heavy SDKs imported at start\s*: none")),
    "model_server_local": Row((rf'"served_vs_in_process": {NUMBER}',)),
    "pod_doctor": Row((r"diagnose\(\) .*x baseline\)", r"root: cuda_oom on \S+ \(node rank 6\)",
                       rf"growth exponent k over 4x pods: snapshot {NUMBER}, live -?{NUMBER}")),
    "rank_times_cost": Row((rf"step time .* ratio {NUMBER}x \(goal <= 1.01\)",)),
    # The worker's one Slurm (SLURM_CONF), shared with the Slurm tests: no cluster of its own.
    "slurm_overhead": Row((rf"slurm / local: {NUMBER}x",), (slurm.check,),
                          ("slurm_cluster",), ("--slurm-in-env",)),
    "stream_packing": Row((rf"growth exponent over 16x tokens: now {NUMBER}, before {NUMBER}",)),
    "trainer_bench": Row((rf"step time .* ratio {NUMBER}x", rf"tokens/s .* ratio {NUMBER}x",
                          rf"ckpt block .* ratio {NUMBER}x",
                          rf"\+ grad norm \+ clip +[+-]{NUMBER} ms a step",
                          rf"\+ all four +[+-]{NUMBER} ms a step")),
    "trainer_scale": Row((rf'"peak_over_shard": {NUMBER}',
                          rf'"second_start_to_first_batch_s": {NUMBER}')),
}  # fmt: skip


def benchmarks() -> list[str]:
    """The benchmarks in benchmarks/ (bare_*.py are baselines they run, _*.py helpers),
    as the Makefile's bench target lists them."""
    return sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                  if not p.name.startswith(("bare_", "_")))  # fmt: skip


@pytest.mark.parametrize("name", [n for n in benchmarks() if n not in RUN_ELSEWHERE])
def test_the_benchmark_runs_to_its_ratios_in_its_quick_mode(name, request):
    assert name in ROWS, f"benchmarks/{name}.py has no row here: give it --quick and a row"
    row = ROWS[name]
    for check in row.services:
        require(check)
    for fixture in row.fixtures:
        request.getfixturevalue(fixture)
    out = run_quick(name, *row.args)
    missing = [line for line in row.lines if not re.search(line, out, re.MULTILINE)]
    assert not missing, (missing, out[-3000:])


def test_every_benchmark_has_a_quick_mode_and_one_test():
    names = benchmarks()
    assert set(ROWS) | set(RUN_ELSEWHERE) == set(names)
    assert not set(ROWS) & set(RUN_ELSEWHERE)
    for name in names:
        assert "--quick" in (ROOT / "benchmarks" / f"{name}.py").read_text(), name
    for name, test_file in RUN_ELSEWHERE.items():
        # run_quick("name") or run_quick("name", more arguments)
        assert f'run_quick("{name}"' in (ROOT / test_file).read_text(), (name, test_file)


def test_make_bench_runs_every_benchmark():
    """`make -n bench` lists exactly the benchmarks in the directory."""
    done = subprocess.run(["make", "-n", "bench"], cwd=ROOT, capture_output=True, text=True,
                          check=True)  # fmt: skip
    listed = re.search(r"for b in ([^;]+);", done.stdout)
    assert listed, done.stdout[-2000:]
    assert [Path(b).stem for b in listed[1].split()] == benchmarks()
