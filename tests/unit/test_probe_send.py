"""What a probe's sending decides before it waits for an ack. A relaunch begun while the probe's
record waited for a locked store skips it (its new agent is booting). A probe the agent's CLI can
no longer read is the agent's miss, at once; one Loom could not type is Loom's own `inject_failed`. The real actions.canary_now (probe, inject, the store), with the
driver port filled by one that refuses the line as the stream-json driver does: `AgentNotReading`
after the pump's write to the CLI's stdin failed, a plain TmuxError (PumpRefused) for the rest.
The real pump's refusal is pinned in tests/e2e/test_pump.py, the recycle it leads to in
tests/e2e/test_stream_driver.py."""

from __future__ import annotations

import os
import shlex
import threading
from pathlib import Path

import pytest

from fake_clock import FakeClock
from harness import wait_for
from loomtui import actions, clock
from loomtui.canary import runs
from loomtui.canary.loop import CanaryLoop
from loomtui.context import Context
from loomtui.errors import AgentNotReading, TmuxError
from loomtui.store import ledger

T0 = 1_800_000_000.0


class Refusing:
    """The driver port, as far as a probe reaches it: a live pane that refuses every line."""

    has_dialogs, owns_turns = False, False

    def __init__(self, error: TmuxError) -> None:
        self.error = error
        self.typed = 0

    def pane_pid(self) -> int:
        return 4242

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator", ref: str = ""):
        self.typed += 1
        raise self.error


@pytest.fixture(autouse=True)
def fixed_clock():
    with clock.use(FakeClock(T0, 9000.0, "boot-a")) as c:
        yield c


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[canary]\nack_timeout = "2s"\nmisses_to_recycle = 2\n')
    c = Context.load(str(config), str(tmp_path / "state"), environ={})
    yield c
    c.close()


def test_a_probe_the_cli_can_no_longer_read_is_a_miss_at_once(ctx, fixed_clock):
    why = "the pump did not take the line: the pump refused the message: the agent's CLI no longer reads its input"
    ctx.driver = Refusing(AgentNotReading(why))
    probe = actions.canary_now(ctx, source="canary")
    assert (probe.result, probe.why) == (runs.MISS, why)
    assert fixed_clock.at_mono == 9000.0  # no ack waited for: the kernel has said no line gets through
    [run] = ctx.store.query("SELECT result, why FROM canary_runs")
    assert (run["result"], run["why"]) == ("miss", why)
    [sent] = ledger.tail(ctx.store, 5, kinds=["canary_sent"])
    assert sent.cause == "inject_failed" and sent.detail["ok"] is False  # the line's own record: not typed
    assert not CanaryLoop(ctx, driver=ctx.driver).misses_mean_deaf()
    assert actions.canary_now(ctx, source="canary").result == runs.MISS
    assert CanaryLoop(ctx, driver=ctx.driver).misses_mean_deaf()  # two: deaf, as misses_to_recycle says


def test_a_line_loom_could_not_type_stays_loom_s_own_failure(ctx):
    ctx.driver = Refusing(TmuxError("the pump did not take the line: no pump answers on its socket"))
    for _ in range(3):
        assert actions.canary_now(ctx, source="canary").result == runs.INJECT_FAILED
    assert not CanaryLoop(ctx, driver=ctx.driver).misses_mean_deaf()


class Typing(Refusing):
    """A live pane that takes every line (and counts them)."""

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator", ref: str = ""):
        self.typed += 1
        return None


