"""Reading what is new in one job log: the file side of the sentinel scan.

Cost is one open, one fstat and one small read of the head per job, plus the new bytes.
After a rotation or a copy-and-truncate the previous file is finished from the remembered
offset when it can still be found beside the log (same inode, or same head and long enough),
so lines written just before the rotation are not lost, and no line is read twice.
"""

from __future__ import annotations

import errno
import os
import stat
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from loomtui.sentinel import logscan
from loomtui.sentinel.logscan import Carry, FileFacts, Line, Position
from loomtui.sentinel.queue_rules import LINE, Failure
from loomtui.sentinel.signature import normalize
from loomtui.store import scan_offsets

CHUNK = 1 << 20
MAX_SIGNATURES = 20  # distinct failure signatures per job per scan; the rest fold into one item
MAX_SAMPLE = 500
OVERFLOW = "(more distinct failure lines than one scan lists: read the log)"


@dataclass
class ScanResult:
    position: Position
    plan: str
    failures: dict[tuple[str, str], Failure] = field(default_factory=dict)
    bytes_read: int = 0
    lines: int = 0
    failure_lines: int = 0
    finished_old: str | None = None
    finished_inode: int | None = None  # the previous file read to its end: never to be read again
    finished_head: bytes | None = None  # its first bytes, which tell it from a later file given its inode number


def open_regular(path: str) -> int:
    """A descriptor on the regular file at `path`; OSError for anything else. Without O_NONBLOCK a
    named pipe in a log's place blocked the open until someone wrote to it: the sentinel hung holding
    its lock, and no job was scanned, nudged or escalated again."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        raise OSError(errno.EINVAL, "not a regular file", path)
    return fd


def scan_log(job_name: str, path: str, pos: Position | None, matcher: logscan.Matcher) -> ScanResult:
    """Read the log's new lines; OSError other than a missing file is the caller's to report."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        fd = None
    if fd is None:
        if pos is None or pos.path != path:
            return ScanResult(Position(path), logscan.ABSENT)
        result = ScanResult(Position(path), logscan.ABSENT)
        if pos.inode is not None:
            # Rotated away and not recreated yet: finish the old file now; the next one is read from 0.
            _finish_previous(path, pos, None, matcher, _collector(job_name, result), result)
        if result.finished_inode is None and pos.inode is not None:
            result.finished_inode, result.finished_head = pos.inode, pos.head
        prev_inode, prev_head = _previous(result, pos)
        result.position = Position(path, prev_inode=prev_inode, prev_head=prev_head)
        return result
    try:
        facts = _facts(fd)
        plan = logscan.plan(pos, path, facts)
        result = ScanResult(Position(path), plan.kind)
        sink = _collector(job_name, result)
        start, carry = plan.start, logscan.first_carry(plan.start)
        if plan.finish_old and pos is not None:
            _finish_previous(path, pos, facts, matcher, sink, result)
            if plan.kind == logscan.ROTATED and result.finished_inode is None:
                result.finished_inode, result.finished_head = pos.inode, pos.head
        elif plan.kind == logscan.CONTINUE and pos is not None:
            carry = pos.carry
            if plan.look_for_copy and _finish_previous(path, pos, facts, matcher, sink, result, quiet=True):
                start, carry = 0, Carry()  # the log was truncated after the copy: all it holds is new
        prev_inode, prev_head = _previous(result, pos)
        end, carry, count = read_lines(fd, start, carry, facts.size, matcher, lambda line: sink(line, facts))
        result.bytes_read += end - start
        result.lines += count
        result.position = Position(path, facts.dev, facts.inode, end, carry, facts.head, facts.mtime_ns, prev_inode,
                                   prev_head)
        return result
    finally:
        os.close(fd)


def _previous(result: ScanResult, pos: Position | None) -> tuple[int | None, bytes | None]:
    """The inode and first bytes of the file finished last: the one just finished, else the one remembered."""
    if result.finished_inode is not None:
        return result.finished_inode, result.finished_head
    return (pos.prev_inode, pos.prev_head) if pos is not None else (None, None)


def read_lines(fd: int, start: int, carry: Carry, limit: int, matcher: logscan.Matcher,
               on_failure: Callable[[Line], None]) -> tuple[int, Carry, int]:
    """Failure lines from `start` to `limit` (the size at fstat: what a writer adds meanwhile
    waits for the next scan); returns where reading stopped, the carry and how many lines ended."""
    offset, count = start, 0
    while offset < limit:
        chunk = os.pread(fd, min(CHUNK, limit - offset), offset)
        if not chunk:
            break
        failures, n, carry = logscan.scan(carry, chunk, offset, matcher)
        count += n
        for line in failures:
            on_failure(line)
        offset += len(chunk)
    return offset, carry, count


def _facts(fd: int) -> FileFacts:
    st = os.fstat(fd)
    return FileFacts(st.st_dev, st.st_ino, st.st_size, os.pread(fd, logscan.HEAD_BYTES, 0), st.st_mtime_ns)


