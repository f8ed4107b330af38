"""The incident timeline: ledger events grouped from failure to recovery, or the raw events.

Both views read one page at a time through an index (`ledger.page`), newest first, so a
ledger of a million events opens at once; `[` goes to older pages, `]` back to the newest.
A filter `kind:NAME words` narrows by kind and by text.

The events come through an `EventReader`: this machine's store (`StoreEvents`), or another
host's `loom ledger tail --json` over ssh (tui/remote_agent.py's `RemoteEvents`) while one of that
host's agents is the console's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Static
from textual.worker import Worker

from loomtui.report import incidents
from loomtui.store import ledger
from loomtui.store.db import Store
from loomtui.text import printable
from loomtui.tui.canary_panel import when
from loomtui.tui.modals import PromptScreen, open_detail
from loomtui.tui.snapshot import event_detail, pretty, took
from loomtui.tui import worker_errors
from loomtui.tui.tables import KeyedTable, safe

INCIDENT_PAGE = 3000
EVENT_PAGE = 300
# Each view its own headings: an incident's span and sessions, an event's kind, source and cause.
INCIDENT_COLUMNS = [("when", "when", 14), ("status", "status", 10), ("took", "took", 10),
                    ("sessions", "sessions", 17), ("what", "what", None)]
EVENT_COLUMNS = [("when", "when", 14), ("kind", "kind", 14), ("source", "source", 10), ("cause", "cause", 13),
                 ("detail", "detail", None)]
# The view's columns, the one that stretches, and whether it wraps: an incident's `what` is read
# whole at 80 columns (a row as tall as it needs); an event's detail stays one line (Enter: all of it).
COLUMNS = {"incidents": (INCIDENT_COLUMNS, "what", True), "events": (EVENT_COLUMNS, "detail", False)}
STATUS_STYLES = {"recovered": "green", "ongoing": "bold red", "held": "bold magenta", "note": "dim"}


@dataclass(frozen=True)
class Filter:
    kinds: tuple[str, ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, raw: str) -> Filter:
        kinds: list[str] = []
        words: list[str] = []
        for part in raw.split():
            if part.startswith("kind:") and len(part) > 5:
                kinds.extend(k for k in part[5:].split(",") if k)
            else:
                words.append(part)
        return cls(tuple(kinds), " ".join(words))

    def __str__(self) -> str:
        return " ".join([f"kind:{','.join(self.kinds)}"] * bool(self.kinds) + [self.text] * bool(self.text))


class EventReader(Protocol):
    """Where the timeline reads its events: a page newest first, and an incident's events by id."""

    @property
    def where(self) -> str:
        """"" for this machine's store, else whose events these are ("host b")."""

    def page(self, *, before_id: int | None, limit: int, kinds: list[str] | None, text: str | None,
             agent: str | None) -> list[ledger.Event]: ...

    def by_ids(self, ids: list[int]) -> list[ledger.Event]: ...


@dataclass(frozen=True)
class StoreEvents:
    """This machine's ledger, through the console's store connection."""

    store: Callable[[], Store]
    where: str = ""

    def page(self, *, before_id: int | None, limit: int, kinds: list[str] | None, text: str | None,
             agent: str | None) -> list[ledger.Event]:
        return ledger.page(self.store(), before_id=before_id, limit=limit, kinds=kinds, text=text, agent=agent)

    def by_ids(self, ids: list[int]) -> list[ledger.Event]:
        return event_detail(self.store(), ids)


def short(session: str | None) -> str:
    return (session or "")[:8]


# A row of the table: its key, its cells, and what it shows (Enter opens its detail).
TimelineRow = tuple[str, list[Text], "incidents.Incident | ledger.Event"]


def incident_rows(found: list[incidents.Incident], now: float) -> list[TimelineRow]:
    rows: list[TimelineRow] = []
    for inc in reversed(found):
        sessions = short(inc.old_session)
        if inc.new_session and inc.new_session != inc.old_session:
            sessions = f"{sessions}→{short(inc.new_session)}" if sessions else short(inc.new_session)
        rows.append((inc.key, [safe(when(inc.start)), safe(inc.status, STATUS_STYLES.get(inc.status, "")),
                               safe(took(inc, now)), safe(sessions), safe(inc.title)], inc))
    return rows


