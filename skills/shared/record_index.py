"""A derived index of a folder of JSON records, in SQLite (stdlib), so a list or a
filter over thousands of records reads none of them (issue 49). The JSON record stays
the source of truth for one entry; the index holds what lists sort and filter on, per
entry with the record file's fingerprint (inode, mtime, size) when its row was made.

A list first syncs: one stat per record, and a record whose fingerprint differs from
its row's (a writer that did not note it, an index made before the record, an index
new or rebuilt) is read again; rows of removed records go. So existing records migrate
on first use, nothing a writer skipped is lost, and a missing or corrupt index is made
again from the records. Writers note their record after writing it, holding the
record's lock (so a slower writer cannot note an older record over a newer one).

WAL, busy_timeout and short IMMEDIATE transactions make concurrent writers safe. The
index is never made or changed where writes are closed (skills.shared.write_gate):
`open()` answers None there, and the caller reads the records instead."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from skills.shared.write_gate import writes_closed

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 10_000
# Rows a sync writes in one transaction (a migration of thousands holds no more at once).
SYNC_BATCH = 500
Row = Mapping[str, Any]


def fingerprint(path: str | Path) -> str | None:
    """The record file as it is now (None: there is none); a write replaces the file
    (a new inode) or changes its time or size."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


class RecordIndex:
    """`<path>`: table `records(name PRIMARY KEY, fp, <columns>)`, one index per column
    in `indexed` (each a tuple of columns)."""

    def __init__(
        self,
        path: Path,
        columns: Mapping[str, str],
        indexed: Iterable[tuple[str, ...]],
        version: int = 1,
    ) -> None:
        self.path = path
        self.columns = dict(columns)
        self.indexed = list(indexed)
        self.version = version

    # opening ---------------------------------------------------------------------

    @contextmanager
    def open(self) -> Iterator[sqlite3.Connection | None]:
        """A connection to the index, made (or made again, when corrupt) as needed; None
        where writes are closed or the index cannot be made (the caller reads records)."""
        if writes_closed():
            yield None
            return
        conn = self._connect()
        if conn is None:
            yield None
            return
        with closing(conn):
            yield conn

    def _connect(self) -> sqlite3.Connection | None:
        for attempt in range(2):
            try:
                conn = sqlite3.connect(
                    self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None
                )
                try:
                    self._prepare(conn)
                except BaseException:
                    conn.close()
                    raise
                return conn
            except sqlite3.DatabaseError as exc:
                if attempt or isinstance(exc, sqlite3.OperationalError) and _busy(exc):
                    logger.info("the index %s is not usable now: %s", self.path, exc)
                    return None
                logger.info("the index %s is corrupt (%s): made again", self.path, exc)
                self._remove()
            except OSError as exc:
                logger.info("the index %s cannot be opened: %s", self.path, exc)
                return None
        return None

    def _prepare(self, conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA quick_check(1)").fetchone()  # a damaged file raises here
        if conn.execute("PRAGMA user_version").fetchone()[0] == self.version:
            return
        # A new file, or one of another shape: made again (it is derived).
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DROP TABLE IF EXISTS records")
        cols = "".join(f", {name} {kind}" for name, kind in self.columns.items())
        conn.execute(f"CREATE TABLE records (name TEXT PRIMARY KEY, fp TEXT{cols})")
        for i, cols_of in enumerate(self.indexed):
            conn.execute(f"CREATE INDEX by_{i} ON records ({', '.join(cols_of)})")
        conn.execute(f"PRAGMA user_version={self.version}")
        conn.execute("COMMIT")

    def _remove(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)

    # writing ---------------------------------------------------------------------

    def note(self, name: str, record_path: Path, values: Row) -> None:
        """The record `name`, just written (its lock held), into the index; an index
        that cannot take it now is left to the next sync."""
        try:
            with self.open() as conn:
                if conn is not None:
                    self._upsert(conn, [(name, fingerprint(record_path), values)])
        except sqlite3.Error as exc:
            logger.info("the index %s missed %s: %s", self.path, name, exc)

    def _upsert(self, conn: sqlite3.Connection, rows: list[tuple[str, str | None, Row]]) -> None:
        names = ["name", "fp", *self.columns]
        sql = (
            f"INSERT OR REPLACE INTO records ({', '.join(names)}) "
            f"VALUES ({', '.join('?' * len(names))})"
        )
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(sql, [(n, fp, *(v.get(c) for c in self.columns)) for n, fp, v in rows])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def sync(
        self,
        conn: sqlite3.Connection,
        records: Iterable[tuple[str, str | Path]],
        describe: Callable[[str], Row],
        gone: Callable[[str], bool],
        missing_is_gone: bool = False,
    ) -> int:
        """The index brought to `records` (name -> record file, each name once): a stat
        each, a read (`describe`) of those changed since their row, rows of the gone
        removed (`gone`: a row's name no longer listed; with `missing_is_gone`, a listed
        name whose record file is missing is no record either). Returns how many were
        read. One row at a time (a lookup by name), so its memory does not grow with
        the records: only the rows a count shows to be gone are looked for."""
        changed: list[tuple[str, str | None, Row]] = []
        read = present = 0
        for name, path in records:
            fp = fingerprint(path)  # before the read: a write after it shows next time
            if fp is None and missing_is_gone:
                continue
            present += 1
            row = conn.execute("SELECT fp FROM records WHERE name = ?", (name,)).fetchone()
            if row is None or row[0] != fp or fp is None:
                changed.append((name, fp, describe(name)))
            if len(changed) >= SYNC_BATCH:  # a migration's rows in bounded batches
                read += len(changed)
                self._upsert(conn, changed)
                changed.clear()
        if changed:
            read += len(changed)
            self._upsert(conn, changed)
        # Every listed name has its row now: rows past their count are of the gone.
        (rows,) = conn.execute("SELECT COUNT(*) FROM records").fetchone()
        if rows > present:
            stale = [(n,) for (n,) in conn.execute("SELECT name FROM records") if gone(n)]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("DELETE FROM records WHERE name = ?", stale)
            conn.execute("COMMIT")
        return read


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)
