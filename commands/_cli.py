"""The CLI of every tool, generated from its input model: `--job_name` and
`--job-name` both work, `--json` prints the result model, `--help` shows the
Field descriptions. Values go to the same validation as MCP calls."""

from __future__ import annotations

import argparse
import collections.abc
import contextlib
import json
import os
import sys
import time
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import path_fields, project_root
from skills.shared.progress import CancellableProgress
from skills.shared.results import ToolResult
from skills.shared.tooling import WAIT_PARAM, ToolSpec, spec_of, token_argument
from trainer.hub import is_hub_id

EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """Usage errors are the project's invalid_input failure, as JSON under --json."""

    as_json = False
    dict_flags: list[str]  # the dests of KEY=VALUE flags (build_parser sets them)

    def error(self, message: str) -> typing.NoReturn:
        failure = ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{self.prog}: {message}",
            f"Run `{self.prog} --help` for the flags.",
        )
        print_failure(failure, as_json=self.as_json)
        raise SystemExit(failure.exit_status)


def _rules(info: FieldInfo) -> list[str]:
    rules = []
    for meta in info.metadata:
        for attr, label in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                rules.append(f"{label} {getattr(meta, attr)}")
        if getattr(meta, "pattern", None):
            rules.append(f"matches {meta.pattern}")
        if getattr(meta, "max_length", None):
            rules.append(f"at most {meta.max_length} chars")
    return rules


def _without_none(annotation: Any) -> Any:
    """`X | None` -> X (and Annotated[X, ...] -> X); anything else as it is."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return _without_none(rest[0])
    return annotation


def _choices(annotation: Any) -> list[str]:
    inner = _without_none(annotation)
    if typing.get_origin(inner) is typing.Literal:
        return [str(arg) for arg in typing.get_args(inner)]
    return []


def _kind(annotation: Any) -> str:
    """How a field is spelled on the command line: bool, list, dict, model or value."""
    inner = _without_none(annotation)
    origin = typing.get_origin(inner) or inner
    if inner is bool:
        return "bool"
    if origin in (list, tuple, set, frozenset):
        return "list"
    if origin in (dict, typing.Mapping, collections.abc.Mapping):
        return "dict"
    if isinstance(inner, type) and issubclass(inner, BaseModel):
        return "model"
    return "value"


def _help(info: FieldInfo, kind: str) -> str:
    parts = [info.description or ""]
    if choices := _choices(info.annotation):
        parts.append(f"one of: {', '.join(choices)}.")
    if kind == "list":
        parts.append("Repeat the flag for each item.")
    elif kind == "dict":
        parts.append("KEY=VALUE; repeat the flag for each key.")
    if rules := _rules(info):
        parts.append(f"Rules: {', '.join(rules)}.")
    if info.is_required():
        parts.append("Required.")
    elif info.default is not None or kind == "bool":
        parts.append(f"Default: {info.default}.")
    return " ".join(part for part in parts if part)


def _add_fields(
    parser: argparse.ArgumentParser, model: type[BaseModel], prefix: str = ""
) -> list[str]:
    """One flag per field (a nested model's fields as dotted flags); returns the dict dests."""
    dict_dests: list[str] = []
    for name, info in model.model_fields.items():
        dest = f"{prefix}{name}"
        kind = _kind(info.annotation)
        if kind == "model":
            dict_dests += _add_fields(parser, _without_none(info.annotation), prefix=f"{dest}.")
            continue
        flags = [f"--{dest}"] + ([f"--{dest.replace('_', '-')}"] if "_" in dest else [])
        common: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
        common["help"] = _help(info, kind)
        choices = _choices(info.annotation)
        metavar = "{" + ",".join(choices) + "}" if choices else name.upper()
        if kind == "bool":
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **common)
        elif kind in ("list", "dict"):
            parser.add_argument(*flags, action="append", metavar=metavar, **common)
            if kind == "dict":
                dict_dests.append(dest)
        else:
            # Strings go to pydantic (lax mode turns "4" into 4), so the CLI and MCP
            # give the same errors for the same bad value.
            parser.add_argument(*flags, metavar=metavar, **common)
    return dict_dests


