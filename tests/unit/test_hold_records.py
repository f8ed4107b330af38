"""The hold as an operator meets it: `loom hold` / `loom release` (actions.hold, actions.release,
what they print and their JSON), the ledger's events and their details, the messages sent when
someone other than the operator acts, and each agent's own hold and labels. A real store in a
temporary state dir, on a clock the test sets (clock.use)."""

from __future__ import annotations

import pytest

from fake_clock import FakeClock
from loomtui import actions, clock
from loomtui.actors import Actor
from loomtui.agent import hold_rules, holds
from loomtui.context import Context
from loomtui.store import counters, ledger, outbox
from loomtui.timing import Instant

T0 = 1_800_000_000.0
BOOT = "boot-a"
TWO_AGENTS = '[[agents]]\nname = "main"\n[[agents]]\nname = "beta"\n'
AGENT = Actor("agent", session="s-1", agent="beta")


@pytest.fixture
def ticking():
    with clock.use(FakeClock(T0, 1000.0, BOOT)) as c:
        yield c


@pytest.fixture
def ctx(tmp_path):
    c = Context.load(None, str(tmp_path / "state"), environ={})
    yield c
    c.close()


@pytest.fixture
def beta(tmp_path):
    """Agent `beta` of a two-agent config (may_hold on for its agent)."""
    config = tmp_path / "config.toml"
    config.write_text(TWO_AGENTS + "may_hold = true\n")
    main = Context.load(str(config), str(tmp_path / "state"), {})
    b = main.for_agent("beta")
    yield b
    b.close()
    main.close()


def events(ctx, kind):
    return ledger.tail(ctx.store, 50, kinds=[kind])


def messages(ctx):
    return [m.text for m in outbox.pending(ctx.store)]


def test_a_timed_hold_from_the_cli_says_what_waits_and_ends_after_its_duration(ctx, ticking):
    change = actions.hold(ctx, "deploying", 1800.0, source="cli")
    assert change.action == "placed" and not change.released
    assert change.describe() == ("held by the operator: deploying (30m left); automatic relaunches, reaps, "
                                 "modal dismissals and nudges wait")
    assert change.as_json() == {"action": "placed", "hold": {
        "by": "operator", "actor": "cli", "reason": "deploying", "since": T0, "until": T0 + 1800.0,
        "remaining": 1800.0}}
    [placed] = events(ctx, "hold_placed")
    assert (placed.source, placed.cause, placed.ts) == ("cli", None, T0)
    assert placed.detail == {"by": "operator", "reason": "deploying", "until": T0 + 1800.0, "actor": "cli"}
    assert messages(ctx) == []  # the operator placed it: nobody to tell
    ticking.advance(1799.0)
    assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog") is not None
    ticking.advance(1.0)
    assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog") is None
    [cleared] = events(ctx, "hold_cleared")
    assert (cleared.source, cleared.ts) == ("watchdog", T0 + 1800.0)
    assert cleared.detail == {"by": "watchdog", "how": "expired", "held_by": "operator", "reason": "deploying",
                              "actor": "watchdog"}
    assert actions.release(ctx, source="cli").describe() == "nothing was held"


def test_a_timed_hold_lasts_its_duration_on_the_monotonic_clock_when_the_wall_clock_jumps(ctx, ticking):
    actions.hold(ctx, "deploying", 600.0, source="cli")
    ticking.at_wall += 7200.0  # NTP steps the wall clock two hours ahead; 10 s have passed
    ticking.advance(10.0)
    assert holds.current(ctx, clock.now()) is not None
    assert actions.admit(ctx, "nudge", cause="queue_item", source="sentinel") is not None
    assert events(ctx, "hold_cleared") == []
    ticking.advance(590.0)
    assert holds.current(ctx, clock.now()) is None


