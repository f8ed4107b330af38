"""Issue 26 in the simulator: with `{hook_settings}` in the agent's commands the simulated agent
writes its hook events (hooks_model.py; some lost, some late) and Loom's own hooks loop reads them.
A long busy turn misses every probe typed into it and is not recycled (`busy_not_recycled`); a
wedge inside a turn is still recycled, once the turn has gone quiet; a run without hooks is the
run it always was."""

from __future__ import annotations

from loomtui.config import parse_config
from loomtui.sim import simulate
from loomtui.sim.engine import Sim
from loomtui.sim.profiles import PROFILES, default_config

H = 3600.0
HOOKED = {"fresh_command": "claude --settings {hook_settings} --session-id {session_id}",
          "resume_command": "claude --settings {hook_settings} --resume {session_id}"}


def hooked(**canary) -> object:
    return default_config({"agent": dict(HOOKED), **({"canary": canary} if canary else {})})


def scripted(config, hours: float, faults: list[tuple[float, str]], seed: int = 1, looks=()) -> Sim:
    """A run of `hours` with the faults at their times, and `looks` (at, fn(sim)) taken mid-run."""
    sim = Sim(config, PROFILES["incident"], seed, hours / 24)
    for at, kind in faults:
        sim.at(at, sim.fault, kind)
    for at, fn in looks:
        sim.at(at, fn, sim)
    return sim.run()


def automatic(sim: Sim) -> dict:
    return {c: m for c, m in sim.report.relaunches.items() if not c.startswith("operator_")}


def long_turn_missed_and_kept(config) -> Sim:
    """A run with one long turn of the operator's, long enough to have been recycled twice over had
    its turns not been told: its probes missed, nothing recycled, every invariant held."""
    sim = scripted(config, 5, [(1 * H, "long_turn")], seed=6)  # a turn of 80 minutes, hooked or streamed
    assert sim.violation is None, sim.violation
    [(start, end, _, _)] = sim.world.turns
    cfg = sim.config.canary
    assert end - start > cfg.interval + 2 * (cfg.misses_to_recycle * cfg.ack_timeout)
    assert sim.report.probes.get("miss", 0) >= cfg.misses_to_recycle
    assert automatic(sim) == {}
    return sim


def test_a_long_busy_turn_misses_its_probes_and_is_not_recycled():
    sim = long_turn_missed_and_kept(hooked())
    assert sim.hooks is not None and sim.hooks.written > 10


def test_a_wedge_inside_a_turn_is_recycled_once_the_turn_goes_quiet():
    sim = scripted(hooked(), 6, [(1 * H, "long_turn"), (1.1 * H, "wedge")])
    assert sim.violation is None, sim.violation
    assert sum(automatic(sim).get("canary_failed", {}).values()) == 1
    a = sim.world.agent
    assert a is not None and a.hearing()


def test_a_hooked_storm_holds_every_invariant():
    for seed in (1, 2):
        report = simulate(seed, 1.0, "storm", hooked())
        assert report["violation"] is None, report["violation"]


def test_a_turn_outlives_a_relaunch_whose_stop_left_the_agent_running():
    # Storm seed 10 with no poller configured: at 12:30 an operator's resume finds the old agent will
    # not die, in a long turn. The failed relaunch's launch record once ended that turn in Loom's
    # eyes, and the probes typed into it recycled a busy agent at 12:40.
    config = parse_config({"agent": dict(HOOKED)}, "<test>", None)
    report = simulate(10, 0.6, "storm", config)
    assert report["violation"] is None, report["violation"]


def test_a_run_without_hooks_draws_no_hooked_fault_and_writes_no_hook_event():
    sim = Sim(default_config(), PROFILES["storm"], 3, 0.5).run()
    assert sim.hooks is None and "long_turn" not in sim.report.faults
    assert sim.world.turns == []


