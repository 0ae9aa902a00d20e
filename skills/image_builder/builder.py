"""The build loop: analyze -> (analyze_only: stop) -> attempt: base image check + build ->
on failure classify the log; a class with a known fix asks the analyzer + fixer for an
edited Dockerfile (written as <Dockerfile>.fixed, or in place with write=True) and
builds again, up to max_attempts; a failure with no known fix stops at once.

Builds go through the docker SDK's low-level API (`client.api.build(decode=True)`): a
failed build is an `error`/`errorDetail` entry in the stream, not an exception, so
every entry is checked. Each `Step N/M` (Docker) / `STEP N/M:` (podman) line is
reported as progress. The text sent to the daemon is the working Dockerfile with
pulled images rewritten through the base mirror; the user's file is never edited
unless write=True.
"""

from __future__ import annotations

import http.client
import os
import re
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skills.catalog import cuda as cuda_tables
from skills.cloud.clients import docker_client
from skills.cloud.registry_images import check_image
from skills.image_builder import dockerfile_reader
from skills.image_builder.build_errors import BuildError, classify
from skills.image_builder.dockerfile_analyzer import analyze
from skills.image_builder.dockerfile_fixer import fix, write_fixed
from skills.image_builder.image_labels import label_build_args
from skills.image_builder.models import Attempt, BuildResult, Versions
from skills.image_builder.registry_check import mirror_setting, rewrite_from
from skills.image_builder.tags import TagStrategy, build_inputs, choose_tag, concrete_strategy
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.progress import NullProgress, Progress
from skills.shared.reading import read_bytes

LOG_TAIL = 40
_STEP = re.compile(r"^\s*step\s+(\d+)/(\d+)\s*:?", re.IGNORECASE)
_BUILT = re.compile(r"^Successfully built ([0-9a-f]+)")


@dataclass
class BuildOptions:
    dockerfile: Path
    context: Path | None = None
    tag: str | None = None
    repository: str = "fsdp-eks-trainer"
    tag_strategy: TagStrategy = "auto"
    auto_fix: bool = True
    max_attempts: int = 3
    analyze_only: bool = False
    write: bool = False
    base_image: str | None = None
    instance_type: str | None = None
    driver_version: str | None = None
    base_mirror: str | None = None
    build_args: dict[str, str] = field(default_factory=dict)
    # Images whose layers the daemon may reuse (e.g. the repository's newest, pulled).
    cache_from: list[str] = field(default_factory=list)


@dataclass
class _Outcome:
    ok: bool
    lines: list[str]
    image_id: str | None = None
    error: str | None = None


def _inputs(options: BuildOptions) -> tuple[str, Path]:
    """The Dockerfile's text and the context directory, or a typed error (exit 2)."""
    path = options.dockerfile
    if not path.exists():
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No Dockerfile at {path}.",
            "Pass dockerfile as the path of an existing Dockerfile.",
            {"field": "dockerfile", "path": str(path)},
        )
    if path.is_dir():
        raise ToolFailure(
            ErrorCode.IS_A_DIRECTORY,
            f"dockerfile {path} is a directory.",
            "Pass the Dockerfile itself (the context is its directory unless you pass context).",
            {"field": "dockerfile", "path": str(path)},
        )
    if not path.is_file():  # a device, a FIFO, /proc/self/fd/N: nothing to build from
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"dockerfile {path} is not a regular file.",
            "Pass the path of a Dockerfile.",
            {"problems": [{"field": "dockerfile", "problem": "not a regular file"}]},
        )
    data = read_bytes(path, what="dockerfile", max_bytes=dockerfile_reader.MAX_DOCKERFILE_CHARS)
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"dockerfile {path} is not text.",
            "Pass the path of a Dockerfile.",
            {"problems": [{"field": "dockerfile", "problem": "not UTF-8 text"}]},
        ) from None
    if not dockerfile_reader.read(text, options.build_args).froms:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"dockerfile {path} has no FROM instruction.",
            "Pass the path of a Dockerfile (it starts from a base image: FROM IMAGE).",
            {"problems": [{"field": "dockerfile", "problem": "no FROM instruction"}]},
        )
    context = options.context or path.parent
    if not context.exists():
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No build context directory at {context}.",
            "Pass context as an existing directory (default: the Dockerfile's directory).",
            {"field": "context", "path": str(context)},
        )
    if not context.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_A_DIRECTORY,
            f"context {context} is not a directory.",
            "Pass context as a directory (default: the Dockerfile's directory).",
            {"field": "context", "path": str(context)},
        )
    if not os.access(context, os.R_OK | os.X_OK):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"The build context {context} cannot be read by this user.",
            "Pass a context directory this user may read, or fix its mode.",
            {"problems": [{"field": "context", "problem": "not readable"}]},
        )
    return text, context


