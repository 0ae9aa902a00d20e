"""The targets by name: one line per target. Tools take `target` and its settings
through `TargetSettings` (flattened into their inputs) and never branch on a name."""

from __future__ import annotations

from typing import Annotated, Any, Union

from pydantic import Field, PrivateAttr, SerializerFunctionWrapHandler, field_serializer

from skills.catalog.pricing import cost_comment, cost_rows
from skills.shared.errors import ToolFailure
from skills.shared.secrets import mask_data, redact
from skills.shared.tooling import Flatten
from skills.training_job_deployer.models import JobState, RetryAttempt
from skills.training_job_deployer.targets.base import Capability, Target
from skills.training_job_deployer.targets.base import TargetSettings as _Settings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from skills.training_job_deployer.targets.local.target import LocalTarget
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

TARGETS: dict[str, type[Target[Any]]] = {
    LocalTarget.name: LocalTarget,
    KubernetesTarget.name: KubernetesTarget,
    SlurmTarget.name: SlurmTarget,
}


def _one_of(models: list[type[Any]]) -> Any:
    """A union of the models (a single model stays itself), told apart by `target`."""
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="target")]  # noqa: UP007


# A tool parameter: `target` plus each target's own settings as flat inputs.
TargetSettings = Annotated[
    _one_of([t.settings_model for t in TARGETS.values()]),
    Flatten("target", description="Where the job runs (default: implied by the settings):"),
]
# deploy_training_job's: each target's deploy settings (its settings plus how to place
# a job), so the other job tools' inputs stay small.
DeploySettings = Annotated[
    _one_of([t.deploy_settings_model for t in TARGETS.values()]),
    Flatten("target", description="Where the job runs (default: implied by the settings):"),
]
# diagnose_training_job's: every target's settings, those the job doctor can read first,
# so that `target` left out means the first of them (a cluster), and the others answer
# unsupported_for_target rather than a schema error.
DoctorSettings = Annotated[
    _one_of(
        [
            t.settings_model
            for t in sorted(
                TARGETS.values(),
                # A cluster first (the default), then the others the doctor can read.
                key=lambda t: (Capability.SNAPSHOT not in t.capabilities, not t.on_cluster),
            )
        ]
    ),
    Flatten("target", description="The cluster:"),
]
# Any target's plan, as a result field.
AnyPlan = _one_of([t.plan_model for t in TARGETS.values()])


def get_target(settings: _Settings) -> Target[Any]:
    """The target its settings name, built from them."""
    return TARGETS[settings.target](settings)  # type: ignore[attr-defined,call-arg,abstract]


class DeployResult(JobState):
    dry_run: bool = False
    plan: AnyPlan  # type: ignore[valid-type]
    attempts: list[RetryAttempt] | None = Field(default=None, description="auto_retry: each try.")
    stop_reason: str | None = None
    operation_id: str | None = None
    model: str | None = Field(default=None, description="The model and its parameter count.")
    # include_plan=true: the plan goes over MCP after a submit too (a dry run's always).
    _show_plan: bool = PrivateAttr(default=False)

    def show_plan(self, shown: bool) -> None:
        self._show_plan = shown

    def failure(self) -> ToolFailure | None:
        """A job that failed is a failed deploy (isError over MCP; a failed operation)."""
        return self.job_failure()

    cost: dict[str, Any] | None = Field(
        default=None, description="Dry run: the estimate from the dated price table."
    )

    def summary_rows(self) -> list[tuple[str, Any]]:
        if self.status == "planned":
            return [
                ("job", self.job_name),
                ("status", "planned (dry run: nothing was started)"),
                *([("model", self.model)] if self.model else []),
                *[("warning", w) for w in self.warnings],
                *cost_rows(self.cost),
                *([("async save", self.plan.async_save)] if self.plan.async_save else []),
                *([("backend", self.plan.process_group)] if self.plan.process_group else []),
                *mask_data(self.plan.to_display()),
            ]
        rows = super().summary_rows()
        if self.model:
            rows.insert(1, ("model", self.model))
        for a in self.attempts or []:
            said = f"{a.code} on {a.pod} (rank {a.rank})" if a.code else a.status
            rows.append((f"attempt {a.number}", said + (f" -> {a.remedy}" if a.remedy else "")))
            rows += [("  diff", line) for line in a.spec_diff]
            if a.resumed_from is not None:
                rows.append(("  resumed from", f"step {a.resumed_from}"))
        if self.stop_reason:
            rows.append(("stopped", self.stop_reason))
        if self.operation_id:
            rows.append(("operation", self.operation_id))
        return rows

    def plain_text(self) -> str | None:
        text = self.plan.plain_text() if self.status == "planned" else None
        if text is None:
            return None
        # The script as sbatch gets it, then the cost as shell comments.
        return redact(text.rstrip("\n") + "\n" + cost_comment(self.cost))

    def left_out_over_mcp(self) -> set[str]:
        # The plan (a PyTorchJob manifest: ~4 KB) is a dry run's answer; dry_run shows it.
        return set() if self.dry_run or self._show_plan else {"plan"}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        """Over MCP the last attempt keeps its evidence; the earlier ones their first line
        (with what was changed: spec_diff, remedy)."""
        attempts: list[dict[str, Any]] = data.get("attempts") or []
        brief = [{**a, "evidence": a["evidence"][:1]} for a in attempts[:-1]]
        return {**data, "attempts": brief + attempts[-1:]}

    @field_serializer("plan", mode="wrap")
    def _masked_plan(self, plan: Any, handler: SerializerFunctionWrapHandler) -> Any:
        """The plan leaves as logs do: argv, env and scripts with secrets masked (the
        target runs the plan object itself, never this copy)."""
        return mask_data(handler(plan))
