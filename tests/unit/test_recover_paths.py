"""actions.recover and the facts it decides from (agent/recovery.py), on the paths that never
reach a relaunch: a hold, the backoff, the ceiling's escalation, recycle.lock busy, a second look
that finds the failure gone; and what the agent may not do without `agent.may_hold`. The ledger,
the messages to the operator and the loop KPIs are what the operator reads. A real store in a
temporary state dir, on a clock the test sets (the relaunches are ledger events, as Loom writes them).
"""

from __future__ import annotations

import secrets
import subprocess

import pytest

from fake_clock import FakeClock
from loomtui import actions, clock
from loomtui.actors import Actor
from loomtui.agent import holds, launch, launches, policy, recovery
from loomtui.context import Context
from loomtui.store import counters, ledger, locks, outbox, session
from loomtui.text import digest

T0 = 1_800_000_000.0
MONO = 5000.0
BOOT = "boot-a"
# A private tmux socket for each agent: a mutant that lets a relaunch through (make mutants) must
# not start an agent on the operator's own socket.
SOCKET = f"loomtest-recover-{secrets.token_hex(4)}"
ONE_AGENT = f'[agent]\ntmux_socket = "{SOCKET}"\n'
TWO_AGENTS = (f'[[agents]]\nname = "main"\ntmux_socket = "{SOCKET}"\n'
              f'[[agents]]\nname = "beta"\ntmux_socket = "{SOCKET}-beta"\n')
AGENT = Actor("agent", session="s-1", agent="main")


@pytest.fixture(scope="module", autouse=True)
def no_tmux_server_left():
    """A recovery the policy lets through relaunches for real (the release's test does, and so
    does any mutant that lets one through): its tmux session, the placeholder pane, was left running
    on the private socket after the run. Ended with the module."""
    yield
    for socket in (SOCKET, f"{SOCKET}-beta"):
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=30, check=False)


@pytest.fixture(autouse=True)
def fixed_clock():
    with clock.use(FakeClock(T0, MONO, BOOT)) as c:
        yield c


