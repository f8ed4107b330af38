"""The agent's memory: a directory of markdown files and a one-line-per-entry index.

An index line looks like `- [Title](file.md) — one-line hook`. Parsing, linting and searching are
pure functions over plain data (`Listing`); `load`, `survey`, `read_text` and `add_entry` are the
thin I/O around them. Loom never rewrites a memory file behind the operator's back: reads open
files with O_NOATIME where the kernel allows it, so even access times stay put, and the only
writer is `add_entry`, which the operator runs on purpose.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
import shlex
import stat
import tempfile
import unicodedata
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from loomtui.errors import LoomError
from loomtui.store.locks import FileLock
from loomtui.text import printable  # noqa: F401  (the panel and CLI say memory.printable)

# An index line longer than this is a lint problem: the index is read into the agent's context at
# every session start, so an entry is a pointer with a hook, not the fact itself.
LINE_LIMIT = 200
READ_LIMIT = 4 * 1024 * 1024  # search reads at most this much of one file
BLANK_PROBE = 4096  # a larger file is assumed to hold more than whitespace

MISSING, OUTSIDE, ORPHAN = "missing", "outside", "orphan"
DUP_FILE, DUP_TITLE, EMPTY = "duplicate-file", "duplicate-title", "empty"
LONG_LINE, UNPARSED, NO_INDEX = "long-line", "unparsed", "no-index"


@dataclass(frozen=True)
class Entry:
    line: int  # 1-based line number in the index
    title: str
    target: str  # the link destination as written
    hook: str
    raw: str


@dataclass(frozen=True)
class Unparsed:
    line: int
    raw: str
    reason: str


@dataclass(frozen=True)
class Index:
    entries: tuple[Entry, ...] = ()
    unparsed: tuple[Unparsed, ...] = ()
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileInfo:
    size: int
    blank: bool  # nothing but whitespace


@dataclass(frozen=True)
class Listing:
    """What is on disk: the index text (None when absent) and the files that matter, by relative path:
    top-level markdown files (not hidden, not the index) plus every linked target that exists."""

    index_name: str
    index_text: str | None
    files: Mapping[str, FileInfo] = field(default_factory=dict)
    # Of those, the ones that lead out of the directory through a symlink (shown, searched and edited
    # by no one: `inside`); lint says so, where it said ok.
    outside: frozenset[str] = frozenset()
    # The index itself is a link out of the directory: not read (index_text None), and lint says so.
    index_outside: bool = False


@dataclass(frozen=True)
class Problem:
    kind: str
    line: int | None
    path: str | None
    message: str

    def describe(self, index_name: str) -> str:
        where = f"{index_name}:{self.line}" if self.line is not None else (self.path or index_name)
        return f"{where}: {self.kind}: {self.message}"


@dataclass(frozen=True)
class Row:
    """One line of the console's table: an index line (`line:N`) or an orphan file (`file:PATH`)."""

    key: str
    line: int | None
    title: str
    target: str
    path: str | None  # the existing file it names, relative to the memory dir
    hook: str
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    index_name: str
    rows: tuple[Row, ...]
    problems: tuple[Problem, ...]
    entries: int


@dataclass(frozen=True)
class Hit:
    path: str
    title: str
    where: str  # "title", "hook" or "line N"
    text: str


# -- parsing ------------------------------------------------------------------------------------

_MARKER = re.compile(r"\s{0,8}(?:[-*+]|\d{1,9}[.)])\s+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_SEPARATORS = ("—", "–", "--", "-", ":", "|")


def _bracket(s: str, i: int) -> tuple[str, int] | None:
    """The text of the balanced `[...]` starting at s[i], with backslash escapes undone."""
    depth, out, j = 0, [], i
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s) and s[j + 1] in _PUNCT:
            out.append(s[j + 1])
            j += 2
            continue
        if c == "[":
            depth += 1
            if depth == 1:
                j += 1
                continue
        elif c == "]":
            depth -= 1
            if depth == 0:
                return "".join(out), j + 1
        out.append(c)
        j += 1
    return None


