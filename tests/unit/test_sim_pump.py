"""The stream-json driver in the simulator: with `agent.driver = "stream-json"` the simulated pane runs
a modelled `loom pump` (sim/pump_model.py) that writes the transcript and pump.json Loom's own code
reads, through the pump's own rules (pump/rules.py) and transcript writer. Without `{hook_settings}`
the pump is Loom's source of turns (hooks/source.py): a long busy turn misses its probes and is not
recycled, a wedge is."""

from __future__ import annotations

import json

from loomtui.agent.drivers import driver_class
from loomtui.hooks import pump_marks, source
from loomtui.hooks.turn_rules import PROMPT, STOP
from loomtui.pump import transcript
from loomtui.pump.facts import read_facts
from loomtui.sim import simulate
from loomtui.sim.engine import Sim
from loomtui.sim.profiles import PROFILES, default_config
from loomtui.telegram import bridge

from test_sim_hooks import H, automatic, holds_and_told, long_turn_missed_and_kept, scripted

# README's stream-json commands, without `{hook_settings}`: the pump tells the turns.
STREAM = {"driver": "stream-json",
          "fresh_command": "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' --session-id {session_id}",
          "resume_command": "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' --resume {session_id}"}


def streamed(hooks: bool = False, **canary) -> object:
    agent = dict(STREAM)
    if hooks:
        agent = {k: v.replace("claude ", "claude --settings {hook_settings} ") if k != "driver" else v
                 for k, v in agent.items()}
    return default_config({"agent": agent, **({"canary": canary} if canary else {})})


def test_the_stream_json_sim_runs_the_pump_driver_whose_turns_loom_reads():
    seen: dict = {}

    def look(sim: Sim) -> None:
        # Mid-turn, through Loom's own readers: the source, pump.json's facts, the transcript's marks.
        ctx, a = sim.ctx, sim.world.agent
        assert ctx is not None and a is not None
        seen["source"] = source.of(ctx)
        seen["facts"] = read_facts(ctx.agent_dir, a.pid)
        records = list(transcript.read(transcript.path_in(ctx.agent_dir)))
        seen["marks"], _ = pump_marks.marks(records)
        seen["dirs"] = {r.dir for r in records}
        seen["session"] = a.session

    sim = scripted(streamed(), 3, [(1 * H, "long_turn")], looks=[(1.5 * H, look)])
    assert sim.violation is None, sim.violation
    real = driver_class(sim.config)
    assert (sim.driver.name, sim.driver.has_dialogs, sim.driver.owns_turns) == \
        (real.name, real.has_dialogs, real.owns_turns) == ("stream-json", False, True)
    assert seen["source"] == source.PUMP
    facts = seen["facts"]
    assert facts.current and facts.running and facts.session_id == seen["session"] and facts.cli_exit is None
    assert facts.turns >= 1 and facts.last_result is not None and not facts.last_result.is_error
    assert seen["dirs"] == {"pump", "in", "out"}
    # The probes before it: each a prompt and its stop; the operator's turn, still open, its prompt last.
    events = [m.event for m in seen["marks"] if m.event in (PROMPT, STOP)]
    assert events[-1] == PROMPT and events.count(STOP) >= 1


def test_a_long_busy_turn_misses_its_probes_and_is_not_recycled():
    long_turn_missed_and_kept(streamed())


def own_turn(monkeypatch, looks=()) -> Sim:
    """A run of 3 hours with a background task's end at hour 1, told in a long turn the CLI takes
    by itself (longer than three ack timeouts)."""
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "OWN_LONG", 1.0)
    return scripted(streamed(), 3, [(1 * H, "own_turn")], looks=looks)