def _analyze(text: str, options: BuildOptions, context: Path) -> Any:
    return analyze(
        text,
        base_image=None,  # already in the text (see _working_text)
        instance_type=options.instance_type,
        driver_version=options.driver_version,
        build_args=options.build_args or None,
        context_dir=context,
    )


def _working_text(text: str, options: BuildOptions) -> str:
    """The Dockerfile as it will be built: base_image (if given) in the last FROM."""
    if not options.base_image:
        return text
    working, _ = rewrite_from(text, None, options.build_args, options.base_image)
    return working


def _versions(analysis: Any) -> Versions:
    resolved = getattr(analysis, "resolved", None)
    return Versions(**resolved.model_dump()) if resolved is not None else Versions()


def _client_and_tag(options: BuildOptions, context: Path) -> tuple[Any, str, str]:
    """The Docker client and the image's tag with where it came from. A tag that needs no
    daemon (explicit, latest, git-sha) is chosen before one is reached: a context outside
    git is the caller's to fix, whatever the daemon."""

    def tag_with(client: Any) -> tuple[str, str]:
        return choose_tag(
            tag=options.tag,
            strategy=options.tag_strategy,
            repository=options.repository,
            context=context,
            client=client,
            inputs=build_inputs(options.base_image, options.build_args),
        )

    semantic = not options.tag and concrete_strategy(options.tag_strategy, context) == "semantic"
    tag, source = ("", "") if semantic else tag_with(None)
    client = docker_client()
    if semantic:
        tag, source = tag_with(client)
    return client, tag, source


def build(options: BuildOptions, progress: Progress | None = None) -> BuildResult:
    """Analyze the Dockerfile; unless analyze_only, build it, and on a failure the
    analyzer can fix, fix and build again (at most max_attempts)."""
    progress = progress or NullProgress()
    text, context = _inputs(options)
    mirror = mirror_setting(options.base_mirror)  # a bad mirror is refused before any work
    working = _working_text(text, options)
    analysis = _analyze(working, options, context)
    if options.analyze_only:
        return BuildResult(
            status="analyzed",
            dockerfile=str(options.dockerfile),
            resolved=_versions(analysis),
            labels=dict(analysis.labels),
            findings=[f.model_dump() for f in analysis.findings],
        )
    client, tag, source = _client_and_tag(options, context)
    run = _Run(
        options,
        context,
        mirror,
        client,
        f"{options.repository}:{tag}",
        source,
        [f.model_dump() for f in analysis.findings],
        progress,
    )
    for number in range(1, options.max_attempts + 1):
        attempt, outcome, labels = _attempt(run, working, analysis, number)
        if outcome.ok:
            return _built(run, analysis, outcome, labels)
        stop, fixed = _after_failure(run, working, attempt, outcome, number)
        if fixed is None:
            return _failed(run, analysis, attempt, stop)
        working, analysis = fixed
    raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover


@dataclass
class _Run:
    """One build call: what every attempt shares, and the attempts so far."""

    options: BuildOptions
    context: Path
    mirror: str | None  # registry_check.mirror_setting: HOST[:PORT][/PREFIX] or none
    client: Any
    image_name: str
    tag_source: str
    findings: list[dict[str, Any]]  # the first analysis's: what the caller's file has
    progress: Progress
    attempts: list[Attempt] = field(default_factory=list)
    avoid: set[str] = field(default_factory=set)  # base images that failed their check