def test_misses_in_a_turn_loom_was_never_told_of_are_a_wedge_s_even_once_it_ended():
    """Storm seed 30, day 2.76, README's hooked config: a long turn whose prompt hook was lost took
    the two probes typed into it (queued behind it, as the CLI does) and ended seconds before the
    second one's deadline; Loom, told of no turn, recycled at that deadline. Without evidence of the
    turn that is a wedge to Loom, by design (docs/HOOKS.md), as it is while such a turn runs; the
    checker took it for a false recycle because the turn had just ended. (Loom's fixes since moved
    that seed's history past it: the checker's rule is held here to the moment it judged.)"""
    from types import SimpleNamespace

    sim = Sim(hooked(), PROFILES["storm"], 30, 1)
    checker, world = sim.checker, sim.world
    agent, t = SimpleNamespace(pid=7), 238_395.0
    world.t = t  # the recycle; its misses' span before it
    span = checker.misses_span
    world.turns = [[t - 2 * span, t - 5.0, 7, None]]  # never reported (its prompt hook lost), ended 5 s ago
    assert checker.unreported_turn_just_ended(agent)
    world.turns = [[t - 2 * span, t - 5.0, 7, t - span + 10.0]]  # reported, but after the misses began
    assert checker.unreported_turn_just_ended(agent)
    world.turns = [[t - 2 * span, t - 5.0, 7, t - 2 * span]]  # reported at its start: Loom was told
    assert not checker.unreported_turn_just_ended(agent)
    world.turns = [[t - 3 * span, t - span - 120.0, 7, None]]  # ended before the misses' window
    assert not checker.unreported_turn_just_ended(agent)
    world.turns = [[t - 2 * span, t - 5.0, 8, None]]  # another process's
    assert not checker.unreported_turn_just_ended(agent)


def test_misses_a_dialog_ate_under_a_rate_limit_are_the_dialogs_not_the_limits():
    """The hooked storm, seeds 89 (day 17.41) and 145 (day 20.38): a rate limit held; a dialog came
    under the hold and Loom stopped pressing its keys; the hold ran out and the dialog ate the two
    probes after it; the operator closed it, and the canary recycled on those misses. The checker
    read misses under a limit Loom was told of as the limit's failed turns and called the recycle a
    violation: they were the dialog's (dialog_closed, by design), as without the limit."""
    from types import SimpleNamespace

    sim = Sim(hooked(), PROFILES["storm"], 89, 1)
    checker, world = sim.checker, sim.world
    t = 1_504_543.7
    world.t, world.tmux_session = t, True
    world.limited_until, world.limit_told = t - 117.0, t - 2_000.0  # the limit's hold ran out just now
    agent = SimpleNamespace(pid=7, alive=True, deaf_since=None, modal=False, eaten_at=t - 45.0,
                            probes_eaten=[t - 105.0, t - 45.0])  # both probes that missed
    world.agent = agent
    assert checker.unjustified("canary_failed") == ""
    assert sim.report.hearing_recycles == {"dialog_closed": 1}
    limited = ("the agent was rate-limited (or its bill or login refused), its CLI reporting each failed turn, "
               "and was recycled")
    agent.probes_eaten = [t - 45.0]  # the first miss was the limit's failed turn, Loom's to excuse
    assert checker.unjustified("canary_failed") == limited
    agent.probes_eaten = [t - checker.misses_span - 120.0] * 2  # a dialog before the misses: the limit's own
    assert checker.unjustified("canary_failed") == limited


def test_a_poller_relaunch_of_an_agent_that_exited_meanwhile_is_no_false_recycle():
    """The hooked storm, seed 187, day 8.17: the poller lost, the store locked past the watchdog's
    bound, the agent exited (status 0) a second before the tick that could act, and that tick
    relaunched for the poller. The checker called it a relaunch "without a definitive signal: the
    poller was there": an agent gone is relaunched whatever the cause it is relaunched under."""
    from types import SimpleNamespace

    sim = Sim(hooked(), PROFILES["storm"], 187, 1)
    checker, world = sim.checker, sim.world
    world.poller_lost_at = 100.0
    world.agent = agent = SimpleNamespace(pid=7, alive=False, poller=False)
    assert checker.unjustified("poller_missing") == ""
    agent.alive = True
    assert checker.unjustified("poller_missing") == ""  # alive, its poller lost: the looks were right
    agent.poller = True
    assert checker.unjustified("poller_missing") == "the poller was there"
    agent.poller, world.poller_lost_at = False, None
    assert checker.unjustified("poller_missing") == "the poller was there"


