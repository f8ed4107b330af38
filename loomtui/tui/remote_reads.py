"""Another host's answers to the console's reads, made typed records: its `loom queue --json`, `loom
jobs --json`, `loom canary --history N --json` and `loom pane --json` (tui/remote_source.py asks),
and its `loom memory --json`, `memory show --json` and `memory search --json` (tui/memory_source.py). The output is
untrusted JSON: parsed with hosts.view.loads (json.loads, a nesting too deep an error too), bounded, and every field checked against the type the
local record has (a field of the wrong type is its default where it has one, else the record is
refused), every string made printable and cut to a length. Nothing here runs anything.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from loomtui.canary.runs import Probe
from loomtui.report.pane import STATES
from loomtui.hosts.view import finite_number, loads
from loomtui.memory.index import Hit, Problem, Report, Row
from loomtui.report.fleet import JobRow
from loomtui.sentinel.queue_rules import Item
from loomtui.text import printable
from loomtui.tui.snapshot import PaneView

MAX_ROWS = 1000     # items, jobs or probes read from one answer, whatever the host sends
MAX_TEXT = 2000     # a log line, a note: the local panels show no more
SHORT_TEXT = 200    # a name, a state, a source
LONG_FIELDS = {"sample", "note", "why", "log", "signature", "hook", "message", "text"}
# Every number these records hold is a time (seconds since the epoch, either clock) or a duration:
# beyond this (the year 5138) it is no time Loom wrote, and a datetime of it would raise.
MAX_SECONDS = 1e11
MAX_PANE = 512 * 1024  # characters of a pane's text kept (its newest), escapes and all
PANE_LINES = 200       # the scrollback asked for: a screen or two of history, every few seconds

R = TypeVar("R")


def queue_words(agent: str, witnessed: int = 10) -> list[str]:
    return ["queue", "--json", "--agent", agent, "--witnessed", str(witnessed)]


def jobs_words(agent: str) -> list[str]:
    return ["jobs", "--json", "--agent", agent]


def canary_words(agent: str, limit: int = 100) -> list[str]:
    return ["canary", "--history", str(limit), "--json", "--agent", agent]


def pane_words(agent: str, lines: int = PANE_LINES) -> list[str]:
    return ["pane", "--json", "--lines", str(lines), "--agent", agent]


def _value(kind: str, value: Any, name: str) -> Any:
    """`value` as a field of `kind` ("int", "float", "str", "bool"); ValueError when it is not one."""
    if kind == "bool":
        if isinstance(value, bool):
            return value
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 63:
            return value
    elif kind == "float":
        number = finite_number(value)
        if number is not None and abs(number) <= MAX_SECONDS:
            return number
    elif kind == "str":
        if isinstance(value, str):
            return printable(value[:MAX_TEXT if name in LONG_FIELDS else SHORT_TEXT])
    raise ValueError(f"{name} is not {kind}")


def record(cls: type[R], doc: Any, **preset: Any) -> R:
    """A `cls` (a dataclass of plain fields) from one untrusted JSON object. A field missing or of
    the wrong type takes its default (None where it may be None); a field without a default must
    be there and right, else ValueError."""
    if not isinstance(doc, dict):
        raise ValueError(f"a {cls.__name__} that is not an object")
    values: dict[str, Any] = dict(preset)
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.name in values:
            continue
        spec = str(field.type)
        kinds = [k.strip() for k in spec.split("|")]
        optional = "None" in kinds
        kind = next(k for k in kinds if k != "None")
        required = field.default is dataclasses.MISSING and not optional
        raw = doc.get(field.name)
        try:
            if raw is None and optional:
                values[field.name] = None
            else:
                values[field.name] = _value(kind, raw, field.name)
        except ValueError:
            if required:
                raise ValueError(f"a {cls.__name__} whose {field.name} is missing or not {kind}") from None
            if field.default is not dataclasses.MISSING:
                values[field.name] = field.default
            else:
                values[field.name] = None
    return cls(**values)


def _list(data: Any, what: str) -> list[Any]:
    if not isinstance(data, list):
        raise ValueError(f"not a list of {what}")
    return data[:MAX_ROWS]


def parse_queue(stdout: str) -> list[Item]:
    """The items of `loom queue --json`, in its order."""
    data = loads(stdout)
    if not isinstance(data, dict):
        raise ValueError("not the queue's object")
    return [record(Item, doc) for doc in _list(data.get("items"), "queue items")]


def parse_jobs(stdout: str) -> list[JobRow]:
    """The jobs of `loom jobs --json`, in the host's config's order."""
    return [record(JobRow, doc) for doc in _list(loads(stdout), "jobs")]


def parse_probes(stdout: str) -> list[Probe]:
    """The probes of `loom canary --history N --json`, newest first (no nonce is sent: none kept)."""
    return [record(Probe, doc, nonce="", joined=False) for doc in _list(loads(stdout), "probes")]


def parse_pane(stdout: str) -> PaneView:
    """The pane of `loom pane --json`: its state (one of a look's), its text as it came, escapes and
    all (the pane panel shows any pane's text through rich's ANSI reader and tables.shown, never
    raw), and why, made printable."""
    doc = loads(stdout)
    if not isinstance(doc, dict) or doc.get("state") not in STATES:
        raise ValueError("not a pane's look")
    text, why = doc.get("text"), doc.get("why")
    if not isinstance(text, str) or not isinstance(why, str):
        raise ValueError("a pane without its text or why")
    return PaneView(doc["state"], text[-MAX_PANE:], printable(why[:MAX_TEXT]))


# -- another host's memory directory: `loom memory --json`, `show --json`, `search --json` --------

MAX_MEMORY_ROWS = 10_000   # an index's rows and problems kept (a local one of 5000 lints in a second)
MAX_KINDS = 16             # lint kinds on one row: there are eight
MAX_MEMORY_TEXT = 64 * 1024  # characters of one file's preview, as the local panel shows
MAX_HITS = 1000


@dataclasses.dataclass(frozen=True)
class MemoryListing:
    report: Report
    replica: str | None  # the replica's lag, short (None: that directory is not replicated)


def memory_words(agent: str) -> list[str]:
    return ["memory", "--json", "--agent", agent]


def show_words(agent: str, rel: str) -> list[str]:
    return ["memory", "show", "--json", "--agent", agent, "--", rel]  # `--`: a file named -x.md is a name


def search_words(agent: str, term: str) -> list[str]:
    return ["memory", "search", "--json", "--agent", agent, "--", term]


def edit_words(agent: str, rel: str) -> list[str]:
    return ["memory", "edit", "--agent", agent, "--", rel]


def _kinds(raw: Any) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(printable(k[:SHORT_TEXT]) for k in raw[:MAX_KINDS] if isinstance(k, str))


def parse_memory(stdout: str) -> MemoryListing:
    """The listing of `loom memory --json`: its rows in the index's order (a row whose key came
    before is dropped: a key names one row of the table), its problems, its replica's lag."""
    doc = loads(stdout)
    if not isinstance(doc, dict):
        raise ValueError("not a memory listing's object")
    index = doc.get("index")
    if not isinstance(index, str) or not index:
        raise ValueError("a memory listing without its index's name")
    rows: dict[str, Row] = {}
    raw_rows = doc.get("rows")
    for raw in (raw_rows if isinstance(raw_rows, list) else [])[:MAX_MEMORY_ROWS]:
        row = record(Row, raw, kinds=_kinds(raw.get("kinds") if isinstance(raw, dict) else None))
        rows.setdefault(row.key, row)
    raw_problems = doc.get("problems")
    problems = tuple(record(Problem, p) for p in (raw_problems if isinstance(raw_problems, list) else [])[:MAX_MEMORY_ROWS])
    entries = doc.get("entries")
    count = entries if isinstance(entries, int) and not isinstance(entries, bool) and 0 <= entries < 1 << 31 else 0
    replica = doc.get("replica")
    words = printable(replica[:SHORT_TEXT]) if isinstance(replica, str) else None
    return MemoryListing(Report(printable(index[:SHORT_TEXT]), tuple(rows.values()), problems, count), words)


def parse_shown(stdout: str) -> tuple[str, bool]:
    """One file's text from `loom memory show --json` (printable, its lines kept; at most
    MAX_MEMORY_TEXT characters) and whether it was cut, there or here."""
    doc = loads(stdout)
    if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
        raise ValueError("not a memory file's text")
    text = doc["text"]
    clipped = doc.get("clipped") is True or len(text) > MAX_MEMORY_TEXT
    return printable(text[:MAX_MEMORY_TEXT].replace("\r\n", "\n"), keep_newlines=True), clipped


def parse_hits(stdout: str) -> list[Hit]:
    """The hits of `loom memory search --json`, in its order."""
    data = loads(stdout)
    if not isinstance(data, list):
        raise ValueError("not a list of hits")
    return [record(Hit, doc) for doc in data[:MAX_HITS]]