def event_rows(events: list[ledger.Event]) -> list[TimelineRow]:
    rows: list[TimelineRow] = []
    for e in events:
        detail = " ".join(f"{k}={v}" for k, v in sorted(e.detail.items()))
        rows.append((f"e{e.id}", [safe(when(e.ts)), safe(e.kind), safe(e.source), safe(e.cause or ""),
                                  safe(detail)], e))
    return rows


def load_page(events_of: EventReader, mode: str, flt: Filter, before_id: int | None, now: float,
              agent: str | None = None) -> tuple[list[TimelineRow], int | None]:
    """(rows, oldest id on the page): the events of `agent` (every agent's with None). Runs in a
    worker thread."""
    if mode == "events":
        events = events_of.page(before_id=before_id, limit=EVENT_PAGE, kinds=list(flt.kinds) or None,
                                text=flt.text or None, agent=agent)
        return event_rows(events), (events[-1].id if events else None)
    # Grouped from every incident event, filtered after: a filter chooses which incidents show,
    # never what one says (its canary ack filtered away, a recovered incident would read ongoing).
    events = events_of.page(before_id=before_id, limit=INCIDENT_PAGE, kinds=list(incidents.KINDS), text=None,
                            agent=agent)
    oldest = events[-1].id if events else None
    found = incidents.group(list(reversed(events)))
    if flt.kinds:
        kind_of = {e.id: e.kind for e in events}
        found = [i for i in found if any(kind_of.get(n) in flt.kinds for n in i.event_ids)]
    if flt.text:
        needle = flt.text.lower()
        found = [i for i in found if needle in " ".join([i.title, *i.causes, i.old_session or "",
                                                         i.new_session or ""]).lower()]
    return incident_rows(found, now), oldest


def detail_text(title: str, events: list[ledger.Event]) -> Text:
    out = Text()
    for e in events:
        out.append(f"#{e.id} {when(e.ts)} ", style="bold")
        out.append(f"{e.kind}", style="cyan")
        out.append(f" by {e.source}" + (f" cause {e.cause}" if e.cause else "") + "\n")
        out.append(pretty(e.detail) + "\n\n")  # JSON escapes control characters; Text never parses markup
    return out


