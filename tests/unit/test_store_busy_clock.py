"""A store whose busy wait is on loomtui.clock (`waits_on_clock`, the simulator's connections): a
write that finds the store locked waits its timeout on the clock's sleep, trying again every
CLOCK_BUSY_POLL, and takes the store as soon as a try finds it free; a store that stays locked
fails after the whole timeout, as SQLite's own busy wait does in the daemon. Real SQLite files,
another connection holding the lock."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
from fake_clock import FakeClock

from loomtui import clock
from loomtui.errors import StoreUnavailable
from loomtui.store import ledger
from loomtui.store.db import CLOCK_BUSY_POLL, Store


class Unlocking(FakeClock):
    """A clock whose sleep lets the blocker go once `free_after` seconds have been slept."""

    def __init__(self, blocker: sqlite3.Connection, free_after: float) -> None:
        super().__init__()
        self.blocker, self.free_after, self.slept = blocker, free_after, []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        super().sleep(seconds)
        if sum(self.slept) >= self.free_after and self.blocker.in_transaction:
            self.blocker.execute("ROLLBACK")


@pytest.fixture
def db_path(state_dir):
    state_dir.mkdir(mode=0o700)
    with Store.in_dir(state_dir) as s:
        ledger.append(s, "inject", source="t", detail={"n": 1})
        return s.path


def locked(path) -> sqlite3.Connection:
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    return blocker


def test_a_store_locked_for_good_fails_after_its_whole_timeout_slept_on_the_clock(db_path):
    with Store(db_path, timeout=10.0, waits_on_clock=True) as store, closing(locked(db_path)) as blocker:
        fake = Unlocking(blocker, free_after=float("inf"))
        with clock.use(fake), pytest.raises(StoreUnavailable, match="database is locked"):
            ledger.append(store, "inject", source="t", detail={"n": 2})
        assert sum(fake.slept) == pytest.approx(10.0)
        assert fake.slept == [CLOCK_BUSY_POLL] * 5
        assert fake.at_mono == pytest.approx(510.0)  # the clock the caller lives on moved by the wait


def test_a_write_takes_the_store_at_the_first_try_after_the_lock_ends(db_path):
    with Store(db_path, timeout=10.0, waits_on_clock=True) as store, closing(locked(db_path)) as blocker:
        fake = Unlocking(blocker, free_after=3.0)
        with clock.use(fake):
            ledger.append(store, "inject", source="t", detail={"n": 2})
        assert fake.slept == [CLOCK_BUSY_POLL, CLOCK_BUSY_POLL]  # freed during the second pause
        assert [r["detail"] for r in ledger.after(store, 0)][-1] == '{"n":2}'


def test_a_last_pause_shorter_than_the_poll_ends_the_wait_on_the_timeout(db_path):
    with Store(db_path, timeout=3.0, waits_on_clock=True) as store, closing(locked(db_path)) as blocker:
        fake = Unlocking(blocker, free_after=float("inf"))
        with clock.use(fake), pytest.raises(StoreUnavailable):
            ledger.append(store, "inject", source="t", detail={})
        assert fake.slept == [CLOCK_BUSY_POLL, 3.0 - CLOCK_BUSY_POLL]


def test_a_free_store_never_sleeps_and_a_damaged_one_is_not_waited_for(db_path):
    with Store(db_path, timeout=10.0, waits_on_clock=True) as store:
        fake = FakeClock()
        slept: list[float] = []
        fake.sleep = slept.append  # type: ignore[method-assign]
        with clock.use(fake):
            ledger.append(store, "inject", source="t", detail={})
            store.conn.execute("PRAGMA query_only = 1")  # a refusal that is not a lock: no wait for it
            with pytest.raises(StoreUnavailable, match="readonly"):
                ledger.append(store, "inject", source="t", detail={})
        assert slept == []


def test_the_daemons_store_leaves_the_wait_to_sqlite(db_path):
    """Without waits_on_clock the clock is never slept on: SQLite's busy wait (real time) is the wait."""
    with Store(db_path, timeout=0.05) as store, closing(locked(db_path)):
        fake = FakeClock()
        slept: list[float] = []
        fake.sleep = slept.append  # type: ignore[method-assign]
        with clock.use(fake), pytest.raises(StoreUnavailable, match="database is locked"):
            ledger.append(store, "inject", source="t", detail={})
        assert slept == [] and store.busy_on_clock is None
