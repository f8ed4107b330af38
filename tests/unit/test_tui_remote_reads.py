"""Another host's answers to the console's reads (tui/remote_reads.py): what its own `loom queue
--json`, `loom jobs --json` and `loom canary --history N --json` print becomes the records the
local panels show, and anything else a host may send is refused or made harmless: wrong types,
numbers that are not finite, control characters, endless lists. The real commands' output is read
back too, from a real store (tests/unit/test_cli_jobs_history.py runs them)."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.canary.runs import Probe
from loomtui.memory.index import Hit, Problem, Report, Row
from loomtui.report.fleet import JobRow
from loomtui.sentinel.queue_rules import Item
from loomtui.tui import remote_reads
from loomtui.tui.remote_source import ledger_events, status_of

ITEM = {"id": 4, "job": "nightly", "kind": "exit", "signature": "exit 3", "sample": "ERROR: 503", "log": "/l",
        "first_seen": 100.0, "last_seen": 130.5, "count": 2, "state": "open", "nudges": 1, "agent": "main"}


def test_a_queue_item_as_the_host_printed_it_is_the_local_record():
    local = Item(**{**ITEM, "claimed_by": "agent", "note": "fixed"})
    [item] = remote_reads.parse_queue(json.dumps({"counts": {}, "items": [dataclasses.asdict(local)]}))
    assert item == local


def test_a_hostile_queue_item_is_made_harmless_field_by_field():
    doc = {**ITEM, "job": "night\x1b[2Jly", "sample": "x" * 5000, "count": "2", "nudges": True,
           "escalated_at": float("nan"), "last_nudge_at": 1e400, "claimed_by": ["not", "text"], "state": "open\x07"}
    [item] = remote_reads.parse_queue(json.dumps({"items": [doc]}).replace("NaN", "1e999"))
    assert (item.job, item.state) == ("night\u241b[2Jly", "open\u2407")  # the controls shown as symbols
    assert len(item.sample) <= remote_reads.MAX_TEXT
    assert (item.count, item.nudges, item.escalated_at, item.last_nudge_at, item.claimed_by) == (1, 0, None, None, None)


@pytest.mark.parametrize("bad", [
    {**ITEM, "id": "4"}, {**ITEM, "id": True}, {**ITEM, "job": None}, {**ITEM, "first_seen": "yesterday"},
    {k: v for k, v in ITEM.items() if k != "signature"}, {**ITEM, "id": 1 << 80}, [ITEM], "item",
])
def test_an_item_without_what_it_must_have_is_refused(bad):
    with pytest.raises(ValueError):
        remote_reads.parse_queue(json.dumps({"items": [bad]}))


@pytest.mark.parametrize("bad", ['[]', '{"items": {}}', '{"items": "x"}', "not json", "null"])
def test_an_answer_that_is_not_the_queue_is_refused(bad):
    with pytest.raises(ValueError):
        remote_reads.parse_queue(bad)


def test_endless_lists_are_cut():
    many = json.dumps([{"name": f"j{n}", "schedule": "", "running": False, "open_items": 0} for n in range(5000)])
    assert len(remote_reads.parse_jobs(many)) == remote_reads.MAX_ROWS


def test_jobs_and_probes_as_the_host_printed_them():
    job = JobRow("nightly", "every 1h", 10.0, 3, 1.5, False, 2, 3610.0)
    assert remote_reads.parse_jobs(json.dumps([job.as_json()])) == [job]
    never = {"name": "weekly", "schedule": "", "last_start": None, "last_exit": None, "last_duration": None,
             "running": False, "open_items": 0, "next_due": None}
    assert remote_reads.parse_jobs(json.dumps([never])) == [JobRow("weekly", "", None, None, None, False, 0, None)]
    probe = {"id": 9, "result": "ok", "sent_at": 50.0, "deadline": 110.0, "ack_at": 51.0, "latency": 1.0,
             "why": "", "source": "ssh"}
    assert remote_reads.parse_probes(json.dumps([probe])) == [Probe(9, "", "ok", 50.0, 110.0, 51.0, 1.0, "", False, "ssh")]
    with pytest.raises(ValueError):
        remote_reads.parse_probes(json.dumps([{**probe, "deadline": None}]))
    with pytest.raises(ValueError):
        remote_reads.parse_jobs(json.dumps({"jobs": []}))


def test_the_words_sent_are_the_hosts_own_commands():
    assert remote_reads.queue_words("main") == ["queue", "--json", "--agent", "main", "--witnessed", "10"]
    assert remote_reads.jobs_words("ops") == ["jobs", "--json", "--agent", "ops"]
    assert remote_reads.canary_words("main", 100) == ["canary", "--history", "100", "--json", "--agent", "main"]


def test_the_ledger_size_is_the_named_agent_s_and_zero_when_the_host_does_not_say():
    out = [{"name": "ops", "ledger": {"events": 5}}, {"name": "main", "ledger": {"events": 12}}]
    assert ledger_events(out, "main") == 12
    for odd in ({}, [{"name": "main", "ledger": {"events": True}}], [{"name": "main"}]):
        assert ledger_events(odd, "main") == 0
    # The status read parses the answer once, for the row and the size; one that is no list is refused.
    row, size = status_of([{"name": "main", "state": "running", "ledger": {"events": 12}}], "main")
    assert row is not None and row.name == "main" and size == 12
    assert status_of([{"name": "ops", "state": "running"}], "main") == (None, 0)
    with pytest.raises(ValueError):
        status_of({}, "main")


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                       max_leaves=20)


@given(st.dictionaries(st.sampled_from([f.name for f in dataclasses.fields(Item)]), JSONISH, max_size=30))
def test_whatever_a_host_sends_is_a_clean_record_or_refused(doc):
    try:
        [item] = remote_reads.parse_queue(json.dumps({"items": [{**ITEM, **doc}]}, allow_nan=True))
    except ValueError:
        return
    for field in dataclasses.fields(Item):
        value = getattr(item, field.name)
        if isinstance(value, str):
            assert value.isprintable() or value == ""
        if isinstance(value, float):
            assert math.isfinite(value)
        assert not isinstance(value, (list, dict))


def test_a_pane_as_the_host_printed_it_keeps_its_colours_and_its_newest_text():
    pane = remote_reads.parse_pane(json.dumps({"state": "up", "text": "\x1b[31mred\x1b[0m\n> ", "why": ""}))
    assert (pane.state, pane.text, pane.why) == ("up", "\x1b[31mred\x1b[0m\n> ", "")
    long = remote_reads.parse_pane(json.dumps({"state": "dead", "text": "old" + "x" * remote_reads.MAX_PANE,
                                               "why": "exited\x1b[2J (status 1)"}))
    assert len(long.text) == remote_reads.MAX_PANE and not long.text.startswith("old")
    assert long.why == "exited\u241b[2J (status 1)"
    assert remote_reads.pane_words("main") == ["pane", "--json", "--lines", "200", "--agent", "main"]


@pytest.mark.parametrize("bad", [
    {"state": "remote", "text": "", "why": ""}, {"state": "up", "text": None, "why": ""},
    {"state": "up", "text": "", "why": 3}, {"text": "", "why": ""}, ["up"],
])
def test_a_pane_that_is_not_a_look_is_refused(bad):
    with pytest.raises(ValueError):
        remote_reads.parse_pane(json.dumps(bad))


def test_a_hosts_pane_is_drawn_as_any_pane_its_escapes_never_raw():
    from loomtui.tui.agent_panel import render_pane

    pane = remote_reads.parse_pane(json.dumps({"state": "up", "text": "\x1b[31mred\x1b[0m \x1b]0;title\x07 \x9b2J", "why": ""}))
    drawn = render_pane(pane)
    assert "red" in drawn.plain and all(c.isprintable() or c == "\n" for c in drawn.plain), repr(drawn.plain)


def test_a_link_on_a_pane_never_carries_escapes_to_the_terminal():
    """An OSC 8 link whose address holds a BEL and more escapes: from_ansi made it a link style,
    drawn with its address raw in the terminal's own OSC 8, which the BEL ended: the rest (a
    clipboard write, a title) was obeyed. The pane's text is drawn, its link is not."""
    from rich.console import Console
    from textual.content import Content
    from textual.strip import Strip

    from loomtui.tui.agent_panel import render_pane

    evil = ("ok \x1b]8;;https://x\x07\x1b]52;c;cm0gLXJmIH4K\x07\x1b]0;owned\x07\x1b\\here\x1b]8;;\x1b\\ "
            "\x1b[31mred\x1b[0m")
    drawn = render_pane(remote_reads.parse_pane(json.dumps({"state": "up", "text": evil, "why": ""})))
    assert "here" in drawn.plain and "red" in drawn.plain
    assert not any(span.style.link for span in drawn.spans if not isinstance(span.style, str))
    console = Console(width=200, color_system="truecolor", force_terminal=True)
    segments = list(Content.from_rich_text(drawn).render_segments())
    written = Strip(segments).render(console)
    assert "\x1b]8" not in written and "\x1b]52" not in written and "\x1b]0;" not in written
    assert "\x1b[" in written  # its colours are still drawn