def _destination(s: str, i: int) -> tuple[str, int] | None:
    """The destination of the `(...)` at s[i]. Spaces are tolerated: agents write `(my notes.md)`."""
    j = i + 1
    while j < len(s) and s[j] == " ":
        j += 1
    if j < len(s) and s[j] == "<":
        end = s.find(">", j + 1)
        close = s.find(")", end + 1) if end >= 0 else -1
        if close < 0:
            return None
        return s[j + 1:end], close + 1
    depth, out = 0, []
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s) and s[j + 1] in _PUNCT:
            out.append(s[j + 1])
            j += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                dest = re.sub(r"""\s+("[^"]*"|'[^']*')\s*$""", "", "".join(out))
                return dest.strip(), j + 1
            depth -= 1
        out.append(c)
        j += 1
    return None


def parse_line(raw: str) -> tuple[str, str, str] | str | None:
    """(title, target, hook) for an entry; a reason string for a line that is not one;
    None for structure that belongs in an index (blank lines, headings, HTML comments)."""
    s = raw.rstrip("\r\n").rstrip()
    bare = s.strip()
    if not bare or bare.startswith("#") or (bare.startswith("<!--") and bare.endswith("-->")):
        return None
    m = _MARKER.match(s)
    rest = s[m.end():] if m else bare
    bold = rest.startswith("**")
    if bold:
        rest = rest[2:]
    if not rest.startswith("["):
        return "not a link entry like `- [Title](file.md) — hook`"
    got = _bracket(rest, 0)
    if got is None:
        return "unclosed [ in the title"
    title, j = got
    if j >= len(rest) or rest[j] != "(":
        return "title is not followed by (file)"
    dest = _destination(rest, j)
    if dest is None:
        return "unclosed ( in the link"
    target, k = dest
    tail = rest[k:]
    if bold and tail.startswith("**"):
        tail = tail[2:]
    if not title.strip():
        return "empty title"
    if not target or target.startswith("#"):
        return "link has no file"
    if _SCHEME.match(target):
        return "link is not a file in the memory directory"
    hook = tail.strip()
    for sep in _SEPARATORS:
        if hook.startswith(sep):
            hook = hook[len(sep):].strip()
            break
    return title.strip(), target, hook


def parse_index(text: str) -> Index:
    # A byte-order mark (an editor on Windows writes one) is not part of the first line: it made a
    # `# Memory` heading, or the first entry, an unparsed line.
    lines = tuple(text.removeprefix("\ufeff").splitlines())
    entries: list[Entry] = []
    unparsed: list[Unparsed] = []
    for n, raw in enumerate(lines, 1):
        got = parse_line(raw)
        if isinstance(got, tuple):
            entries.append(Entry(n, got[0], got[1], got[2], raw))
        elif isinstance(got, str):
            unparsed.append(Unparsed(n, raw, got))
    return Index(tuple(entries), tuple(unparsed), lines)


def candidates(target: str) -> list[str]:
    """Relative paths a link destination may mean, best first; empty when it leaves the directory.

    `a%20b.md` may be percent-encoded or literally named so, and `x.md#part` a fragment or a `#`
    in the name: the first one that exists wins."""
    raw = [target]
    if "%" in target:
        raw.append(urllib.parse.unquote(target, errors="surrogateescape"))
    raw += [r.split("#", 1)[0] for r in list(raw) if "#" in r]
    out: list[str] = []
    for r in raw:
        if not r or r.startswith("/"):
            continue
        norm = posixpath.normpath(r)
        if norm == ".." or norm.startswith("../") or norm in out or norm == ".":
            continue
        out.append(norm)
    return out


def _fold(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).casefold().split())


def _is_top_md(path: str, index_name: str) -> bool:
    return "/" not in path and path.endswith(".md") and not path.startswith(".") and path != index_name


# -- lint -------------------------------------------------------------------------------------


