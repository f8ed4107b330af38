"""Issue 26, busy or deaf, on a real store: the canary loop's count of misses reads the agent's
turns from its recorded hook events and the acks that came late; a permission prompt withholds the
probe and is told to the operator; a line typed into a busy turn does not hasten a probe."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fake_clock import FakeClock
from loomtui import clock
from loomtui.canary.loop import CanaryLoop
from loomtui.canary.rules import MISS, OK, PENDING
from loomtui.canary.runs import insert_run, note_late_acks, recent_runs, settle_run
from loomtui.context import Context
from loomtui.hooks import ingest, settings, turns
from loomtui.store import canary_runs, hook_events, ledger, outbox

BOOT = "b1"


def hooked_ctx(tmp_path: Path, **canary: str) -> Context:
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    extra = "".join(f'{k} = "{v}"\n' for k, v in canary.items())
    config.write_text(f'state_dir = {json.dumps(str(state))}\n[agent]\n'
                      f'fresh_command = "claude --settings {{hook_settings}} --session-id {{session_id}}"\n'
                      f'resume_command = "claude --settings {{hook_settings}} --resume {{session_id}}"\n'
                      f'[canary]\ninterval = "20m"\nack_timeout = "3m"\nmisses_to_recycle = 2\n{extra}')
    return Context.load(str(config), None, environ={})


def hook(ctx: Context, event: str, source: str = "", **detail) -> None:
    with ctx.store.write() as db:
        hook_events.insert_in(db, ctx.agent, clock.now(), event, "s-1", source, detail)


def miss(ctx: Context, virtual: FakeClock, wait: float = 180.0) -> int:
    """A probe sent now that gets no ack within its timeout (the clock moves past it)."""
    sent = clock.wall()
    run = insert_run(ctx, os.urandom(6).hex(), "canary", PENDING, sent, sent + 180.0)
    virtual.advance(wait)
    settle_run(ctx, run, MISS, why="no ack")
    return run


def test_misses_typed_into_a_busy_turn_do_not_count_until_the_turn_goes_quiet(tmp_path):
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        hook(ctx, "UserPromptSubmit")  # the operator's long task begins
        virtual.advance(60)
        for _ in range(3):
            hook(ctx, "PostToolUse", "Bash")
            miss(ctx, virtual)
        assert not loop.misses_mean_deaf()
        assert {r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now()) if r.result == MISS} == {"busy"}
        virtual.advance(15 * 60)  # nothing from the turn for turn_quiet: a wedge, and its misses count,
        assert not loop.misses_mean_deaf()  # found late (canary.rules.should_recycle): one look more
        miss(ctx, virtual)
        assert loop.misses_mean_deaf()
        # The turn ends by itself after all: the agent was alive and working, its misses excused for good.
        hook(ctx, "Stop")
        assert not loop.misses_mean_deaf()
        # A probe after the turn ended counts as ever, and so does the next one.
        miss(ctx, virtual)
        assert not loop.misses_mean_deaf()
        miss(ctx, virtual)
        assert loop.misses_mean_deaf()


def test_a_turn_whose_tool_calls_keep_failing_is_busy_not_quiet(tmp_path):
    """A build or a test run failing again and again: PostToolUse is a success's only, so the turn
    said nothing for turn_quiet, read as a wedge, and its misses recycled a working agent."""
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        hook(ctx, "UserPromptSubmit")
        for _ in range(8):  # 8 x (5 + 3) minutes: well past turn_quiet, a failed call every 8
            virtual.advance(5 * 60)
            hook(ctx, "PostToolUseFailure", "Bash")
            miss(ctx, virtual)
        assert not loop.misses_mean_deaf()
        [turn] = turns.read(ctx)
        assert turn.tool == "Bash" and turn.ended is None


def unread(ctx: Context, name: int | str, at: float, event: str = "PostToolUse", **fields) -> None:
    """An event file the hooks loop has not read yet (the store was locked, say), written (its mtime)
    at `at`; its payload's `fields` beside the event's name (a Bash tool's use when none)."""
    path = settings.events_dir(ctx.agent_dir) / f"ev.{name}.json"
    path.write_text(json.dumps({"hook_event_name": event, "session_id": "s-1", **(fields or {"tool_name": "Bash"})}))
    os.utime(path, (at, at))


def test_a_turn_is_not_taken_for_quiet_while_its_newer_events_wait_unread(tmp_path):
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        hook(ctx, "UserPromptSubmit")
        hook(ctx, "PostToolUse", "Bash")
        miss(ctx, virtual)
        miss(ctx, virtual)
        unread(ctx, 1, clock.wall() + 300)  # the turn went on; the store could not take its event
        virtual.advance(15 * 60)  # quiet for longer than turn_quiet, on what the store holds
        assert not loop.misses_mean_deaf()
        assert {r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now()) if r.result == MISS} == {"busy"}
        assert len(ingest.collect(ctx)) == 1  # read at last: the turn is busy on its own record
        assert not loop.misses_mean_deaf()
        virtual.advance(15 * 60)  # and quiet since, a wedge: its misses count, once looked at again
        assert not loop.misses_mean_deaf()
        miss(ctx, virtual)
        assert loop.misses_mean_deaf()