def test_a_turn_the_cli_takes_by_itself_holds_the_lines_and_its_probes_misses_are_excused(monkeypatch):
    # Until 2026-12-08 the simulated CLI never took a turn of its own: the pump's `own_since`, its
    # records' `own_turn` and the marks that begin a turn at such an init ran in no simulation.
    seen: dict = {}

    def look(sim: Sim) -> None:
        ctx = sim.ctx
        assert ctx is not None
        seen["records"] = list(transcript.read(transcript.path_in(ctx.agent_dir)))

    sim = own_turn(monkeypatch, looks=[(2.99 * H, look)])
    assert sim.violation is None, sim.violation
    [(start, end, _, reported)] = sim.world.turns
    assert start == 1 * H and reported == start and end - start > 3 * sim.config.canary.ack_timeout
    records = seen["records"]
    inits = [r for r in records if r.dir == transcript.OUT and r.data["event"].get("subtype") == "init"
             and r.data.get("own_turn") is True]
    results = [r for r in records if r.dir == transcript.OUT and r.data["event"].get("type") == "result"
               and r.data.get("own_turn") is True]
    assert len(inits) == 1 and len(results) == 1 and inits[0].ts < results[0].ts
    # The probes handed over during it were queued, written only at its result, each acked late.
    queued = [r for r in records if r.dir == transcript.PUMP and r.data.get("what") == "queued"
              and inits[0].ts < r.ts < results[0].ts]
    assert queued, "no probe came during the CLI's own turn"
    written = [r for r in records if r.dir == transcript.IN and r.data["seq"] == queued[0].data["seq"]]
    assert written and written[0].ts >= results[0].ts
    assert sim.report.probes.get("miss", 0) >= sim.config.canary.misses_to_recycle
    assert automatic(sim) == {}


def test_a_busy_turn_at_one_minute_is_excused_by_the_pump():
    # A 1-minute wait: the `busy` turn outlasts one probe's wait and the queued probe is acked late.
    sim = scripted(streamed(ack_timeout="1m"), 3, [(1 * H, "busy")])
    assert sim.violation is None, sim.violation
    assert sim.report.probes.get("miss", 0) >= 1
    assert automatic(sim) == {}


def test_a_wedged_agent_is_recycled_and_a_wedge_inside_a_turn_once_it_goes_quiet():
    sim = scripted(streamed(), 3, [(1 * H, "wedge")])
    assert sim.violation is None, sim.violation
    assert sum(automatic(sim).get("canary_failed", {}).values()) == 1
    sim = scripted(streamed(), 6, [(1 * H, "long_turn"), (1.1 * H, "wedge")])
    assert sim.violation is None, sim.violation
    assert sum(automatic(sim).get("canary_failed", {}).values()) == 1
    a = sim.world.agent
    assert a is not None and a.hearing()


def test_a_resume_that_finds_no_conversation_goes_fresh():
    sim = scripted(streamed(), 2, [(1 * H, "resume_fails")])
    assert sim.violation is None, sim.violation
    assert automatic(sim).get("resume_failed") == {"fresh": 1}


def test_same_seed_same_bytes_and_no_dialog_faults():
    first = simulate(4, 0.3, "storm", streamed())
    again = simulate(4, 0.3, "storm", streamed())
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert first["violation"] is None, first["violation"]
    # Print mode has no dialog: the `modal` fault is drawn, and skipped.
    assert first["faults"].get("modal", 0) == 0


def test_the_storm_with_a_stream_json_config_holds_every_invariant():
    for seed in range(1, 6):
        report = simulate(seed, 1.0, "storm", streamed())
        assert report["violation"] is None, (seed, report["violation"])
        assert report["faults"].get("long_turn", 0) > 0


def test_with_hooks_too_the_hooks_tell_the_turns_and_the_pump_writes_its_files():
    seen: dict = {}

    def look(sim: Sim) -> None:
        assert sim.ctx is not None
        seen["source"] = source.of(sim.ctx)

    sim = scripted(streamed(hooks=True), 5, [(1 * H, "long_turn")], looks=[(1.5 * H, look)])
    assert sim.violation is None, sim.violation
    assert seen["source"] == source.HOOKS
    assert sim.hooks is not None and sim.hooks.written > 10
    assert sim.pump is not None and sim.pump.records > 10
    assert automatic(sim) == {}
    # At the hooked default (1 minute): the storm seed whose slow boot was recycled before
    # canary.rules.ack_deadline (docs/SIM.md; seed 2, 1h51m) now holds.
    report = simulate(2, 0.5, "storm", streamed(hooks=True))
    assert report["violation"] is None, report["violation"]


