"""The pod doctor: why a PyTorchJob's pods fail, as typed findings, root cause first.

    diagnosis = diagnose(snapshot)          # offline (a saved file) or live (snapshot.py)
    diagnosis.root                          # the finding to act on, or None

A snapshot is what the Kubernetes API returns (camelCase JSON), gathered in one dict:

    {"job": <PyTorchJob>, "pods": [<Pod>], "events": [<Event>],
     "logs": {"<pod>": "<text>", "<pod>/previous": "<text>"}}

Every event, pod condition, container state and log line is a signal; a signal takes
the first row of the signature table (failure_signatures.py) that it matches. Signals
of one code on one pod make one finding. Findings are ordered so the root cause comes
first: causes before generic Python errors before symptoms (timeouts, closed
rendezvous, a lost peer: what the other ranks show when one rank failed) before
warnings; then the earliest failure first (container finishedAt/startedAt, event and
log timestamps); then the lowest node rank.

Logs are scanned by substring first (each row's keywords, newest lines first, a bounded
number of hits per keyword), and a row's regex only runs on the few lines that hold
one of its keywords, each cut to MAX_LINE characters: a 10 MB log stays interactive.
Evidence is masked with skills.shared.secrets.redact before it leaves this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skills.job_doctor import node_faults
from skills.job_doctor.failure_signatures import (
    CODES,
    SIGNATURES,
    Role,
    Signature,
    Source,
    rows_for,
)
from skills.job_doctor.log_lines import MAX_SCAN, candidate_lines, match_log
from skills.kube.pods import PREVIOUS, PodInfo, event_time, has_master, pod_info
from skills.kube.pods import api_time as _time
from skills.kube.pods import as_int as _int
from skills.kube.pods import get as _get
from skills.kube.pods import items as _list
from skills.kube.pods import text as _str
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paging import Key, cursor_after, is_after, start_after
from skills.shared.secrets import redact, secret_values

# Bounds that keep a diagnosis interactive whatever the logs hold.
MAX_LINE = 2000  # characters of a line a regex sees
MAX_EVIDENCE = 4  # lines per finding
EVIDENCE_CHARS = 400  # characters per evidence line
# Past the root cause, findings of one code and role on this many pods or more are one
# finding that counts them (63 ranks timing out after one OOM say one thing, once).
GROUP_AT = 3
ALIKE_PODS_SHOWN = 8
MAX_PER_POD_FINDINGS = 100  # per_pod: a page's findings at most (`cursor` the rest)
PER_POD_PAGE_BYTES = 30_000  # per_pod: a page's findings' JSON at most, under the 40 KB cap
MAX_CONSEQUENCES = 16  # what followed a node fault, listed under it

ROLE_ORDER: dict[str, int] = {"cause": 0, "fallback": 1, "symptom": 2, "warning": 3}
_ROW_INDEX = {id(row): i for i, row in enumerate(SIGNATURES)}
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)) ")
_PROCESS_RANK = re.compile(r"\[rank(\d+)\]|\"rank\": (\d+)|^\s*rank\s*:\s*(\d+)")


class Finding(BaseModel):
    """One failure signature seen on one pod."""

    code: str = Field(description="The failure class (failure_signatures.CODES).")
    pod: str | None = None
    rank: int | None = Field(default=None, description="The pod's node rank (Master-0 is 0).")
    replica: str | None = Field(default=None, description="Replica type and index, e.g. worker-2.")
    process_rank: int | None = Field(
        default=None, description="The global process rank the log names, if it does."
    )
    role: Role = "cause"
    evidence: list[str] = Field(default_factory=list, description="The lines that show it.")
    root_cause: str
    remediation: str
    retryable: bool
    time: str | None = Field(default=None, description="When it was first seen (RFC 3339).")
    alike: int = Field(default=0, description="How many more pods showed the same.")
    alike_pods: list[str] = Field(default_factory=list, description="Some of those pods.")
    node: str | None = Field(default=None, description="The node the pod ran on.")
    fault: Literal["node", "job"] | None = Field(
        default=None, description="Whose fault, where known: the node's hardware or the job."
    )
    consequences: list[str] = Field(
        default_factory=list, description="What followed on other pods (a node fault's)."
    )

    def one_line(self) -> str:
        where = f" on {self.pod}" if self.pod else ""
        rank = f" (node rank {self.rank})" if self.rank is not None else ""
        whose = ""
        if self.fault:
            on = f" {self.node}" if self.node else ""
            whose = f" [node{on}: the {self.fault}'s fault]"
        first = self.evidence[0] if self.evidence else ""
        seen = f": {first[:157]}..." if len(first) > 160 else f": {first}" if first else ""
        return f"{self.code}{where}{rank}{whose}{seen}"


class Diagnosis(BaseModel):
    job_name: str | None = None
    namespace: str | None = None
    job_status: str | None = Field(default=None, description="The job's latest condition.")
    pods: int = 0
    findings: list[Finding] = Field(default_factory=list, description="Root cause first.")
    summary: str = ""
    log_chars_scanned: int = 0
    logs_cut: list[str] = Field(
        default_factory=list, description="Logs longer than the scan bound (head+tail read)."
    )
    findings_cut: int = Field(default=0, description="per_pod: findings past this page.")
    gpu_notes: list[str] = Field(
        default_factory=list, description="DCGM exporters on the job's nodes not read."
    )
    next_cursor: str | None = Field(default=None, description="per_pod: the next page's cursor.")

    @property
    def root(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]


class Snapshot(BaseModel):
    """The snapshot's outer shape; the objects inside are read defensively, as the API
    may omit any field."""

    model_config = ConfigDict(extra="forbid")

    job: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    logs: dict[str, str] = Field(default_factory=dict)
    nodes: list[dict[str, Any]] = Field(
        default_factory=list, description="The nodes the pods ran on (their conditions)."
    )
    gpu_metrics: dict[str, list[str]] = Field(
        default_factory=dict, description="The DCGM exporter's trouble lines per node."
    )
    gpu_notes: list[str] = Field(
        default_factory=list, description="DCGM exporters that could not be read."
    )


def validate_snapshot(snapshot: Any, where: str = "snapshot") -> Snapshot:
    """The snapshot, or ToolFailure(SNAPSHOT_INVALID) naming what is wrong with it."""
    try:
        return Snapshot.model_validate(snapshot)
    except ValidationError as exc:
        problems = [
            {"field": ".".join(map(str, e["loc"])) or where, "problem": e["msg"]}
            for e in exc.errors()[:10]
        ]
        summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems[:3])
        raise ToolFailure(
            ErrorCode.SNAPSHOT_INVALID,
            f"The {where} is not a pod-doctor snapshot: {summary}",
            'A snapshot is {"job": {...}, "pods": [...], "events": [...], "logs": '
            '{"<pod>": "..."}}, as --save_snapshot writes it.',
            {"problems": problems},
        ) from None


# --- signals -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Signal:
    pod: str | None
    source: Source
    reason: str
    text: str
    where: str
    exit_code: int | None = None
    time: datetime | None = None
    process_rank: int | None = None


def _event_signals(
    events: list[Any], pods: dict[str, PodInfo], by_node: dict[str, list[str]]
) -> Iterable[Signal]:
    for event in events:
        kind = _str(_get(event, "involvedObject", "kind"))
        name = _str(_get(event, "involvedObject", "name"))
        if kind == "Pod":
            targets = [name]
        elif kind == "Node":
            targets = by_node.get(name, [])  # a node's trouble is its pods' trouble
        else:
            continue
        reason = _str(_get(event, "reason"))
        message = _str(_get(event, "message") or _get(event, "note"))
        where = f"event {reason}"
        if kind == "Node":  # node agents put what happened in the reason (NvidiaXID79Error)
            where = f"node {name} event"
            message = message if reason in message else f"{reason}: {message}"
        for pod in targets:
            yield Signal(pod, "event", reason, message, where, time=event_time(event))


def _node_signals(node: Any, pods: list[str]) -> Iterable[Signal]:
    """A node's conditions that report trouble (node_faults.is_problem), as signals of
    the job's pods on it; their text is "<reason>: <message>", as node events'."""
    name = _str(_get(node, "metadata", "name"))
    for condition in _list(_get(node, "status", "conditions")):
        kind, state = _str(_get(condition, "type")), _str(_get(condition, "status"))
        if not node_faults.is_problem(kind, state):
            continue
        reason, message = _str(_get(condition, "reason")), _str(_get(condition, "message"))
        text = message if reason in message else f"{reason}: {message}"
        when = _time(_get(condition, "lastTransitionTime"))
        for pod in pods:
            yield Signal(pod, "event", reason, text, f"node {name} condition {kind}", time=when)


def _gpu_metric_signals(node: str, lines: list[str], pods: list[str]) -> Iterable[Signal]:
    """The DCGM exporter's lines about a node (skills/kube/dcgm.py), as signals of the
    job's pods on it. A job-fault XID there is left out: the exporter keeps a GPU's last
    XID, naming no process, so it may be an earlier job's, and it is never the node's."""
    for line in lines:
        xid = node_faults.xid_of([line])
        if xid is not None and xid.fault == "job":
            continue
        for pod in pods:
            yield Signal(pod, "event", "DCGM", line, f"node {node} dcgm-exporter")


def _pod_signals(pod: Any, info: PodInfo) -> Iterable[Signal]:
    status = _get(pod, "status")
    for condition in _list(_get(status, "conditions")):
        kind, state = _str(_get(condition, "type")), _str(_get(condition, "status"))
        if (kind == "PodScheduled" and state == "False") or (
            kind == "DisruptionTarget" and state == "True"
        ):
            reason = _str(_get(condition, "reason"))
            yield Signal(
                info.name,
                "event",
                reason,
                _str(_get(condition, "message")),
                f"condition {kind} {reason}",
                time=_time(_get(condition, "lastTransitionTime")),
            )
    reason = _str(_get(status, "reason"))
    if reason:
        yield Signal(info.name, "event", reason, _str(_get(status, "message")), f"pod {reason}")
    for group in ("initContainerStatuses", "containerStatuses"):
        for container in _list(_get(status, group)):
            cname = _str(_get(container, "name"))
            for state_key in ("state", "lastState"):
                state = _get(container, state_key)
                waiting, done = _get(state, "waiting"), _get(state, "terminated")
                if isinstance(waiting, Mapping):
                    why = _str(waiting.get("reason"))
                    yield Signal(
                        info.name,
                        "container",
                        why,
                        _str(waiting.get("message")),
                        f"container {cname} waiting {why}",
                    )
                if isinstance(done, Mapping):
                    why = _str(done.get("reason"))
                    code = _int(done.get("exitCode"))
                    yield Signal(
                        info.name,
                        "container",
                        why,
                        _str(done.get("message")),
                        f"container {cname} terminated {why} (exit {code})",
                        exit_code=code,
                        time=_time(done.get("finishedAt")) or _time(done.get("startedAt")),
                    )


def _container_end(pod: Any, previous: bool) -> datetime | None:
    """When the log's container ended: the time its last lines were written."""
    ends = []
    for container in _list(_get(pod, "status", "containerStatuses")):
        done = _get(container, "lastState" if previous else "state", "terminated")
        ends.append(_time(_get(done, "finishedAt")))
    return min((e for e in ends if e), default=None)