def test_a_relaunch_begun_while_the_probe_s_record_waited_for_the_store_skips_the_probe(tmp_path):
    """The probe looks for a relaunch under way before it records its run, and that write can wait
    out a locked store (its busy timeout, on the clock here as in the simulator). A relaunch that
    took recycle.lock meanwhile has its new agent booting: the probe is skipped, not typed into it.
    Real SQLite and file locks; the wait's clock lets the store go and the relaunch begin."""
    import sqlite3

    from loomtui.store import locks

    config = tmp_path / "config.toml"
    config.write_text('[canary]\nack_timeout = "2s"\n')
    loaded = Context.load(str(config), str(tmp_path / "state"), environ={})
    ctx = Context(loaded.config, loaded.config_path, loaded.state_dir, store_waits_on_clock=True)
    loaded.close()
    ctx.driver = typing = Typing(TmuxError("unused"))
    ctx.store.query("SELECT 1")  # opened (and migrated) before the store is locked
    blocker = sqlite3.connect(ctx.store.path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    relaunch: list = []

    class RelaunchMeanwhile(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if not relaunch:
                relaunch.append(locks.hold(ctx.agent_dir, locks.RECYCLE, timeout=0))  # the watchdog's relaunch
                blocker.execute("ROLLBACK")  # and the store free again

    try:
        with clock.use(RelaunchMeanwhile(T0, 9000.0, "boot-a")):
            probe = actions.canary_now(ctx, source="canary")
        assert (probe.result, probe.why) == (runs.SKIPPED, "a relaunch is under way")
        assert typing.typed == 0
        [run] = ctx.store.query("SELECT result FROM canary_runs")
        assert run["result"] == "skipped"
    finally:
        for held in relaunch:
            held.release()
        blocker.close()
        ctx.close()


def test_a_probe_its_prober_never_typed_is_no_miss_however_often_it_happens(ctx, fixed_clock):
    """A prober killed after recording its run and before typing it (the daemon's SIGKILL while it
    waited for inject.lock or a slow paste) leaves a pending run no agent was asked to ack. Settled
    later, it is an error (ours), never a miss: two such deaths recycled a healthy agent."""
    for n in range(2):
        now = clock.now()
        runs.insert_run(ctx, f"n-untyped-{n}", "canary", runs.PENDING, now.wall, now.wall + 2)
        fixed_clock.advance(2 + runs.SETTLE_SLACK)
        assert runs.settle_stale(ctx) == 1
    rows = ctx.store.query("SELECT result, why FROM canary_runs ORDER BY id")
    assert [(r["result"], r["why"]) for r in rows] == [("error", runs.NEVER_TYPED)] * 2
    assert not CanaryLoop(ctx, driver=Typing(TmuxError("unused"))).misses_mean_deaf()
    # One that was typed (its canary_sent says ok) and never acked is a miss, as before.
    now = clock.now()
    typed = runs.insert_run(ctx, "n-typed", "canary", runs.PENDING, now.wall, now.wall + 2)
    ledger.append(ctx.store, "canary_sent", source="canary", detail={"run": typed, "ok": True})
    fixed_clock.advance(2 + runs.SETTLE_SLACK)
    assert runs.settle_stale(ctx) == 1
    assert runs.last_probe(ctx).result == runs.MISS


class Acking(Typing):
    """A live pane whose agent runs the probe's command at once."""

    def type_line(self, text: str, expect_pane_pid: int | None = None, *, origin: str = "operator", ref: str = ""):
        self.typed += 1
        Path(shlex.split(text.rsplit("touch ", 1)[1])[0]).touch()
        return None


def test_a_pending_probe_its_prober_never_typed_is_not_joined(ctx, fixed_clock):
    """Joining it would wait for an ack no agent was asked for, and record its miss: the run is
    settled as never typed and a probe of the asker's own is typed."""
    now = clock.now()
    orphan = runs.insert_run(ctx, "n-untyped", "canary", runs.PENDING, now.wall, now.wall + 2)
    ctx.driver = acking = Acking(TmuxError("unused"))
    asked: list = []
    # A daemon thread: joined, the wait never ends on this clock, and fails the poll, not pytest.
    threading.Thread(target=lambda: asked.append(actions.canary_now(ctx, source="operator")), daemon=True).start()
    [probe] = wait_for(lambda: asked, 60, what="the operator's probe")
    assert (probe.result, probe.joined, acking.typed) == (runs.OK, False, 1)
    [row] = ctx.store.query("SELECT result, why FROM canary_runs WHERE id = ?", (orphan,))
    assert (row["result"], row["why"]) == ("error", runs.NEVER_TYPED)


def test_an_ack_that_comes_while_the_miss_is_recorded_is_kept_and_counted_late(tmp_path):
    """The miss's record can wait out a busy store (its busy timeout), right at the deadline a slow
    agent acks by: the ack written meanwhile was deleted unread, and the miss counted for an agent
    that heard. Real SQLite; the wait's clock lets the agent ack and the store go."""
    import sqlite3

    from loomtui.canary import probe as probe_mod

    config = tmp_path / "config.toml"
    config.write_text('[canary]\nack_timeout = "2s"\n')
    loaded = Context.load(str(config), str(tmp_path / "state"), environ={})
    ctx = Context(loaded.config, loaded.config_path, loaded.state_dir, store_waits_on_clock=True)
    loaded.close()
    ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    acked: list[float] = []
    blocker = sqlite3.connect(ctx.store.path, isolation_level=None)

    class AckMeanwhile(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if not acked:
                ack = ctx.acks_dir / "n-slow"
                ack.touch()
                os.utime(ack, (T0 + 2.5, T0 + 2.5))  # half a second late
                acked.append(T0 + 2.5)
                blocker.execute("ROLLBACK")  # and the store free again

    try:
        with clock.use(AckMeanwhile(T0, 9000.0, "boot-a")) as virtual:
            run_id = runs.insert_run(ctx, "n-slow", "canary", runs.PENDING, T0, T0 + 2)
            row = ctx.store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run_id,))
            virtual.advance(3)  # past its deadline: the wait records the miss at once
            blocker.execute("BEGIN EXCLUSIVE")
            assert probe_mod.wait(ctx, runs.probe_from(row)).result == runs.MISS
            assert acked and (ctx.acks_dir / "n-slow").exists()
            assert runs.note_late_acks(ctx) == 1
        assert runs.last_probe(ctx).ack_at == T0 + 2.5  # it heard, late
    finally:
        blocker.close()
        ctx.close()


def test_an_ack_read_after_another_settler_recorded_the_miss_is_left_for_its_late_record(ctx, fixed_clock):
    """The canary loop's settle_stale recorded the miss first (its prober slow, the store busy);
    the prober then read the late ack, lost the race to record it, and deleted it all the same."""
    from loomtui.canary import probe as probe_mod

    ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
    run_id = runs.insert_run(ctx, "n-raced", "canary", runs.PENDING, T0, T0 + 2)
    row = ctx.store.query_one("SELECT * FROM canary_runs WHERE id = ?", (run_id,))
    fixed_clock.advance(3)
    assert runs.settle_run(ctx, run_id, runs.MISS, why="no ack before the deadline (prober went away)")
    ack = ctx.acks_dir / "n-raced"
    ack.touch()
    os.utime(ack, (T0 + 2.5, T0 + 2.5))
    assert probe_mod.wait(ctx, runs.probe_from(row)).result == runs.MISS
    assert ack.exists() and runs.note_late_acks(ctx) == 1
    assert runs.last_probe(ctx).ack_at == T0 + 2.5
