"""Another host's ledger events, as its own `loom ledger tail --json` prints them: the words of
that command for one page, and its output read back as events (untrusted JSON lines: each parsed
with hosts.view.loads (json.loads, a nesting too deep an error too) and every field checked for its type; a line that is not an event is an error,
never half an event). The console's timeline of another host's agent reads its pages so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loomtui.hosts.view import finite_number, loads
from loomtui.store.ledger import Event
from loomtui.text import printable

MAX_EVENTS = 3000  # a page is at most this many events, whatever the host sends
MAX_TS = 1e11      # an event's time beyond this (the year 5138) is none Loom wrote


def tail_words(*, limit: int, agent: str, kinds: Sequence[str] = (), before_id: int | None = None,
               text: str | None = None) -> list[str]:
    """`loom ledger tail` for one page of `agent`'s events (the words ssh.run quotes)."""
    words = ["ledger", "tail", "--json", "-n", str(max(0, min(limit, MAX_EVENTS))), "--agent", agent]
    # `--text=WORDS`, not two words: a filter that starts with `-` is then still its value.
    words += [f"--kind={kind}" for kind in kinds]
    if before_id is not None:
        words += ["--before", str(before_id)]
    if text:
        words.append(f"--text={text}")
    return words


def _text(doc: dict[str, Any], key: str, limit: int, *, optional: bool = False) -> Any:
    value = doc.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"an event whose {key} is not text")
    return printable(value[:limit])  # another host's text: its control characters shown, never obeyed


def event(line: str) -> Event:
    """One line of `ledger tail --json` as an event; ValueError when it is not one."""
    doc = loads(line)
    if not isinstance(doc, dict):
        raise ValueError("an event that is not an object")
    ident, ts, detail = doc.get("id"), doc.get("ts"), doc.get("detail")
    if not isinstance(ident, int) or isinstance(ident, bool):
        raise ValueError("an event without an id")
    when = finite_number(ts)
    if when is None or not 0 <= when <= MAX_TS:
        raise ValueError("an event without a time")
    return Event(ident, when, _text(doc, "kind", 64), _text(doc, "source", 64),
                 _text(doc, "cause", 200, optional=True), detail if isinstance(detail, dict) else {"value": detail},
                 _text(doc, "hash", 128, optional=True) or "", _text(doc, "agent", 64))


def parse_page(stdout: str) -> list[Event]:
    """The events of `ledger tail --json`, newest first (it prints them oldest first)."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    return [event(line) for line in reversed(lines[-MAX_EVENTS:])]