@dataclass
class LogScan:
    chars: int = 0
    cut: bool = False


def _log_signals(pod: str, key: str, text: str, end: datetime | None) -> tuple[list[Signal], bool]:
    previous = key.endswith(PREVIOUS)
    where = "log (previous)" if previous else "log"
    signals = []
    lines, cut = candidate_lines(text)
    for _, line in lines:
        line = line[:MAX_LINE].rstrip("\r")
        stamp = _TIMESTAMP.match(line)
        when = end
        if stamp:
            when = _time(stamp[1]) or end
            line = line[stamp.end() :]
        row = match_log(line)
        if row is None:
            continue
        ranks = _PROCESS_RANK.search(line)
        process_rank = int(next(g for g in ranks.groups() if g)) if ranks else None
        signals.append(
            Signal(pod, "log", row.code, line.strip(), where, time=when, process_rank=process_rank)
        )
    return signals, cut


def _match(signal: Signal) -> Signature | None:
    if signal.source == "log":
        return match_log(signal.text)
    for row in rows_for(signal.source):
        if row.reasons and signal.reason not in row.reasons:
            continue
        if row.exit_codes and signal.exit_code not in row.exit_codes:
            continue
        if row.regex is not None and not row.regex.search(signal.text[:MAX_LINE]):
            continue
        if row.regex is None and not row.reasons and not row.exit_codes:
            continue
        return row
    return None