def test_a_wedge_hidden_in_a_probes_turn_after_a_relaunch_is_found_within_the_witness_bound():
    """Hooked storm seed 102, day 6.97, scripted: after a crash's relaunch the operator's turn held
    the relaunch's own probe (a miss, excused), the next probe came an interval later, the agent
    took it and wedged at once. Its misses count once that turn has been quiet for turn_quiet, at
    the first probe after, an interval on: the recycle came later than the witness bound the
    checker had (no time for a turn hiding a wedge), which reported a false relaunch_witnessed."""
    sim = scripted(hooked(), 3, [(1 * H, "crash"), (1 * H + 15, "busy"), (4895.0, "wedge")])
    assert sim.violation is None, sim.violation
    # The crash's status is lost to tmux one look in ten (its 3.3a race): an `exit` then, the same relaunch.
    crashed = automatic(sim)
    assert sum(crashed.pop(c, {}).get("resume", 0) for c in ("crash", "exit")) == 1
    assert crashed == {"canary_failed": {"resume": 1}}
    misses = [t for _, t, kind, d in sim.trace if kind == "canary" and d["result"] == "miss"]
    relaunches = [d["at"] for _, _, kind, d in sim.trace if kind == "relaunch"]
    crash, recycle = relaunches[1], relaunches[2]
    assert misses[0] < 4892.0 < 4895.0 < misses[1] < recycle  # the second probe went out, then the wedge
    checker = sim.checker
    busy = sim.world.busy_between(crash, recycle)
    assert recycle - crash > checker.detect + 60.0 + busy  # past the bound it had
    assert recycle - crash < checker.witness_bound + busy


def test_a_wall_clock_stepped_during_a_busy_turn_does_not_get_the_busy_agent_recycled():
    """Clockjump seed 4, README's hooked config, 8 hours in: the wall clock stepped back during an
    operator's long turn, and the probe typed into it looked, by wall time, sent before the turn
    began; its miss counted, and so did the next: the busy agent was recycled 920 s into its turn
    (`busy_not_recycled`). Which came first is now the monotonic clock's word (turn_rules.after)."""
    from conftest import REPO

    from loomtui.config import load_config

    config = load_config(str(REPO / "docs" / "evidence" / "hooked.toml"))[0]
    # Scripted now (the world's draws have moved since): seed 6's long turn runs 80 minutes, and the
    # wall clock is stepped back a day 5 minutes into it.
    sim = scripted(config, 4, [(1 * H, "long_turn"), (1 * H + 300, "clock_back")], seed=6)
    assert sim.violation is None, sim.violation
    [(start, end, _, _)] = sim.world.turns
    assert end is not None and start < 1 * H + 300 < end and end - start > 3600
    assert sim.report.faults == {"clock_back": 1, "long_turn": 1} and automatic(sim) == {}
    assert sim.report.probes.get("miss", 0) >= config.canary.misses_to_recycle  # missed, and kept