def test_the_accounts_trouble_through_the_pump_is_held_told_once_and_released(monkeypatch):
    # README's stream-json config (hooks too): until 2026-12-07 (session 29) the simulated pump's
    # CLI never failed a turn. Now a rate limit, a bill or a login fails each turn it reads: an
    # error `result` in the transcript and StopFailure from the hooks; Loom holds, never recycles.
    from loomtui.sim import faults

    monkeypatch.setattr(faults, "LIMIT_FOR", (3 * H, 3 * H))
    for error, cause in (("rate_limit", "rate_limited"), ("authentication_failed", "auth")):
        monkeypatch.setattr(faults, "LIMIT_ERRORS", ((error, 1.0),))
        seen: dict = {}
        told = holds_and_told(seen, error)

        def read(sim: Sim, told=told) -> None:
            assert sim.ctx is not None
            told(sim)
            seen["errors"] = [r.event.get("result") for r in transcript.read(transcript.path_in(sim.ctx.agent_dir))
                              if r.dir == transcript.OUT and r.event.get("is_error") is True]

        sim = scripted(streamed(hooks=True), 7, [(1 * H, "rate_limit"), (1.5 * H, "crash")], looks=[(6.9 * H, read)])
        assert sim.violation is None, (error, sim.violation)
        held = [t for t, kind, c in seen["ledger"] if kind == "hold_placed" and c == cause]
        assert len(held) >= 3 and held[0] < 1.1 * H, (error, held)
        assert len(seen["said"]) == 1, seen["said"]
        assert "canary_failed" not in {c for _, kind, c in seen["ledger"] if kind == "relaunch"}, seen["ledger"]
        crash = [t for t, kind, c in seen["ledger"] if kind == "relaunch" and c == "crash"]
        assert crash and crash[0] >= held[0] + 30 * 60 - 1, (held, crash)  # not before the hold ran out
        released = [t for t, kind, c in seen["ledger"] if kind == "hold_cleared" and c == cause]
        assert released and released[-1] >= 4 * H - 1 and not [t for t in held if t > released[-1]]
        assert seen["errors"] and all(str(e).startswith("API Error: ") for e in seen["errors"]), seen["errors"]


def test_a_slow_boot_the_config_allows_is_waited_out_not_recycled():
    # README's stream-json config with hooks (1-minute waits): a probe goes as the pump comes up and
    # the dispatch witness hastens a second; the CLI reads them only once its slow boot is over (after
    # the 90 s grace). Both wait out the grace before their ack timeout, and are acked.
    config = streamed(hooks=True)
    sim = scripted(config, 2, [(0.5 * H, "slow_boot"), (0.6 * H, "crash")])
    assert sim.violation is None, sim.violation
    assert automatic(sim) == {"crash": {"resume": 1}}
    assert sim.report.probes.get("miss", 0) == 0 and sim.report.probes.get("ok", 0) >= 2


def test_a_cli_that_stopped_reading_its_input_is_recycled_its_refusals_taken_as_misses():
    """The CLI closes its stdin and runs on: the pump's next write fails (`write_failed`) and it
    refuses every later line as the real one does (rules.INPUT_CLOSED_CODE). Loom's probe takes the
    refusal as the agent's miss (canary/probe.py), so the agent is recycled within `deaf_bound`;
    were it Loom's `inject_failed`, the agent would stay deaf for good (test_sim_mutants.py)."""
    seen: dict = {}

    def look(sim: Sim) -> None:
        assert sim.ctx is not None
        records = list(transcript.read(transcript.path_in(sim.ctx.agent_dir)))
        seen["failed"] = [r.data["what"] for r in records if r.dir == transcript.PUMP].count("write_failed")

    sim = scripted(streamed(), 3, [(1 * H, "stdin_closed")], looks=[(2.9 * H, look)])
    assert sim.violation is None, sim.violation
    assert sum(automatic(sim).get("canary_failed", {}).values()) == 1
    a = sim.world.agent
    assert a is not None and a.hearing()
    assert seen["failed"] == 1
    assert sim.report.probes.get("inject_failed", 0) == 0 and sim.report.probes.get("miss", 0) >= 2