def test_another_hosts_ledger_text_is_made_printable_before_any_panel_draws_it():
    """A relaunch's cause from another host reached the plots panel's title and labels as it came,
    its escapes with it (the timeline and the overview made it safe; the plots did not)."""
    from loomtui.hosts import ledger_view
    from loomtui.tui.plots import relaunch_title

    line = json.dumps({"id": 1, "ts": 100.0, "kind": "relaunch\x1b[2J", "source": "watchdog", "agent": "main",
                       "cause": "crash\x1b]0;owned\x07\x1b[2J", "detail": {}})
    ev = ledger_view.event(line)
    assert ev.cause == "crash\u241b]0;owned\u2407\u241b[2J" and ev.kind == "relaunch\u241b[2J"
    title = relaunch_title({"crash\x1b[2J": [1]})  # as a local store might hold it, too
    assert all(c.isprintable() for c in title.plain)


def test_a_finite_number_too_large_for_a_time_is_none_and_never_reaches_a_datetime():
    from loomtui.hosts import ledger_view
    from loomtui.tui.canary_panel import rows, when

    huge = {**ITEM, "escalated_at": 1e300, "last_nudge_at": -1e300}
    [item] = remote_reads.parse_queue(json.dumps({"items": [huge]}))
    assert (item.escalated_at, item.last_nudge_at) == (None, None)
    with pytest.raises(ValueError):
        remote_reads.parse_queue(json.dumps({"items": [{**ITEM, "first_seen": 1e300}]}))
    probe = {"id": 9, "result": "ok", "sent_at": 50.0, "deadline": 110.0, "ack_at": 1e300, "latency": 1e200}
    [p] = remote_reads.parse_probes(json.dumps([probe]))
    assert (p.ack_at, p.latency) == (None, None) and rows([p])
    for ts in (1e300, -5, "1e400"):
        with pytest.raises(ValueError):
            ledger_view.event(json.dumps({"id": 1, "ts": ts, "kind": "k", "source": "s", "agent": "a"})
                              .replace('"1e400"', "1e400"))
    assert when(1e300) == "?" and when(None) == "" and when(0.0) == ""


