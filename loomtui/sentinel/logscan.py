"""Reading a job log incrementally, as pure functions of bytes and remembered position.

The shell stats the file and reads bytes; everything here decides where reading starts, how
bytes become lines (a partial last line is carried to the next scan), and which lines are
failures. Nothing here touches the disk, so a scan in any chunking gives the same lines.
"""

from __future__ import annotations

import re

# Private to Python, allowed in the sealed core for this alone (tests/unit/test_sealed_core.py): the
# needles are read from the tree `re` itself parses a pattern into, so they can never disagree with
# what `re` matches; another parser could. test_sentinel_match.py pins the shape read from it.
import re._constants as _c
import re._parser as _parser
from collections.abc import Callable, Iterable
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
#
# A failure line is one a pattern finds (Python's `re`, on the line's text) and no anti-pattern
# does. Searching line by line costs a regex call per line; instead each pattern yields the
# literal strings one of which every match must contain ("needles", read from the parsed
# pattern), the buffer is searched for those alone, and only the lines holding a needle are
# judged, line by line, exactly as before. A pattern with no needle (`\d+ failed`, `[Ee]rror`)
# makes every line a candidate: correct, at the old speed.

Finder = Callable[[bytes, int, int], Iterable[int]]  # buf, lo, hi -> where needles start in buf[lo:hi]


@dataclass(frozen=True)
class Needle:
    text: bytes  # UTF-8; lower case when caseless
    caseless: bool = False  # ASCII case only: see _CASE_SAFE


class Matcher:
    """Failure patterns minus anti-patterns, each compiled once; the needles of the patterns.

    `finder`, given the needles, may return a faster way to find them (the shell's, e.g.
    hyperscan); without one, bytes.find does.
    """

    def __init__(self, patterns: list[str], anti_patterns: list[str],
                 finder: Callable[[frozenset[Needle]], Finder | None] | None = None) -> None:
        self.patterns = tuple(patterns)
        self.anti_patterns = tuple(anti_patterns)
        # One regex per pattern, not one alternation: a backreference or a global flag in the
        # second pattern means what it says alone.
        self._yes = tuple(re.compile(p) for p in patterns)
        self._no = tuple(re.compile(p) for p in anti_patterns)
        self.needles = needles_of(self.patterns) if patterns else None
        self._find: Finder | None = None
        if self.needles is not None:
            found = finder(self.needles) if finder is not None else None
            self._find = found if found is not None else _finder(self.needles)

    def failure(self, text: str) -> bool:
        if not any(p.search(text) for p in self._yes):
            return False
        return not any(p.search(text) for p in self._no)

    def is_failure_line(self, raw: bytes) -> bool:
        if _is_run_mark(raw):
            return False
        return self.failure(line_text(raw))

    def failures_in(self, buf: bytes, lo: int, hi: int, base: int) -> list[Line]:
        """The failure lines among the complete lines of buf[lo:hi] (hi just past a newline)."""
        if not self._yes or hi <= lo:
            return []
        if self._find is None:
            starts: Iterable[int] = _line_starts(buf, lo, hi)
        else:
            found = set()
            for i in self._find(buf, lo, hi):
                nl = buf.rfind(b"\n", lo, i)
                found.add(lo if nl < 0 else nl + 1)
            starts = sorted(found)
        out = []
        for start in starts:
            end = buf.find(b"\n", start, hi)
            raw = buf[start:min(end, start + MAX_LINE)]
            if self.is_failure_line(raw):
                out.append(Line(base + start, raw, end - start > MAX_LINE))
        return out


def _line_starts(buf: bytes, lo: int, hi: int) -> Iterable[int]:
    start = lo
    while start < hi:
        yield start
        start = buf.find(b"\n", start, hi) + 1


def _finder(needles: frozenset[Needle]) -> Finder:
    plain = [n.text for n in needles if not n.caseless]
    folded = [n.text for n in needles if n.caseless]

    def find(buf: bytes, lo: int, hi: int) -> list[int]:
        hits: list[int] = []
        for hay, texts in ((buf, plain), (buf.lower() if folded else b"", folded)):
            for text in texts:
                i = hay.find(text, lo, hi)
                while i >= 0:
                    hits.append(i)
                    # One hit per line is enough: the line is judged whole.
                    i = hay.find(text, hay.find(b"\n", i, hi) + 1, hi)
        return hits

    return find


def scan(carry: Carry, chunk: bytes, base: int, matcher: Matcher) -> tuple[list[Line], int, Carry]:
    """The failure lines completed in carry+chunk (chunk read at file offset `base`), how many
    lines were completed, and the new carry: what split() and is_failure_line on every line give."""
    first = chunk.find(b"\n")
    if first < 0:
        return [], 0, split(carry, chunk, base)[1]
    failures: list[Line] = []
    # The line the carry was waiting for ends here; it may be long, cut or to be dropped.
    completed, _ = split(carry, chunk[:first + 1], base)
    failures += [line for line in completed if matcher.is_failure_line(line.raw)]
    lo, hi = first + 1, chunk.rfind(b"\n") + 1
    count = len(completed) + chunk.count(b"\n", lo, hi)
    failures += matcher.failures_in(chunk, lo, hi, base)
    rest = chunk[hi:]
    return failures, count, Carry(rest[:MAX_LINE], len(rest), False)