def _attempt(
    run: _Run, working: str, analysis: Any, number: int
) -> tuple[Attempt, _Outcome, dict[str, str]]:
    """Check the base images, then build the text as it is now; the attempt recorded
    and the labels it was built with."""
    options = run.options
    started = time.monotonic()
    sent, pulled = rewrite_from(working, run.mirror, options.build_args)
    attempt = Attempt(number=number, ok=False, base_images=[target for _, target in pulled])
    run.attempts.append(attempt)
    run.progress.report(0, None, f"attempt {number}: checking base images")
    outcome = _check_bases(run.client, pulled, run.avoid)
    attempt.base_checks = list(outcome.lines)
    # The labels of the text built now (after base_image, build_args and any fix).
    labels = dict(analysis.labels)
    if outcome.ok:
        outcome = _build(
            run.client,
            sent,
            run.context,
            run.image_name,
            options,
            number,
            run.progress,
            labels=labels,
            build_args=_label_args(working, labels, options),
        )
    attempt.duration_s = round(time.monotonic() - started, 3)
    attempt.log_tail = outcome.lines[-LOG_TAIL:]
    attempt.ok = outcome.ok
    return attempt, outcome, labels


def _built(run: _Run, analysis: Any, outcome: _Outcome, labels: dict[str, str]) -> BuildResult:
    """The built image, checked for the labels it was given (the CUDA gate reads them)."""
    inspected = run.client.api.inspect_image(run.image_name)
    built = (inspected.get("Config") or {}).get("Labels") or {}
    wrong = {k: built.get(k) for k in _LABEL_KEYS if built.get(k) != labels.get(k)}
    return BuildResult(
        status="failed" if wrong else "built",
        dockerfile=str(run.options.dockerfile),
        image_id=inspected.get("Id") or outcome.image_id,
        tags=[] if wrong else [run.image_name],
        tag_source=run.tag_source,
        size_bytes=inspected.get("Size"),
        resolved=_versions(analysis),
        labels=labels,
        findings=run.findings,
        attempts=run.attempts,
        hint=f"The built image's labels {wrong} differ from its analysis {labels}: "
        "the daemon did not apply the labels it was given, so the CUDA gate would "
        "read wrong ones; do not push this image."
        if wrong
        else None,
    )


def _after_failure(
    run: _Run, working: str, attempt: Attempt, outcome: _Outcome, number: int
) -> tuple[str, tuple[str, Any] | None]:
    """The failed attempt classified; (why it stops, None), or ("", the fixed text and
    its analysis) to build again."""
    error = classify([*outcome.lines, outcome.error or ""])
    attempt.message = outcome.error
    attempt.error_class = error.error_class if error else None
    attempt.evidence = error.evidence if error else ([outcome.error] if outcome.error else [])
    stop = _why_stop(error, run.options, number)
    if stop is not None:
        return stop, None
    fixed = _fix(working, run.options, run.context, run.avoid, attempt)
    if fixed is not None:
        return "", fixed
    stop = f"{error.fix if error else ''}; the analyzer found no edit for this Dockerfile."
    return stop.lstrip("; "), None


def _failed(run: _Run, analysis: Any, attempt: Attempt, stop: str) -> BuildResult:
    return BuildResult(
        status="failed",
        dockerfile=str(run.options.dockerfile),
        tags=[],
        tag_source=run.tag_source,
        resolved=_versions(analysis),
        findings=run.findings,
        attempts=run.attempts,
        error_class=attempt.error_class,
        hint=stop,
    )


_LABEL_KEYS = (
    cuda_tables.TORCH_LABEL,
    cuda_tables.CUDA_LABEL,
    cuda_tables.PYTHON_LABEL,
    cuda_tables.EFA_LABEL,
)


def _label_args(text: str, labels: dict[str, str], options: BuildOptions) -> dict[str, str]:
    """The caller's build args, and the version ARGs the Dockerfile's own LABELs read."""
    return {**label_build_args(text, labels, options.build_args), **options.build_args}


def _why_stop(error: BuildError | None, options: BuildOptions, number: int) -> str | None:
    """The hint when the loop stops after this failed attempt; None to try a fix."""
    if error is None:
        return "The failure matches no known signature: read the log tail and fix the Dockerfile."
    if not error.auto_fix:
        return f"{error.cause}: {error.fix}."
    if not options.auto_fix:
        return f"{error.fix} (auto_fix is off: call with auto_fix=true to let it try)."
    if number >= options.max_attempts:
        return f"{error.fix} ({number} attempts made; raise max_attempts to try more)."
    return None