def test_the_simulated_cli_runs_one_turn_at_a_time(monkeypatch):
    # Hooked storm seed 87, day 22.99: two nudges typed at once were each taken at once, each its own
    # prompt and Stop, and an operator's long turn began 1.5 s later, inside them: prompt, prompt,
    # prompt, Stop, Stop. Claude Code never writes that (a line typed during a turn joins it or waits
    # for its end); Loom's turns closed the long turn at the first Stop, the misses of the probes
    # typed into it counted, and a busy agent was recycled. Lines typed at once are one prompt now,
    # and the operator's prompt waits for that turn's Stop.
    from loomtui.sim import hooks_model
    from loomtui.store import hook_events

    # The order the CLI runs them in, every hook written at once (one lost or late reorders the
    # files, as it may the real CLI's: the turns must cope with that, and other tests show it).
    monkeypatch.setattr(hooks_model, "HOOK_LOST", 0.0)
    monkeypatch.setattr(hooks_model, "HOOK_LATE", 0.0)
    seen: list[str] = []

    def type_two(sim) -> None:
        a = sim.world.agent
        sim.hooks.typed(a, "the first nudge", False)
        sim.hooks.typed(a, "the second nudge", False)

    def operator(sim) -> None:
        sim.hooks.begin_turn(sim.world.agent, sim.world.t + 900)

    def read(sim) -> None:
        rows = reversed(hook_events.recent(sim.ctx.store, sim.ctx.agent, limit=500))
        seen.extend(r["event"] for r in rows if r["event"] in ("UserPromptSubmit", "Stop")
                    and r["ts"] >= sim.world.wall - 1200)

    sim = scripted(hooked(), 2, [], looks=[(1 * H, type_two), (1 * H + 1.5, operator), (1 * H + 1100, read)])
    assert sim.violation is None, sim.violation
    assert seen[:4] == ["UserPromptSubmit", "Stop", "UserPromptSubmit", "Stop"], seen
    open_turns = 0
    for event in seen:  # never a prompt while a turn runs, never a Stop with none
        open_turns += 1 if event == "UserPromptSubmit" else -1
        assert open_turns in (0, 1), seen


def test_a_turn_that_runs_away_past_max_turn_is_recycled_and_counted_apart(monkeypatch):
    # The world's long turns once ended by 80 % of max_turn: the recycle of a turn past it, the wedge
    # Loom is told to take it for, never ran in a storm. One in ten now runs away for hours.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "RUNAWAY", 1.0)
    sim = scripted(hooked(), 6, [(1 * H, "long_turn")])
    assert sim.violation is None, sim.violation
    [(start, _, _, _)] = sim.world.turns
    a = sim.world.agent
    assert a is not None and a.started - start >= sim.config.canary.max_turn  # recycled past max_turn
    assert sum(automatic(sim).get("canary_failed", {}).values()) == 1
    assert sim.report.hearing_recycles == {"runaway_turn": 1}
    assert sim.report.as_json()["hearing_recycles"] == {"runaway_turn": 1}


def test_ordinary_turns_cut_short_by_the_configs_thresholds_are_counted_by_which(monkeypatch):
    # A config may take the operator's ordinary turns for wedges (turn_quiet shorter than a tool call,
    # max_turn shorter than a long task): no invariant breaks, Loom does as it is told, and the
    # report says how often an agent still at work was recycled so.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "RUNAWAY", 0.0)
    quiet = scripted(hooked(turn_quiet="1m"), 5, [(1 * H, "long_turn")], seed=3)  # seed 1's turn: 5 minutes
    assert quiet.violation is None and quiet.report.hearing_recycles.get("turn_quiet", 0) >= 1, quiet.violation
    # A turn of exactly an hour, the longest an ordinary one runs here: past a max_turn of 20 minutes.
    monkeypatch.setattr(faults, "LONG_TURN", 3600.0)
    monkeypatch.setattr(faults, "RUNAWAY", 1.0)
    monkeypatch.setattr(faults, "RUNAWAY_TURN", (3600.0, 3600.0))
    short = scripted(hooked(max_turn="20m"), 5, [(1 * H, "long_turn")])
    assert short.violation is None, short.violation
    assert short.report.hearing_recycles == {"turn_too_long": 1}