# --- findings ------------------------------------------------------------------------------


@dataclass
class _Draft:
    code: str
    pod: str | None
    role: str
    row_index: int
    time: datetime | None
    process_rank: int | None
    evidence: list[str]
    said: set[str] = field(default_factory=set)


def _evidence(signal: Signal, secrets: tuple[str, ...]) -> str:
    text = " ".join(signal.text.split())
    if signal.source == "log":
        line = f"{signal.where}: {text}"
    else:
        line = f"{signal.where}: {text}" if text else signal.where
    line = redact(line, secrets)
    return line if len(line) <= EVIDENCE_CHARS else line[: EVIDENCE_CHARS - 3] + "..."


def diagnose(
    snapshot: Mapping[str, Any] | Snapshot,
    per_pod: bool = False,
    limit: int = MAX_PER_POD_FINDINGS,
    cursor: str | None = None,
    logs: Iterable[tuple[str, str]] | None = None,
) -> Diagnosis:
    """The findings in a snapshot, root cause first (see the module's docstring); past
    the root, repeated symptoms grouped unless `per_pod` (then a page of at most `limit`
    findings and PER_POD_PAGE_BYTES after `cursor`, the rest counted, with the cursor
    that continues). `logs`: the snapshot's logs as (key, text), read one at a time (a
    file streamed: snapshot_file), instead of the snapshot's own."""
    snap = snapshot if isinstance(snapshot, Snapshot) else validate_snapshot(snapshot)
    master = has_master(snap.job, snap.pods)
    pods: dict[str, PodInfo] = {}
    raw: dict[str, Any] = {}
    for pod in snap.pods:
        info = pod_info(pod, master)
        if info.name:
            pods[info.name], raw[info.name] = info, pod
    logs = snap.logs.items() if logs is None else logs
    signals, scan, cut_logs = _signals(snap, pods, raw, iter(logs))
    drafts = _root_cause_first(_drafts(signals), pods)
    every = [_finding(d, pods.get(d.pod or "")) for d in drafts]
    key_of = {id(f): _order(d, pods) for d, f in zip(drafts, every, strict=True)}
    findings = _consequences_of_a_node_fault(every)
    cut, next_cursor, summary = 0, None, _summary(findings[:1])
    if per_pod:  # the root's line as the summary, on every page
        page, cut, last = _page([key_of[id(f)] for f in findings], findings, limit, cursor)
        findings = page
        next_cursor = cursor_after(last) if cut and last is not None else None
    else:
        findings = grouped(findings)
        summary = _summary(findings)
    return Diagnosis(
        job_name=_str(_get(snap.job, "metadata", "name")) or None,
        namespace=_str(_get(snap.job, "metadata", "namespace")) or None,
        job_status=_job_status(snap.job),
        pods=len(pods),
        findings=findings,
        summary=summary,
        log_chars_scanned=scan.chars,
        logs_cut=cut_logs,
        findings_cut=cut,
        next_cursor=next_cursor,
        gpu_notes=snap.gpu_notes,
    )


