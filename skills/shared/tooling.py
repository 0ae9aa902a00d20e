"""The tool contract: one typed function per tool, from which the CLI and the MCP
tool are both generated, so the two cannot drift.

    @tool(read_only=False, destructive=False, idempotent=False)
    def deploy_training_job(*, job_name: JobName = "demo", ...,
                            progress: Progress | None = None) -> DeployResult: ...

The keyword parameters (with pydantic `Field` descriptions and rules) become the
tool's input model; `progress` is injected by the caller and is not an input.
Every call, from Python, the CLI or MCP, is validated by that one model.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from skills.shared.errors import ToolFailure, invalid_input
from skills.shared.progress import NullProgress, Progress
from skills.shared.results import ToolResult

PROGRESS_PARAM = "progress"

F = TypeVar("F", bound=Callable[..., ToolResult])


@dataclass(frozen=True)
class ToolSpec:
    name: str
    fn: Callable[..., ToolResult]
    params: type[BaseModel]
    result: type[ToolResult]
    description: str
    read_only: bool
    destructive: bool
    idempotent: bool

    def parse(self, raw: Mapping[str, Any]) -> BaseModel:
        """Validate raw arguments (strings from a CLI, JSON from MCP) or raise ToolFailure."""
        try:
            return self.params.model_validate(dict(raw))
        except ValidationError as exc:
            raise invalid_input(exc, self.name) from None

    def invoke(self, raw: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        args = self.parse(raw)
        kwargs = {name: getattr(args, name) for name in type(args).model_fields}
        return self.fn(**kwargs, **{PROGRESS_PARAM: progress or NullProgress()})


def _params_model(name: str, fn: Callable[..., Any]) -> type[BaseModel]:
    signature = inspect.signature(fn, eval_str=True)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.name == PROGRESS_PARAM:
            continue
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"tool {name}: parameter {param.name!r} must be keyword-only")
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {name}: parameter {param.name!r} needs a type annotation")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (param.annotation, default)
    model_name = "".join(part.title() for part in name.split("_")) + "Input"
    # extra="forbid": a misspelt argument is an error, not silently ignored.
    return create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)


def tool(
    *, read_only: bool, destructive: bool = False, idempotent: bool = False
) -> Callable[[F], F]:
    """Register a function as a tool; calls through Python validate like CLI and MCP calls."""

    def decorate(fn: F) -> F:
        result = typing.get_type_hints(fn)["return"]
        spec = ToolSpec(
            name=fn.__name__,
            fn=fn,
            params=_params_model(fn.__name__, fn),
            result=result,
            description=inspect.getdoc(fn) or "",
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
        )

        @functools.wraps(fn)
        def validated(**kwargs: Any) -> ToolResult:
            progress = kwargs.pop(PROGRESS_PARAM, None)
            return spec.invoke(kwargs, progress)

        validated.tool_spec = spec  # type: ignore[attr-defined]
        return validated  # type: ignore[return-value]

    return decorate


def spec_of(fn: Callable[..., Any]) -> ToolSpec:
    try:
        return fn.tool_spec  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"{fn!r} is not decorated with @tool") from None


__all__ = ["ToolFailure", "ToolSpec", "spec_of", "tool"]