def test_an_event_file_left_unread_longer_than_turn_quiet_does_not_excuse_a_wedge(tmp_path):
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        hook(ctx, "UserPromptSubmit")
        miss(ctx, virtual)
        miss(ctx, virtual)
        unread(ctx, 1, clock.wall())  # never read (say it cannot be): it holds the judgement back a while
        virtual.advance(14 * 60)
        assert not loop.misses_mean_deaf()
        virtual.advance(2 * 60)  # waiting for longer than turn_quiet: judged on what the store holds,
        miss(ctx, virtual)        # and one look again (the misses were found late)
        assert loop.misses_mean_deaf()


def test_a_wall_clock_stepped_while_events_wait_unread_does_not_date_them(tmp_path):
    """Clockjump seed 15, README's hooked config: the store locked, the busy turn's newer events
    waited in the directory, and the wall clock was stepped back; by their mtimes they were
    written after now, so nothing held the judgement back, and the busy agent was recycled. Once the
    clock was stepped, how long they have waited is the monotonic clock's, from when a look first
    saw them, for turn_quiet at most."""
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        hook(ctx, "UserPromptSubmit")
        hook(ctx, "PostToolUse", "Bash")
        miss(ctx, virtual)
        unread(ctx, 1, clock.wall())  # the turn goes on; the store cannot take its event
        miss(ctx, virtual)
        assert not loop.misses_mean_deaf()  # a look sees it waiting
        virtual.at_wall -= 3600  # stepped back an hour: its mtime now lies ahead
        virtual.advance(10 * 60)  # quiet for 16 minutes on what the store holds
        assert not loop.misses_mean_deaf()
        assert {r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now()) if r.result == MISS} == {"busy"}
        virtual.advance(15 * 60)  # waiting longer than turn_quiet since first seen: judged on the store
        assert not loop.misses_mean_deaf()  # found late: one look more
        miss(ctx, virtual)
        assert loop.misses_mean_deaf()


def test_a_launch_before_a_wall_clock_stepped_back_ends_only_the_turns_before_it(tmp_path):
    """Clockjump seed 11, README's hooked config: the launch's boundary was placed among the turn
    marks by wall time; the clock stepped back since, the new process's own busy turn read as before
    the launch and the boundary ended it: its misses counted, and the busy agent was recycled."""
    from loomtui.agent.launches import LAUNCH_KEY
    from loomtui.agent.records import LaunchRecord

    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        now = clock.now()
        launched = LaunchRecord(now.wall, now.mono, now.boot, "resume", "s-1", "exit")
        with ctx.store.write() as db:
            ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY), launched.to_json(), db)
        virtual.advance(600)
        virtual.at_wall -= 3600  # stepped back an hour: what comes now reads as before the launch
        hook(ctx, "UserPromptSubmit")  # the new process's turn, and it works on
        for _ in range(2):
            virtual.advance(60)
            hook(ctx, "PostToolUse", "Bash")
            miss(ctx, virtual, wait=60.0)
        assert not CanaryLoop(ctx).misses_mean_deaf()
        assert turns.explains(ctx, clock.wall() - 5, clock.now()) == "busy"


