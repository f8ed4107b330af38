"""launch.relaunch_locked when the old agent will not die (its processes outlive SIGTERM and
SIGKILL): no agent is launched, so nothing changed hands. The relaunch and its failure stay in the
ledger (an attempt counts toward the fuse and the ceiling), but the launch record goes back to what
it was: a turn open in the old agent, which runs on, is not ended by a launch that never happened
(the hooked storm's seed 10 recycled a busy agent so), nor taken for a boot. A real
store; the driver port answers stop with the survivors, as the tmux driver does."""

from __future__ import annotations

import pytest

from fake_clock import FakeClock
from loomtui import clock
from loomtui.agent import launch, launches, recovery
from loomtui.agent.tmux import TmuxError
from loomtui.agent.records import LaunchRecord
from loomtui.context import Context
from loomtui.store import ledger, session

T0 = 1_800_000_000.0
MONO = 5000.0
BOOT = "boot-a"


class StubbornTree:
    """The driver port of an agent whose processes survive the stop; a launch would be a bug."""

    has_dialogs = True
    owns_turns = False

    def __init__(self) -> None:
        self.stops = 0

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]:
        self.stops += 1
        return [4242]

    def launch(self, *args, **kwargs):
        raise AssertionError("launched while the old agent still ran")


@pytest.fixture
def ctx(tmp_path):
    with clock.use(FakeClock(T0, MONO, BOOT)):
        c = Context.load(None, str(tmp_path / "state"), environ={})
        yield c
        c.close()


def pin(ctx, session_id: str) -> None:
    with ctx.store.write() as db:
        session.pin_in(db, session_id)


def launched_before(ctx) -> LaunchRecord:
    record = LaunchRecord(T0 - 600, MONO - 600, BOOT, "fresh", "s-old", "crash")
    ctx.store.set_meta(ctx.store.agent_key(launches.LAUNCH_KEY), record.to_json())
    pin(ctx, "s-old")
    return record


@pytest.mark.parametrize("mode", ["fresh", "resume"])
def test_a_stop_that_leaves_the_old_agent_running_puts_the_launch_record_back(ctx, mode):
    before = launched_before(ctx)
    driver = StubbornTree()
    outcome = launch.relaunch_locked(ctx, mode, cause="canary_failed", source="watchdog", driver=driver)
    assert not outcome.ok and "would not die" in (outcome.error or "")
    assert driver.stops == 1
    assert launches.last_launch(ctx) == before
    assert not launches.in_boot_grace(ctx)
    # The old agent runs on in its session: a fresh one's new pin goes back (left, the next crash
    # resumed a session never launched, failed, and started fresh: the running conversation lost).
    assert session.pinned(ctx.store) == "s-old"
    events = ledger.tail(ctx.store, 10)
    assert [e.kind for e in events][-2:] == ["relaunch", "relaunch_failed"]
    assert events[-2].detail["mode"] == mode  # the attempt is in the ledger, as it was tried
    assert (events[-1].detail["relaunch"], events[-1].detail["stopped"]) == (events[-2].id, False)


class LaunchFails(StubbornTree):
    """The old agent stops; the new one cannot be launched (tmux stopped answering)."""

    def stop(self, grace: float, recorded: dict | None = None) -> list[int]:
        self.stops += 1
        return []

    def launch(self, *args, **kwargs):
        raise TmuxError("tmux did not answer")


@pytest.mark.parametrize("driver", [StubbornTree, LaunchFails])
def test_a_canary_relaunch_that_launched_nothing_does_not_make_the_next_one_fresh(ctx, driver):
    """The policy starts fresh a session already relaunched for canary_failed (resumed, it revived
    its wedge): one whose relaunch launched nothing was never resumed, and is resumed now."""
    launched_before(ctx)
    assert not launch.relaunch_locked(ctx, "resume", cause="canary_failed", source="canary", driver=driver()).ok
    assert not ledger.canary_recycled(ctx.store, ctx.agent, "s-old")
    assert recovery.situation(ctx, "canary_failed").canary_recycled == frozenset()
    # One that launched counts.
    ledger.append(ctx.store, "relaunch", source="canary", cause="canary_failed",
                  detail={"mode": "resume", "old_session": "s-old", "new_session": "s-old"})
    assert ledger.canary_recycled(ctx.store, ctx.agent, "s-old")


def test_a_fresh_relaunch_whose_launch_failed_after_the_stop_puts_the_pin_back_and_keeps_its_record(ctx):
    # The old agent is gone; the session it ran is still the one to resume (the new one never ran).
    launched_before(ctx)
    outcome = launch.relaunch_locked(ctx, "fresh", cause="crash", source="watchdog", driver=LaunchFails())
    assert not outcome.ok and "tmux did not answer" in (outcome.error or "")
    assert session.pinned(ctx.store) == "s-old"
    assert launches.last_launch(ctx).mode == "fresh"  # the stop happened: the record is the attempt's
    failed = ledger.tail(ctx.store, 1)[-1]
    assert (failed.kind, failed.detail["stopped"]) == ("relaunch_failed", True)


def test_with_no_launch_recorded_before_none_is_left_behind(ctx):
    pin(ctx, "s-old")
    outcome = launch.relaunch_locked(ctx, "fresh", cause="crash", source="watchdog", driver=StubbornTree())
    assert not outcome.ok
    assert launches.last_launch(ctx) is None


@pytest.mark.parametrize("driver", [StubbornTree, LaunchFails])
@pytest.mark.parametrize("mode", ["fresh", "resume"])
def test_a_fresh_relaunch_with_no_pin_before_that_launched_nothing_leaves_none(ctx, driver, mode):
    """A resume with nothing pinned starts fresh; launching nothing, it left its new session
    pinned, never launched: the next crash resumed that, failed, and started fresh."""
    outcome = launch.relaunch_locked(ctx, mode, cause="crash", source="watchdog", driver=driver())
    assert not outcome.ok and outcome.mode == "fresh"
    assert session.pinned(ctx.store) is None
    assert session.read_sidecar(ctx.state_dir) is None
    relaunch = [e for e in ledger.tail(ctx.store, 10) if e.kind == "relaunch"][-1]
    assert relaunch.detail["old_session"] is None and relaunch.detail["new_session"]