def analyze(listing: Listing) -> Report:
    """Every entry resolved against the files on disk, with its lint problems."""
    files = listing.files
    nfc = {unicodedata.normalize("NFC", p): p for p in files}
    problems: list[Problem] = []
    if listing.index_outside:
        problems.append(Problem(OUTSIDE, None, listing.index_name,
                                "the index leads outside the memory directory through a symlink; not read"))
    elif listing.index_text is None:
        problems.append(Problem(NO_INDEX, None, listing.index_name, "the index file does not exist"))
    index = parse_index(listing.index_text or "")
    kinds: dict[str, list[str]] = {}
    rows: list[Row] = []
    linked: dict[str, int] = {}
    seen_file: dict[str, int] = {}
    seen_title: dict[str, int] = {}

    def flag(key: str, kind: str, line: int | None, path: str | None, message: str) -> None:
        problems.append(Problem(kind, line, path, message))
        kinds.setdefault(key, []).append(kind)

    for n, raw in enumerate(index.lines, 1):
        if len(raw.rstrip("\r")) > LINE_LIMIT:
            flag(f"line:{n}", LONG_LINE, n, None, f"{len(raw.rstrip())} characters (limit {LINE_LIMIT})")
    for u in index.unparsed:
        flag(f"line:{u.line}", UNPARSED, u.line, None, f"{u.reason}: {u.raw.strip()}")
    for e in index.entries:
        key = f"line:{e.line}"
        cands = candidates(e.target)
        path = next((c for c in cands if c in files), None)
        if path is None:
            path = next((nfc[c] for c in (unicodedata.normalize("NFC", c) for c in cands) if c in nfc), None)
        if not cands:
            flag(key, OUTSIDE, e.line, None, f"{e.target!r} points outside the memory directory")
        elif path is not None and path in listing.outside:
            flag(key, OUTSIDE, e.line, path, f"{e.target!r} leads outside the memory directory through a symlink")
        elif path is None:
            flag(key, MISSING, e.line, cands[0], f"{e.target!r} does not exist")
        ident = path or (unicodedata.normalize("NFC", cands[0]) if cands else None)
        if ident is not None:
            if ident in seen_file:
                flag(key, DUP_FILE, e.line, ident, f"{ident!r} is already linked on line {seen_file[ident]}")
            else:
                seen_file[ident] = e.line
        title = _fold(e.title)
        if title in seen_title:
            flag(key, DUP_TITLE, e.line, path, f"title {e.title!r} is already used on line {seen_title[title]}")
        else:
            seen_title[title] = e.line
        if path is not None:
            linked.setdefault(path, e.line)
        rows.append(Row(key, e.line, e.title, e.target, path, e.hook))
    for u in index.unparsed:
        rows.append(Row(f"line:{u.line}", u.line, "", "", None, u.raw.strip()))
    rows.sort(key=lambda r: r.line or 0)
    for path in sorted(files):
        if path not in linked and _is_top_md(path, listing.index_name):
            rows.append(Row(f"file:{path}", None, "", path, path, ""))
            flag(f"file:{path}", ORPHAN, None, path, f"not linked from {listing.index_name}")
    by_path: dict[str, list[str]] = {}
    for r in rows:
        if r.path is not None:
            by_path.setdefault(r.path, []).append(r.key)
    for path in sorted(files):
        if files[path].blank and (path in linked or _is_top_md(path, listing.index_name)):
            problems.append(Problem(EMPTY, linked.get(path), path, f"{path!r} is empty"))
            for key in by_path.get(path, ()):
                kinds.setdefault(key, []).append(EMPTY)
    problems.sort(key=lambda p: (p.line is None, p.line or 0, p.path or "", p.kind))
    final = tuple(replace(r, kinds=tuple(dict.fromkeys(kinds.get(r.key, ())))) for r in rows)
    return Report(listing.index_name, final, tuple(problems), len(index.entries))


def linked_paths(index_text: str | None) -> set[str]:
    """Every path an index may link to, so the I/O side knows what to stat beyond the top level."""
    out: set[str] = set()
    for e in parse_index(index_text or "").entries:
        out.update(candidates(e.target))
    return out


# -- search -----------------------------------------------------------------------------------


def search(term: str, report: Report, bodies: Mapping[str, str]) -> list[Hit]:
    """Case-insensitive hits in titles, hooks and file bodies, in index order, then orphan files."""
    needle = unicodedata.normalize("NFC", term).casefold()
    if not needle:
        return []
    hits: list[Hit] = []
    done: set[str] = set()

    def has(text: str) -> bool:
        return needle in unicodedata.normalize("NFC", text).casefold()

    for r in report.rows:
        name = r.path or r.target or f"{report.index_name}:{r.line}"
        if r.title and has(r.title):
            hits.append(Hit(name, r.title, "title", r.title))
        if r.hook and has(r.hook):
            hits.append(Hit(name, r.title, "hook" if r.title else "not an entry", r.hook))
        if r.path and r.path not in done:
            done.add(r.path)
            for n, line in enumerate(bodies.get(r.path, "").splitlines(), 1):
                if has(line):
                    hits.append(Hit(r.path, r.title, f"line {n}", line.strip()))
    return hits


