"""The pump's transcript: one JSON object per line, appended; read from a byte offset.

Written by the pump only; read by the driver, the console and the Telegram bridge, which keep
their own offsets. A line cut short by a crash mid-write is skipped, not fatal, and a reader
never passes a line that has no newline yet (it is still being written). So that the next record
is never glued onto such a line (and lost with it: a pump's `started`, a turn's `in`), a writer
ends it with a newline before its first record, and a record it could write only in part (a full
disk) is cut back off again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from loomtui import clock, platform
from loomtui.appends import end_cut_line, write_all

NAME = "transcript.jsonl"
IN, OUT, ERR, PUMP = "in", "out", "err", "pump"
# What `read` gives for a line longer than MAX_LINE: a record with no data, so that no reader stays
# before it for ever (an image's base64 in a tool result can run to megabytes).
SKIPPED = "skipped"
MAX_LINE = 64 << 20


def path_in(state_dir: Path) -> Path:
    return Path(state_dir) / NAME


@dataclass(frozen=True)
class Record:
    offset: int          # where the line starts
    end: int             # where the next one starts: the offset to read from next
    ts: float
    dir: str
    data: dict[str, Any]
    # The monotonic clock and boot the record was written on (none in records written before they
    # were kept, or dated by their writer): how long ago it was, whatever the wall clock did since.
    mono: float | None = None
    boot: str | None = None

    @property
    def event(self) -> dict[str, Any]:
        """The CLI's event of an `out` record ({} for the others and for a line that was not JSON)."""
        value = self.data.get("event")
        return value if isinstance(value, dict) else {}


class Writer:
    """Appends records; one writer at a time (the pump holds its state dir's lock), so a reader never
    sees two lines interleaved."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            end_cut_line(self.path, self._fd)  # a line cut short by a writer killed mid-write: ended here
        except OSError:
            os.close(self._fd)
            raise

    def append(self, dir: str, ts: float | None = None, **data: Any) -> None:
        """A record of now on both clocks (Loom's, as the supervisor reads them: loomtui.clock), or
        of the wall time `ts` its writer gives alone."""
        head: dict[str, Any] = {"ts": ts}
        if ts is None:
            head = {"ts": clock.wall(), "mono": clock.monotonic(), "boot": _boot()}
        record = {**head, "dir": dir, **data}
        try:
            line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        except UnicodeEncodeError:
            # A lone surrogate (half an emoji, as a CLI that cut a string in JavaScript prints it)
            # has no UTF-8: the line is written in ASCII, escaped, and reads back the same.
            line = (json.dumps(record, separators=(",", ":")) + "\n").encode("ascii")
        self._write_line(line)

    def _write_line(self, line: bytes) -> None:
        """All of `line`, or none of it: a part left behind would swallow the next record."""
        done = os.write(self._fd, line)
        if done == len(line):
            return
        start = os.lseek(self._fd, 0, os.SEEK_CUR) - done  # O_APPEND: the write ended at the end
        try:
            write_all(self._fd, line[done:])
        except OSError:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass  # the newline the next Writer ends it with keeps the records after it whole
            raise

    def close(self) -> None:
        os.close(self._fd)


def read(path: Path, offset: int = 0, limit_bytes: int = 4 << 20, max_line: int = MAX_LINE) -> Iterator[Record]:
    """Complete records from `offset` on (at most about `limit_bytes` of them per call). A first line
    longer than `limit_bytes` is read whole, up to `max_line`; one longer still is stepped over, as
    one SKIPPED record, once its end is written. (Before, a line longer than a read was never passed:
    every reader stayed before it for good.)"""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read(limit_bytes)
            if len(chunk) == limit_bytes and b"\n" not in chunk:
                chunk += fh.readline(max(0, max_line - len(chunk)))
                if not chunk.endswith(b"\n") and len(chunk) >= max_line:
                    end = _line_end(fh)
                    if end is not None:
                        yield Record(offset, end, 0.0, SKIPPED, {})
                    return
    except FileNotFoundError:
        return
    pos = given = offset  # `given`: the end of the last record yielded
    for raw in chunk.splitlines(keepends=True):
        if not raw.endswith(b"\n"):
            break
        start, pos = pos, pos + len(raw)
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than this reader's stack allows
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("dir"), str):
            continue
        ts = obj.pop("ts", 0.0)
        kind = obj.pop("dir")
        mono, boot = obj.pop("mono", None), obj.pop("boot", None)
        yield Record(start, pos, _float(ts) or 0.0, kind, obj, _float(mono),
                     boot if isinstance(boot, str) and boot else None)
        given = pos
    if pos > given:
        # Whole lines that are no record (one cut short by a killed pump, ended by the next) close
        # the read: stepped over as one SKIPPED record. Readers move on by records alone, and a cut
        # line longer than a read, read whole and alone, held every reader before it for good.
        yield Record(given, pos, 0.0, SKIPPED, {})


def _line_end(fh: BinaryIO) -> int | None:
    """The offset just past the next newline from where `fh` stands, or None: none written yet."""
    while piece := fh.read(1 << 20):
        cut = piece.find(b"\n")
        if cut >= 0:
            return fh.tell() - len(piece) + cut + 1
    return None


def _boot() -> str | None:
    """The boot, where the platform reads it from a file (/proc: Linux). The portable platform asks
    psutil, which the pump, standing on the standard library, never loads: there a record keeps no
    boot and is timed on the wall clock, as every record was before they kept both clocks."""
    return clock.boot_id() if platform.current().boot_from_file else None


def _float(value: Any) -> float | None:
    """A number as a float; None for anything else, and for an int past a float's range."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def reaching_back(path: Path, windows: Iterable[int], wanted: Callable[[Record], bool]) -> int | None:
    """Where reading back from the end first meets a record `wanted`: the start (a line start) of
    the first of `windows` (bytes before the end, widening) that holds one, each looked through
    only where the one before did not reach; 0 once a window is the whole file, None when none
    holds one and the last is not. A first read starts there, not at the tail, when what it needs
    lies further back (a turn's `in` before megabytes of tool results; the last seq)."""
    looked_from: int | None = None  # the previous window's start: what lies after it holds none
    for window in windows:
        start = tail_offset(path, window)
        if start == 0 or _holds(path, start, looked_from, wanted):
            return start
        looked_from = start
    return None


def _holds(path: Path, start: int, stop: int | None, wanted: Callable[[Record], bool]) -> bool:
    """Whether a record from `start` up to `stop` (None: the end) is `wanted`."""
    offset = start
    while stop is None or offset < stop:
        records = list(read(path, offset))
        if not records:
            return False
        for record in records:
            if stop is not None and record.offset >= stop:
                return False
            if wanted(record):
                return True
        offset = records[-1].end
    return False


def tail_offset(path: Path, keep_bytes: int) -> int:
    """An offset about `keep_bytes` before the end, at a line start (0 for a short file)."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return 0
    if size <= keep_bytes:
        return 0
    with open(path, "rb") as fh:
        fh.seek(size - keep_bytes)
        fh.readline()
        return fh.tell()