def _is_run_mark(raw: bytes) -> bool:
    # run-job's own lines are "<timestamp> [loom run-job] ..."; the timestamp has no spaces.
    sp = raw.find(b" ")
    return sp > 0 and raw.startswith(RUN_MARK, sp + 1)


def matcher_for(job_patterns: list[str] | None, job_anti: list[str] | None,
                patterns: list[str], anti_patterns: list[str],
                finder: Callable[[frozenset[Needle]], Finder | None] | None = None) -> Matcher:
    """A job's own lists, where it has them, replace the global ones."""
    return Matcher(patterns if job_patterns is None else job_patterns,
                   anti_patterns if job_anti is None else job_anti, finder)


# -- needles: literals every match contains ----------------------------------------------

# Under IGNORECASE Python's `re` lets i, k and s match non-ASCII letters too (U+0130, U+0131,
# U+212A, U+017F); every other ASCII character matches only its ASCII cases, so an ASCII-caseless
# search finds all it can match.
_CASE_SAFE = frozenset("abcdefghjlmnopqrtuvwxyz0123456789" + "".join(
    chr(c) for c in range(32, 127) if not chr(c).isalnum()))
_REPEATS = (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", _c.MAX_REPEAT))
_ATOMIC = getattr(_c, "ATOMIC_GROUP", None)


def needles_of(patterns: tuple[str, ...]) -> frozenset[Needle] | None:
    """Literals such that a line any pattern matches contains one of them; None if a pattern has none."""
    out: set[Needle] = set()
    for pattern in patterns:
        found = pattern_needles(pattern)
        if found is None:
            return None
        out |= found
    return frozenset(out)


def pattern_needles(pattern: str) -> frozenset[Needle] | None:
    try:
        tree = _parser.parse(pattern)
    except (re.error, RecursionError):
        return None
    try:
        return _sequence(list(tree), bool(tree.state.flags & _c.SRE_FLAG_IGNORECASE))
    except (TypeError, ValueError, AttributeError):
        # The private parser's tree changed shape in this Python: no needle, every line judged
        # (correct, at the old speed). test_sentinel_match.py's shape test says what moved.
        return None


def _usable(ch: str, caseless: bool) -> bool:
    # A line's text never holds a newline, and U+FFFD or a surrogate may stand for bytes that are not it.
    if ch == "\n" or ch == "\ufffd" or "\ud800" <= ch <= "\udfff":
        return False
    return ch.lower() in _CASE_SAFE if caseless else True


def _sequence(items: list, caseless: bool) -> frozenset[Needle] | None:
    """The best needle set among the parts every match of this sequence goes through."""
    best: frozenset[Needle] | None = None
    run: list[str] = []

    def close() -> None:
        nonlocal best
        if run:
            text = "".join(run)
            best = _better(best, frozenset({Needle(text.encode("utf-8"), caseless)}))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL and _usable(chr(av), caseless):
            run.append(chr(av).lower() if caseless else chr(av))
            continue
        close()
        if op is _c.SUBPATTERN:
            _group, add, drop, sub = av
            inner = (caseless or bool(add & _c.SRE_FLAG_IGNORECASE)) and not drop & _c.SRE_FLAG_IGNORECASE
            best = _better(best, _sequence(list(sub), inner))
        elif op is _ATOMIC:
            best = _better(best, _sequence(list(av), caseless))
        elif op in _REPEATS:
            least, _most, sub = av
            if least >= 1:
                best = _better(best, _sequence(list(sub), caseless))
        elif op is _c.IN and av and all(o is _c.LITERAL and _usable(chr(v), caseless) for o, v in av):
            # `a|b` and `[ab]` parse to a class of literals: each is a needle.
            chars = {chr(v).lower() if caseless else chr(v) for _o, v in av}
            best = _better(best, frozenset(Needle(ch.encode("utf-8"), caseless) for ch in chars))
        elif op is _c.BRANCH:
            alternatives = [_sequence(list(alt), caseless) for alt in av[1]]
            found = [a for a in alternatives if a is not None]
            if len(found) == len(alternatives):
                best = _better(best, frozenset[Needle]().union(*found))
        # Anything else (a class, any character, an assertion, a group reference, a conditional)
        # names no literal: it only ends the run of literals before it.
    close()
    return best


def _better(a: frozenset[Needle] | None, b: frozenset[Needle] | None) -> frozenset[Needle] | None:
    """The set whose shortest needle is longest (fewer false hits), then the smaller set."""
    if a is None:
        return b
    if b is None:
        return a

    def score(s: frozenset[Needle]) -> tuple[int, int]:
        return min(len(n.text) for n in s), -len(s)

    return b if score(b) > score(a) else a
