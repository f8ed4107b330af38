"""Reading a job log incrementally, as pure functions of bytes and remembered position.

The shell stats the file and reads bytes; everything here decides where reading starts, how
bytes become lines (a partial last line is carried to the next scan), and which lines are
failures. Nothing here touches the disk, so a scan in any chunking gives the same lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_LINE = 4096  # bytes of a line kept for matching and display; the rest is skipped, not split
HEAD_BYTES = 256  # the file's first bytes, remembered to notice a file replaced in place
FIRST_LOOK = 64 * 1024  # a log seen for the first time is read from at most this far back

# Lines that `loom run-job` writes about a run (start, exit) are not output of the job.
RUN_MARK = b"[loom run-job] "


@dataclass(frozen=True)
class Carry:
    """The partial line at the end of what was read: its first MAX_LINE bytes and full length.

    `discard` drops the first line completed (reading began mid-line, at a first look).
    """

    data: bytes = b""
    length: int = 0
    discard: bool = False


@dataclass(frozen=True)
class Line:
    offset: int  # file offset of the line's first byte
    raw: bytes  # at most MAX_LINE bytes, without the newline
    cut: bool = False

    @property
    def text(self) -> str:
        return line_text(self.raw)


def line_text(raw: bytes) -> str:
    # Invalid UTF-8 must never stop a scan; a replacement character marks where it was.
    return raw[:MAX_LINE].decode("utf-8", "replace").rstrip("\r")


def split(carry: Carry, chunk: bytes, base: int) -> tuple[list[Line], Carry]:
    """Complete lines in carry+chunk (chunk read at file offset `base`), and the new carry."""
    lines: list[Line] = []
    start = base - carry.length  # offset of the pending line
    head, length, discard = carry.data, carry.length, carry.discard
    pos = 0
    while True:
        nl = chunk.find(b"\n", pos)
        if nl < 0:
            break
        piece = chunk[pos:nl]
        total = length + len(piece)
        if discard:
            discard = False
        else:
            raw = (head + piece[: max(0, MAX_LINE - len(head))]) if len(head) < MAX_LINE else head
            lines.append(Line(start, raw, total > MAX_LINE))
        start = base + nl + 1
        head, length = b"", 0
        pos = nl + 1
    rest = chunk[pos:]
    if len(head) < MAX_LINE:
        head = head + rest[: MAX_LINE - len(head)]
    return lines, Carry(head, length + len(rest), discard)


def flush(carry: Carry, end: int) -> Line | None:
    """The partial line as a final line, when its file ends for good (rotated or truncated)."""
    if carry.length == 0 or carry.discard:
        return None
    return Line(end - carry.length, carry.data, carry.length > MAX_LINE)


# -- where to start -----------------------------------------------------------------------


@dataclass(frozen=True)
class Position:
    """What the store remembers per job between scans."""

    path: str
    dev: int | None = None
    inode: int | None = None
    offset: int = 0  # bytes consumed, the carry included
    carry: Carry = field(default_factory=Carry)
    head: bytes = b""
    mtime_ns: int = 0
    prev_inode: int | None = None  # the file finished at the last rotation: never a copy to read again
    prev_head: bytes | None = None  # its first bytes then; None: remembered before they were (inode alone)


@dataclass(frozen=True)
class FileFacts:
    dev: int
    inode: int
    size: int
    head: bytes  # the first HEAD_BYTES bytes (fewer if the file is shorter)
    mtime_ns: int = 0


CONTINUE, FIRST, NEW, TRUNCATED, REPLACED, ROTATED, ABSENT = (
    "continue", "first", "new", "truncated", "replaced", "rotated", "absent")


@dataclass(frozen=True)
class Plan:
    kind: str
    start: int  # where to read the current file from
    finish_old: bool = False  # read what is left of the previous file first, then end its carry
    # A copy-and-truncate may have moved lines never read to a copy beside the log.
    look_for_copy: bool = False


def plan(pos: Position | None, path: str, facts: FileFacts | None) -> Plan:
    if facts is None:
        return Plan(ABSENT, pos.offset if pos else 0)
    if pos is None or pos.path != path:
        # A log watched for the first time may hold years of history: look at its recent end only.
        return Plan(FIRST, max(0, facts.size - FIRST_LOOK))
    if pos.inode is None:
        return Plan(NEW, 0)
    if (pos.dev, pos.inode) != (facts.dev, facts.inode):
        return Plan(ROTATED, 0, finish_old=True)
    if facts.size < pos.offset:
        return Plan(TRUNCATED, 0, finish_old=True)
    if not same_head(pos.head, facts.head):
        # Same inode, other content (rewritten with `>` or deleted and recreated): start over.
        return Plan(REPLACED, 0, finish_old=True)
    # Empty at the last look and written since: the first lines may already sit in a copy.
    return Plan(CONTINUE, pos.offset, look_for_copy=not pos.head and facts.mtime_ns != pos.mtime_ns)


def same_head(remembered: bytes, current: bytes) -> bool:
    n = min(len(remembered), len(current))
    return remembered[:n] == current[:n] and len(current) >= len(remembered)


def is_copy(pos: Position, candidate: FileFacts, current: FileFacts | None, *, quiet: bool = False) -> bool:
    """Whether a file beside the log is a copy of it taken since the last look (copy-and-truncate).

    It begins as the log did, holds more than was read and was written since the last look.
    """
    if not same_head(pos.head, candidate.head) or candidate.size < pos.offset or not (pos.head or quiet):
        return False
    if candidate.mtime_ns < pos.mtime_ns or (current is not None and candidate.inode == current.inode):
        return False
    if quiet:
        # Nothing was read (no head to tell files apart): not the file left by the last rotation,
        # which its writer may still append to, and not a file that begins as the log does now.
        if is_previous(pos, candidate) or candidate.size == 0:
            return False
        n = min(len(current.head), len(candidate.head)) if current is not None else 0
        if n and current is not None and current.head[:n] == candidate.head[:n]:
            return False
    return True


def is_previous(pos: Position, candidate: FileFacts) -> bool:
    """Whether a file is the one finished at the last rotation: its inode, still beginning as it did.

    A freed inode number goes to the next file created, and `cp` writes into an existing file: the
    number with other first bytes is another file. One that was empty then held nothing we read.
    """
    if candidate.inode != pos.prev_inode:
        return False
    return pos.prev_head is None or (pos.prev_head != b"" and same_head(pos.prev_head, candidate.head))


def first_carry(start: int) -> Carry:
    return Carry(discard=start > 0)


# -- which lines are failures ------------------------------------------------------------


class Matcher:
    """Failure patterns minus anti-patterns, each side compiled once into one alternation."""

    def __init__(self, patterns: list[str], anti_patterns: list[str]) -> None:
        self.patterns = tuple(patterns)
        self.anti_patterns = tuple(anti_patterns)
        self._yes = _union(patterns)
        self._no = _union(anti_patterns)

    def failure(self, text: str) -> bool:
        if self._yes is None or not self._yes.search(text):
            return False
        return self._no is None or not self._no.search(text)

    def is_failure_line(self, raw: bytes) -> bool:
        if _is_run_mark(raw):
            return False
        return self.failure(line_text(raw))


def _union(patterns: list[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns))


def _is_run_mark(raw: bytes) -> bool:
    # run-job's own lines are "<timestamp> [loom run-job] ..."; the timestamp has no spaces.
    sp = raw.find(b" ")
    return sp > 0 and raw.startswith(RUN_MARK, sp + 1)


def matcher_for(job_patterns: list[str] | None, job_anti: list[str] | None,
                patterns: list[str], anti_patterns: list[str]) -> Matcher:
    """A job's own lists, where it has them, replace the global ones."""
    return Matcher(patterns if job_patterns is None else job_patterns,
                   anti_patterns if job_anti is None else job_anti)
