"""The tool contract: one typed function per tool, from which the CLI and the MCP
tool are both generated, so the two cannot drift.

    @tool(read_only=False, long=True)
    def deploy_training_job(*, job: Annotated[JobSpec, Flatten()],
                            target: Annotated[TargetSettings, Flatten("target")],
                            dry_run: DryRun = False, wait_seconds: WaitSeconds = None,
                            progress: Progress | None = None) -> DeployResult: ...

The keyword parameters (with pydantic `Field` descriptions and rules) become the
tool's input model. A parameter marked `Flatten` is a model whose fields become the
tool's own inputs (one CLI flag, one MCP property each) and are gathered back into
that model for the call: a new JobSpec field is a new flag and schema property with
no other edit. Two flattened models may share a field declared through one alias (one
input feeding both: manage_eks_cluster's `bucket`, storage's and cleanup's). A union of
models marked `Flatten(discriminator)` is told apart by that field (each target's
settings). `progress` is injected by the caller.
Every call, from Python, the CLI or MCP, is validated by the one input model, and an
SDK or OS exception the user can act on comes out as a typed ToolFailure.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from skills.shared.error_mapping import failure_from_exception
from skills.shared.errors import ErrorCode, ToolFailure, bad_fields, invalid_input
from skills.shared.next_step import NextStep
from skills.shared.progress import NullProgress, Progress
from skills.shared.results import ToolResult
from skills.shared.secrets import is_secret_name, looks_like_secret

PROGRESS_PARAM = "progress"
WAIT_PARAM = "wait_seconds"

F = TypeVar("F", bound=Callable[..., ToolResult])

WaitSeconds = Annotated[
    float | None,
    Field(
        ge=0,
        le=86_400,
        description="Return after N seconds; None waits to the end (the "
        "CLI's default). MCP calls default to 40 s: then poll.",
    ),
]


@dataclass(frozen=True)
class Flatten:
    """Marks a model parameter whose fields are the tool's own inputs. For a union of
    models, `discriminator` names the field that picks the member."""

    discriminator: str | None = None
    description: str = ""


@dataclass(frozen=True)
class FlatGroup:
    """One flattened parameter: which flat fields it takes and how to rebuild it."""

    param: str
    members: Mapping[Any, type[BaseModel]]  # by discriminator value (None: the one model)
    discriminator: str | None
    fields: frozenset[str]

    def implied(self, given: set[str], default: Any) -> Any:
        """The member the given fields imply when the discriminator is left out: the
        default if they all belong to it, else the one member they all belong to."""
        flat = self.fields & given

        def fits(key: Any) -> bool:
            return flat <= set(self.members[key].model_fields)

        if fits(default):
            return default
        fitting = [key for key in self.members if fits(key)]
        return fitting[0] if len(fitting) == 1 else default

    def build(self, args: BaseModel, tool_name: str) -> BaseModel:
        given = args.model_fields_set
        key = getattr(args, self.discriminator) if self.discriminator else None
        if self.discriminator and self.discriminator not in given:
            key = self.implied(given, key)
        model = self.members[key]
        stray = sorted(n for n in self.fields & given if n not in model.model_fields)
        if stray:
            problem = f"does not apply to {self.discriminator}={key!r}"
            raise bad_fields([{"field": n, "problem": problem} for n in stray], tool_name)
        values = {n: getattr(args, n) for n in model.model_fields if n in given}
        if self.discriminator:
            values[self.discriminator] = key
        try:
            return model.model_validate(values)
        except ValidationError as exc:
            raise invalid_input(exc, tool_name) from None


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
    # May run longer than an agent's call: MCP gives it a bounded wait_seconds.
    long: bool = False
    # Runs detached as an operation when a caller waits less than to the end.
    operation: bool = False
    groups: tuple[FlatGroup, ...] = ()
    fn_params: frozenset[str] = field(default_factory=frozenset)

    @property
    def entry(self) -> str:
        """`module:function`, importable by an operation's worker process."""
        module = self.fn.__module__
        return f"{f'commands.{self.name}' if module == '__main__' else module}:{self.name}"

    def parse(self, raw: Mapping[str, Any]) -> BaseModel:
        """Validate raw arguments (strings from a CLI, JSON from MCP) or raise ToolFailure."""
        for name in raw:
            if (failure := token_argument(str(name), self.params)) is not None:
                raise failure
        refuse_secrets(raw)
        try:
            return self.params.model_validate(dict(raw))
        except ValidationError as exc:
            raise invalid_input(exc, self.name) from None

    def call_kwargs(self, args: BaseModel) -> dict[str, Any]:
        """The function's keyword arguments: flat inputs gathered back into their models."""
        kwargs = {group.param: group.build(args, self.name) for group in self.groups}
        grouped = set().union(*(group.fields for group in self.groups))
        for name in type(args).model_fields:
            if name not in grouped and name in self.fn_params:
                kwargs[name] = getattr(args, name)
        return kwargs

    def invoke(self, raw: Mapping[str, Any], progress: Progress | None = None) -> ToolResult:
        kwargs = self.call_kwargs(self.parse(raw))
        try:
            return self.fn(**kwargs, **{PROGRESS_PARAM: progress or NullProgress()})
        except ToolFailure as failure:
            self._confirm_step(failure, raw)
            raise
        except Exception as exc:
            failure = failure_from_exception(exc)
            if failure is None:
                raise
            raise failure from exc

    def _confirm_step(self, failure: ToolFailure, raw: Mapping[str, Any]) -> None:
        """A confirmation_required failure's next step: this same call, confirmed."""
        confirmable = "confirm" in self.params.model_fields
        if failure.code == ErrorCode.CONFIRMATION_REQUIRED and confirmable:
            arguments = {k: v for k, v in raw.items() if k != WAIT_PARAM}
            failure.next_step = failure.next_step or NextStep(
                tool=self.name, arguments={**arguments, "confirm": True}, why="confirm it"
            )

    def expand(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Python callers may pass a flattened parameter as its model (job=JobSpec(...))."""
        for group in self.groups:
            value = kwargs.pop(group.param, None)
            if isinstance(value, BaseModel):
                kwargs = {**value.model_dump(), **kwargs}
            elif value is not None:
                kwargs[group.param] = value  # left for validation to name
        return kwargs


SECRET_HINT = (
    "Set it in the environment instead (e.g. HF_TOKEN=... for Hugging Face, AWS_* for "
    "AWS); the job inherits it."
)


# Where a token the documents pass as an argument (hf_token="hf_...") goes instead.
TOKEN_HOMES = {
    "HF_TOKEN": "export HF_TOKEN in the environment you call from (the shell that starts "
    "the CLI or the MCP client): local and Slurm jobs inherit it, and on Kubernetes "
    "deploy_training_job puts it in the job's Secret fsdp-eks-hf-token, never in the manifest",
}


def token_argument(name: str, params: type[BaseModel]) -> ToolFailure | None:
    """A token given as an argument no tool takes (hf_token): refused saying where it
    goes instead (its environment variable). Its value is never read, so never echoed."""
    if name in params.model_fields or not is_secret_name(name):
        return None
    variable = {"HUGGINGFACE_TOKEN": "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN": "HF_TOKEN"}.get(
        name.upper(), name.upper()
    )
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"{name} is not an argument: tokens never ride in tool calls (they would land "
        "in plans, records and logs).",
        TOKEN_HOMES.get(
            variable, f"export {variable} in the environment you call from; the job inherits it"
        ),
        {"problems": [{"field": name, "problem": f"a token: set {variable} instead"}]},
    )


def _strings(value: Any) -> typing.Iterator[tuple[str, str]]:
    """(where, text) for every string in an argument: values, items, keys, at any depth
    (a loop, not recursion: a client's JSON may nest deeper than Python's stack)."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        where, value = pending.pop()
        if isinstance(value, str):
            yield where, value
        elif isinstance(value, BaseModel):
            pending.append((where, value.model_dump()))
        elif isinstance(value, Mapping):
            for key, item in value.items():
                pending.append((f"{where}.{key}" if where else str(key), item))
                # A key's own text may be the secret: name the mapping, not the key; it
                # is pushed last so it is checked before anything named after it.
                pending.append((f"a key of {where or 'the arguments'}", key))
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending += [(f"{where}[{i}]", item) for i, item in enumerate(value)]


def refuse_secrets(raw: Mapping[str, Any]) -> None:
    """Tokens are never arguments: they would land in plans, records and logs. Checked
    before validation, so no later message can quote one. The value is never echoed."""
    for where, text in _strings(dict(raw)):
        if looks_like_secret(text):
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{where} looks like a secret token; tokens are never passed as arguments",
                SECRET_HINT,
                {"problems": [{"field": where, "problem": "looks like a secret token"}]},
            )


