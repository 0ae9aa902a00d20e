"""The one-function helpers of skills/shared: atomic writes, polling, the confirm gate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import SymlinkDestination, atomic_write_bytes, atomic_write_text
from skills.shared.waiting import poll_until

# --- files -------------------------------------------------------------------------------


def test_atomic_write_replaces_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_text("old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["record.json"]
    assert target.stat().st_mode & 0o777 == 0o600  # mkstemp's mode unless told


def test_atomic_write_sets_mode(tmp_path: Path) -> None:
    target = atomic_write_bytes(tmp_path / "a.bin", b"\x00\x01", mode=0o644)
    assert target.read_bytes() == b"\x00\x01"
    assert target.stat().st_mode & 0o777 == 0o644


def test_atomic_write_refuses_a_symlink_destination(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text("keep")
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(SymlinkDestination) as caught:
        atomic_write_text(link, "evil")
    assert caught.value.code == ErrorCode.PATH_NOT_ALLOWED.value
    assert real.read_text() == "keep" and link.is_symlink()
    # a dangling link is refused too (nothing may be created where it points)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(SymlinkDestination):
        atomic_write_text(dangling, "x")
    assert not (tmp_path / "nowhere").exists()


def test_atomic_write_failure_keeps_old_content_and_removes_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f"]


# --- waiting -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_poll_until_returns_when_done() -> None:
    clock = FakeClock()
    values = iter([1, 2, 3, 4])
    got = poll_until(lambda: next(values), lambda v: v == 3, 60, 5, clock=clock, sleep=clock.sleep)
    assert got == 3 and clock.sleeps == [5, 5]


def test_poll_until_stops_at_the_deadline_without_oversleeping() -> None:
    clock = FakeClock()
    calls = []
    got = poll_until(
        lambda: calls.append(clock.now) or len(calls),
        lambda v: False,
        12,
        5,
        clock=clock,
        sleep=clock.sleep,
    )
    assert clock.sleeps == [5, 5, 2]  # the last sleep ends at the deadline
    assert got == 4 and calls[-1] == 112  # polled once more at the deadline


def test_poll_until_zero_timeout_polls_once() -> None:
    clock = FakeClock()
    got = poll_until(lambda: "x", lambda v: False, 0, 5, clock=clock, sleep=clock.sleep)
    assert got == "x" and clock.sleeps == []


def test_poll_until_without_timeout_waits_until_done() -> None:
    clock = FakeClock()
    values = iter(range(100))
    got = poll_until(
        lambda: next(values), lambda v: v == 50, None, 1, clock=clock, sleep=clock.sleep
    )
    assert got == 50 and len(clock.sleeps) == 50


# --- confirm -----------------------------------------------------------------------------


def test_require_confirm_passes_when_confirmed() -> None:
    require_confirm(True, "would delete everything")


def test_require_confirm_raises_a_typed_failure_with_the_plan() -> None:
    with pytest.raises(ToolFailure) as caught:
        require_confirm(False, "Scaling ng to zero stops 2 nodes.", "to scale to zero", {"a": 1})
    failure = caught.value
    assert failure.code == "confirmation_required" and failure.exit_status == 2
    assert failure.message == "Scaling ng to zero stops 2 nodes."
    assert failure.hint == "Call again with confirm=true (CLI: --confirm) to scale to zero."
    assert failure.details == {"a": 1}
