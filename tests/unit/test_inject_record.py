"""A line typed stays typed when the store then refuses its ledger event (locked past its busy
timeout by another process: a backup, an operator's sqlite3 shell). Raised, it read as a line never
sent, and the caller's retry typed it twice: the sentinel's next pass nudged again, an operator sent
it again. The real actions.inject and actions.nudge on a real store locked by a second SQLite
connection the moment the line is typed; the store waits its busy timeout on the test's clock; the
driver port is one that takes every line and counts it. The sentinel's count of a nudge, refused by
the same locked store, is kept for its next pass instead of typing the line again."""

from __future__ import annotations

import sqlite3

import pytest

from fake_clock import FakeClock
from harness import clock_waiting_context, locked_by_another

from loomtui import actions, clock
from loomtui.errors import StoreUnavailable, TmuxError
from loomtui.store import ledger

T0 = 1_800_000_000.0


class LocksTheStoreAsItTypes:
    """The driver port, as far as typing reaches it: a live pane that takes every line, and another
    process that takes the store's write lock at that moment (released by `free`)."""

    has_dialogs, owns_turns = False, False

    def __init__(self, store_path, fail: bool = False) -> None:
        self.store_path, self.fail = store_path, fail
        self.typed: list[str] = []
        self.blocker: sqlite3.Connection | None = None

    def pane_pid(self) -> int:
        return 4242

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator", ref: str = ""):
        self.blocker = locked_by_another(self.store_path)
        if self.fail:
            raise TmuxError("the pane is gone")
        self.typed.append(text)
        return None

    def free(self) -> None:
        if self.blocker is not None:
            self.blocker.close()
            self.blocker = None


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    c = clock_waiting_context(config, tmp_path / "state")
    yield c
    c.close()


def test_a_line_typed_is_reported_typed_when_its_ledger_event_cannot_be_written(ctx):
    ctx.driver = pane = LocksTheStoreAsItTypes(ctx.store.path)
    try:
        with clock.use(FakeClock(T0, 9000.0, "boot-a")) as c:
            result = actions.inject(ctx, "deploy is done", source="cli")
            assert c.at_mono >= 9010.0  # the store's busy timeout was waited out, on the clock
    finally:
        pane.free()
    assert pane.typed == ["deploy is done"]
    assert result.ok and result.error == "" and result.event_id == 0
    assert "locked" in result.unrecorded and str(ctx.store.path) in result.unrecorded
    assert ledger.tail(ctx.store, 10, kinds=["inject"]) == []  # nothing recorded, nothing invented


def test_a_nudge_typed_is_a_nudge_sent_whatever_the_store_then_says(ctx):
    ctx.driver = pane = LocksTheStoreAsItTypes(ctx.store.path)
    try:
        with clock.use(FakeClock(T0, 9000.0, "boot-a")):
            result = actions.nudge(ctx, "job x failed", source="sentinel", detail={"item": 1})
    finally:
        pane.free()
    assert result.ok and result.unrecorded and pane.typed == ["job x failed"]


def test_a_line_not_typed_still_reports_the_store_s_refusal(ctx):
    # Nothing typed, nothing to protect from a retry: the store's fault is the one raised.
    ctx.driver = pane = LocksTheStoreAsItTypes(ctx.store.path, fail=True)
    try:
        with clock.use(FakeClock(T0, 9000.0, "boot-a")), pytest.raises(StoreUnavailable):
            actions.inject(ctx, "hello", source="cli")
    finally:
        pane.free()
    assert pane.typed == []


def test_a_nudge_typed_whose_count_the_store_refused_is_counted_on_the_next_pass_not_typed_again(tmp_path):
    # The store stays locked past the line's ledger event and past the sentinel's count of the nudge:
    # that pass fails. The next one found the item never nudged and typed the line a second time.
    from test_sentinel_scan import Fleet

    from loomtui.sentinel import queue
    from loomtui.sentinel.tick import sentinel_tick

    fleet = Fleet(tmp_path / "fleet", [{"name": "backup"}], {"renudge": "20m", "backstop": "30m"})
    fleet.ctx.close()
    ctx = clock_waiting_context(fleet.config_path)
    ctx.driver = pane = LocksTheStoreAsItTypes(ctx.store.path)
    fleet.write("backup", "ERROR disk full\n")
    try:
        with clock.use(FakeClock(T0, 9000.0, "boot-a")):
            with pytest.raises(StoreUnavailable):
                sentinel_tick(ctx, T0, notify=True)
            with pytest.raises(StoreUnavailable):
                sentinel_tick(ctx, T0 + 30, notify=True)  # still locked: nothing typed, nothing forgotten
            pane.free()
            assert len(pane.typed) == 1
            report = sentinel_tick(ctx, T0 + 60, notify=True)
        [item] = queue.listing(ctx.store)
        assert len(pane.typed) == 1 and report.nudged == [item.id]
        assert (item.nudges, item.last_nudge_at) == (1, T0)  # counted when it was typed
    finally:
        pane.free()
        ctx.close()
