"""Every `--flag` the product names exists: a hint that suggests a flag nobody takes
sends the reader nowhere. Hints may name only flags a user passes (a tool's CLI, the
MCP server); other text (docstrings, the argv a plan builds) may also name the
trainer's and torchrun's own flags. Scanned from the source (AST), so a new hint is
checked with no edit here."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from commands import all_tools, tool_spec
from commands._cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_DIRS = ("skills", "commands", "mcp_server")

FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
# A command of another program, quoted in a hint: its flags are that program's.
FOREIGN_COMMAND = re.compile(
    r"`(?:aws|kubectl|docker|git|pip|make|eksctl|helm|sbatch|sinfo|srun|sacct|scontrol)\s[^`]*`"
)

# Flags of no parser here that a text may still name, each with why.
PIP_FLAGS = (
    "--abi --cache-dir --constraint --editable --extra-index-url --find-links "
    "--implementation --index-url --no-build-isolation --platform --prefix --progress-bar "
    "--python-version --requirement --root --src --trusted-host"
)
SLURM_FLAGS = "--parsable --parsable2 --noheader --format --gpus-per-node --container-mounts"
ETCD_FLAGS = "--data-dir --listen-client-urls --listen-peer-urls --advertise-client-urls"
GIT_FLAGS = (
    "--is-inside-work-tree --porcelain --short --untracked-files --show-toplevel --binary "
    "--no-ext-diff --no-color --others --exclude-standard --stdin-paths"
)
VLLM_FLAGS = "--served-model-name --tensor-parallel-size --dtype --max-model-len"
ALLOWED: dict[str, str] = {
    **dict.fromkeys(PIP_FLAGS.split(), "pip's: the Dockerfile analyzer reads and fixes pip lines"),
    **dict.fromkeys(GIT_FLAGS.split(), "git's: the argv tags.py runs to find the commit"),
    "--no-": "next_step.py's: the prefix of a boolean's negative flag (--no-<name>)",
    "--junitxml": "pytest's: the buildspec's test step (commands/_buildspec.py)",
    **dict.fromkeys(SLURM_FLAGS.split(), "Slurm's and pyxis's: the argv the Slurm target runs"),
    **dict.fromkeys(ETCD_FLAGS.split(), "etcd's: the etcd Deployment auto_fix applies"),
    **dict.fromkeys(
        VLLM_FLAGS.split(), "vLLM's: the model server's argv (model_server/kubernetes)"
    ),
    **dict.fromkeys(
        ("--no-progress", "--only-show-errors"), "aws s3 sync's: the model fetch init container"
    ),
    "--raw": "kubectl get's: the model server's curl line through the API proxy",
    "--skip-kmod": "the EFA installer's (efa_installer.sh): the analyzer's efa_missing fix",
    "--enable-scheme": "the Training Operator's: its pinned Deployment (components.py)",
    "--profile": "the kubeconfig exec plugin's own argv (kube/access.py)",
    "--flag": "a placeholder in a docstring (slurm_script.py)",
    "--log-level": "transformers serve's: the argv the local model server runs",
    **dict.fromkeys(
        ("--checkpoint", "--out"),
        "trainer.export's: the hint to export a checkpoint before serving it (model_server)",
    ),
    **dict.fromkeys(
        ("--validate_components", "--validate-components"),
        "the seed's CLI spelling manage_eks_cluster's main still takes (the default action)",
    ),
}

# Trainer errors reach a deploy_training_job user as the job's message, so the flags
# they suggest must be ones deploy takes. These are known, reported to the trainer's
# owner, and may only go away; each entry names the file and what to say instead.
TRAINER_ONLY: dict[tuple[str, str], str] = {
    ("trainer/config_loader.py", "--config"): "the trainer's own YAML option: deploy never passes "
    "--config, so only a direct `python -m trainer` user can get this error",
}


def _flags_of(parser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


@cache
def tool_flags() -> frozenset[str]:
    return frozenset().union(*(_flags_of(build_parser(spec)) for spec in all_tools()))


@cache
def mcp_server_flags() -> frozenset[str]:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--help"],
        capture_output=True, text=True, cwd=ROOT, check=True, timeout=60,
    )  # fmt: skip
    return frozenset(FLAG.findall(done.stdout))


@cache
def installer_flags() -> frozenset[str]:
    """`python -m mcp_server install`'s own flags (--client, --scope, --dir, ...)."""
    from mcp_server.install import build_parser as installer_parser

    return frozenset(_flags_of(installer_parser()))