def _page(
    keys: list[Key], findings: list[Finding], limit: int, cursor: str | None
) -> tuple[list[Finding], int, Key | None]:
    """per_pod's page after `cursor` (a keyset on the root-cause-first order, so a pod
    failing between two pages neither repeats nor hides another): at most `limit`
    findings and PER_POD_PAGE_BYTES of their JSON (always one); how many are past it;
    the key of its last finding."""
    anchor = start_after(cursor, lambda _name: None, keys[0] if keys else None)
    rest = [(k, f) for k, f in zip(keys, findings, strict=True) if is_after(k, anchor)]
    shown: list[tuple[Key, Finding]] = []
    size = 0
    for key, finding in rest[: max(1, limit)]:
        size += len(finding.model_dump_json())
        if shown and size > PER_POD_PAGE_BYTES:
            break
        shown.append((key, finding))
    last = shown[-1][0] if shown else None
    return [f for _, f in shown], len(rest) - len(shown), last


def grouped(findings: list[Finding]) -> list[Finding]:
    """The root cause as it is; after it, each code and role seen on GROUP_AT pods or
    more as one finding (its earliest pod's, counting the others), in the order of its
    first member."""
    if not findings:
        return []
    members: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings[1:]:
        members.setdefault((finding.code, finding.role), []).append(finding)
    out = [findings[0]]
    for finding in findings[1:]:
        group = members[(finding.code, finding.role)]
        if len(group) < GROUP_AT:
            out.append(finding)
        elif group[0] is finding:
            others = [f.pod for f in group[1:] if f.pod]
            out.append(
                finding.model_copy(
                    update={"alike": len(group) - 1, "alike_pods": others[:ALIKE_PODS_SHOWN]}
                )
            )
    return out


