"""Issue 26: the harness's holds in a real store. A StopFailure file in the agent's events
directory, recorded by the hooks loop's ingest, holds the agent with its cause in the same
transaction (one message to the operator per episode); a later Stop ends the hold; every loop's
admission refuses relaunches meanwhile; `loom status` and `loom release` see it as any hold.
And a resume's SessionStart judged: proven once, by the pinned session, within the boot grace."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import run_loom
from fake_clock import FakeClock
from loomtui import actions, clock
from loomtui.agent import hold_rules, holds
from loomtui.agent.launches import LAUNCH_KEY
from loomtui.agent.records import LaunchRecord
from loomtui.context import Context
from loomtui.hooks import harness_rules, ingest, resume, settings
from loomtui.store import ledger, outbox

BOOT = "b1"


def hooked_ctx(tmp_path: Path) -> Context:
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = {json.dumps(str(state))}\n[agent]\n'
                      f'fresh_command = "claude --settings {{hook_settings}} --session-id {{session_id}}"\n'
                      f'resume_command = "claude --settings {{hook_settings}} --resume {{session_id}}"\n'
                      'boot_grace = "90s"\n')
    ctx = Context.load(str(config), None, environ={})
    settings.write(ctx.agent_dir)
    return ctx


class Hooks:
    """Event files as the hook command leaves them, each dated on the virtual clock, then ingested."""

    def __init__(self, ctx: Context, virtual: FakeClock) -> None:
        self.ctx, self.virtual, self.n = ctx, virtual, 0

    def __call__(self, event: str, **fields) -> None:
        self.n += 1
        path = settings.events_dir(self.ctx.agent_dir) / f"ev.{self.n}.json"
        path.write_text(json.dumps({"session_id": "s-1", "hook_event_name": event, **fields}))
        os.utime(path, (self.virtual.at_wall, self.virtual.at_wall))
        self.virtual.advance(1)
        assert len(ingest.collect(self.ctx)) == 1


def messages(ctx: Context) -> list[str]:
    return [m.text for m in reversed(outbox.recent(ctx.store))]


def kinds(ctx: Context, *wanted: str) -> list:
    return [e for e in ledger.tail(ctx.store, 500) if e.kind in wanted]


def test_a_rate_limit_holds_without_a_relaunch_tells_once_and_a_success_releases(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        hook("StopFailure", error="rate_limit", error_details="429 Too Many Requests")
        hold = holds.current(ctx, clock.now())
        assert (hold.by, hold.cause, hold.actor) == ("harness", "rate_limited", "hooks")
        assert hold.until == hold.since + harness_rules.DEFAULT_HOLD
        assert "by the harness (rate_limited)" in hold_rules.describe(hold, clock.now())
        [told] = messages(ctx)
        assert "rate_limit" in told and "rate_limited" in told and "no relaunch" in told and "30m" in told
        [placed] = kinds(ctx, "hold_placed")
        assert placed.source == "hooks" and placed.cause == "rate_limited" and placed.detail["by"] == "harness"

        # Nothing destructive runs while it holds: the watchdog's and the canary's recover, a nudge.
        for source, cause in (("watchdog", "crash"), ("canary", "canary_failed")):
            assert actions.recover(ctx, cause, source=source).status == "held"
        assert actions.admit(ctx, "nudge", cause="queue_item", source="sentinel") is not None
        assert not kinds(ctx, "relaunch")

        hook("StopFailure", error="rate_limit")  # the next failed turn: the hold renewed, nothing said
        assert len(messages(ctx)) == 1 and holds.current(ctx, clock.now()).since == virtual.at_wall - 1
        hook("StopFailure", error="server_error")  # the normal path: recorded, nothing else
        assert len(messages(ctx)) == 1 and holds.current(ctx, clock.now()).cause == "rate_limited"
        assert [e.detail["source"] for e in kinds(ctx, "turn_failed")] == ["rate_limit", "rate_limit", "server_error"]

        hook("Stop")  # a turn that succeeded: the hold ends by itself, silently
        assert holds.current(ctx, clock.now()) is None
        [cleared] = kinds(ctx, "hold_cleared")
        assert cleared.detail["how"] == "succeeded" and cleared.detail["held_by"] == "harness"
        assert cleared.cause == "rate_limited" and len(messages(ctx)) == 1

        hook("StopFailure", error="rate_limit")  # after a success: a new episode, told again
        assert len(messages(ctx)) == 2 and holds.current(ctx, clock.now()) is not None


def test_a_hold_that_ran_out_is_renewed_silently_by_the_next_failure_and_a_login_is_news(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        hook("StopFailure", error="rate_limit")
        virtual.advance(harness_rules.DEFAULT_HOLD + 5)
        assert holds.current(ctx, clock.now()) is None
        assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog") is None  # recorded as expired
        assert kinds(ctx, "hold_cleared")[-1].detail["how"] == "expired"
        hook("StopFailure", error="rate_limit")  # the canary's next look fails too: held again, silently
        assert holds.current(ctx, clock.now()).cause == "rate_limited" and len(messages(ctx)) == 1
        # A hold past its end that no loop expired yet is expired by the next event, and judged the same.
        virtual.advance(harness_rules.DEFAULT_HOLD + 5)
        hook("StopFailure", error="rate_limit")
        assert len(messages(ctx)) == 1 and [e.detail["how"] for e in kinds(ctx, "hold_cleared")] == ["expired"] * 2
        hook("StopFailure", error="authentication_failed")  # another cause: told
        assert holds.current(ctx, clock.now()).cause == "auth" and len(messages(ctx)) == 2
        assert "authentication_failed" in messages(ctx)[-1]


def test_a_failure_after_a_success_is_news_also_when_the_hold_ran_out_before_the_success(tmp_path):
    # The hold ran out, no loop recorded it yet, and a turn succeeded: recorded as expired at the
    # reading of that Stop, after it, the success seemed to come before the end, and the next
    # rate limit was taken for the same episode: the operator never heard of it.
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        hook("StopFailure", error="rate_limit")
        virtual.advance(harness_rules.DEFAULT_HOLD + 5)
        hook("Stop")
        assert holds.current(ctx, clock.now()) is None
        assert [e.detail["how"] for e in kinds(ctx, "hold_cleared")] == ["expired"]
        virtual.advance(600)
        hook("StopFailure", error="rate_limit")
        assert holds.current(ctx, clock.now()).cause == "rate_limited" and len(messages(ctx)) == 2


def test_a_reset_time_in_the_payload_ends_the_hold_but_never_beyond_a_day(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        failed_at = virtual.at_wall
        hook("StopFailure", error="rate_limit", resets_at=failed_at + 7200)
        assert holds.current(ctx, clock.now()).until == failed_at + 7200
        assert "2h" in messages(ctx)[-1] and "reset time" in messages(ctx)[-1]
        failed_at = virtual.at_wall
        hook("StopFailure", error="rate_limit", resets_at=failed_at + 30 * 86400)
        assert holds.current(ctx, clock.now()).until == failed_at + harness_rules.MAX_AHEAD


def test_an_operator_s_hold_is_left_as_it_is(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        actions.hold(ctx, "deploying", None, source="cli")
        hook("StopFailure", error="billing_error")
        hook("Stop")
        hold = holds.current(ctx, clock.now())
        assert (hold.by, hold.reason) == ("operator", "deploying")
        assert messages(ctx) == [] and not kinds(ctx, "hold_cleared")


def test_loom_status_shows_the_harness_s_hold_with_its_cause_and_loom_release_ends_it(tmp_path):
    ctx = hooked_ctx(tmp_path)
    hook = Hooks(ctx, FakeClock(time.time(), time.monotonic(), None))
    hook("StopFailure", error="billing_error")
    config = str(tmp_path / "config.toml")
    shown = run_loom("status", "--config", config)
    assert "held by the harness (billing)" in shown.stdout, shown.stdout + shown.stderr
    status = json.loads(run_loom("status", "--json", "--config", config).stdout)
    assert status["hold"]["by"] == "harness" and status["hold"]["cause"] == "billing"
    released = run_loom("release", "--config", config)
    assert released.returncode == 0 and "the harness's hold" in released.stdout, released.stdout + released.stderr
    assert holds.current(ctx, clock.now()) is None


# -- a resume judged by its SessionStart ---------------------------------------------------------


def launched(ctx: Context, mode: str, session: str, at: float) -> int:
    """A launch as relaunch_locked records it: the relaunch event and the launch record."""
    with ctx.store.write() as db:
        event = ledger.append_in(db, "relaunch", source="watchdog", cause="crash", ts=at,
                                 detail={"mode": mode, "old_session": session, "new_session": session})
        ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY), LaunchRecord(at, None, None, mode, session, "crash").to_json(), db)
    return event.id


def test_a_resume_is_proven_once_by_the_pinned_session_s_start(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        relaunch = launched(ctx, "resume", "pinned-1", virtual.at_wall - 0.5)
        assert resume.look(ctx) is None and not kinds(ctx, "resume_proven")  # no word yet
        hook("SessionStart", source="resume", session_id="pinned-1")
        assert resume.look(ctx) is None and resume.look(ctx) is None
        [proof] = kinds(ctx, "resume_proven")
        assert proof.source == "hooks" and proof.detail["relaunch"] == relaunch
        assert proof.detail["started"] == {"source": "resume", "session_id": "pinned-1"}
        assert not kinds(ctx, "resume_failed", "relaunch_failed") and len(kinds(ctx, "relaunch")) == 1


def test_the_pinned_session_s_first_start_told_late_is_passed_over_for_the_resume_s_own(tmp_path):
    # Storm seed 4, day 7.9 (docs/SIM.md): the fresh launch that made the session, its SessionStart
    # written late by a hook of that process, just after Loom resumed the session; taken for the
    # resume's, it failed a resume that had worked and started fresh, wiping the conversation.
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        relaunch = launched(ctx, "resume", "pinned-1", virtual.at_wall - 0.5)
        hook("SessionStart", source="startup", session_id="pinned-1")  # the session's birth, told late
        assert resume.look(ctx) is None
        assert not kinds(ctx, "resume_proven", "resume_failed")
        virtual.advance(1.0)
        hook("SessionStart", source="resume", session_id="pinned-1")  # the resume's own
        assert resume.look(ctx) is None
        [proof] = kinds(ctx, "resume_proven")
        assert proof.detail["relaunch"] == relaunch and proof.detail["started"]["source"] == "resume"
        assert not kinds(ctx, "resume_failed") and len(kinds(ctx, "relaunch")) == 1


def test_no_verdict_from_a_fresh_launch_nor_from_a_start_past_the_boot_grace(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        launched(ctx, "fresh", "new-1", virtual.at_wall - 0.5)
        hook("SessionStart", source="startup", session_id="other")
        assert resume.look(ctx) is None
        launched(ctx, "resume", "pinned-2", virtual.at_wall - 0.5)
        virtual.advance(ctx.config.agent.boot_grace + 1)
        hook("SessionStart", source="startup", session_id="other")  # too late to speak for the boot
        assert resume.look(ctx) is None
        assert not kinds(ctx, "resume_proven", "resume_failed") and len(kinds(ctx, "relaunch")) == 2


def test_no_verdict_for_a_relaunch_that_launched_nothing(tmp_path):
    # A resume whose stop left the old agent running (launch.relaunch_locked): the ledger's last
    # relaunch is the failed one, the launch record the older launch, put back. The older launch's
    # own SessionStart does not speak for the relaunch that started nothing.
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        older = LaunchRecord(virtual.at_wall - 60, 5000.0 - 60, BOOT, "resume", "pinned-1", "crash")
        with ctx.store.write() as db:
            ledger.append_in(db, "relaunch", source="watchdog", cause="crash", ts=older.ts,
                             detail={"mode": "resume", "old_session": "pinned-1", "new_session": "pinned-1",
                                     "mono": older.mono, "boot": BOOT})
            ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY), older.to_json(), db)
        hook("SessionStart", source="startup", session_id="other")  # the older launch's resume failed
        with ctx.store.write() as db:  # the relaunch that found the old agent would not die
            ledger.append_in(db, "relaunch", source="watchdog", cause="canary_failed", ts=virtual.at_wall,
                             detail={"mode": "resume", "old_session": "pinned-1", "new_session": "pinned-1",
                                     "mono": 5000.0, "boot": BOOT})
            ledger.append_in(db, "relaunch_failed", source="watchdog", cause="canary_failed",
                             detail={"mode": "resume", "session": "pinned-1", "error": "would not die"})
        assert resume.look(ctx) is None
        assert not kinds(ctx, "resume_proven", "resume_failed") and len(kinds(ctx, "relaunch")) == 2


def test_an_event_file_dated_ahead_is_taken_as_written_when_read(tmp_path):
    """An mtime ahead of the reading (the wall clock stepped back while the file waited, or set by
    hand): the event was recorded with that time to come, so a rate limit's hold never ran out and no
    Stop was ever after it; a permission prompt in a turn would have held probes back for good."""
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    with clock.use(virtual):
        path = settings.events_dir(ctx.agent_dir) / "ev.1.json"
        path.write_text(json.dumps({"session_id": "s-1", "hook_event_name": "StopFailure", "error": "rate_limit"}))
        ahead = virtual.at_wall + 30 * 86400
        os.utime(path, (ahead, ahead))
        assert len(ingest.collect(ctx)) == 1
        hold = holds.current(ctx, clock.now())
        assert hold is not None and hold.since <= clock.now().wall and hold.start.mono <= clock.now().mono
        virtual.advance(harness_rules.DEFAULT_HOLD + 1)
        assert holds.current(ctx, clock.now()) is None  # it ran out, as a hold placed now does
        hook = Hooks(ctx, virtual)
        hook("StopFailure", error="rate_limit")
        hook("Stop")
        assert holds.current(ctx, clock.now()) is None  # and a later success ends one


def test_a_failed_resume_held_off_is_settled_by_the_hold_not_carried_out_at_its_release(tmp_path):
    """The operator holds the agent and resumes it by hand; its CLI starts another session
    (resume_failed, by the hooks). The hold refuses the fresh start, and the agent goes on, for
    hours maybe, in the conversation its CLI started: the release must not wipe it then."""
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        actions.hold(ctx, "looking into it", None, source="cli")
        launched(ctx, "resume", "pinned-1", virtual.at_wall - 0.5)
        hook("SessionStart", source="startup", session_id="another")
        assert resume.look(ctx) is None
        [failed] = kinds(ctx, "resume_failed")
        assert failed.source == "hooks" and failed.detail["started"]["session_id"] == "another"
        virtual.advance(6 * 3600)
        actions.release(ctx, source="cli")
        before = [e.id for e in ledger.tail(ctx.store, 500)]
        assert resume.look(ctx) is None and resume.look(ctx) is None
        assert [e.id for e in ledger.tail(ctx.store, 500)] == before  # nothing tried, nothing refused
        assert len(kinds(ctx, "relaunch")) == 1


def test_the_misses_a_rate_limit_caused_do_not_recycle_once_its_hold_ran_out(tmp_path):
    """A probe typed into a rate-limited agent begins a turn the CLI retries, then fails: its miss
    was the quota's. Counted, it outlived the hold, and at the hold's end the next probe (its turn
    retrying the 429 again, no StopFailure yet) made two misses: a recycle, then a fresh start."""
    from loomtui.canary import runs as canary_runs
    from loomtui.canary.loop import CanaryLoop

    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        def missed(nonce: str) -> None:
            now = clock.now()
            canary_runs.insert_run(ctx, nonce, "canary", canary_runs.MISS, now.wall, now.wall + 60)
            virtual.advance(1)
            hook("UserPromptSubmit", prompt=f"liveness check {nonce}")  # the probe's own turn

        missed("n-1")
        virtual.advance(180)  # the CLI retries the 429, then gives up
        hook("StopFailure", error="rate_limit")
        assert holds.current(ctx, clock.now()).cause == "rate_limited"
        virtual.advance(harness_rules.DEFAULT_HOLD + 5)
        assert holds.current(ctx, clock.now()) is None  # ran out, no turn succeeded
        missed("n-2")  # its turn retries again: open, no StopFailure yet
        virtual.advance(60)
        assert not CanaryLoop(ctx).misses_mean_deaf()
        from loomtui.hooks import turns

        judged = turns.excused(ctx, canary_runs.recent_runs(ctx), clock.now())
        assert [r.excused for r in judged] == ["refused", ""]  # the first: its own turn refused by the API
        virtual.advance(120)
        hook("StopFailure", error="rate_limit")  # and so the next hold, still no relaunch
        assert not CanaryLoop(ctx).misses_mean_deaf()
        assert not kinds(ctx, "relaunch")


def test_a_cron_canary_tick_records_the_agent_s_hook_events_before_it_reads_the_turns(tmp_path):
    """`loom tick canary` from cron: no daemon runs the hooks loop, so the tick records the event
    files itself. Unread, they piled up (whole payloads), and no rate limit held, no busy turn
    excused a miss, no resume was proven."""
    from loomtui.daemon.oneshot import tick_once

    ctx = hooked_ctx(tmp_path)
    events = settings.events_dir(ctx.agent_dir)
    (events / "ev.1.json").write_text(json.dumps({"session_id": "s-1", "hook_event_name": "StopFailure",
                                                  "error": "rate_limit"}))
    outcome = tick_once(ctx, "canary")
    assert outcome.status == "ran", outcome.line
    hold = holds.current(ctx, clock.now())
    assert hold is not None and hold.cause == "rate_limited"
    assert not list(events.iterdir())
    assert not kinds(ctx, "canary_sent")  # held: nothing probed


def test_a_permission_prompt_after_a_week_without_events_is_told_though_its_row_id_was_used_before(tmp_path):
    """A prune that empties the table gives the next event the id of one forgotten, and the outbox
    keeps every key it sent: keyed by the row id alone, the new prompt went untold."""
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        hook("Notification", notification_type="permission_prompt", message="Claude needs your permission to use Bash")
        virtual.advance(8 * 86400)
        assert ingest.prune(ctx) == 1
        hook("Notification", notification_type="permission_prompt", message="Claude needs your permission to use Edit")
    told = [m for m in messages(ctx) if "waits for your permission" in m]
    assert len(told) == 2 and told[1].endswith("to use Edit")


def test_a_turn_that_succeeded_ends_the_hold_though_the_wall_clock_stepped_back_between(tmp_path):
    """NTP stepped the clock back two minutes after the rate limit: the next turn's Stop was dated
    before the hold began, by wall time, and the hold lasted its whole time though the agent was
    working again."""
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(time.time(), 5000.0, BOOT)
    hook = Hooks(ctx, virtual)
    with clock.use(virtual):
        hook("StopFailure", error="rate_limit")
        assert holds.current(ctx, clock.now()) is not None
        virtual.at_wall -= 120
        virtual.advance(30)
        hook("Stop")
        assert holds.current(ctx, clock.now()) is None
        [cleared] = kinds(ctx, "hold_cleared")
        assert cleared.detail["how"] == "succeeded"


def test_a_canary_tick_beside_a_running_daemon_leaves_the_hook_events_to_the_daemon_s_hooks_loop(tmp_path):
    from loomtui.daemon.oneshot import tick_once
    from loomtui.store import locks

    ctx = hooked_ctx(tmp_path)
    events = settings.events_dir(ctx.agent_dir)
    (events / "ev.1.json").write_text(json.dumps({"session_id": "s-1", "hook_event_name": "StopFailure",
                                                  "error": "rate_limit"}))
    class NoPane:  # the driver port with no agent running: the tick types nothing anywhere
        has_dialogs, owns_turns = False, False

        def pane_pid(self) -> None:
            return None

        def type_line(self, text, expect_pane_pid=None, *, origin="operator", ref=""):
            from loomtui.errors import TmuxError

            raise TmuxError("no pane")

    ctx.driver = NoPane()
    with locks.hold(ctx.state_dir, locks.SUPERVISOR, timeout=0):  # `loom supervise` runs
        tick_once(ctx, "canary", source="cli")
    assert [p.name for p in events.iterdir()] == ["ev.1.json"]  # left for the daemon, not read twice