@cache
def trainer_flags() -> frozenset[str]:
    from trainer.config_loader import build_parser as trainer_parser

    return frozenset(_flags_of(trainer_parser()))


@cache
def torchrun_flags() -> frozenset[str]:
    run = pytest.importorskip("torch.distributed.run")
    return frozenset(_flags_of(run.get_args_parser()))


def user_flags() -> frozenset[str]:
    """What a person or agent can actually pass: the tools', the MCP server's and its
    installer's flags."""
    return tool_flags() | mcp_server_flags() | installer_flags() | frozenset(ALLOWED)


# --- the scan ---------------------------------------------------------------------------


def _product_files() -> list[Path]:
    return sorted(p for d in PRODUCT_DIRS for p in (ROOT / d).rglob("*.py"))


def _strings(node: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant under `node`, f-strings' literal parts too."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.lineno, sub.value


def _hint_nodes(tree: ast.AST) -> Iterator[ast.expr]:
    """The hint of every ToolFailure(code, message, hint) and every `hint=` argument."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        if name == "ToolFailure" and len(node.args) >= 3:
            yield node.args[2]
        yield from (k.value for k in node.keywords if k.arg == "hint")


def _named_flags(text: str) -> list[str]:
    return FLAG.findall(FOREIGN_COMMAND.sub("", text))


def _unknown(
    path: Path, pairs: Iterator[tuple[int, str]], known: frozenset[str]
) -> list[tuple[str, int, str, str]]:
    """(file, line, flag, text) for each flag in the texts that is not `known`."""
    where = str(path.relative_to(ROOT))
    return [
        (where, line, flag, text)
        for line, text in pairs
        for flag in _named_flags(text)
        if flag not in known
    ]


def test_the_scan_sees_hints_and_flags():
    hints = [t for p in _product_files() for n in _hint_nodes(ast.parse(p.read_text()))
             for _, t in _strings(n)]  # fmt: skip
    assert len(hints) > 20, "the scan found few hints: it is broken"
    assert any("--confirm" in _named_flags(t) for t in hints)
    assert _named_flags("Run `aws configure --profile NAME` or pass --job_name") == ["--job_name"]
    assert {"--job_name", "--job-name", "--confirm", "--no-confirm", "--json"} <= tool_flags()
    assert {"--workspace", "--allow-path", "--read-only"} <= mcp_server_flags()


def test_every_flag_a_hint_names_is_one_a_user_can_pass():
    unknown = [
        problem
        for path in _product_files()
        for node in _hint_nodes(ast.parse(path.read_text()))
        for problem in _unknown(path, _strings(node), user_flags())
    ]
    assert unknown == []


def test_every_flag_product_code_names_exists():
    known = user_flags() | trainer_flags() | torchrun_flags()
    unknown = [
        problem
        for path in _product_files()
        for problem in _unknown(path, _strings(ast.parse(path.read_text())), known)
    ]
    assert unknown == []


def _raised_texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            yield from _strings(node.exc)


def test_trainer_errors_name_only_flags_deploy_takes():
    """A trainer error is the job's message: its advice must work through deploy."""
    deploy = frozenset(_flags_of(build_parser(tool_spec("deploy_training_job"))))
    found = {
        (where, flag): (line, text)
        for path in sorted((ROOT / "trainer").rglob("*.py"))
        if path.name != "export.py"  # its own CLI, run by hand: its errors reach no job
        for where, line, flag, text in _unknown(
            path, _raised_texts(ast.parse(path.read_text())), deploy
        )
    }
    # Known ones may go (fixed); a new one fails here.
    assert {key: found[key] for key in found.keys() - TRAINER_ONLY.keys()} == {}