def test_without_hooks_every_miss_counts(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        miss(ctx, virtual)
        miss(ctx, virtual)
        assert CanaryLoop(ctx).misses_mean_deaf()


def test_an_ack_that_comes_after_its_miss_was_recorded_ends_the_run_of_misses(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        first = miss(ctx, virtual)
        nonce = canary_runs.get(ctx.store, first)["nonce"]
        ctx.acks_dir.mkdir(mode=0o700, exist_ok=True)
        ack = ctx.acks_dir / nonce
        ack.touch()
        os.utime(ack, (clock.wall(), clock.wall()))
        assert note_late_acks(ctx) == 1
        assert note_late_acks(ctx) == 0  # once
        assert not ack.exists()
        row = canary_runs.get(ctx.store, first)
        assert row["result"] == MISS and row["ack_at"] == clock.wall() and row["latency"] == 180.0
        [late] = [e for e in ledger.tail(ctx.store, 20) if e.kind == "canary_late_ack"]
        assert late.detail == {"run": first, "launch": 0, "latency": 180.0}
        miss(ctx, virtual)
        assert not CanaryLoop(ctx).misses_mean_deaf()  # the late ack broke the run: one miss since
        # The loop looks for late acks itself before it counts.
        third = miss(ctx, virtual)
        (ctx.acks_dir / canary_runs.get(ctx.store, third)["nonce"]).touch()
        assert not CanaryLoop(ctx).misses_mean_deaf()
        assert canary_runs.get(ctx.store, third)["ack_at"] is not None


def test_a_permission_prompt_is_told_once_and_withholds_the_probe_until_it_closes(tmp_path):
    ctx = hooked_ctx(tmp_path)
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        hook(ctx, "UserPromptSubmit")
        # The hook's file, through ingest: the operator hears of it once, its message made printable.
        event = settings.events_dir(ctx.agent_dir) / "ev.7.json"
        event.write_text(json.dumps({
            "hook_event_name": "Notification", "notification_type": "permission_prompt", "session_id": "s-1",
            "message": "Claude needs your permission to use Bash\x1b[2J"}))
        os.utime(event, (clock.wall(), clock.wall()))  # written now (a real mtime lies ahead of this clock)
        assert len(ingest.collect(ctx)) == 1
        [told] = outbox.pending(ctx.store)
        assert told.text == "Loom: the agent waits for your permission: Claude needs your permission to use Bash[2J"
        loop = CanaryLoop(ctx)
        virtual.advance(1.5 * 3600)  # long past the interval (within max_turn): a probe is due, and would answer the dialog
        assert loop.tick() == "" and loop.next_look is None
        assert canary_runs.last(ctx.store, ctx.agent) is None
        miss_run = miss(ctx, virtual)  # a probe typed before the prompt opened would have been excused too
        assert canary_runs.get(ctx.store, miss_run)["result"] == MISS
        assert {r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now())} == {"permission"}
        # Nor is a sentinel's nudge typed into the dialog: refused, not tried (the next tick tries again).
        from loomtui import actions
        nudged = actions.nudge(ctx, "[loom sentinel] Queue item 1: ...", source="sentinel", detail={"item": 1})
        assert (nudged.ok, nudged.refused, nudged.length, nudged.digest, nudged.event_id) == (
            False, "permission", 0, "", 0)
        assert nudged.error == "refused: the agent waits for the operator's permission"
        assert not [e for e in ledger.tail(ctx.store, 50) if e.kind == "queue_nudge"]
        hook(ctx, "PostToolUse", "Bash")  # answered: the tool ran
        assert not turns.withholds_probe(ctx, clock.now())


def test_no_probe_or_nudge_is_typed_while_a_permission_prompts_notification_waits_unread(tmp_path):
    """Hooked storm seed 70, day 2.07: the store locked for fifteen minutes, a permission prompt
    opened in them, its notification waited in the events directory while the hooks loop backed
    off after the lock, and the canary typed a probe into the prompt. The turns are judged as they
    will stand once the waiting events are recorded: no probe and no nudge while they say a prompt
    is open, as the recorded ones would (for max_turn at most)."""
    from loomtui import actions

    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)

    def waiting(n: int, event: str, **fields) -> None:
        unread(ctx, n, clock.wall(), event, **fields)

    def permission(n: int) -> None:
        waiting(n, "Notification", notification_type="permission_prompt",
                message="Claude needs your permission to use Bash")

    with clock.use(virtual):
        hook(ctx, "UserPromptSubmit")
        loop = CanaryLoop(ctx)
        waiting(1, "PostToolUse", tool_name="Read")  # the store locked from here: this waits unread
        virtual.advance(16 * 60)  # longer than turn_quiet: the oldest waiting file bounds nothing here
        assert not turns.withholds_probe(ctx, clock.now())  # a tool's event says nothing of a prompt
        permission(2)
        assert turns.withholds_probe(ctx, clock.now())
        virtual.advance(20 * 60)  # a probe is due (the interval is 20 minutes)
        assert loop.tick() == "" and canary_runs.last(ctx.store, ctx.agent) is None
        nudged = actions.nudge(ctx, "[loom sentinel] Queue item 1: ...", source="sentinel", detail={"item": 1})
        assert (nudged.ok, nudged.refused) == (False, "permission")
        waiting(3, "PreCompact", trigger="auto")  # no turn's event (turn_rules never reads it): still open
        assert turns.withholds_probe(ctx, clock.now())
        waiting(4, "PostToolUse", tool_name="Bash")  # answered: its tool ran
        assert not turns.withholds_probe(ctx, clock.now())
        permission(5)  # asked again
        assert turns.withholds_probe(ctx, clock.now())
        assert len(ingest.collect(ctx)) == 5  # read at last: the recorded turn says the same
        assert turns.withholds_probe(ctx, clock.now())
        permission(6)
        virtual.advance(2 * 3600)  # unread and unanswered for max_turn: probed, as a recorded prompt is
        assert not turns.withholds_probe(ctx, clock.now())
        loop.tick()
        assert canary_runs.last(ctx.store, ctx.agent) is not None  # the probe, typed now