def test_a_host_that_answers_nothing_in_time_keeps_what_the_panels_showed(tmp_path):
    # A real ssh whose connection never comes (its proxy sleeps): every read times out on its own.
    from loomtui.config import HostConfig
    from loomtui.hosts import view
    from loomtui.tui.hosts_view import Chosen
    from loomtui.tui.remote_source import RemoteSource

    import psutil
    from harness import wait_for

    nap = f"{30 + (os.getpid() % 1000) / 1000:.3f}"  # a sleep of this test's own, to look for after
    host = HostConfig.build({"name": "b", "ssh": "b.invalid", "timeout": "1s", "connect_timeout": "30s",
                             "ssh_options": ["-F", os.devnull, "-o", f"ProxyCommand=sleep {nap}"]}, ("hosts", 0), None)
    row = view.AgentRow("main", "running", "ok", 5.0, 0, "", 3.0)
    load = RemoteSource(host, tmp_path / "state", Chosen("b", "main", row, 100.0)).load(200.0)
    assert load.chosen is None and load.snapshot.host == "b"
    assert load.snapshot.store_error == "`loom status` on host b: no answer within 1s", load.snapshot.store_error

    def proxies() -> list[int]:
        return [p.pid for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == [nap]]

    # ssh went with the proxy it started: nothing of the six reads is left running.
    wait_for(lambda: not proxies(), 10, what="no proxy left")