def test_replacing_a_hold_in_force_says_so_and_an_expired_one_is_not_replaced(ctx):
    holds.place(ctx, by="operator", reason="a", until=T0 + 60, source="cli", now=T0)
    holds.place(ctx, by="operator", reason="b", until=None, source="tui", now=T0 + 10)
    holds.place(ctx, by="ceiling", reason="5 relaunches in 1h", until=None, source="watchdog", now=T0 + 20,
                cause="crash")
    first, second, third = events(ctx, "hold_placed")
    assert "replaced" not in first.detail
    assert second.detail["replaced"] == "operator" and second.source == "tui"
    assert third.detail == {"by": "ceiling", "reason": "5 relaunches in 1h", "until": None, "actor": "watchdog",
                            "replaced": "operator"}
    assert third.cause == "crash"
    assert holds.stored(ctx).cause == "crash" and holds.stored(ctx).by == "ceiling"
    ctx.store.set_meta(holds.KEY, "")
    holds.place(ctx, by="operator", reason="c", until=T0 + 200, source="cli", now=T0 + 100)
    holds.place(ctx, by="operator", reason="d", until=None, source="cli", now=T0 + 300)  # c ended at T0+200
    assert "replaced" not in events(ctx, "hold_placed")[-1].detail


def test_releasing_says_whose_hold_ended(ctx, ticking):
    with ctx.store.write() as db:  # as the ceiling places its hold (recovery.escalate)
        holds.place_if_free(db, hold_rules.Hold(T0, "ceiling", "5 relaunches in 1h", cause="crash"))
    change = actions.release(ctx, source="tui")
    assert change.released and change.action == "released"
    assert change.describe() == "released the ceiling's hold (5 relaunches in 1h); automatic recovery is on again"
    assert change.as_json()["hold"]["by"] == "ceiling" and change.as_json()["action"] == "released"
    [cleared] = events(ctx, "hold_cleared")
    assert cleared.detail == {"by": "tui", "how": "release", "held_by": "ceiling", "reason": "5 relaunches in 1h",
                              "actor": "tui"}
    actions.hold(ctx, "deploying", None, source="cli")
    assert actions.release(ctx, source="cli").describe() == (
        "released the operator's hold (deploying); automatic recovery is on again")
    assert actions.release(ctx, source="cli").as_json() == {"action": "none", "hold": None}
    assert messages(ctx) == []


def test_a_release_by_a_relaunch_records_its_cause_and_tells_nobody(ctx):
    holds.place(ctx, by="ceiling", reason="r", until=None, source="cli", now=T0)
    ended = holds.release(ctx, source="cli", how="relaunch", now=T0 + 5, cause="operator_fresh",
                          actor=Actor("agent", session="s", agent="main"))
    assert ended is not None and ended.reason == "r"
    [cleared] = events(ctx, "hold_cleared")
    assert (cleared.cause, cleared.ts, cleared.detail["how"]) == ("operator_fresh", T0 + 5, "relaunch")
    assert messages(ctx) == []  # only a release by hand is told
    holds.place(ctx, by="ceiling", reason="r", until=None, source="watchdog", now=T0 + 6)
    assert messages(ctx) == ["Loom: watchdog placed a hold: held at the ceiling: r (until released)"]


def test_the_agents_own_hold_and_release_are_told_to_the_operator_with_its_name(beta, ticking):
    change = actions.hold(beta, "running migrations", 600.0, source="cli", actor=AGENT)
    assert change.describe().startswith("held by the agent: running migrations (10m left)")
    assert change.as_json()["hold"]["actor"] == "agent"
    [placed] = events(beta, "hold_placed")
    assert placed.agent == "beta"
    assert placed.detail == {"by": "operator", "reason": "running migrations", "until": T0 + 600.0,
                             "actor": "agent", "actor_session": "s-1", "actor_agent": "beta"}
    ticking.advance(60.0)
    released = actions.release(beta, source="cli", actor=AGENT)
    assert released.describe() == "released the agent's hold (running migrations); automatic recovery is on again"
    [cleared] = events(beta, "hold_cleared")
    assert cleared.detail["actor"] == "agent" and cleared.detail["actor_session"] == "s-1"
    assert holds.stored(beta) is None
    assert messages(beta) == [
        "[beta] Loom: the agent beta placed a hold: held by the agent: running migrations (10m left)",
        "[beta] Loom: the agent beta released the hold (held by the agent: running migrations (9m left)); "
        "automatic recovery is on again",
    ]


def test_one_agent_is_not_named_in_its_messages_and_each_is_dated_when_it_happened(ctx):
    me = Actor("agent", session="s", agent="main")
    holds.place(ctx, by="operator", reason="x", until=None, source="cli", now=T0, actor=me)
    holds.release(ctx, source="cli", how="release", now=T0 + 77, actor=me)
    assert messages(ctx) == ["Loom: the agent main placed a hold: held by the agent: x (until released)",
                             "Loom: the agent main released the hold (held by the agent: x (until released)); "
                             "automatic recovery is on again"]
    assert [m.created for m in outbox.pending(ctx.store)] == [T0, T0 + 77]
    assert [(e.kind, e.ts) for e in ledger.tail(ctx.store, 10)] == [("hold_placed", T0), ("hold_cleared", T0 + 77)]