def test_a_failed_tick_is_tried_again_after_the_daemons_backoff_with_its_loop_made_afresh():
    # The daemon's loop, its tick raised (a store locked past its busy wait), waits 2 s, 4 s, 8 s ...
    # (supervise.LOOP_RETRY, doubled, at most MAX_LOOP_BACKOFF) and makes the tick afresh. The
    # simulator's loops went on with the same objects at their next interval (the sentinel's ten
    # minutes on): the memory the daemon loses then (the watchdog's, the hooks witness's) was never
    # lost in a storm, nor a tick tried again soon.
    from loomtui.daemon.supervise import LOOP_RETRY
    from loomtui.timing import backoff

    failed: list[float] = []
    hooks: list[float] = []

    def lock(sim) -> None:
        sim.world.store_locked_until = sim.world.t + 200.0
        sim.world.impair(sim.world.store_locked_until)
        sim.lock_store(sim.world.store_locked_until)

    def read(sim) -> None:
        failed.extend(t for _, t, kind, d in sim.trace if kind == "tick_failed" and d["loop"] == "sentinel")
        hooks.extend(t for _, t, kind, d in sim.trace if kind == "tick_failed" and d["loop"] == "hooks")

    sim = scripted(hooked(), 2, [], looks=[(1 * H, lock), (1 * H + 199, read)])
    assert sim.violation is None, sim.violation
    assert len(failed) >= 4, failed
    gaps = [b - a for a, b in zip(failed, failed[1:])]
    busy = gaps[0] - LOOP_RETRY  # each try waits out the store's busy timeout, then the backoff
    assert [round(g - busy, 6) for g in gaps] == [backoff(n, LOOP_RETRY, 60.0) for n in range(1, len(gaps) + 1)]
    assert max(gaps) < sim.config.sentinel.interval
    # The hooks loop's too.
    hook_gaps = [b - a for a, b in zip(hooks, hooks[1:])]
    assert len(hook_gaps) >= 3 and hook_gaps == sorted(hook_gaps), hooks


def test_misses_found_late_behind_a_locked_store_are_looked_at_again_before_a_recycle():
    # The hooked storm, seed 34, day 9.36: a dialog ate two probes; the store was locked from
    # before the second one's deadline until after the dialog was closed, and the agent, hearing
    # again, was recycled on the dialog's misses six minutes old (a `definitive_signal` violation).
    # Misses found late call for one look more (canary.rules.should_recycle): it is acked.
    eaten: list[float] = []
    closed: list[float] = []

    def close(sim) -> None:
        a = sim.world.agent
        a.modal = False  # the operator answered it
        closed.append(sim.world.t)

    def lock(sim) -> None:
        w = sim.world
        w.store_locked_until = w.t + 370.0
        w.impair(w.store_locked_until)
        sim.lock_store(w.store_locked_until)

    def watch(sim) -> None:
        a = sim.world.agent
        if a is not None and a.modal and a.eaten_at not in eaten and a.eaten_at > 0:
            eaten.append(a.eaten_at)
            if len(eaten) == 2:  # the second probe the dialog ate: lock past its deadline, close inside
                sim.after(30.0, lock, sim)
                sim.after(200.0, close, sim)
                return
        sim.after(1.0, watch, sim)

    def dialog(sim) -> None:
        sim.world.agent.modal = True  # one Loom has no keys for: this config lists no dialogs
        watch(sim)

    config = default_config({"agent": {**HOOKED, "modals": []}})
    sim = scripted(config, 3, [], looks=[(1 * H, dialog)])
    assert sim.violation is None, sim.violation
    assert len(eaten) == 2 and closed, (eaten, closed)
    assert automatic(sim) == {}  # heard again once the dialog closed: nothing recycled
    after = [t for _, t, kind, d in sim.trace if kind == "canary" and d["result"] == "ok" and t > closed[0]]
    assert after, "the look again was never taken"