# -- another host's memory: `loom memory --json`, `memory show --json`, `memory search --json` ----

ROW = {"key": "line:2", "line": 2, "title": "Timezone", "target": "tz.md", "path": "tz.md", "hook": "the clock",
       "kinds": []}


def test_a_memory_listing_is_the_local_records_and_hostile_rows_are_made_harmless():
    doc = {"dir": "/m", "index": "MEMORY.md", "entries": 3, "replica": "pushed 2m ago",
           "rows": [ROW,
                    {**ROW, "key": "line:2", "title": "a second row with the same key"},
                    {**ROW, "key": "line:3\x1b[2J", "line": "3", "title": "t\x07" * 300, "path": None,
                     "hook": "h" * 5000, "kinds": ["missing", 7, "x\x1b"] + ["k"] * 50},
                    {**ROW, "key": "file:o.md", "line": None, "title": "", "kinds": "orphan"}],
           "problems": [{"kind": "missing", "line": 3, "path": "gone.md", "message": "'gone.md' does not exist"},
                        {"kind": "orphan", "line": None, "path": None, "message": "m\x1b]0;x\x07"}]}
    listing = remote_reads.parse_memory(json.dumps(doc))
    assert listing.replica == "pushed 2m ago" and listing.report.index_name == "MEMORY.md"
    assert listing.report.entries == 3
    first, hostile, orphan = listing.report.rows  # the repeated key dropped: a key is one table row
    assert first == Row("line:2", 2, "Timezone", "tz.md", "tz.md", "the clock", ())
    assert hostile.key == "line:3\u241b[2J" and hostile.line is None and hostile.path is None
    assert len(hostile.title) <= remote_reads.SHORT_TEXT and hostile.title.isprintable()
    assert len(hostile.hook) <= remote_reads.MAX_TEXT
    assert hostile.kinds[:2] == ("missing", "x\u241b") and len(hostile.kinds) <= remote_reads.MAX_KINDS
    assert orphan.kinds == () and orphan.line is None
    assert listing.report.problems[1] == Problem("orphan", None, None, "m\u241b]0;x\u2407")


@pytest.mark.parametrize("bad", ['[]', '{"rows": []}', '{"index": 3}', '{"index": "M", "rows": [3]}',
                                 '{"index": "M", "rows": [{"key": "k"}]}', 'not json'])
def test_an_answer_that_is_not_a_memory_listing_is_refused(bad):
    with pytest.raises(ValueError):
        remote_reads.parse_memory(bad)


def test_a_listing_with_no_rows_or_a_wrong_count_is_empty_not_wrong():
    listing = remote_reads.parse_memory('{"index": "M.md", "entries": true, "replica": 5}')
    assert listing.report == Report("M.md", (), (), 0) and listing.replica is None


def test_a_memory_file_from_another_host_is_printable_and_bounded():
    text, clipped = remote_reads.parse_shown(json.dumps({"text": "a\r\nb\x1b[2J\n" + "x" * 70_000, "clipped": False}))
    assert clipped and len(text) == remote_reads.MAX_MEMORY_TEXT - 1  # \r\n made one \n
    assert text.startswith("a\nb\u241b[2J\n")
    assert remote_reads.parse_shown('{"text": "short", "clipped": true}') == ("short", True)
    for bad in ('{"text": 3}', '["text"]', '{}'):
        with pytest.raises(ValueError):
            remote_reads.parse_shown(bad)