def test_each_agent_has_its_own_hold_and_its_refusals_are_counted_under_its_name(beta, tmp_path):
    main = Context.load(str(tmp_path / "config.toml"), str(tmp_path / "state"), {})
    try:
        holds.place(beta, by="operator", reason="beta only", until=None, source="cli", now=T0)
        assert holds.current(main, T0 + 1) is None and holds.current(beta, T0 + 1).reason == "beta only"
        holds.refused(beta, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 1)
        holds.refused(main, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 1)
        counted = {tuple(sorted(c.labels.items())): c.value for c in counters.read(main.store, "loom_admit_total")
                   if c.name == "loom_admit_total"}
        assert counted == {
            (("agent", "beta"), ("decision", "refused"), ("loop", "watchdog"), ("reason", "hold")): 1.0,
            (("decision", "refused"), ("loop", "watchdog"), ("reason", "hold")): 1.0,
        }
        [refusal] = events(beta, "refused")  # main held nothing: counted, never recorded
        assert refusal.agent == "beta"
        holds.place(main, by="operator", reason="main's", until=None, source="cli", now=T0)
        assert holds.release(beta, source="cli", how="release", now=T0 + 2).reason == "beta only"
        assert holds.stored(beta) is None and holds.stored(main).reason == "main's"
    finally:
        main.close()


def test_a_refusal_records_what_was_refused_and_whose_hold_refused_it_once(ctx):
    holds.place(ctx, by="operator", reason="deploying", until=None, source="cli", now=T0)
    holds.refused(ctx, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 3)
    holds.refused(ctx, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 4)
    holds.refused(ctx, action="nudge", cause="", loop="sentinel", source="sentinel", now=Instant(T0 + 5, 9.0, BOOT))
    first, second = events(ctx, "refused")
    assert (first.source, first.cause, first.ts) == ("watchdog", "crash", T0 + 3)
    assert first.detail == {"action": "relaunch", "reason": "hold", "held_by": "operator", "hold_reason": "deploying"}
    assert (second.cause, second.ts, second.detail["action"]) == (None, T0 + 5, "nudge")
    assert holds.stored(ctx).refused == ("relaunch:crash", "nudge:")
    holds.release(ctx, source="cli", how="release", now=T0 + 6)
    holds.place(ctx, by="operator", reason="again", until=None, source="cli", now=T0 + 7)
    holds.refused(ctx, action="relaunch", cause="crash", loop="watchdog", source="watchdog", now=T0 + 8)
    assert [e.detail["hold_reason"] for e in events(ctx, "refused")] == ["deploying", "deploying", "again"]


def test_an_unreadable_record_holds_as_the_operators_until_released(ctx, ticking):
    ctx.store.set_meta(holds.KEY, "{not json")
    assert actions.admit(ctx, "relaunch", cause="crash", source="watchdog") is not None
    change = actions.release(ctx, source="cli")
    assert change.describe() == ("released the operator's hold (unreadable hold record (loom release clears it)); "
                                 "automatic recovery is on again")
    assert change.as_json() == {"action": "released", "hold": {
        "by": "operator", "actor": "", "reason": "unreadable hold record (loom release clears it)", "since": 0.0,
        "until": None, "remaining": None}}


def test_the_ceiling_places_its_hold_only_where_none_is_in_force(ctx):
    ceiling = hold_rules.Hold(T0, "ceiling", "5 relaunches in 1h", cause="crash")
    with ctx.store.write() as db:
        assert holds.place_if_free(db, ceiling)
    with ctx.store.write() as db:
        assert not holds.place_if_free(db, hold_rules.Hold(T0 + 1, "ceiling", "again"))
    assert holds.stored(ctx) == ceiling
    ctx.store.set_meta(holds.KEY, "")
    holds.place(ctx, by="operator", reason="short", until=T0 + 10, source="cli", now=T0)
    with ctx.store.write() as db:
        assert holds.place_if_free(db, hold_rules.Hold(T0 + 11, "ceiling", "after the short one"))
    assert holds.stored(ctx).reason == "after the short one"