def rate_limited(monkeypatch, hours: float = 7.0, resets: bool | None = None, looks=(),
                 error: str = "rate_limit") -> Sim:
    """A run with a rate limit of three hours from hour 1 (StopFailure `rate_limit` for every turn
    the CLI takes, the reset time given as `resets` says, else as the seed draws), and a crash under
    it at 1.5 h; or, as `error` says, the account's bill or login failing its turns as long."""
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "LIMIT_FOR", (3 * H, 3 * H))
    monkeypatch.setattr(faults, "LIMIT_ERRORS", ((error, 1.0),))
    told = [] if resets is None else [(1 * H + 0.001, lambda sim: setattr(sim.world, "limit_resets", resets))]
    return scripted(hooked(), hours, [(1 * H, "rate_limit"), (1.5 * H, "crash")], looks=[*told, *looks])


def test_a_turn_taken_between_two_limits_ends_the_hold_though_it_ends_inside_the_second(monkeypatch):
    # Hooked storm seed 69, day 28.4: the login failed a turn (held, cause auth), the account came
    # back, a line was taken, and a rate limit began while its one call to the model was answered.
    # The turn succeeded (Stop) inside the second limit, and the hold ended by it, as Loom's rule
    # says. The checker counted only a Stop written late as a success under a limit, and named it
    # a hold ended by a success that never came.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "LIMIT_FOR", (600.0, 600.0))
    monkeypatch.setattr(faults, "LIMIT_ERRORS", (("authentication_failed", 1.0),))

    def line(sim) -> None:
        a = sim.world.agent
        sim.hooks.typed(a, f"a line at {sim.world.t:.0f}", False)

    def limited_again(sim) -> None:
        assert not sim.world.limited()
        sim.fault("rate_limit")
        assert sim.world.limited()

    sim = scripted(hooked(), 2.0, [(1 * H, "rate_limit")],
                   looks=[(1 * H + 10, line), (1 * H + 900, line), (1 * H + 900.01, limited_again)])
    assert sim.violation is None, sim.violation
    placed = [t for _, t, kind, d in sim.trace if kind == "hold_placed" and d.get("cause") == "auth"]
    cleared = [t for _, t, kind, d in sim.trace if kind == "hold_cleared" and d.get("cause") == "auth"]
    assert placed and placed[0] < 1 * H + 600, placed
    assert cleared and 1 * H + 900 < cleared[0] < 1 * H + 960, (cleared, sim.trace[-20:])


def test_the_operator_hears_of_a_rate_limit_once_and_its_renewals_are_silent(monkeypatch):
    # No reset time given: Loom holds the default half hour, the canary looks again, the turn fails
    # again, and the hold is renewed without a word more (harness_rules.on_failure). With one, a
    # single hold to the reset time.
    said: dict[bool, list[str]] = {}
    for resets in (False, True):
        def read(sim, resets=resets) -> None:
            said[resets] = [r[0] for r in sim.observer.query("SELECT text FROM outbox ORDER BY id")
                            if "rate_limit" in r[0]]

        sim = rate_limited(monkeypatch, resets=resets, looks=[(6.9 * H, read)])
        assert sim.violation is None, sim.violation
        holds = [d for _, _, kind, d in sim.trace if kind == "hold_placed" and d.get("cause") == "rate_limited"]
        assert len(said[resets]) == 1, said[resets]
        assert len(holds) >= (3 if not resets else 1), holds
        if resets:
            assert len(holds) == 1


def test_a_rate_limit_is_held_never_recycled_and_a_crash_under_its_hold_waits_for_its_end(monkeypatch):
    # Until 2026-12-07 the simulated CLI never failed a turn: the harness's holds, the `refused`
    # excuse and the bounds that must wait through a hold were not in any storm.
    sim = rate_limited(monkeypatch)
    assert sim.violation is None, sim.violation
    placed = [(t, d) for _, t, kind, d in sim.trace if kind == "hold_placed" and d.get("cause") == "rate_limited"]
    assert placed and placed[0][0] < 1.1 * H, placed
    relaunches = [(t, d["cause"]) for _, t, kind, d in sim.trace if kind == "relaunch"]
    assert "canary_failed" not in {cause for _, cause in relaunches}  # its probes' turns failed: no recycle
    crash = [t for t, cause in relaunches if cause == "crash"]
    assert crash and crash[0] >= placed[0][0] + 30 * 60 - 1, (placed, crash)  # not before the hold ran out
    assert any(kind == "canary" and d["result"] == "ok" and t > 4 * H for _, t, kind, d in sim.trace)