def test_a_result_that_denied_a_call_is_recorded_once(monkeypatch):
    """The pump's result of a turn whose tool call the CLI's permissions refused is recorded by
    Loom's watchdog (record_denials) as one permission_denied event, and never again at later ticks
    (`denials_recorded_once`; test_sim_mutants.py drops the read offset and sees it fire)."""
    from loomtui.sim import pump_model

    monkeypatch.setattr(pump_model, "DENIED", 1.0)
    sim = scripted(streamed(), 4, [(1 * H, "long_turn")])
    assert sim.violation is None, sim.violation
    assert len(sim.checker.denials_written) == sim.checker.denials_recorded == 1


def test_the_real_bridge_tells_each_of_the_operators_messages_once_from_the_pumps_records():
    """The simulated pump's records (`unread` and its `set_aside`, a new pump's `pending`, a result's
    `unread`, a queued line's `kept`) read by Loom's own bridge over a stream-json storm day: each
    of the operator's messages (a `telegram` line) is answered once, told it goes again, or told it
    was lost; one told it goes again is written again, one told lost never is. Pins the model's
    records to what the bridge takes them to mean (the runner's own are tested in test_pump_runner)."""
    seen: dict = {}

    def look(sim: Sim) -> None:
        assert sim.ctx is not None
        path, records, offset = transcript.path_in(sim.ctx.agent_dir), [], 0
        while chunk := list(transcript.read(path, offset)):
            records += chunk
            offset = chunk[-1].end
        cursor, answers = bridge.advance(bridge.Cursor(), records)
        # Read in pieces, as the bridge's loop reads a growing file: the same answers, the same end.
        piecewise, told = bridge.Cursor(), []
        for start in range(0, len(records), 97):
            piecewise, more = bridge.advance(piecewise, records[start:start + 97])
            told += more
        assert (told, piecewise.open) == (answers, cursor.open)
        seen.update(records=records, answers=answers, open=cursor.open)

    # Seed 2: a day with each answer in it (seed 1's, once the world's jobs could hang, has no "again").
    sim = Sim(streamed(), PROFILES["storm"], 2, 1.0)
    sim.at(24 * H - 1.0, look, sim)
    sim.run()
    assert sim.violation is None, sim.violation
    sent = [(i, r) for i, r in enumerate(seen["records"])
            if r.dir == transcript.IN and r.data.get("origin") == bridge.TELEGRAM]
    told = {a.key: a.what for a in seen["answers"]}
    assert len(told) == len(seen["answers"])  # none told twice
    still = {i.key for i in seen["open"]}
    # What is still open at the end was written after the last turn's end, a CLI's exit or a start.
    ended = max(i for i, r in enumerate(seen["records"]) if r.dir == transcript.OUT and r.event.get("type") == "result"
                or r.dir == transcript.PUMP and r.data.get("what") in ("cli_exit", "started"))
    for i, r in sent:
        key = bridge.Input(r.data["seq"], bridge.TELEGRAM, r.ts).key
        assert (key in told) != (key in still), (r.data, told.get(key))
        assert key not in still or i > ended, r.data
        again = any(j > i and q.data["seq"] == r.data["seq"] for j, q in sent)
        if told.get(key) == "again":
            assert again, r.data
        elif told.get(key) == "lost":
            assert not again, r.data
    assert {"answer", "again", "lost"} <= set(told.values()), told
