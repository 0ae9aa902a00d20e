"""The CLI of every tool, generated from its input model: `--job_name` and
`--job-name` both work, `--json` prints the result model, `--help` shows the
Field descriptions. Values go to the same validation as MCP calls."""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from skills.shared.errors import ToolFailure
from skills.shared.results import ToolResult
from skills.shared.tooling import ToolSpec, spec_of

EXIT_FAILED = 1
EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        failure = ToolFailure(
            "invalid_input", f"{self.prog}: {message}", f"Run `{self.prog} --help` for the flags."
        )
        _print_failure(failure, as_json="--json" in sys.argv[1:])
        raise SystemExit(EXIT_USAGE)


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


def _choices(annotation: Any) -> list[str]:
    if typing.get_origin(annotation) is typing.Literal:
        return [str(arg) for arg in typing.get_args(annotation)]
    return []


def _is_bool(annotation: Any) -> bool:
    return annotation is bool or (
        typing.get_origin(annotation) in (typing.Union, types.UnionType)
        and set(typing.get_args(annotation)) == {bool, type(None)}
    )


def build_parser(spec: ToolSpec, prog: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog or spec.name,
        description=spec.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for name, info in spec.params.model_fields.items():
        flags = [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])
        help_parts = [info.description or ""]
        if choices := _choices(info.annotation):
            help_parts.append(f"one of: {', '.join(choices)}.")
        if rules := _rules(info):
            help_parts.append(f"Rules: {', '.join(rules)}.")
        if info.default is not PydanticUndefined:
            help_parts.append(f"Default: {info.default}.")
        else:
            help_parts.append("Required.")
        common = {"dest": name, "default": argparse.SUPPRESS, "help": " ".join(help_parts)}
        if _is_bool(info.annotation):
            parser.add_argument(*flags, action=argparse.BooleanOptionalAction, **common)
        else:
            # Strings go to pydantic (lax mode turns "4" into 4), so the CLI and MCP
            # give the same errors for the same bad value.
            parser.add_argument(*flags, metavar=name.upper(), **common)
    parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
    return parser


def _print_failure(failure: ToolFailure, as_json: bool) -> None:
    if as_json:
        print(json.dumps(failure.to_dict(), indent=2))
    print(f"error [{failure.code}]: {failure.message}", file=sys.stderr)
    if failure.hint:
        print(f"hint: {failure.hint}", file=sys.stderr)


def _print_result(result: ToolResult, as_json: bool) -> None:
    if as_json:
        print(result.to_json())
        return
    if (text := result.plain_text()) is not None:
        print(text)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    for key, value in result.summary_rows():
        table.add_row(f"[bold]{key}[/bold]", str(value))
    Console().print(table)


class ConsoleProgress:
    """A rich progress bar on a terminal; throttled plain lines when stderr is a pipe."""

    def __init__(self, label: str) -> None:
        from rich.console import Console

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
                TextColumn("{task.fields[message]}"),
                console=self._console,
            )
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=None, message="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._unprinted is not None:  # the final state, even if throttled
            self._console.print(self._unprinted, highlight=False)

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, total=total, message=message)
            return
        of_total = f"/{total:g}" if total is not None else ""
        line = f"{self._label} {completed:g}{of_total} {message}"
        now = time.monotonic()
        if now - self._last_line >= 2.0 or (total is not None and completed >= total):
            self._last_line = now
            self._console.print(line, highlight=False)
            self._unprinted = None
        else:
            self._unprinted = line


def run_cli(fn: Callable[..., ToolResult], argv: Sequence[str] | None = None) -> int:
    """Parse flags, call the tool with a progress bar, print the result; returns the exit code."""
    spec = spec_of(fn)
    args = vars(build_parser(spec).parse_args(argv))
    as_json = args.pop("json")
    try:
        with ConsoleProgress(spec.name) as progress:
            result = spec.invoke(args, progress)
    except ToolFailure as failure:
        _print_failure(failure, as_json)
        return EXIT_USAGE if failure.code == "invalid_input" else EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    _print_result(result, as_json)
    return result.cli_exit_status()


def main_for(fn: Callable[..., ToolResult]) -> Callable[[Sequence[str] | None], None]:
    """The `main()` of a command module: run the tool's CLI and exit with its status."""

    def main(argv: Sequence[str] | None = None) -> None:
        raise SystemExit(run_cli(fn, argv))

    return main