def _consequences_of_a_node_fault(findings: list[Finding]) -> list[Finding]:
    """A node's fault first explains what the other ranks showed after it (timeouts, a lost
    peer, their Python errors): those are listed under it as consequences, not as findings."""
    if not findings or findings[0].fault != "node":
        return findings
    root, kept, after = findings[0], [findings[0]], []
    for finding in findings[1:]:
        if finding.role in ("symptom", "fallback"):
            rank = f" (node rank {finding.rank})" if finding.rank is not None else ""
            after.append(f"{finding.code} on {finding.pod}{rank}")
        else:
            kept.append(finding)
    root.consequences = after[:MAX_CONSEQUENCES] + (
        [f"... and {len(after) - MAX_CONSEQUENCES} more"] if len(after) > MAX_CONSEQUENCES else []
    )
    return kept


def _summary(findings: list[Finding]) -> str:
    """The root cause's line; then the largest group of what followed, counted."""
    if not findings:
        return "no known failure signature in the snapshot"
    line = findings[0].one_line()
    if findings[0].consequences:
        line += f" | then {len(findings[0].consequences)} consequence(s) on other pods"
    largest = max(findings[1:], key=lambda f: f.alike, default=None)
    if largest is not None and largest.alike:
        root = findings[0]
        where = f" on {root.pod}" if root.pod else ""
        line += f" | then {largest.code} on {largest.alike + 1} pods after the {root.code}{where}"
    return line


def _signals(
    snap: Snapshot, pods: dict[str, PodInfo], raw: dict[str, Any], logs: Iterator[tuple[str, str]]
) -> tuple[list[Signal], LogScan, list[str]]:
    """Every signal of the snapshot: events, pod statuses, log lines (with what was scanned
    and which logs were cut). `logs` is read once, one log at a time: none is kept."""
    by_node: dict[str, list[str]] = {}
    for info in pods.values():
        if info.node:
            by_node.setdefault(info.node, []).append(info.name)
    signals: list[Signal] = list(_event_signals(snap.events, pods, by_node))
    for node in snap.nodes:
        signals += _node_signals(node, by_node.get(_str(_get(node, "metadata", "name")), []))
    for node, lines in snap.gpu_metrics.items():
        signals += _gpu_metric_signals(node, lines, by_node.get(node, []))
    for name, pod in raw.items():
        signals += _pod_signals(pod, pods[name])
    scan, cut_logs = LogScan(), []
    for key, text in logs:
        previous = key.endswith(PREVIOUS)
        name = key[: -len(PREVIOUS)] if previous else key
        found, cut = _log_signals(name, key, text, _container_end(raw.get(name), previous))
        signals += found
        scan.chars += min(len(text), MAX_SCAN)
        if cut:
            cut_logs.append(key)
    return signals, scan, cut_logs