# -- display ----------------------------------------------------------------------------------


def slug(title: str) -> str:
    text = re.sub(r"[^\w]+", "-", unicodedata.normalize("NFC", title).lower()).strip("-_")
    while len(text.encode("utf-8", "surrogateescape")) > 100:
        text = text[:-1]
    return text.rstrip("-_") or "entry"


def index_line(title: str, target: str, hook: str) -> str:
    esc = re.sub(r"([\\\[\]])", r"\\\1", title)
    dest = f"<{target}>" if re.search(r"[\s()]", target) else target
    return f"- [{esc}]({dest}) — {hook}"


def memory_index_path(config) -> Path:
    """The index file, for `{memory_index}` in the agent's launch commands."""
    return Path(config.memory.dir) / config.memory.index


# -- I/O --------------------------------------------------------------------------------------


def _open(path: str | Path, dir_fd: int | None = None, directory: bool = False) -> int:
    # O_NONBLOCK: a FIFO planted in the directory must not hang a reader.
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
    try:
        return os.open(path, flags | getattr(os, "O_NOATIME", 0), dir_fd=dir_fd)
    except PermissionError:  # O_NOATIME needs ownership; a readable file we do not own still reads
        return os.open(path, flags, dir_fd=dir_fd)


def _read(path: str | Path, limit: int, dir_fd: int | None = None) -> bytes | None:
    """Up to `limit` bytes of a regular file; None when it is missing or not a regular file."""
    try:
        fd = _open(path, dir_fd)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, left = [], limit
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _info(rel: str, dir_fd: int) -> FileInfo | None:
    try:
        st = os.stat(rel, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    if st.st_size == 0:
        return FileInfo(0, True)
    if st.st_size > BLANK_PROBE:
        return FileInfo(st.st_size, False)
    try:
        data = _read(rel, BLANK_PROBE, dir_fd)
    except OSError:
        data = b"x"  # unreadable is not empty; the preview says what is wrong
    return FileInfo(st.st_size, data is not None and not data.strip())


def _open_dir(memory_dir: Path) -> int:
    try:
        return _open(memory_dir, directory=True)
    except FileNotFoundError:
        raise LoomError(f"memory dir {memory_dir} does not exist (memory.dir)") from None
    except NotADirectoryError:
        raise LoomError(f"memory dir {memory_dir} is not a directory (memory.dir)") from None
    except OSError as exc:
        raise LoomError(f"memory dir {memory_dir}: {exc.strerror or exc}") from None


def load(memory_dir: Path, index_name: str) -> Listing:
    dfd = _open_dir(memory_dir)
    try:
        try:
            # As `read_text`: the agent writes this directory, and an index it linked to a secret
            # must not put the secret on the screen.
            where = inside(memory_dir, index_name)
        except LoomError:
            where = None
        try:
            raw = None if where is None else _read(where, READ_LIMIT)
        except OSError as exc:
            raise LoomError(f"memory index {memory_dir / index_name}: {exc.strerror or exc}") from None
        text = None if raw is None else raw.decode("utf-8", "surrogateescape")
        files: dict[str, FileInfo] = {}
        with os.scandir(dfd) as it:
            names = [e.name for e in it if _is_top_md(e.name, index_name)]
        for name in names:
            info = _info(name, dfd)
            if info is not None:
                files[name] = info
        for rel in linked_paths(text) - files.keys():
            info = _info(rel, dfd)
            if info is not None:
                files[rel] = info
        outside = set()
        for rel in files:
            try:
                inside(memory_dir, rel)
            except LoomError:
                outside.add(rel)
        return Listing(index_name, text, files, frozenset(outside), index_outside=where is None)
    finally:
        os.close(dfd)


def survey(memory_dir: Path, index_name: str) -> Report:
    return analyze(load(memory_dir, index_name))


def read_text(memory_dir: Path, rel: str, limit: int = READ_LIMIT) -> str | None:
    """One file of the directory, as the console's preview shows it; None when it is missing or not
    a regular file, LoomError when it leads outside (`inside`): the agent writes this directory,
    and a link it made to a secret must not put the secret on the screen."""
    data = _read(inside(Path(memory_dir), rel), limit)
    return None if data is None else data.decode("utf-8", "replace")


def inside(memory_dir: Path, rel: str) -> Path:
    """Where `rel` is inside the memory dir, symlinks resolved, for `loom memory show` and `edit`
    (another host's console asks for them by name): LoomError when it is absolute, climbs out with
    `..`, or a symlink on the way leads out of the directory."""
    root = Path(os.path.realpath(memory_dir))
    norm = posixpath.normpath(rel) if rel else ""
    if not rel or rel.startswith("/") or "\x00" in rel or norm in (".", "..") or norm.startswith("../"):
        raise LoomError(f"memory: {rel!r} is not a relative path inside the memory dir {memory_dir}")
    real = Path(os.path.realpath(root / norm))
    if root not in real.parents:
        raise LoomError(f"memory: {rel!r} leads outside the memory dir {memory_dir}")
    return real


def show_text(memory_dir: Path, rel: str, limit: int) -> tuple[str, bool]:
    """The first `limit` characters of one regular file inside the memory dir, and whether there
    was more; LoomError (one line naming it) when it is outside, missing or not a regular file."""
    os.close(_open_dir(Path(memory_dir)))  # a missing memory dir says so, not "no such file"
    path = inside(Path(memory_dir), rel)
    try:
        data = _read(path, limit * 4 + 4)  # UTF-8: `limit` characters are at most 4 bytes each
    except OSError as exc:
        raise LoomError(f"memory: {path}: {exc.strerror or exc}") from None
    if data is None:
        what = "not a regular file" if os.path.lexists(path) else "no such file"
        raise LoomError(f"memory: {rel!r} in the memory dir {memory_dir}: {what}")
    text = data.decode("utf-8", "replace")
    return text[:limit], len(text) > limit


def edit_path(memory_dir: Path, rel: str) -> Path:
    """The file `loom memory edit` hands to the editor: inside the memory dir, a regular file or
    none yet (a broken link's file is created by the editor) in a folder that exists."""
    os.close(_open_dir(Path(memory_dir)))
    path = inside(Path(memory_dir), rel)
    if os.path.lexists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise LoomError(f"memory: {rel!r} is not a regular file in the memory dir {memory_dir}")
    if not path.parent.is_dir():
        raise LoomError(f"memory: {rel!r}: its folder does not exist in the memory dir {memory_dir}")
    return path


def editor_argv(environ: Mapping[str, str], path: Path) -> list[str]:
    """$VISUAL, then $EDITOR, then vi; the path is one argv element, never shell text. One that
    names no program (blank) is passed over: the argv was the memory file alone, which ran the
    file the agent wrote. ValueError for one shlex cannot split (an unclosed quote)."""
    for name in ("VISUAL", "EDITOR"):
        words = shlex.split(environ.get(name) or "")
        if words:
            return [*words, str(path)]
    return ["vi", str(path)]


def read_bodies(memory_dir: Path, paths: Iterable[str]) -> dict[str, str]:
    """The text of each file to search, leaving out what is not a regular file inside the directory
    (a symlink out is not searched, as `show` does not show it)."""
    dfd = _open_dir(memory_dir)
    try:
        out = {}
        for rel in paths:
            try:
                inside(memory_dir, rel)
            except LoomError:
                continue
            try:
                data = _read(rel, READ_LIMIT, dfd)
            except OSError:
                continue
            if data is not None:
                out[rel] = data.decode("utf-8", "replace")
        return out
    finally:
        os.close(dfd)


def _check_text(what: str, text: str) -> str:
    text = text.strip()
    if not text:
        raise LoomError(f"memory add: {what} is empty")
    if any(not c.isprintable() for c in text):
        raise LoomError(f"memory add: {what} must be one line without control characters")
    return text


def _check_file(name: str, index_name: str) -> str:
    name = unicodedata.normalize("NFC", name.strip())
    if not name.endswith(".md"):
        name += ".md"
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        raise LoomError(f"memory add: --file {name!r} must be a plain relative path inside the memory dir")
    if any(not c.isprintable() or c in "<>" for c in name) or name == index_name:
        raise LoomError(f"memory add: --file {name!r} is not a usable file name")
    return name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_index(index: Path, old: bytes | None, line: str, mode: int) -> None:
    sep = b"\r\n" if old and b"\r\n" in old else b"\n"
    data = (old or b"")
    if data and not data.endswith(b"\n"):
        data += sep
    data += line.encode("utf-8") + sep
    fd, tmp = tempfile.mkstemp(dir=index.parent, prefix=f".{index.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.rename(tmp, index)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def add_entry(memory_dir: Path, index_name: str, title: str, hook: str, file: str | None = None,
              body: str | None = None) -> tuple[Path, str]:
    try:
        return _add_entry(Path(memory_dir), index_name, title, hook, file, body)
    except OSError as exc:
        raise LoomError(f"memory add: {exc.filename or memory_dir}: {exc.strerror or exc}") from None


def _add_entry(memory_dir: Path, index_name: str, title: str, hook: str, file: str | None,
               body: str | None) -> tuple[Path, str]:
    """Create the file (never overwriting one) and append its line to the index atomically.

    Loom's own adders serialize on a lock file next to the index; a writer that does not take the
    lock (the agent's editor) is detected by the index changing under us, and we start over."""
    title, hook = _check_text("title", title), _check_text("--hook", hook)
    rel = _check_file(file if file else slug(title), index_name)
    line = index_line(title, rel, hook)
    parsed = parse_line(line)
    if not isinstance(parsed, tuple) or (rel not in candidates(parsed[1])[:1]):
        # Its own reader must read the line back as this file (`todo:x.md` reads as a link elsewhere,
        # `#b.md` as no file, `c\_d.md` as `c_d.md`): else the index points nowhere and the file is an orphan.
        raise LoomError(f"memory add: --file {rel!r} would not read back as that file in the index; "
                        "use letters, digits, '-', '_' and '/'")
    if len(line) > LINE_LIMIT:
        raise LoomError(f"memory add: the index line would be {len(line)} characters (limit {LINE_LIMIT}); "
                        "shorten the title or the hook")
    memory_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # what Loom creates is the operator's alone
    index = inside(memory_dir, index_name)  # a link it is may lead elsewhere in the dir, never out of it
    inside(memory_dir, rel)  # a folder on the way that is a link out would put the new file outside
    target = memory_dir / rel
    lock = FileLock(index.parent, f".{index.name}.lock")
    # A blocking flock queues in the kernel; polling with LOCK_NB lets a busy adder starve the other.
    # The holder does a bounded amount of local I/O and a dead holder's lock is dropped by the kernel.
    lock.acquire()
    try:
        for _ in range(10):
            stamp = _stamp(index)
            old = _read(index, 1 << 30)
            if old is None and stamp is not None:
                raise LoomError(f"memory index {index} is not a regular file")
            _refuse_duplicate(index, (old or b"").decode("utf-8", "surrogateescape"), title, rel)
            created = _create(target, body if body is not None else f"# {title}\n\n{hook}\n")
            try:
                if _stamp(index) != stamp:
                    raise _Retry
                mode = os.stat(index).st_mode & 0o7777 if stamp else os.stat(target).st_mode & 0o666
                _write_index(index, old, line, mode)
            except _Retry:
                os.unlink(created)
                continue
            except BaseException:
                os.unlink(created)
                raise
            # The line is in the index from its rename on: a failure now (or Ctrl-C) must not take its
            # file away (it did, and the index pointed at a file deleted).
            _fsync_dir(index.parent)
            return target, line
    finally:
        lock.release()
    raise LoomError(f"memory add: {index} kept changing under us; try again")


class _Retry(Exception):
    pass


def _refuse_duplicate(index: Path, text: str, title: str, rel: str) -> None:
    name = unicodedata.normalize("NFC", rel)
    for e in parse_index(text).entries:
        if _fold(e.title) == _fold(title):
            raise LoomError(f"memory add: title {title!r} is already in {index} (line {e.line})")
        if name in {unicodedata.normalize("NFC", c) for c in candidates(e.target)}:
            raise LoomError(f"memory add: {rel!r} is already linked from {index} (line {e.line})")


def _create(target: Path, body: str) -> Path:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        # 0600: a memory file may hold what the operator told the agent; an index Loom creates with
        # it takes the same mode, an existing one keeps its own.
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise LoomError(f"memory add: {target} already exists; not overwriting it") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(target.parent)
    except BaseException:
        # Not in the index yet: a file left behind would be an orphan, and the next add "already exists".
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
        raise
    return target