def test_memory_hits_from_another_host():
    hits = remote_reads.parse_hits(json.dumps([{"path": "a.md", "title": "A", "where": "line 1", "text": "z\x07"}] * 2000))
    assert len(hits) == remote_reads.MAX_HITS and hits[0] == Hit("a.md", "A", "line 1", "z\u2407")
    with pytest.raises(ValueError):
        remote_reads.parse_hits('[{"path": "a.md"}]')
    with pytest.raises(ValueError):
        remote_reads.parse_hits('{"hits": []}')


def test_the_memory_words_sent_keep_a_name_that_looks_like_an_option_a_name():
    assert remote_reads.show_words("main", "-rf.md") == ["memory", "show", "--json", "--agent", "main", "--", "-rf.md"]
    assert remote_reads.search_words("main", "--x")[-2:] == ["--", "--x"]
    assert remote_reads.edit_words("main", "a.md") == ["memory", "edit", "--agent", "main", "--", "a.md"]
    assert remote_reads.memory_words("main") == ["memory", "--json", "--agent", "main"]


def test_a_queue_that_could_not_be_read_is_never_shown_as_empty():
    # Another host's `loom queue` failed while its status answered: the tab said "the queue is
    # empty" and the plot "nothing waits" in green, while the header said "queue 3".
    import asyncio

    from textual.widgets import Static

    from loomtui.tui.plots import queue_title
    from loomtui.tui.queue_panel import QueuePanel

    why = "`loom queue` on host b: no answer within 1s"
    assert "not read: " + why in queue_title([], why).plain and "nothing waits" not in queue_title([], why).plain
    assert "nothing waits" in queue_title([]).plain

    async def run() -> None:
        app = queue_app()
        async with app.run_test(size=(80, 24)) as pilot:
            panel = app.query_one(QueuePanel)
            panel.show([], why)
            await pilot.pause()
            detail = app.query_one("#queue-detail", Static).content.plain
            assert detail == "the queue could not be read: " + why
            panel.show([])
            await pilot.pause()
            assert app.query_one("#queue-detail", Static).content.plain == "the queue is empty"

    asyncio.run(run())


def test_a_host_that_sends_one_id_twice_or_json_nested_too_deep_never_ends_the_console():
    # Two queue items with one id became two rows with one key: the table raised DuplicateKey in a
    # message handler and Textual ended the console. A `[[[[...` answer raised RecursionError, no
    # ValueError: `loom hosts` ended for every host.
    import asyncio

    from textual.widgets import DataTable

    from loomtui.hosts import gather, ledger_view, ssh, view
    from loomtui.tui.queue_panel import QueuePanel

    twice = remote_reads.parse_queue(json.dumps({"items": [ITEM, {**ITEM, "job": "other"}]}))
    assert [i.id for i in twice] == [4, 4]

    async def run() -> None:
        app = queue_app()
        async with app.run_test(size=(80, 24)) as pilot:
            app.query_one(QueuePanel).show(twice)
            await pilot.pause()
            table = app.query_one(QueuePanel).query_one(DataTable)
            assert table.row_count == 1
            assert app.is_running

    asyncio.run(run())
    deep = "[" * 100_000 + "]" * 100_000
    for parse in (remote_reads.parse_queue, remote_reads.parse_jobs, remote_reads.parse_probes, view.parse_status,
                  remote_reads.parse_memory, remote_reads.parse_hits, ledger_view.parse_page):
        with pytest.raises(ValueError):
            parse(deep)
    shown = gather.host_view(None, ssh.Reply("b", 0, deep, ""), 0.0)
    assert shown.error.startswith("not the status JSON expected")


def queue_app():
    """An App holding the queue panel alone (Textual imported here, as the tests above do)."""
    from textual.app import App

    from loomtui.tui.queue_panel import QueuePanel

    class Panel(App):
        def compose(self):
            yield QueuePanel()

    return Panel()