class TimelinePanel(Widget):
    DEFAULT_CSS = """
    TimelinePanel { height: 1fr; }
    TimelinePanel #timeline-status { height: 1; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [
        # Shown in the panel's own status line, so the footer keeps room for the app's keys.
        Binding("t", "toggle_mode", "Incidents/events", id="timeline.mode", show=False),
        Binding("left_square_bracket", "older", "Older", id="timeline.older", show=False),
        Binding("right_square_bracket", "newest", "Newest", id="timeline.newest", show=False),
    ]

    @dataclass
    class Loaded(Message):
        generation: int
        rows: list[TimelineRow]
        oldest_id: int | None
        error: str = ""
        events: EventReader | None = None  # where the rows came from (an incident's detail reads there)

    @dataclass
    class DetailLoaded(Message):
        title: str
        body: Any

    def __init__(self, events: EventReader, now: Callable[[], float] = time.time, agent: str | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self._events = events
        self.agent = agent
        self._now = now
        self.mode = "incidents"
        self.filter = Filter()
        self.pages: list[int | None] = [None]   # before_id of each page visited; [None] = newest
        self.oldest: int | None = None
        self.generation = 0
        self._shown_generation = -1  # the generation whose rows the table shows
        self._rows: dict[str, incidents.Incident | ledger.Event] = {}
        self._rows_from: EventReader = events  # the reader the rows shown came from
        self.seen_count = -1

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(""), id="timeline-status", markup=False)
            columns, stretch, wrap = COLUMNS[self.mode]
            yield KeyedTable(columns, stretch=stretch, wrap=wrap, id="timeline-table")

    def on_mount(self) -> None:
        self.reload()

    # -- loading -----------------------------------------------------------------------------

    def reload(self) -> None:
        self.generation += 1
        self._load(self.generation, self.mode, self.filter, self.pages[-1], self._events, self.agent)

    def show_agent(self, events: EventReader, agent: str) -> None:
        """Another agent was selected (maybe another host's): its events from the newest page, the
        filter and mode kept."""
        self._events = events
        self.agent = agent
        self.pages = [None]
        self.oldest = None  # the old agent's: `[` waits for this one's first page
        self.seen_count = -1
        self.reload()

    @work(thread=True, exclusive=True, group="timeline", exit_on_error=False)
    def _load(self, generation: int, mode: str, flt: Filter, before_id: int | None, events: EventReader,
              agent: str | None) -> None:
        try:
            rows, oldest = load_page(events, mode, flt, before_id, self._now(), agent)
            self.post_message(self.Loaded(generation, rows, oldest, events=events))
        except Exception as exc:  # a locked or broken store: shown in the status line
            self.post_message(self.Loaded(generation, [], None, " ".join(str(exc).split())))

    @on(Loaded)
    def _loaded(self, message: Loaded) -> None:
        message.stop()
        if message.generation != self.generation:
            return  # a newer request superseded this one
        status = self.query_one("#timeline-status", Static)
        if message.error:
            # No rows of another agent or host left under the error (nor a page to go back from).
            self.oldest, self._rows = None, {}
            self.query_one(KeyedTable).sync([])
            status.update(safe(f"timeline unavailable: {message.error}", "bold red"))
            # Read again at the next refresh that has the ledger's size, changed or not: waiting for
            # a new event kept the error up for as long as the ledger stayed quiet.
            self.seen_count, self.pages = -1, [None]
            return
        self.oldest = message.oldest_id
        self._shown_generation = message.generation
        self._rows = {key: obj for key, _, obj in message.rows}
        if message.events is not None:
            self._rows_from = message.events
        table = self.query_one(KeyedTable)
        columns, stretch, wrap = COLUMNS[self.mode]  # the mode these rows were loaded for (a newer one: a newer generation)
        table.set_columns(columns, stretch=stretch, wrap=wrap)
        table.sync([(key, cells) for key, cells, _ in message.rows])
        page = len(self.pages)
        what = "incidents" if self.mode == "incidents" else "events"
        where = f" of {self.agent} on {self._events.where}" if self._events.where else ""
        flt = f" · filter {self.filter}" if str(self.filter) else ""
        status.update(Text(printable(f"{what}{where} · page {page}{flt} · [ older  ] newest  t incidents/events  "
                                     "enter detail"), no_wrap=True, overflow="ellipsis"))

    def ledger_changed(self, count: int) -> None:
        """New events arrived: refresh if we are looking at the newest page. None did: an open
        incident's time so far is still said as of now (the summary's, at the same refresh)."""
        if count != self.seen_count:
            self.seen_count = count
            if self.pages == [None]:
                self.reload()
        elif self.mode == "incidents" and self.generation == self._shown_generation:
            found = [obj for obj in self._rows.values() if isinstance(obj, incidents.Incident)]
            if any(inc.end is None and inc.status != incidents.NOTE for inc in found):
                rows = incident_rows(list(reversed(found)), self._now())
                self.query_one(KeyedTable).sync([(key, cells) for key, cells, _ in rows])

    # -- keys --------------------------------------------------------------------------------

    def ask_filter(self) -> None:
        def submitted(raw: str | None) -> None:
            if raw is not None:
                self.set_filter(raw)

        self.app.push_screen(PromptScreen("Filter the timeline (kind:NAME words; empty clears)", "kind:relaunch crash",
                                          str(self.filter), allow_empty=True), submitted)

    def set_filter(self, raw: str) -> None:
        self.filter = Filter.parse(raw)
        self.pages = [None]
        self.reload()

    def action_toggle_mode(self) -> None:
        self.mode = "events" if self.mode == "incidents" else "incidents"
        self.pages = [None]
        self.reload()

    def action_older(self) -> None:
        if self.oldest is not None:
            self.pages.append(self.oldest)
            self.reload()

    def action_newest(self) -> None:
        self.pages = [None]
        self.reload()

    @on(KeyedTable.RowSelected)
    def _selected(self, event: KeyedTable.RowSelected) -> None:
        event.stop()
        obj = self._rows.get(event.row_key.value or "") if event.row_key else None
        if obj is not None:
            self._detail(obj, self._rows_from)

    @work(thread=True, group="timeline-detail", exit_on_error=False)
    def _detail(self, obj: incidents.Incident | ledger.Event, source: EventReader) -> None:
        if isinstance(obj, incidents.Incident):
            events = source.by_ids(obj.event_ids)  # where its row came from, whatever is selected now
            title = f"incident {obj.first_id}: {obj.title}"
        else:
            events = [obj]
            title = f"event {obj.id}: {obj.kind}"
        self.post_message(self.DetailLoaded(title, detail_text(title, events)))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker_errors.tell(self, event)  # a page or a detail the store would not give

    @on(DetailLoaded)
    def _show_detail(self, message: DetailLoaded) -> None:
        message.stop()
        open_detail(self, message.title, message.body)