def test_a_lock_s_worth_of_unread_tool_events_before_the_prompt_s_notification_are_all_read(tmp_path):
    # A review of the first fix: it read the newest 200 files only, and the turn's prompt lay further back.
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    with clock.use(FakeClock(1_000_000.0, 5_000.0, BOOT)) as virtual:
        hook(ctx, "UserPromptSubmit")
        hook(ctx, "Stop")  # the last turn recorded has ended: the new one's prompt waits unread
        start = clock.wall()
        unread(ctx, "0", start, "UserPromptSubmit", prompt="go on")
        for n in range(1, 301):
            unread(ctx, f"{n}", start + n, "PostToolUse", tool_name="Read")
        unread(ctx, "301", start + 301, "Notification", notification_type="permission_prompt", message="Bash")
        virtual.advance(400)
        assert turns.withholds_probe(ctx, clock.now())
        assert len(ingest.collect(ctx)) == 302
        assert turns.withholds_probe(ctx, clock.now())  # as the recorded turn says


def test_an_unread_prompt_dated_ahead_of_now_ages_from_when_it_was_first_seen(tmp_path):
    # A wall clock stepped back (or a forged mtime): dated now at every look, it never aged.
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    with clock.use(FakeClock(1_000_000.0, 5_000.0, BOOT)) as virtual:
        unread(ctx, "ahead", clock.wall() + 4 * 3600, "UserPromptSubmit")
        unread(ctx, "ahead2", clock.wall() + 4 * 3600 + 1, "Notification", notification_type="permission_prompt")
        assert turns.withholds_probe(ctx, clock.now())
        virtual.advance(2 * 3600 - 60)
        assert turns.withholds_probe(ctx, clock.now())
        virtual.advance(120)
        assert not turns.withholds_probe(ctx, clock.now())  # max_turn since first seen, still "ahead"


def test_events_recorded_between_the_directory_s_read_and_the_store_s_are_read_again(tmp_path, monkeypatch):
    # A tool's event waited; the prompt's notification came after the listing, and the hooks loop
    # recorded both before the store's read: the tool's event, in both and read last from its
    # file, would have been taken for the newest (the prompt answered).
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    settings.write(ctx.agent_dir)
    with clock.use(FakeClock(1_000_000.0, 5_000.0, BOOT)) as virtual:
        hook(ctx, "UserPromptSubmit")
        unread(ctx, "tool", clock.wall(), "PostToolUse", tool_name="Bash")
        unread_marks, recorded = turns._unread_marks, []

        def meanwhile(ctx, now):
            marks = unread_marks(ctx, now)
            if not recorded:
                unread(ctx, "asked", clock.wall() + 1, "Notification", notification_type="permission_prompt")
                recorded.extend(ingest.collect(ctx))
            return marks

        monkeypatch.setattr(turns, "_unread_marks", meanwhile)
        virtual.advance(2)
        assert turns.withholds_probe(ctx, clock.now())
        assert len(recorded) == 2