def _collector(job: str, result: ScanResult) -> Callable[[Line, FileFacts], None]:
    def sink(line: Line, facts: FileFacts) -> None:
        """One failure line (the caller has judged it)."""
        result.failure_lines += 1
        text = line.text
        signature = normalize(text)
        key = (LINE, signature)
        if key not in result.failures and len(result.failures) >= MAX_SIGNATURES:
            key = (LINE, OVERFLOW)
            signature = OVERFLOW
        where = (facts.dev, facts.inode, line.offset)
        seen = result.failures.get(key)
        if seen is None:
            result.failures[key] = Failure(job, LINE, signature, text[:MAX_SAMPLE], 1, position=where)
        else:
            result.failures[key] = Failure(job, LINE, signature, seen.sample, seen.count + 1, position=where)

    return sink


def _finish_previous(path: str, pos: Position, current: FileFacts | None, matcher: logscan.Matcher,
                     sink: Callable[[Line, FileFacts], None],
                     result: ScanResult, *, quiet: bool = False) -> bool:
    """Read the rest of the file we were reading before it was rotated, copied or truncated.

    Quietly (the log shows no sign of it), only a copy found beside it counts: then nothing else
    happens when there is none.
    """
    found = _find_previous(path, pos, current, quiet)
    if found is None and quiet:
        return False
    end, carry = pos.offset, pos.carry
    last = FileFacts(pos.dev or 0, pos.inode or 0, pos.offset, pos.head)
    if found is not None:
        name, fd = found
        try:
            last = _facts(fd)
            end, carry, count = read_lines(fd, pos.offset, pos.carry, last.size, matcher, lambda line: sink(line, last))
            result.bytes_read += end - pos.offset
            result.lines += count
            result.finished_old, result.finished_inode, result.finished_head = name, last.inode, last.head
        finally:
            os.close(fd)
    # That file will not grow any more for us: its unterminated last line is a line.
    tail = logscan.flush(carry, end)
    if tail is not None:
        result.lines += 1
        if matcher.is_failure_line(tail.raw):
            sink(tail, last)
    return True


def _find_previous(path: str, pos: Position, current: FileFacts | None, quiet: bool) -> tuple[str, int] | None:
    """The file we were reading (same inode), else a copy of it (see logscan.is_copy), opened."""
    directory, base = os.path.split(path)
    try:
        names = sorted(e.name for e in os.scandir(directory or ".") if e.name != base and e.name.startswith(base))
    except OSError:
        return None
    copy: tuple[str, int] | None = None
    for name in names:
        full = os.path.join(directory, name)
        try:
            fd = open_regular(full)
        except OSError:
            continue
        try:
            facts = _facts(fd)
        except OSError:
            os.close(fd)
            continue
        same = (facts.dev, facts.inode) == (pos.dev, pos.inode)
        if same and not quiet and (current is None or (current.dev, current.inode) != (pos.dev, pos.inode)):
            if copy is not None:
                os.close(copy[1])
            return full, fd
        if copy is None and not same and logscan.is_copy(pos, facts, current, quiet=quiet):
            copy = (full, fd)
        else:
            os.close(fd)
    return copy


# -- remembered positions ----------------------------------------------------------------


@dataclass(frozen=True)
class Watch:
    position: Position | None
    watch_since: float | None
    missed_mark: float | None
    renamed_from: str | None = None  # the job's name before a rename (its log the same)


NO_WATCH = Watch(None, None, None)


def load_watch(db: sqlite3.Connection, job: str) -> Watch:
    row = scan_offsets.get_in(db, job)
    return NO_WATCH if row is None else _watch(row)


def load_watches(db: sqlite3.Connection) -> dict[str, Watch]:
    return {row["job"]: _watch(row) for row in scan_offsets.every_in(db)}


def _watch(row: sqlite3.Row) -> Watch:
    carry = Carry(bytes(row["carry"]), row["carry_len"], bool(row["carry_skip"]))
    pos = Position(row["path"], row["dev"], row["inode"], row["offset"], carry, bytes(row["head"]),
                   row["mtime_ns"], row["prev_inode"], None if row["prev_head"] is None else bytes(row["prev_head"]))
    return Watch(pos, row["watch_since"], row["missed_mark"], row["renamed_from"])


def save_watch(db: sqlite3.Connection, job: str, pos: Position, watch_since: float, missed_mark: float | None,
               now: float) -> None:
    scan_offsets.save_in(db, job, path=pos.path, dev=pos.dev, inode=pos.inode, offset=pos.offset,
                         carry=pos.carry.data, carry_len=pos.carry.length, carry_skip=pos.carry.discard,
                         head=pos.head, mtime_ns=pos.mtime_ns, prev_inode=pos.prev_inode, prev_head=pos.prev_head,
                         watch_since=watch_since, missed_mark=missed_mark, updated=now)
