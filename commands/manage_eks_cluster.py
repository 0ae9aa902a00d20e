"""manage_eks_cluster: describe, validate and fix an EKS GPU cluster; NCCL gate; scale;
kubeconfig without the aws CLI; an eksctl config for a new cluster."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import sys
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field

from commands import _eks_params as p
from commands._cli import parse_flags, run_cli
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.cleanup import CleanupSpec
from skills.eks_cluster_manager.create_config import ConfigSpec
from skills.eks_cluster_manager.manage import ClusterCall, manage
from skills.eks_cluster_manager.models import ClusterReport
from skills.eks_cluster_manager.nccl_gate import NcclSpec
from skills.eks_cluster_manager.nodegroups import ScaleSpec
from skills.eks_cluster_manager.storage import StorageSpec
from skills.kube.access import default_kubeconfig
from skills.kube.fields import EksClusterWriteAccess
from skills.shared.confirm import Confirm
from skills.shared.errors import ToolFailure
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, spec_of, tool

Action = Literal[
    "describe",
    "validate",
    "auto_fix",
    "nccl_test",
    "scale",
    "kubeconfig",
    "create_config",
    "storage",
    "cleanup",
    "release_node",
]


@tool(read_only=False, destructive=True, long=True)
def manage_eks_cluster(
    *,
    action: Annotated[Action, Field(description="See above.")] = "validate",
    access: Annotated[EksClusterWriteAccess, Flatten()],
    auto_fix: Annotated[Confirm, Field(description="= action auto_fix.")] = False,
    confirm: Annotated[
        Confirm,
        Field(description="Apply auto_fix/storage; cleanup; scale to 0; re-point; run eksctl."),
    ] = False,
    checkpoint_pvc: p.CheckpointPvc = None,
    rdzv_backend: p.RdzvBackend = "c10d",
    # Each action's own parameters, declared once on its spec and flattened here.
    scale: Annotated[ScaleSpec, Flatten()],
    nccl: Annotated[NcclSpec, Flatten()],
    config: Annotated[ConfigSpec, Flatten()],
    storage: Annotated[StorageSpec, Flatten()],
    cleanup: Annotated[CleanupSpec, Flatten()],
    node: Annotated[
        str | None,
        Field(pattern=r"^[a-z0-9][-a-z0-9.]{0,252}$", description="release_node."),
    ] = None,
    wait_seconds: p.Wait = None,
    progress: Progress | None = None,
) -> ClusterReport:
    """Fix and change a GPU cluster; reads alone: inspect_eks_cluster. action: describe;
    validate; auto_fix, storage (FSx+S3+PV), cleanup (what this suite made): a plan,
    confirm applies; nccl_test; scale; kubeconfig (writes it); create_config (eksctl);
    release_node (undo a quarantine).

    nccl_test runs the NCCL job as an operation, or judges a saved nccl_output.
    kubeconfig writes the named file without the aws CLI. release_node needs confirm;
    without a node it lists the quarantined ones."""
    options = Options(access.namespace, checkpoint_pvc, rdzv_backend)
    call = ClusterCall(
        action=action,
        access=access,
        options=options,
        auto_fix=auto_fix,
        confirm=confirm,
        scale=scale,
        nccl=nccl,
        config=config,
        storage=storage,
        cleanup=cleanup,
        wait_seconds=wait_seconds,
        node=node,
    )
    return manage(call, progress)


_SEED_FLAGS = {"--validate_components", "--validate-components"}
_AUTO_FIX_FLAGS = {"--auto_fix", "--auto-fix"}


def cli(argv: Sequence[str]) -> int:
    """The CLI, which owns the machine: action=kubeconfig writes $KUBECONFIG (else
    ~/.kube/config) unless --kubeconfig names a file; create_config --confirm writes
    <cluster>-eksctl.yaml here unless --output names a file; and the seed's explicit
    `--validate_components --auto_fix` prints the plan (stderr), then applies it."""
    argv = list(argv)
    seed = bool(_SEED_FLAGS & set(argv))
    argv = [a for a in argv if a not in _SEED_FLAGS]  # validate is the default action
    creates = _is_action(argv, "create_config") and "--confirm" in argv
    if creates and not any(a.startswith("--output") for a in argv):
        argv += ["--output", f"{_flag_value(argv, 'cluster_name') or 'cluster'}-eksctl.yaml"]
    if _is_action(argv, "kubeconfig") and not any(a.startswith("--kubeconfig") for a in argv):
        argv += ["--kubeconfig", str(default_kubeconfig())]
    if seed and _AUTO_FIX_FLAGS & set(argv) and "--confirm" not in argv:
        try:
            plan = spec_of(manage_eks_cluster).invoke(_plan_arguments(argv))
        except ToolFailure:
            return run_cli(manage_eks_cluster, argv)  # reports it as the CLI does
        if not isinstance(plan, ClusterReport):  # the spec's call is typed as any tool's
            raise TypeError(f"manage_eks_cluster returned {type(plan).__name__}")
        print(plan.summary, file=sys.stderr)
        for item in plan.plan or []:
            print(f"  {item.action} {item.kind} {item.name}", file=sys.stderr)
        argv.append("--confirm")
    return run_cli(manage_eks_cluster, argv)


def _is_action(argv: list[str], action: str) -> bool:
    return _flag_value(argv, "action") == action


def _flag_value(argv: list[str], name: str) -> str | None:
    """The value the flag for `name` was given (either spelling; as the next argument or
    after '='), or None."""
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in spellings:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _plan_arguments(argv: list[str]) -> dict:
    raw, _ = parse_flags(spec_of(manage_eks_cluster), argv)
    return raw


def main(argv: Sequence[str] | None = None) -> None:
    raise SystemExit(cli(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