def _drafts(signals: list[Signal]) -> dict[tuple[str | None, str], _Draft]:
    """One draft finding per (pod, code): its strongest role, earliest time, evidence."""
    drafts: dict[tuple[str | None, str], _Draft] = {}
    secrets = secret_values()  # once, not per evidence line (4,096 pods: 16,000 lines)
    for signal in signals:
        row = _match(signal)
        if row is None:
            continue
        key = (signal.pod, row.code)
        draft = drafts.get(key)
        index = _ROW_INDEX[id(row)]
        if draft is None:
            draft = drafts[key] = _Draft(
                row.code, signal.pod, row.role, index, signal.time, signal.process_rank, []
            )
        if ROLE_ORDER[row.role] < ROLE_ORDER[draft.role]:
            draft.role = row.role
        draft.row_index = min(draft.row_index, index)
        if signal.time and (draft.time is None or signal.time < draft.time):
            draft.time = signal.time
        if draft.process_rank is None:
            draft.process_rank = signal.process_rank
        said = " ".join(signal.text.split())
        if said not in draft.said or not said:  # the same message from an event and a status
            draft.said.add(said)
            line = _evidence(signal, secrets)
            if line not in draft.evidence:
                draft.evidence.append(line)
    return drafts


def _root_cause_first(
    drafts: dict[tuple[str | None, str], _Draft], pods: dict[str, PodInfo]
) -> list[_Draft]:
    # A generic Python error says nothing more when the pod shows a specific failure.
    specific = {d.pod for d in drafts.values() if d.role != "fallback" and d.role != "warning"}
    kept = [d for d in drafts.values() if not (d.role == "fallback" and d.pod in specific)]
    return sorted(kept, key=lambda d: _order(d, pods))


_NEVER = datetime.max.replace(tzinfo=timezone.utc).timestamp()


def _order(d: _Draft, pods: dict[str, PodInfo]) -> Key:
    """A finding's place, root cause first: its role, a failed GPU (it explains the
    rest, whenever seen), the earliest time, the lowest node rank, the table's order; the
    pod and code make it unique (a page's cursor is this key)."""
    rank = pods[d.pod].rank if d.pod in pods else None
    return (
        ROLE_ORDER[d.role],
        int(not CODES[d.code].quarantine),
        d.time.timestamp() if d.time else _NEVER,
        rank if rank is not None else 1 << 30,
        d.row_index,
        d.pod or "",
        d.code,
    )


def _finding(draft: _Draft, info: PodInfo | None) -> Finding:
    meaning = CODES[draft.code]
    root_cause = meaning.root_cause
    xid = node_faults.xid_of(draft.evidence) if meaning.fault else None
    if xid is not None:
        root_cause = f"XID {xid.number}, {xid.meaning}: {root_cause}"
    return Finding(
        code=draft.code,
        pod=draft.pod,
        rank=info.rank if info else None,
        replica=info.replica if info else None,
        process_rank=draft.process_rank,
        role=draft.role,  # type: ignore[arg-type]
        evidence=draft.evidence[:MAX_EVIDENCE],
        root_cause=root_cause,
        remediation=meaning.remediation,
        retryable=meaning.retryable,
        time=draft.time.isoformat().replace("+00:00", "Z") if draft.time else None,
        node=info.node if info else None,
        fault=meaning.fault,
    )


def _job_status(job: Any) -> str | None:
    conditions = _list(_get(job, "status", "conditions"))
    conditions = [c for c in conditions if _get(c, "status") == "True"]
    if not conditions:
        return None
    last = conditions[-1]
    message = _str(_get(last, "message"))
    return redact(f"{_str(_get(last, 'type'))}: {message}" if message else _str(_get(last, "type")))


__all__ = ["Diagnosis", "Finding", "Snapshot", "diagnose", "pod_info", "validate_snapshot"]