def holds_and_told(seen: dict, error: str):
    """A look that puts in `seen`, mid-run, what the operator was told that names `error` ("said")
    and the holds and relaunches in Loom's ledger ("ledger": (time on the run's clock, kind, cause)):
    the run's trace keeps its last events only."""

    def read(sim: Sim) -> None:
        assert sim.observer is not None
        w, db = sim.world, sim.observer
        since = w.wall - w.t  # the ledger's wall time, on the run's clock
        seen["said"] = [r[0] for r in db.query("SELECT text FROM outbox ORDER BY id") if error in r[0]]
        seen["ledger"] = [(ts - since, kind, cause) for ts, kind, cause in db.query(
            "SELECT ts, kind, cause FROM ledger WHERE kind IN ('hold_placed', 'hold_cleared', 'relaunch') ORDER BY id")]

    return read


def test_a_bill_or_a_login_that_fails_every_turn_is_held_told_once_and_released_when_mended(monkeypatch):
    # Until 2026-12-07 the simulated CLI failed its turns for a rate limit only: the harness's
    # other holds (`billing`, `auth`: no reset time, the default half hour renewed while the turns
    # fail) were in no storm.
    for error, cause in (("billing_error", "billing"), ("authentication_failed", "auth")):
        seen: dict = {}
        sim = rate_limited(monkeypatch, error=error, looks=[(6.9 * H, holds_and_told(seen, error))])
        assert sim.violation is None, (error, sim.violation)
        held = [t for t, kind, c in seen["ledger"] if kind == "hold_placed" and c == cause]
        assert len(held) >= 3 and held[0] < 1.1 * H, (error, held)  # renewed while its turns fail
        assert len(seen["said"]) == 1, (error, seen["said"])  # the operator is told once
        assert "canary_failed" not in {c for _, kind, c in seen["ledger"] if kind == "relaunch"}, seen["ledger"]
        released = [t for t, kind, c in seen["ledger"] if kind == "hold_cleared" and c == cause]
        assert released and released[-1] >= 4 * H - 1, released  # mended at 4 h: a turn succeeds
        assert not [t for t in held if t > released[-1]]  # and no hold since


def permission_asked(monkeypatch, wait: float = 80 * 60.0) -> Sim:
    """The operator's 80-minute turn (seed 6) asks for permission 5 minutes in, answered `wait` later."""
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "PERMISSION_WAIT", (wait, wait))
    monkeypatch.setattr(faults, "AWAY_SHARE", 0.0)
    return scripted(hooked(), 6, [(1 * H, "long_turn"), (1 * H + 300, "permission")], seed=6)


def test_a_turn_waiting_on_a_permission_prompt_is_told_and_not_recycled(monkeypatch):
    # Until 2026-12-07 the simulated CLI never asked: the withheld probe, the waiting excuse and the
    # operator's message were in no storm. The wait (80 minutes) is far past turn_quiet: a Loom
    # that took the silent turn for a wedge recycles it.
    sim = permission_asked(monkeypatch)
    assert sim.violation is None, sim.violation
    assert sim.hooks is not None
    asked = [t for _, t, kind, d in sim.trace if kind == "fault" and d["kind"] == "permission"]
    assert asked == [1 * H + 300]
    assert automatic(sim) == {}
    assert sim.world.turns and sim.world.turns[0][1] - sim.world.turns[0][0] > 80 * 60  # it waited, then ended