def _fix(
    working: str, options: BuildOptions, context: Path, avoid: set[str], attempt: Attempt
) -> tuple[str, Any] | None:
    analysis = _analyze(working, options, context)
    result = fix(
        working, analysis, path_label=options.dockerfile.name, avoid_images=frozenset(avoid)
    )
    if result is None or result.text == working:
        return None
    written = write_fixed(options.dockerfile, result, write=options.write)
    attempt.fix_applied = list(result.changes)
    attempt.diff = result.diff
    attempt.fixed_dockerfile = str(written)
    return result.text, _analyze(result.text, options, context)


def _check_bases(client: Any, pulled: list[tuple[str, str]], avoid: set[str]) -> _Outcome:
    """Every pulled base image exists (locally, or by a registry manifest request). A
    registry that cannot tell (unreachable, no credentials) leaves it to the build."""
    lines: list[str] = []
    for original, target in pulled:
        if _local(client, target):
            lines.append(f"base image {target}: present locally")
            continue
        check = check_image(target)
        lines.append(f"base image {target}: {check.message}")
        if check.missing:
            avoid.add(original)
            return _Outcome(False, lines, error=check.message)
    return _Outcome(True, lines)


def _local(client: Any, image: str) -> bool:
    import docker.errors

    try:
        client.api.inspect_image(image)
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError:
        return False
    return True


def _build(
    client: Any,
    text: str,
    context: Path,
    image_name: str,
    options: BuildOptions,
    number: int,
    progress: Progress,
    *,
    labels: dict[str, str],
    build_args: dict[str, str],
) -> _Outcome:
    import docker.errors
    import requests
    import urllib3.exceptions

    lines: list[str] = []
    image_id = None
    error = None
    # The context tar is made here, with the text to build added under a private name:
    # the SDK's own way (a Dockerfile path outside the context) sends the `dockerfile`
    # query parameter twice, and podman reads the second (the file's text) as the path.
    from docker.utils import tar

    name = f".dockerfile.fsdp-eks.{number}"
    with tempfile.TemporaryFile() as body:  # ours: tar() closes none it is given
        tar(context, exclude=_dockerignore(context), dockerfile=(name, text), fileobj=body)
        try:
            stream = client.api.build(
                fileobj=body,
                custom_context=True,
                dockerfile=name,
                tag=image_name,
                buildargs=build_args or None,
                # Set by the daemon on the image whatever the Dockerfile's LABELs say.
                labels=labels or None,
                cache_from=options.cache_from or None,
                decode=True,
                rm=True,
                forcerm=True,
            )
            for entry in stream:
                error = error or _entry_error(entry)
                for line in _entry_lines(entry):
                    lines.append(line)
                    if step := _STEP.match(line):
                        progress.report(int(step[1]), int(step[2]), f"attempt {number}: {line}")
                    elif built := _BUILT.match(line):
                        image_id = built[1]
                if aux := entry.get("aux"):
                    image_id = aux.get("ID") or image_id
        except docker.errors.APIError as exc:  # refused before streaming (a bad Dockerfile)
            error = str(exc.explanation or exc)
        except (
            OSError,
            requests.RequestException,
            docker.errors.DockerException,
            urllib3.exceptions.HTTPError,
            http.client.HTTPException,
        ) as exc:
            # The daemon went away mid-build (a socket error, a cut stream): its own class.
            error = f"lost the Docker Engine API mid-build: {type(exc).__name__}: {exc}"[:500]
    if error:
        lines.append(error)
    return _Outcome(error is None, lines, image_id, error)


def _dockerignore(context: Path) -> list[str] | None:
    """The context's .dockerignore patterns, read as the docker SDK reads them."""
    path = context / ".dockerignore"
    if not path.is_file():
        return None
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _entry_error(entry: dict[str, Any]) -> str | None:
    if "error" in entry or "errorDetail" in entry:
        detail = entry.get("errorDetail") or {}
        return str(entry.get("error") or detail.get("message") or "build failed").strip()
    return None


def _entry_lines(entry: dict[str, Any]) -> Iterable[str]:
    for key in ("stream", "status"):
        text = entry.get(key)
        if isinstance(text, str):
            yield from (line for line in text.splitlines() if line.strip())