def build_parser(spec: ToolSpec, prog: str | None = None) -> _Parser:
    parser = _Parser(
        prog=prog or spec.name,
        # `--conf` is not `--confirm`: a flag is spelled out, as in the trainer.
        allow_abbrev=False,
        description=spec.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.dict_flags = _add_fields(parser, spec.params)
    parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
    return parser


def parse_flags(spec: ToolSpec, argv: Sequence[str]) -> tuple[dict[str, Any], bool]:
    """Flags -> the tool's raw arguments (dotted flags nested, KEY=VALUE pairs as dicts)
    and whether --json was given. Usage errors exit 2, as JSON under --json."""
    parser = build_parser(spec)
    parser.as_json = "--json" in argv
    for arg in argv:  # --hf_token hf_...: where it goes, before argparse quotes the value
        name = arg[2:].partition("=")[0].replace("-", "_") if arg.startswith("--") else ""
        if name and (failure := token_argument(name, spec.params)) is not None:
            print_failure(failure, as_json=parser.as_json)
            raise SystemExit(failure.exit_status)
    flat = vars(parser.parse_args(argv))
    as_json = flat.pop("json")
    for dest in parser.dict_flags:
        if dest in flat:
            pairs = [item.partition("=") for item in flat[dest]]
            if bad := [key for key, eq, _ in pairs if not eq or not key]:
                parser.error(f"--{dest} takes KEY=VALUE, got {len(bad)} item(s) without '='")
            flat[dest] = {key: value for key, _, value in pairs}
    raw: dict[str, Any] = {}
    for dest, value in flat.items():
        *parents, leaf = dest.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return raw, as_json


def _printable(text: str) -> str:
    """`text` as any UTF-8 stream can take it: an undecodable byte from argv (a lone
    surrogate) is written as its escape instead of crashing the print."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _say(text: str, stream: typing.TextIO | None = None) -> None:
    print(_printable(text), file=stream or sys.stdout)


def print_failure(failure: ToolFailure, as_json: bool) -> None:
    if as_json:
        _say(json.dumps(failure.to_dict(), indent=2))
    _say(f"error [{failure.code}]: {failure.message}", sys.stderr)
    if failure.hint:
        _say(f"hint: {failure.hint}", sys.stderr)


def _print_result(result: ToolResult, as_json: bool) -> None:
    if as_json:
        _say(result.to_json())
        return
    if (text := result.plain_text()) is not None:
        _say(text)
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_header=False, box=None, pad_edge=False)
    for key, value in result.cli_rows():
        # Text, not markup: a value like "[/x]" is data, not a style tag.
        table.add_row(Text(_printable(str(key)), style="bold"), Text(_printable(str(value))))
    Console().print(table)


class ConsoleProgress(CancellableProgress):
    """A rich progress bar on a terminal; throttled plain lines when stderr is a pipe.
    (A person cancels with Ctrl-C, which arrives as KeyboardInterrupt.)"""

    def __init__(self, label: str) -> None:
        from rich.console import Console

        super().__init__()

        self._console = Console(stderr=True)
        self._label = label
        self._bar: Any = None
        self._task: Any = None
        self._last_line = 0.0
        self._unprinted: str | None = None

    def __enter__(self) -> ConsoleProgress:
        if self._console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichBar

            self._bar = RichBar(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[message]}", markup=False),
                console=self._console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=None, message="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._unprinted is not None:  # the final state, even if throttled
            self._console.print(self._unprinted, highlight=False, markup=False)

    def emit(self, completed: float, total: float | None, message: str) -> None:
        if self._bar is not None:
            message = _printable(message)
            self._bar.update(self._task, completed=completed, total=total, message=message)
            return
        of_total = f"/{total:g}" if total is not None else ""
        line = f"{self._label} {completed:g}{of_total} {message}"
        now = time.monotonic()
        if now - self._last_line >= 2.0 or (total is not None and completed >= total):
            self._last_line = now
            self._console.print(_printable(line), highlight=False, markup=False)
            self._unprinted = None
        else:
            self._unprinted = _printable(line)


def run_cli(fn: Callable[..., ToolResult], argv: Sequence[str] | None = None) -> int:
    """Parse flags, call the tool with a progress bar, print the result; returns the exit code.

    An operation tool given --wait_seconds runs detached and returns its operation's
    state when that time passes; without it, the CLI runs it here to the end."""
    spec = spec_of(fn)
    argv = list(sys.argv[1:] if argv is None else argv)
    args, as_json = parse_flags(spec, argv)
    args = _typed_paths_from_here(spec, args, Path.cwd())
    _to_project_root()
    try:
        with ConsoleProgress(spec.name) as progress:
            if spec.operation and args.get(WAIT_PARAM) is not None:
                from skills.operations import operations

                result: ToolResult = operations.call(spec, args, progress)
            else:
                result = spec.invoke(args, progress)
    except ToolFailure as failure:
        print_failure(failure, as_json)
        return failure.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    _print_result(result, as_json)
    _write_image(result, as_json)
    return result.cli_exit_status()


def _write_image(result: ToolResult, as_json: bool) -> None:
    """A result's picture (get_training_job --plot) as a file here; its path printed
    (on stderr under --json, whose stdout is the result alone)."""
    image = result.image()
    if image is None:
        return
    path = Path.cwd() / image[0]
    path.write_bytes(image[1])
    print(f"plot: {path}", file=sys.stderr if as_json else sys.stdout)


def _typed_paths_from_here(spec: ToolSpec, args: dict[str, Any], here: Path) -> dict[str, Any]:
    """A relative path typed on the command line is the shell's: from the folder the
    command starts in (a hub name, `org/name` that is no file here, is left as it is;
    `data/train.jsonl` is a file even when missing, so its error names the path typed)."""
    typed = dict(args)
    for name, marker in path_fields(spec.params).items():
        value = typed.get(name)
        if not isinstance(value, str) or not value or "://" in value:
            continue
        if value.startswith("~") or Path(value).is_absolute():
            continue
        # is_hub_id first: it bounds the name (a hub id's parts), so the look at the disk
        # never meets a name too long for the file system.
        if marker.hub_name and is_hub_id(value) and not (here / value).exists():
            continue
        typed[name] = str(here / value)
    return typed


def _to_project_root() -> None:
    """Work where the MCP server does: the project root (project_root: the git root, or
    FSDP_EKS_WORKSPACE), whatever subfolder the command starts in, so its runs/ and
    relative paths are the server's."""
    with contextlib.suppress(OSError):  # a working folder deleted under us: stay
        os.chdir(project_root(Path.cwd()))


class CommandMain(typing.Protocol):
    """A command module's `main`: argv defaults to sys.argv[1:] (console scripts pass none)."""

    def __call__(self, argv: Sequence[str] | None = None) -> None: ...


def main_for(fn: Callable[..., ToolResult]) -> CommandMain:
    """The `main()` of a command module: run the tool's CLI and exit with its status."""

    def main(argv: Sequence[str] | None = None) -> None:
        raise SystemExit(run_cli(fn, argv))

    return main