def _members(annotation: Any) -> tuple[type[BaseModel], ...]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0].rstrip(".") if text else ""


def _flatten(
    tool_name: str, param: str, annotation: Any, marker: Flatten
) -> tuple[FlatGroup, dict[str, Any]]:
    members = _members(annotation)
    fields: dict[str, Any] = {}
    seen: dict[str, FieldInfo] = {}
    for model in members:
        for name, info in model.model_fields.items():
            if name == marker.discriminator:
                continue
            if name in seen and seen[name].annotation != info.annotation:
                raise TypeError(f"tool {tool_name}: {param}.{name} has two types")
            seen.setdefault(name, info)
    by_key: dict[Any, type[BaseModel]] = {}
    if marker.discriminator:
        keys = []
        for model in members:
            (key,) = typing.get_args(model.model_fields[marker.discriminator].annotation)
            by_key[key] = model
            keys.append(key)
        choices = "; ".join(f"'{k}' {_first_line(m.__doc__)}" for k, m in by_key.items())
        fields[marker.discriminator] = (
            Literal[tuple(keys)],
            Field(keys[0], description=f"{marker.description} {choices}.".strip()),
        )
    else:
        (by_key[None],) = members
    for name, info in seen.items():
        owners = [m for m in members if name in m.model_fields]
        flat = FieldInfo.merge_field_infos(info)
        if len(owners) < len(members):  # one target's setting: optional for the others
            flat.annotation = info.annotation | None  # type: ignore[operator]
            if info.is_required():
                flat.default = None
        fields[name] = (flat.annotation, flat)
    group = FlatGroup(param, by_key, marker.discriminator, frozenset(fields))
    return group, fields