def test_a_line_typed_into_a_busy_turn_does_not_hasten_a_probe_until_the_turn_goes_quiet(tmp_path):
    ctx = hooked_ctx(tmp_path, turn_quiet="15m")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        sent = clock.wall()
        ok = insert_run(ctx, "n0", "canary", PENDING, sent, sent + 180)
        settle_run(ctx, ok, OK, ack_at=sent + 1)
        virtual.advance(10)
        hook(ctx, "UserPromptSubmit")  # the operator's turn, after the probe's
        virtual.advance(20)
        ledger.append(ctx.store, "dispatch_missing", source="hooks",
                      detail={"typed": 1, "kind": "inject", "typed_at": clock.wall() - 20, "after": 15.0})
        due = CanaryLoop(ctx)._facts()["due_in"]
        assert due() == 1200 - 30  # queued behind the busy turn: the schedule stands
        virtual.advance(15 * 60)
        assert due() == 0.0  # the turn went quiet: the line was never taken, probe now


def test_status_says_the_turn_as_the_hooks_tell_it(tmp_path):
    from loomtui.report import status

    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        assert status.gather(ctx, look=False).turn.describe() == "idle; no hook event yet"
        hook(ctx, "UserPromptSubmit")
        virtual.advance(240)
        hook(ctx, "PostToolUse", "Bash")
        virtual.advance(5)
        turn = status.gather(ctx, look=False).turn
        assert turn.describe() == "busy 4m5s, last tool Bash; last hook PostToolUse 5s ago"
        assert (turn.as_json(), turn.hooks_json()) == (
            {"state": "busy", "age": 245.0, "quiet": 5.0, "tool": "Bash", "waiting": None, "source": "hooks"},
            {"last_event": "PostToolUse", "age": 5.0})
        virtual.advance(15 * 60)
        assert status.gather(ctx, look=False).turn.describe().startswith(
            "quiet 19m5s (nothing for 15m5s: its misses count), last tool Bash; last hook PostToolUse 15m5s ago")
        hook(ctx, "Notification", "permission_prompt", message="Claude needs your permission to use Bash\x07")
        assert status.gather(ctx, look=False).turn.describe().startswith(
            "waiting for permission: Claude needs your permission to use Bash\u2407;")  # the BEL made visible
        hook(ctx, "Stop")
        assert status.gather(ctx, look=False).turn.describe() == "idle; last hook Stop 0s ago"
    unhooked = tmp_path / "plain.toml"
    unhooked.write_text(f'state_dir = {json.dumps(str(tmp_path / "plain"))}\n')
    assert status.gather(Context.load(str(unhooked), None, environ={}), look=False).turn is None


def test_the_metrics_count_turns_missing_lines_and_dispatch_latency(tmp_path):
    from test_kpis import scrape

    from loomtui.hooks.events import said
    from loomtui.hooks.witness import Witness
    from loomtui.text import digest

    ctx = hooked_ctx(tmp_path)
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        for n, payload in enumerate(({"hook_event_name": "Stop"}, {"hook_event_name": "Stop"},
                                     {"hook_event_name": "StopFailure", "error_type": "rate_limit"},
                                     {"hook_event_name": "StopFailure", "error_type": "made-up by the agent 1"},
                                     {"hook_event_name": "StopFailure", "error_type": "made-up by the agent 2"})):
            (settings.events_dir(ctx.agent_dir) / f"ev.{n}.json").write_text(json.dumps(payload))
        ingest.collect(ctx)
        for text in ("taken quickly", "never taken"):
            ledger.append(ctx.store, "inject", source="cli", detail={"length": len(text), "digest": digest(text),
                                                                    "ok": True})
        virtual.advance(2)
        hook(ctx, "UserPromptSubmit", length=13, said=said("taken quickly"))
        seen.look()
        virtual.advance(20)
        seen.look()
    got = scrape(ctx)
    assert got['loom_turns_total{agent="main",error="",outcome="stopped"}'] == 2
    assert got['loom_turns_total{agent="main",error="rate_limit",outcome="failed"}'] == 1
    # An error type no CLI is known to say is "other": the agent's words are no label (a series each, for good).
    assert got['loom_turns_total{agent="main",error="other",outcome="failed"}'] == 2
    assert got['loom_dispatch_missing_total{agent="main"}'] == 1
    assert got['loom_dispatch_latency_seconds_count{agent="main"}'] == 1
    assert got['loom_dispatch_latency_seconds_sum{agent="main"}'] == 2.0
    assert got['loom_dispatch_latency_seconds_bucket{agent="main",le="1.0"}'] == 0
    assert got['loom_dispatch_latency_seconds_bucket{agent="main",le="2.5"}'] == 1