def test_a_wedge_behind_a_permission_prompt_is_found_once_the_prompt_has_waited_max_turn(monkeypatch):
    # The hooked storm at 1d88d2e, seeds 2 and 4: the agent wedged while its turn waited on a
    # permission prompt; Loom withholds probes from the dialog for max_turn, and `deaf_bound` did
    # not know it.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "PERMISSION_WAIT", (80 * 60.0, 80 * 60.0))
    monkeypatch.setattr(faults, "AWAY_SHARE", 0.0)
    sim = scripted(hooked(), 6, [(1 * H, "long_turn"), (1 * H + 300, "permission"), (1 * H + 600, "wedge")], seed=6)
    assert sim.violation is None, sim.violation
    recycled = [t for _, t, kind, d in sim.trace if kind == "relaunch" and d["cause"] == "canary_failed"]
    assert recycled and recycled[0] >= 1 * H + 300 + sim.config.canary.max_turn, recycled


def test_an_operator_away_past_max_turn_gets_the_waiting_agent_recycled_and_counted_apart(monkeypatch):
    # Until 2026-12-07 (session 29) the world's operator answered every prompt within 90 minutes:
    # a wait past `max_turn`, where Loom takes the silent turn for a wedge (probes typed, their
    # misses counted: docs/HOOKS.md), was in no storm. By design, and counted as the config's doing.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "AWAY_SHARE", 1.0)
    monkeypatch.setattr(faults, "AWAY_WAIT", (3 * H, 3 * H))
    sim = scripted(hooked(), 6, [(1 * H, "long_turn"), (1 * H + 300, "permission")], seed=6)
    assert sim.violation is None, sim.violation
    asked = 1 * H + 300
    recycled = [t for _, t, kind, d in sim.trace if kind == "relaunch" and d["cause"] == "canary_failed"]
    assert recycled and asked + sim.config.canary.max_turn <= recycled[0] < asked + 3 * H, recycled
    assert sim.report.hearing_recycles == {"turn_too_long": 1}, sim.report.hearing_recycles


def test_a_relaunchs_witness_waits_for_a_permission_prompt_opened_under_a_hold(monkeypatch):
    # The hooked storm at 6809663, seed 4, day 15: the harness held a rate-limited agent; the
    # operator relaunched it under the hold (the witness kept back); the limit passed and the new
    # process's turn asked for permission; the hold ran out and the witness probe was typed into
    # the dialog (canary.rules.next_step asked `withheld` only of a scheduled probe).
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "LIMIT_FOR", (600.0, 600.0))
    monkeypatch.setattr(faults, "LIMIT_ERRORS", (("rate_limit", 1.0),))
    monkeypatch.setattr(faults, "PERMISSION_WAIT", (80 * 60.0, 80 * 60.0))
    monkeypatch.setattr(faults, "AWAY_SHARE", 0.0)

    def no_reset(sim) -> None:
        sim.world.limit_resets = False  # a hold of the default half hour, past the limit

    def relaunch(sim) -> None:
        sim.operator.recycle("operator_fresh")

    def ask(sim) -> None:
        a = sim.world.agent
        sim.hooks.begin_turn(a, sim.world.t + 3 * H)
        sim.after(60.0, sim.fault, "permission")

    sim = scripted(hooked(), 4, [(1 * H, "rate_limit")],
                   looks=[(1 * H + 0.001, no_reset), (1 * H + 700, relaunch), (1 * H + 900, ask)])
    assert sim.violation is None, sim.violation
    assert [t for _, t, kind, d in sim.trace if kind == "fault" and d["kind"] == "permission"] == [1 * H + 960]
    held = [t for _, t, kind, d in sim.trace if kind == "hold_placed"]
    assert held and held[0] + 30 * 60 < 1 * H + 960 + 80 * 60  # the hold ran out inside the wait
    # The new launch's first probe (its witness) came once the prompt was answered, not before.
    launch = next(d["seq"] for _, t, kind, d in sim.trace if kind == "relaunch" and t >= 1 * H + 700)
    witnessed = [t for _, t, kind, d in sim.trace if kind == "canary" and d["seq"] == launch]
    assert witnessed and witnessed[0] >= 1 * H + 960 + 80 * 60, witnessed