def _one_input(field: tuple[Any, Any], other: tuple[Any, Any]) -> bool:
    """Two flattened models' fields of one name are one input feeding both when declared
    through one alias: the same type, default, description and validators (fields that
    differ are refused: two declarations would drift)."""
    (kind, info), (other_kind, other_info) = field, other
    if not (isinstance(info, FieldInfo) and isinstance(other_info, FieldInfo)):
        return False  # a function's own parameter is never also a flattened field
    declared = (kind, info.default, info.description, info.metadata)
    return declared == (other_kind, other_info.default, other_info.description, other_info.metadata)


def _params_model(
    name: str, fn: Callable[..., Any], operation: bool
) -> tuple[type[BaseModel], tuple[FlatGroup, ...], frozenset[str]]:
    signature = inspect.signature(fn, eval_str=True)
    fields: dict[str, Any] = {}
    groups: list[FlatGroup] = []
    fn_params: set[str] = set()
    for param in signature.parameters.values():
        if param.name == PROGRESS_PARAM:
            continue
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"tool {name}: parameter {param.name!r} must be keyword-only")
        if param.annotation is inspect.Parameter.empty:
            raise TypeError(f"tool {name}: parameter {param.name!r} needs a type annotation")
        marker = next(
            (m for m in getattr(param.annotation, "__metadata__", ()) if isinstance(m, Flatten)),
            None,
        )
        if marker is not None:
            group, flat = _flatten(name, param.name, typing.get_args(param.annotation)[0], marker)
            clash = {n for n in set(flat) & set(fields) if not _one_input(flat[n], fields[n])}
            if clash:
                raise TypeError(f"tool {name}: {sorted(clash)} named twice")
            groups.append(group)
            fields.update(flat)
            continue
        if param.name in fields:
            raise TypeError(f"tool {name}: {param.name!r} named twice")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (param.annotation, default)
        fn_params.add(param.name)
    if operation and WAIT_PARAM not in fields:
        # How long this call waits; the work itself runs to its end either way.
        fields[WAIT_PARAM] = (WaitSeconds, None)
    model_name = "".join(part.title() for part in name.split("_")) + "Input"
    # extra="forbid": a misspelt argument is an error, not silently ignored.
    model = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    return model, tuple(groups), frozenset(fn_params)


def tool(
    *,
    read_only: bool,
    destructive: bool = False,
    idempotent: bool = False,
    long: bool = False,
    operation: bool = False,
) -> Callable[[F], F]:
    """Register a function as a tool; calls through Python validate like CLI and MCP calls.

    long: the call may outlast an agent's patience; it takes `wait_seconds` and returns
    the current state when that passes (its work goes on: a job). operation: the work
    itself would die with the call, so callers that wait less than to the end get it
    run detached as an operation (a build, a push), polled with get_operation.
    """

    def decorate(fn: F) -> F:
        result = typing.get_type_hints(fn)["return"]
        params, groups, fn_params = _params_model(fn.__name__, fn, operation)
        if (long or operation) and WAIT_PARAM not in params.model_fields:
            raise TypeError(f"tool {fn.__name__}: a long tool takes {WAIT_PARAM}")
        spec = ToolSpec(
            name=fn.__name__,
            fn=fn,
            params=params,
            result=result,
            description=inspect.getdoc(fn) or "",
            read_only=read_only,
            destructive=destructive,
            idempotent=idempotent,
            long=long or operation,
            operation=operation,
            groups=groups,
            fn_params=fn_params,
        )

        @functools.wraps(fn)
        def validated(**kwargs: Any) -> ToolResult:
            progress = kwargs.pop(PROGRESS_PARAM, None)
            return spec.invoke(spec.expand(kwargs), progress)

        validated.tool_spec = spec  # type: ignore[attr-defined]
        return validated  # type: ignore[return-value]

    return decorate


def spec_of(fn: Callable[..., Any]) -> ToolSpec:
    try:
        return fn.tool_spec  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(f"{fn!r} is not decorated with @tool") from None


__all__ = ["Flatten", "ToolFailure", "ToolSpec", "WaitSeconds", "spec_of", "tool"]