def test_hook_events_older_than_a_week_are_forgotten(tmp_path):
    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        hook(ctx, "PostToolUse", "Bash")
        virtual.advance(ingest.KEEP - 60)
        hook(ctx, "Stop")
        assert ingest.prune(ctx) == 0
        virtual.advance(61)
        assert ingest.prune(ctx) == 1
        assert [r["event"] for r in hook_events.recent(ctx.store, ctx.agent)] == ["Stop"]


def test_a_turn_of_the_process_before_the_last_launch_excuses_nothing(tmp_path):
    from loomtui.agent.launches import LAUNCH_KEY
    from loomtui.agent.records import LaunchRecord

    ctx = hooked_ctx(tmp_path)
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        hook(ctx, "UserPromptSubmit")  # the old process's turn, never ended: it died in it
        virtual.advance(30)
        now = clock.now()
        launched = LaunchRecord(now.wall, now.mono, now.boot, "resume", "s-1", "exit")
        with ctx.store.write() as db:
            ctx.store.set_meta(ctx.store.agent_key(LAUNCH_KEY), launched.to_json(), db)
        virtual.advance(100)  # past its boot grace; the new process says nothing (wedged at its start)
        miss(ctx, virtual)
        miss(ctx, virtual)
        assert CanaryLoop(ctx).misses_mean_deaf()
        assert turns.explains(ctx, clock.wall() - 5, clock.now()) == ""


def test_the_loops_tick_reads_the_turns_that_excuse_its_misses(tmp_path):
    """The tick's own gathering (not only misses_mean_deaf): two misses typed into a busy turn are
    no reason to recover; once the turn is quiet for turn_quiet they are, and a hold answers."""
    from loomtui import actions

    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    try:
        with clock.use(virtual):
            loop = CanaryLoop(ctx)
            hook(ctx, "UserPromptSubmit")
            virtual.advance(60)
            for _ in range(2):
                hook(ctx, "PostToolUse", "Bash")
                miss(ctx, virtual)
            actions.hold(ctx, "deploying", None, source="cli")  # what a recovery would meet
            assert loop.tick() == "" and loop.quiet  # busy: nothing to recover, the hold waited out
            virtual.advance(15 * 60)
            miss(ctx, virtual)  # the look again that misses found late call for
            assert loop.tick() == "canary_failed: held: held by the operator: deploying (until released)"
    finally:
        ctx.close()


def test_a_long_turn_after_a_probes_lost_stop_is_aged_from_its_own_prompt(tmp_path):
    # The simulator's hooked storm: a probe's own turn lost its Stop; 18 minutes later the operator's
    # turn began, and ran on, its probes missed. Three misses later the probe's ack was no longer
    # among the runs read, its turn read as open from the probe, the operator's prompt inside it:
    # 101 minutes into the operator's turn, older than max_turn to Loom, and recycled at work.
    ctx = hooked_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(1_000_000.0, 5_000.0, BOOT)
    with clock.use(virtual):
        loop = CanaryLoop(ctx)
        sent = clock.wall()
        probe = insert_run(ctx, os.urandom(6).hex(), "canary", PENDING, sent, sent + 180.0)
        virtual.advance(2)
        hook(ctx, "UserPromptSubmit")  # the probe's prompt; its Stop is lost
        virtual.advance(8)
        assert settle_run(ctx, probe, OK, ack_at=clock.wall())
        virtual.advance(18 * 60)
        hook(ctx, "UserPromptSubmit")  # the operator's long task
        began = clock.now()
        while clock.wall() - began.wall < 101 * 60:
            hook(ctx, "PostToolUse", "Bash")
            miss(ctx, virtual, 5 * 60)
        [*_, probes, operators] = turns.read(ctx)
        assert probes.ended is not None and operators.ended is None and operators.began == began
        assert not loop.misses_mean_deaf()  # busy: 101 minutes old, not the 2 hours of the probe's turn