@pytest.fixture
def ctx(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(ONE_AGENT)
    c = Context.load(str(config), str(tmp_path / "state"), environ={})
    yield c
    c.close()


@pytest.fixture
def beta(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(TWO_AGENTS)
    main = Context.load(str(config), str(tmp_path / "state"), {})
    b = main.for_agent("beta")
    yield b
    b.close()
    main.close()


def relaunched(ctx, ago: float, cause: str = "crash", mode: str = "resume", old: str = "s-0", new: str = "s-1"):
    """A relaunch `ago` seconds before T0, as launch.relaunch_locked records it (both clocks)."""
    return ledger.append(ctx.store, "relaunch", source="watchdog", cause=cause, ts=T0 - ago,
                         detail={"mode": mode, "old_session": old, "new_session": new,
                                 "mono": MONO - ago, "boot": BOOT})


def admitted(ctx):
    return {tuple(sorted(c.labels.items())): c.value for c in counters.read(ctx.store, "loom_admit_total")
            if c.name == "loom_admit_total"}


def kinds(ctx):
    return [e.kind for e in ledger.tail(ctx.store, 100)]


def test_the_history_is_the_agents_relaunches_oldest_first_on_both_clocks(ctx, beta):
    relaunched(ctx, 300, cause="crash", old="a", new="b")
    relaunched(beta, 200, cause="exit")
    relaunched(ctx, 100, cause="canary_failed", mode="fresh", old="b", new="c")
    history = recovery.history(ctx)
    assert [(r.cause, r.mode, r.old_session, r.new_session) for r in history] == [
        ("crash", "resume", "a", "b"), ("canary_failed", "fresh", "b", "c")]
    assert [r.at for r in history] == [clock.Instant(T0 - 300, MONO - 300, BOOT), clock.Instant(T0 - 100, MONO - 100, BOOT)]
    assert [r.cause for r in recovery.history(beta)] == ["exit"]


def test_a_session_recycled_for_canary_failed_is_known_as_such(ctx):
    relaunched(ctx, 100, cause="canary_failed", old="deaf", new="s-2")
    relaunched(ctx, 50, cause="crash", old="crashed", new="s-3")
    assert recovery.canary_recycled(ctx, "deaf") == frozenset({"deaf"})
    assert recovery.canary_recycled(ctx, "crashed") == frozenset()
    assert recovery.canary_recycled(ctx, None) == frozenset()
    with ctx.store.write() as db:
        session.pin_in(db, "deaf")
    s = recovery.situation(ctx, "crash")
    assert (s.cause, s.pinned, s.held, s.canary_recycled, len(s.history)) == ("crash", "deaf", False, {"deaf"}, 2)
    # Never resumed again: the decision from these facts starts fresh.
    decision = policy.decide(s, policy.limits_from(ctx.config), clock.now())
    assert decision.mode == policy.FRESH and "this session was already recycled for canary_failed" in decision.reasons


def test_a_hold_refuses_an_automatic_recovery_once_in_the_ledger_and_counts_each(ctx):
    actions.hold(ctx, "deploying", None, source="cli")
    for _ in range(2):
        result = actions.recover(ctx, "crash", source="watchdog")
        assert result.status == "held" and not result.ok and result.decision is None
        assert result.notes == ["held by the operator: deploying (until released)"]
        assert result.describe() == "held: held by the operator: deploying (until released)"
    assert kinds(ctx).count("refused") == 1 and "relaunch" not in kinds(ctx)
    assert admitted(ctx) == {(("decision", "refused"), ("loop", "watchdog"), ("reason", "hold")): 2.0}


def test_an_operator_trigger_is_never_refused_by_the_hold_but_the_policy_still_holds(ctx):
    actions.hold(ctx, "deploying", None, source="cli")
    result = actions.recover(ctx, "crash", source="cli")  # `loom tick`: an automatic cause, the operator's hands
    assert result.status == "held" and result.decision.action == policy.HOLD and not result.decision.escalate
    assert "refused" not in kinds(ctx) and "escalation" not in kinds(ctx)
    assert admitted(ctx) == {(("decision", "refused"), ("loop", "operator"), ("reason", "hold")): 1.0}


def test_inside_the_backoff_the_recovery_waits_and_says_how_long(ctx, beta):
    relaunched(ctx, 2.0)
    result = actions.recover(ctx, "crash", source="canary")
    assert result.status == "waiting" and result.decision.action == policy.WAIT
    assert result.decision.wait == pytest.approx(3.0)
    assert result.describe() == "waiting: backoff: 5s after relaunch 1"
    assert admitted(ctx) == {(("decision", "refused"), ("loop", "canary"), ("reason", "backoff")): 1.0}
    relaunched(beta, 2.0)
    actions.recover(beta, "crash", source="watchdog")
    assert admitted(ctx)[(("agent", "beta"), ("decision", "refused"), ("loop", "watchdog"), ("reason", "backoff"))] == 1.0


def test_at_the_ceiling_loom_holds_and_tells_the_operator_once(ctx):
    for i in range(6):
        relaunched(ctx, 3000 - 500 * i)
    result = actions.recover(ctx, "exit", source="watchdog")
    assert result.status == "held" and result.notes == ["escalated to the operator"]
    assert result.decision.escalate and result.decision.reasons == ("ceiling: 6 automatic relaunches within 3600s",)
    [escalation] = ledger.tail(ctx.store, 10, kinds=["escalation"])
    assert (escalation.source, escalation.cause, escalation.ts) == ("watchdog", "exit", T0)
    assert escalation.detail == {"reasons": ["ceiling: 6 automatic relaunches within 3600s"], "held": True}
    hold = recovery.held(ctx)
    assert (hold.by, hold.reason, hold.cause, hold.until) == ("ceiling", "ceiling: 6 automatic relaunches within 3600s",
                                                             "exit", None)
    assert (hold.since, hold.mono, hold.boot) == (T0, MONO, BOOT)
    [message] = outbox.pending(ctx.store)
    assert message.text == (
        "Loom stopped relaunching the agent: ceiling: 6 automatic relaunches within 3600s. Last cause: exit. "
        "Automatic recovery is on hold until you act (loom recycle --resume or --fresh). "
        f"ledger {ledger.format_head(escalation.id, escalation.hash)}")
    assert admitted(ctx) == {(("decision", "refused"), ("loop", "watchdog"), ("reason", "ceiling")): 1.0}
    again = actions.recover(ctx, "crash", source="watchdog")  # now the hold refuses it
    assert again.status == "held" and again.notes == [
        "held at the ceiling: ceiling: 6 automatic relaunches within 3600s (until released)"]
    assert kinds(ctx).count("escalation") == 1 and len(outbox.pending(ctx.store)) == 1


def test_a_release_of_the_ceilings_hold_starts_a_new_budget_as_a_relaunch_by_hand_does(ctx):
    """`loom release` ends the ceiling's hold; the same relaunches still in the window held the agent
    again at the next recovery and told the operator again, as if the release had done nothing."""
    for i in range(6):
        relaunched(ctx, 3000 - 500 * i)
    assert actions.recover(ctx, "exit", source="watchdog").decision.escalate
    actions.release(ctx, source="cli")
    again = actions.recover(ctx, "crash", source="watchdog")
    assert again.decision is not None and again.decision.action == policy.RELAUNCH
    assert kinds(ctx).count("escalation") == 1 and len(outbox.pending(ctx.store)) == 1
    assert [r.cause for r in recovery.history(ctx)][-2:] == [policy.RELEASE, "crash"]


def test_the_ceilings_message_names_the_agent_among_several_and_escalates_once_per_hold(beta):
    decision = policy.Decision(policy.HOLD, escalate=True, reasons=("ceiling: 6", "and more"))
    decided = clock.Instant(T0 - 30.0, MONO - 30.0, BOOT)  # when the policy decided, a moment ago
    recovery.escalate(beta, "crash", decision, "watchdog", decided)
    recovery.escalate(beta, "crash", decision, "watchdog", clock.now())
    [message] = outbox.pending(beta.store)
    [escalation] = ledger.tail(beta.store, 10, kinds=["escalation"])
    assert escalation.ts == T0 - 30.0 and message.created == T0 - 30.0
    assert message.dedupe_key == f"hold-{escalation.id}"  # the sender's guard against sending it twice
    assert message.text.startswith("[beta] Loom stopped relaunching the agent: ceiling: 6; and more. Last cause: crash. "
                                   "Automatic recovery is on hold until you act (loom recycle --agent beta --resume "
                                   "or --fresh). ledger ")
    assert [e.agent for e in ledger.tail(beta.store, 10, kinds=["escalation"])] == ["beta"]
    assert recovery.held(beta).reason == "ceiling: 6; and more"


def test_an_operators_relaunch_ends_only_the_ceilings_hold(ctx):
    at = clock.now()
    assert not recovery.clear_hold(ctx, source="cli", cause="operator_fresh", at=at)
    recovery.escalate(ctx, "crash", policy.Decision(policy.HOLD, escalate=True, reasons=("ceiling",)), "watchdog", at)
    assert recovery.clear_hold(ctx, source="tui", cause="operator_resume", at=at)
    [cleared] = ledger.tail(ctx.store, 10, kinds=["hold_cleared"])
    assert (cleared.source, cleared.cause, cleared.detail["how"], cleared.detail["held_by"]) == (
        "tui", "operator_resume", "relaunch", "ceiling")
    actions.hold(ctx, "mine", None, source="cli")
    assert not recovery.clear_hold(ctx, source="cli", cause="operator_fresh", at=at)
    assert recovery.held(ctx).reason == "mine"


def test_a_busy_recycle_lock_and_a_second_look_leave_the_agent_alone(ctx):
    with locks.hold(ctx.agent_dir, locks.RECYCLE):
        busy = actions.recover(ctx, "crash", source="watchdog")
    assert busy.status == "busy" and busy.describe() == "busy: another relaunch holds recycle.lock"
    assert admitted(ctx) == {(("decision", "refused"), ("loop", "watchdog"), ("reason", "lock_busy")): 1.0}
    looks = []
    resolved = actions.recover(ctx, "crash", source="watchdog", still_failing=lambda: looks.append(1) or False)
    assert resolved.status == "resolved" and looks == [1]
    assert resolved.describe() == "resolved: the failure was gone on a second look"
    assert "relaunch" not in kinds(ctx)


def test_a_hold_written_after_the_policys_look_stops_the_relaunch_it_was_placed_to_stop(ctx):
    # The policy read no hold; the operator's `loom hold` landed before the relaunch's record (a
    # locked store's busy wait makes that window seconds wide): the record's own transaction finds
    # it, and nothing is recorded, pinned, stopped or started.
    relaunched(ctx, 3600)
    actions.hold(ctx, "deploying", None, source="cli")
    before = session.pinned(ctx.store)
    launched = ctx.store.get_meta(ctx.store.agent_key(launches.LAUNCH_KEY))
    untouched = ResumeFailsWhileTheOperatorHolds(ctx)  # any call to it would be a launch
    outcome = launch.relaunch_locked(ctx, "fresh", cause="crash", source="watchdog", driver=untouched,
                                     automatic=True)
    assert not outcome.ok and outcome.held is not None and outcome.held.reason == "deploying"
    assert untouched.launched == [] and kinds(ctx).count("relaunch") == 1
    assert session.pinned(ctx.store) == before
    assert ctx.store.get_meta(ctx.store.agent_key(launches.LAUNCH_KEY)) == launched
    # An operator's own relaunch is not refused by it.
    assert not launch.relaunch_locked(ctx, "fresh", cause="operator_fresh", source="cli",
                                      driver=LaunchesAndLives()).held


class ResumeFailsWhileTheOperatorHolds:
    """The driver port for one relaunch: the old agent stops, the resumed one finds no conversation
    and exits, and meanwhile (while it boots) the operator's `loom hold` lands from another process."""

    owns_turns, has_dialogs = False, False

    def __init__(self, operator: Context) -> None:
        self.operator, self.launched = operator, []

    def stop(self, grace, recorded=None):
        return []

    def launch(self, command, cwd, env, exit_signal=None):
        from loomtui.agent.tmux import PaneInfo

        self.launched.append(command)
        actions.hold(self.operator, "saving the conversation by hand", None, source="cli")
        return PaneInfo("%1", 4242, False, None, 200, 50)

    def server_pid(self):
        return None

    def pane_info(self):
        from loomtui.agent.tmux import PaneInfo

        return PaneInfo("%1", 4242, True, 1, 200, 50)

    def screen(self, history=False, pane_id=None):
        return "No conversation found with session ID: s-1"


def test_a_hold_placed_while_a_resume_boots_refuses_its_fresh_fallback(ctx, tmp_path):
    # The fresh start after a failed resume is a relaunch of its own, which wipes the conversation:
    # an operator who held the agent meanwhile (to save it by hand) had it started fresh anyway.
    relaunched(ctx, 3600)
    pinned = "0b6f1d62-5d2a-4c2e-9d55-7a0c1e2f3a4b"
    with ctx.store.write() as db:
        session.pin_in(db, pinned)
    operator = Context.load(str(tmp_path / "config.toml"), str(tmp_path / "state"), environ={})
    pane = ResumeFailsWhileTheOperatorHolds(operator)
    try:
        result = actions.recover(ctx, "crash", source="watchdog", driver=pane)
    finally:
        operator.close()
    assert result.status == "held" and not result.ok, (result.describe(), pane.launched, kinds(ctx))
    assert result.describe() == "held: held by the operator: saving the conversation by hand (until released)"
    assert len(pane.launched) == 1  # the resume alone
    assert session.pinned(ctx.store) == pinned  # the conversation's session stays pinned: nothing fresh began
    assert kinds(ctx)[-4:] == ["relaunch", "hold_placed", "resume_failed", "refused"]
    assert admitted(ctx)[(("decision", "refused"), ("loop", "watchdog"), ("reason", "hold"))] == 1.0


def test_the_fallback_refused_under_loom_tick_is_counted_as_the_operator_s(ctx, tmp_path):
    # `loom tick watchdog` (the operator's hands, an automatic cause): held the same way.
    relaunched(ctx, 3600)
    with ctx.store.write() as db:
        session.pin_in(db, "0b6f1d62-5d2a-4c2e-9d55-7a0c1e2f3a4b")
    operator = Context.load(str(tmp_path / "config.toml"), str(tmp_path / "state"), environ={})
    try:
        result = actions.recover(ctx, "crash", source="cli", driver=ResumeFailsWhileTheOperatorHolds(operator))
    finally:
        operator.close()
    assert result.status == "held"
    assert admitted(ctx)[(("decision", "refused"), ("loop", "operator"), ("reason", "hold"))] == 1.0


def test_a_recovery_says_what_happened_in_one_line():
    assert recovery.Recovery("busy").describe() == "busy"
    assert recovery.Recovery("resolved", notes=["gone", "again"]).describe() == "resolved: gone; again"
    held = policy.Decision(policy.HOLD, reasons=("a", "b"))
    assert recovery.Recovery("held", held, notes=["ignored"]).describe() == "held: a; b"
    relaunched = launch.Outcome(True, "fresh", "s-9", "s-8", "crash")
    assert recovery.Recovery("relaunched", notes=["unwitnessed", "soon"], outcome=relaunched).describe() == (
        "relaunched fresh: session s-9; unwitnessed; soon")


def test_a_timed_hold_reads_as_held_until_its_end_on_the_clock(ctx, fixed_clock):
    actions.hold(ctx, "deploying", 60.0, source="cli")
    fixed_clock.sleep(59.0)
    assert recovery.held(ctx).reason == "deploying"
    fixed_clock.sleep(1.0)
    assert recovery.held(ctx) is None and recovery.situation(ctx, "crash").held is False


def test_who_witnesses_a_relaunch_depends_on_a_running_supervisor(ctx):
    assert recovery.witness_note(ctx) == "unwitnessed: no loom supervise is running to probe it; `loom canary` witnesses it"
    with locks.hold(ctx.state_dir, locks.SUPERVISOR):
        assert recovery.witness_note(ctx) == ("unwitnessed until a canary acks (loom supervise probes it as soon as "
                                              "the agent is ready)")


def test_while_held_nudges_and_dialog_presses_are_refused_and_recorded(ctx):
    actions.hold(ctx, "deploying", 600.0, source="cli")
    nudge = actions.nudge(ctx, "item 3 needs you", source="sentinel", detail={"item": 3})
    assert (nudge.ok, nudge.refused, nudge.error) == (False, "hold", "refused: held by the operator: deploying (10m left)")
    dismissed = actions.dismiss_modal(ctx, ["Escape"], source="watchdog", detail={})
    assert (dismissed.ok, dismissed.refused) == (False, "hold")
    refusals = ledger.tail(ctx.store, 10, kinds=["refused"])
    assert [(e.source, e.cause, e.detail["action"]) for e in refusals] == [
        ("sentinel", "queue_item", "nudge"), ("watchdog", "modal", "dismiss_modal")]
    assert "queue_nudge" not in kinds(ctx) and "modal_dismissed" not in kinds(ctx)


def test_without_may_hold_the_agent_is_refused_recorded_and_the_operator_told(ctx):
    with pytest.raises(actions.Refused, match=r"^hold refused: the agent may not hold \(agent.may_hold is off\)"):
        actions.hold(ctx, "let me work", None, source="cli", actor=AGENT)
    with pytest.raises(actions.Refused, match="^release refused"):
        actions.release(ctx, source="cli", actor=AGENT)
    with pytest.raises(actions.Refused, match="^recycle refused"):
        actions.recycle(ctx, "fresh", source="cli", actor=AGENT, reason="stuck")
    assert holds.stored(ctx) is None and "hold_placed" not in kinds(ctx) and "relaunch" not in kinds(ctx)
    first, second, third = ledger.tail(ctx.store, 10, kinds=["refused"])
    assert (first.source, first.ts) == ("cli", T0)
    assert first.detail == {"action": "hold", "reason": "agent", "actor": "agent", "actor_session": "s-1",
                            "actor_agent": "main", "reason_length": 11, "reason_digest": digest("let me work")}
    assert second.detail == {"action": "release", "reason": "agent", "actor": "agent", "actor_session": "s-1",
                             "actor_agent": "main"}
    assert third.detail == {"action": "recycle", "reason": "agent", "actor": "agent", "actor_session": "s-1",
                            "actor_agent": "main", "reason_length": 5, "reason_digest": digest("stuck")}
    assert [m.text for m in outbox.pending(ctx.store)] == [
        "Loom: refused a hold asked for by the agent main (session s-1): agent.may_hold is off "
        "(reason given: let me work).",
        "Loom: refused a release asked for by the agent main (session s-1): agent.may_hold is off.",
        "Loom: refused a recycle asked for by the agent main (session s-1): agent.may_hold is off "
        "(reason given: stuck).",
    ]
    assert counters.read(ctx.store, "loom_fire_total") == []  # refused before it counted as fired


def test_a_recycle_names_its_mode_and_a_release_rings_the_watchdog(ctx):
    with pytest.raises(ValueError, match="unknown relaunch mode 'restart'"):
        actions.recycle(ctx, "restart", source="cli")
    bell = launches.signals_dir(ctx.agent_dir) / launches.PANE_DIED
    actions.release(ctx, source="cli")
    assert not bell.exists()  # nothing was held: nothing to look at again
    actions.hold(ctx, "x", None, source="cli")
    actions.release(ctx, source="cli")
    assert bell.exists()


def test_an_alert_names_its_agent_among_several(beta):
    assert actions.alert(beta, "tmux hangs", source="watchdog") == "operator alerted: tmux hangs"
    [event] = ledger.tail(beta.store, 10, kinds=["operator_alert"])
    assert event.agent == "beta" and event.detail == {"note": "tmux hangs"}
    [message] = outbox.pending(beta.store)
    assert message.text == f"[beta] Loom: tmux hangs ledger {ledger.format_head(event.id, event.hash)}"


def test_a_relaunch_whose_detail_is_damaged_still_counts_in_the_history(ctx):
    event = relaunched(ctx, 100)
    with ctx.store.write() as db:  # a row written by hand, or damaged: no JSON, no cause
        db.execute("UPDATE ledger SET detail = 'not json', cause = NULL WHERE id = ?", (event.id,))
    [r] = recovery.history(ctx)
    assert (r.cause, r.mode, r.old_session, r.new_session, r.at.wall) == ("", "", None, None, T0 - 100)


def test_the_hold_and_the_admission_are_judged_at_the_instant_given(ctx):
    actions.hold(ctx, "deploying", 60.0, source="cli")
    later = clock.Instant(T0 + 61.0, MONO + 61.0, BOOT)  # past the hold's end; the clock still reads T0
    assert recovery.held(ctx, later) is None and recovery.held(ctx).reason == "deploying"
    soon = clock.Instant(T0 + 30.0, MONO + 30.0, BOOT)
    held = actions.recover(ctx, "crash", source="watchdog", now=soon)
    assert held.status == "held" and held.notes == ["held by the operator: deploying (30s left)"]
    relaunched(ctx, -59.0)  # a relaunch a moment before `later`: its backoff, not the hold, decides then
    waiting = actions.recover(ctx, "crash", source="watchdog", now=later)
    assert waiting.status == "waiting" and waiting.decision.action == policy.WAIT
    assert recovery.held(ctx) is None  # recorded as expired at `later`


def test_an_agents_refused_reason_is_cut_for_the_operator_and_no_reason_is_none(ctx):
    with pytest.raises(actions.Refused):
        actions.hold(ctx, "x" * 300, None, source="cli", actor=AGENT)
    with pytest.raises(actions.Refused):
        actions.recycle(ctx, "resume", source="cli", actor=AGENT)
    cut, plain = [m.text for m in outbox.pending(ctx.store)]
    assert f"(reason given: {'x' * 200})." in cut and "x" * 201 not in cut
    assert plain == "Loom: refused a recycle asked for by the agent main (session s-1): agent.may_hold is off."
    [_, recycle] = ledger.tail(ctx.store, 10, kinds=["refused"])
    assert "reason_length" not in recycle.detail and "reason_digest" not in recycle.detail


def test_a_count_the_store_cannot_take_is_logged_and_the_action_goes_on(ctx, caplog):
    with ctx.store.write() as db:
        db.execute("DROP TABLE counters")  # the store refuses every count
    with locks.hold(ctx.agent_dir, locks.RECYCLE), caplog.at_level("WARNING", logger="loom.actions"):
        busy = actions.recover(ctx, "crash", source="watchdog")
    assert busy.status == "busy"
    [record] = [r for r in caplog.records if r.name == "loom.actions"]
    assert record.getMessage() == ("could not count loom_admit_total {'loop': 'watchdog', 'decision': 'refused', "
                                   "'reason': 'lock_busy'}: no such table: counters")


class LaunchesAndLives:
    """The driver port for one relaunch that works: the old agent stops, the new one runs."""

    owns_turns, has_dialogs = False, False

    def stop(self, grace, recorded=None):
        return []

    def launch(self, command, cwd, env, exit_signal=None):
        from loomtui.agent.tmux import PaneInfo

        return PaneInfo("%1", 4242, False, None, 200, 50)

    def server_pid(self):
        return None

    def pane_info(self):
        from loomtui.agent.tmux import PaneInfo

        return PaneInfo("%1", 4242, False, None, 200, 50)

    def screen(self, history=False, pane_id=None):
        return ""


def test_a_relaunch_whose_record_waited_for_a_locked_store_is_dated_when_written(tmp_path):
    # Dated before the write waited (the store's busy timeout), the relaunch left the ceiling's window
    # that much early, and a seventh came within the hour (hooked storm seed 62, day 22.87).
    from harness import clock_waiting_context, locked_by_another

    config = tmp_path / "config.toml"
    config.write_text(ONE_AGENT)
    ctx = clock_waiting_context(config, tmp_path / "state")
    blocker = locked_by_another(ctx.store.path)

    class FreedAfterFiveSeconds(FakeClock):
        def sleep(self, seconds):
            super().sleep(seconds)
            if self.at_mono - MONO >= 5 and blocker.in_transaction:
                blocker.execute("ROLLBACK")

    try:
        with clock.use(FreedAfterFiveSeconds(T0, MONO, BOOT)):
            outcome = launch.relaunch_locked(ctx, "fresh", cause="crash", source="watchdog",
                                             driver=LaunchesAndLives(), automatic=True)
        assert outcome.ok, outcome.describe()
        [event] = ledger.tail(ctx.store, 5, kinds=["relaunch"])
        assert event.ts >= T0 + 5 and event.detail["mono"] >= MONO + 5
        record = launches.last_launch(ctx)
        assert record is not None and record.ts == event.ts
        [history] = recovery.history(ctx)
        assert history.at.wall == event.ts
    finally:
        blocker.close()
        ctx.close()
