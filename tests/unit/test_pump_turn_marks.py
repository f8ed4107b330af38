"""Issue 26, busy or deaf with the stream-json pump as the source of turns: its transcript's records
as the hooks' turn marks (hooks.pump_marks, pure), read as the file grows (hooks.pump_turns), and
the canary loop's count of misses on a real store and a real transcript when no hooks are configured."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fake_clock import FakeClock
from hypothesis import given
from hypothesis import strategies as st

from loomtui import clock, platform
from loomtui.canary.loop import CanaryLoop
from loomtui.canary.rules import MISS, PENDING
from loomtui.canary.runs import insert_run, recent_runs, settle_run
from loomtui.context import Context
from loomtui.hooks import pump_marks, pump_turns, turn_rules, turns
from loomtui.hooks.turn_rules import BUSY, excuse
from loomtui.pump import transcript
from loomtui.pump.transcript import Record
from loomtui.timing import Instant

QUIET, MAX_TURN = 900.0, 7200.0
T0 = 1_000_000.0


def rec(t: float, direction: str, **data) -> Record:
    return Record(0, 0, T0 + t, direction, data)


def wrote(t: float, seq: int = 1, origin: str = "operator") -> Record:
    return rec(t, transcript.IN, seq=seq, origin=origin, ref="", text="hello")


def said(t: float, kind: str = "assistant", **event) -> Record:
    return rec(t, transcript.OUT, event={"type": kind, **event})


def init(t: float) -> Record:
    return said(t, "system", subtype="init", session_id="s-1")


def own_init(t: float) -> Record:
    """The init of a turn the CLI took by itself, as the pump records it (rules.result_turn)."""
    return rec(t, transcript.OUT, event={"type": "system", "subtype": "init", "session_id": "s-1"}, own_turn=True)


def tool(t: float, name: str = "Bash") -> Record:
    return said(t, message={"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": name,
                                                              "input": {"command": "ls"}}]})


def result(t: float, is_error: bool = False, subtype: str = "success") -> Record:
    return said(t, "result", is_error=is_error, subtype=subtype)


def pump(t: float, what: str, **data) -> Record:
    return rec(t, transcript.PUMP, what=what, **data)


def the_turns(records: list[Record]) -> list[turn_rules.Turn]:
    found, _ = pump_marks.marks(records)
    return turn_rules.turns(found)


def at(t: float) -> Instant:
    return Instant(T0 + t)


# -- the records as marks ------------------------------------------------------------------------


def test_a_line_written_and_answered_is_a_turn_from_its_write_to_its_result():
    [done] = the_turns([pump(0, "started"), wrote(10), init(11), tool(15), said(16, "user"), result(20)])
    assert (done.began, done.last, done.ended, done.outcome, done.tool) == (at(10), at(20), at(20), "stopped", "Bash")
    # While it runs: its last event is its last sign of life, the tool its call named.
    [running] = the_turns([wrote(10), init(11), tool(15, "Edit"), said(16, "user")])
    assert (running.began, running.last, running.ended, running.tool) == (at(10), at(16), None, "Edit")
    [failed] = the_turns([wrote(10), init(11), result(12, is_error=True, subtype="error_during_execution")])
    assert (failed.outcome, failed.error) == (turn_rules.FAILED, "error_during_execution")


def test_a_line_the_cli_never_answered_begins_no_turn_until_it_does():
    """A CLI that stopped reading (or hangs on its resume) is deaf, not busy: the pump's write alone
    says nothing of the CLI. Its first event, even read later, dates the turn from the write."""
    found, carried = pump_marks.marks([pump(0, "started"), wrote(10)])
    assert turn_rules.turns(found) == [] and carried.written == at(10)
    more, carried = pump_marks.marks([init(300), tool(301)], carried)
    [turn] = turn_rules.turns(found + more)
    assert (turn.began, turn.last, turn.ended) == (at(10), at(301), None) and carried.written is None
    # A write that failed, or a CLI that exited or was replaced, leaves nothing to answer.
    for end in (pump(11, "write_failed", seq=1), pump(11, "cli_exit", status=1), pump(11, "started")):
        found, carried = pump_marks.marks([wrote(10), end, tool(12)])
        assert turn_rules.turns(found) == [] and carried.written is None, end


def task(t: float, subtype: str = "task_notification") -> Record:
    return said(t, "system", subtype=subtype, task_id="b1")


def test_a_background_tasks_events_answer_no_line_and_its_end_is_a_turn_the_cli_took_by_itself():
    """Claude Code 2.1.332 prints a background task's progress and end whenever they come, and then
    tells the model of its end in a turn no line began: `init` to `result`. Taken for the answer of
    a line written just before (the CLI had not read it), the line's turn began at its write; the
    CLI's own turn was no turn at all, and a probe queued behind it was a miss with nothing open."""
    found, carried = pump_marks.marks([wrote(10), task(11, "task_updated"), task(11.5)])
    assert turn_rules.turns(found) == [] and carried.written == at(10)  # not answered yet
    first = [wrote(0), init(1), result(2)]
    [_, own] = the_turns([*first, task(4), task(5, "background_tasks_changed"), own_init(6), tool(7), result(9)])
    assert (own.began, own.ended, own.outcome) == (at(6), at(9), "stopped")
    # Read alone, from a window that starts after the last line (the pump's first read of a long
    # transcript, a one-shot tick's): the pump said it was the CLI's own.
    [alone] = the_turns([task(4), own_init(6), tool(7)])
    assert (alone.began, alone.ended) == (at(6), None)
    # An init the pump did not mark begins nothing by itself (Loom's demo agent says one at its start).
    assert the_turns([pump(0, "started"), init(1), tool(2)]) == []
    # A probe queued behind the CLI's own turn: that turn is open while it waits.
    records = [wrote(0), init(1), result(2), task(100), own_init(101), pump(102, "queued", seq=2, position=1),
               tool(500)]
    turns = the_turns(records)
    assert [t.began for t in turns] == [at(0), at(101)] and turns[-1].ended is None
    assert excuse(turns, at(101), at(600), QUIET, MAX_TURN) == BUSY
    # An init that answers a line written is that line's turn, not one of the CLI's own.
    assert [t.began for t in the_turns([wrote(10), task(11), init(12), result(13)])] == [at(10)]


def test_a_turn_is_timed_on_the_monotonic_clock_it_was_written_on_whatever_the_wall_clock_did():
    """Records keep both clocks (transcript.Writer): a day's step of the wall clock back during a
    silent turn must not make it look just begun and excuse a wedge for a day, nor a step forward
    make a busy turn look older than max_turn."""
    def on_both(t: float, record: Record) -> Record:
        return Record(0, 0, record.ts, record.dir, record.data, 500.0 + t, "boot-1")

    found, _ = pump_marks.marks([on_both(10, wrote(10)), on_both(11, init(11)), on_both(12, tool(12))])
    [turn] = turn_rules.turns(found)
    assert turn.began == Instant(T0 + 10, 510.0, "boot-1") and turn.last == Instant(T0 + 12, 512.0, "boot-1")
    for step in (-86400.0, 86400.0):
        # 1,000 s after its last event on the monotonic clock, the wall clock stepped by a day.
        now = Instant(T0 + 1012 + step, 1512.0, "boot-1")
        assert turn_rules.state(turn, now, QUIET, MAX_TURN) == turn_rules.TURN_QUIET, step
        assert turn_rules.state(turn, Instant(T0 + 112 + step, 612.0, "boot-1"), QUIET, MAX_TURN) == turn_rules.TURN_BUSY, step


def test_the_transcript_keeps_both_clocks_of_the_records_it_dates(tmp_path):
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    try:
        with clock.use(FakeClock()):
            now = clock.now()
            log.append(transcript.IN, seq=1, origin="operator", ref="", text="hi")
        log.append(transcript.OUT, ts=T0, event={"type": "system"})  # dated by its writer: the wall alone
    finally:
        log.close()
    dated, given_ts = transcript.read(path)
    # The boot where the platform reads it from /proc (the portable platform's is psutil's: not the pump's).
    boot = now.boot if platform.current().proc_files else None
    assert (dated.ts, dated.mono, dated.boot) == (now.wall, now.mono, boot)
    assert dated.data == {"seq": 1, "origin": "operator", "ref": "", "text": "hi"}  # no clock among its data
    assert (given_ts.ts, given_ts.mono, given_ts.boot) == (T0, None, None)


def test_a_line_queued_behind_a_turn_begins_its_own_turn_only_when_written():
    records = [wrote(0), init(1), pump(5, "queued", seq=2, position=1, origin="canary", ref=""),
               tool(30), result(60), wrote(60.01, seq=2, origin="canary"), init(61), tool(62), result(63)]
    first, probe = the_turns(records)
    assert (first.began, first.ended) == (at(0), at(60))
    assert (probe.began, probe.ended) == (at(60.01), at(63))
    # The probe sent at 5 was queued behind the busy turn: its miss is excused, for good once that
    # turn ended by itself; the probe's own turn excuses nothing of it.
    assert excuse([first], at(5), at(50), QUIET, MAX_TURN) == BUSY
    assert excuse([first, probe], at(5), at(5000), QUIET, MAX_TURN) == BUSY
    assert excuse([first, probe], at(60.005), at(70), QUIET, MAX_TURN) == ""


def test_the_cli_s_exit_or_a_new_pump_ends_a_turn_still_open_and_excuses_nothing_after():
    gone, = the_turns([wrote(0), init(1), tool(5), pump(9, "cli_exit", status=1, signal=None, exit=1)])
    assert (gone.outcome, gone.ended) == (turn_rules.GONE, at(9))
    assert excuse([gone], at(3), at(20), QUIET, MAX_TURN) == ""
    # Loom's launch mark comes first (its record is written before the old agent is stopped); the
    # new pump's start is no late announcement of it: a turn the old pump began after the launch
    # mark (a queued line written as it stopped) ends there.
    launch = turn_rules.Mark(at(100), turn_rules.SESSION_START, turn_rules.LAUNCH)
    found, _ = pump_marks.marks([wrote(101), init(102), pump(103, "started"), wrote(110), init(111)])
    stale, fresh = turn_rules.turns([launch, *found])
    assert stale.outcome == turn_rules.GONE and (fresh.began, fresh.ended) == (at(110), None)


def test_stderr_and_pump_notes_are_no_signs_of_life():
    records = [wrote(0), init(1), rec(500, transcript.ERR, line="warning"), pump(600, "queued", seq=2, position=1)]
    [turn] = the_turns(records)
    assert turn.last == at(1)
    assert turn_rules.state(turn, at(1 + QUIET), QUIET, MAX_TURN) == turn_rules.TURN_QUIET


# -- any order of events, read in any pieces -----------------------------------------------------

EVENTS = st.sampled_from(["in", "init", "tool", "text", "result", "error_result", "raw", "err", "started",
                          "cli_exit", "write_failed", "queued", "task", "own_init"])


def as_record(t: float, kind: str) -> Record:
    return {"in": lambda: wrote(t), "init": lambda: init(t), "tool": lambda: tool(t, f"T{int(t) % 3}"),
            "text": lambda: said(t, message={"content": [{"type": "text", "text": "x"}]}),
            "result": lambda: result(t), "error_result": lambda: result(t, True, "error_max_turns"),
            "raw": lambda: rec(t, transcript.OUT, raw="not json"), "err": lambda: rec(t, transcript.ERR, line="e"),
            "started": lambda: pump(t, "started"), "cli_exit": lambda: pump(t, "cli_exit", status=0),
            "write_failed": lambda: pump(t, "write_failed", seq=1),
            "queued": lambda: pump(t, "queued", seq=1, position=1), "task": lambda: task(t),
            "own_init": lambda: own_init(t)}[kind]()


@given(st.lists(EVENTS, max_size=60), st.lists(st.integers(0, 60), max_size=6))
def test_read_in_pieces_and_compacted_as_it_goes_the_turns_are_those_of_one_whole_read(kinds, cuts):
    records = [as_record(float(i), k) for i, k in enumerate(kinds)]
    whole, _ = pump_marks.marks(records)
    kept: list[turn_rules.Mark] = []
    carried = pump_marks.Read()
    bounds = [0, *sorted(c for c in cuts if c <= len(records)), len(records)]
    for lo, hi in zip(bounds, bounds[1:]):
        found, carried = pump_marks.marks(records[lo:hi], carried)
        kept = pump_marks.compact(kept + found, 10_000)
    assert turn_rules.turns(kept) == turn_rules.turns(whole)
    # Every turn began with a line the pump wrote and the CLI answered (a background task's event no
    # answer), none before its write, or at an init, a turn the CLI began by itself.
    answered = {r.ts for i, r in enumerate(records) if r.dir == transcript.IN
                and any(o.dir == transcript.OUT and o.data.get("event", {}).get("type") != "system"
                        or o.data.get("event", {}).get("subtype") == "init" for o in records[i + 1:])}
    inits = {r.ts for r in records if r.dir == transcript.OUT and r.data.get("own_turn") is True}
    assert {t.began.wall for t in turn_rules.turns(whole)} <= answered | inits
    # Runs of signs of life are cut to at most two marks.
    life = (pump_marks.STREAM_EVENT, pump_marks.TOOL_CALL)
    assert not any(all(m.event in life for m in kept[i:i + 3]) for i in range(len(kept) - 2))


# -- read from the file as it grows -------------------------------------------------------------


def test_the_reader_takes_only_what_was_appended_and_starts_again_on_a_new_file(tmp_path):
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    log.append(transcript.PUMP, ts=T0, what="started")
    log.append(transcript.IN, ts=T0 + 1, seq=1, origin="operator", ref="", text="/busy 60")
    assert turn_rules.turns(pump_turns.marks(tmp_path)) == []
    log.append(transcript.OUT, ts=T0 + 2, event={"type": "system", "subtype": "init"})
    for i in range(500):
        log.append(transcript.OUT, ts=T0 + 3 + i, event={"type": "assistant", "message": {"content": []}})
    first = pump_turns.marks(tmp_path)
    [turn] = turn_rules.turns(first)
    assert (turn.began, turn.last, turn.ended) == (at(1), at(502), None) and len(first) <= 4
    # Half a line (the pump mid-write) waits for its newline.
    with open(path, "ab") as fh:
        fh.write(b'{"ts": 1000600.0, "dir": "out", "event": {"type": "result"')
    assert turn_rules.turns(pump_turns.marks(tmp_path))[0].ended is None
    with open(path, "ab") as fh:
        fh.write(b', "is_error": false}}\n')
    assert turn_rules.turns(pump_turns.marks(tmp_path))[0].ended == at(600)
    log.close()
    # A new transcript in its place (another file): read afresh, nothing of the old one kept.
    os.unlink(path)
    log = transcript.Writer(path)
    log.append(transcript.IN, ts=T0 + 700, seq=2, origin="canary", ref="", text="touch x")
    log.append(transcript.OUT, ts=T0 + 701, event={"type": "system", "subtype": "init"})
    [probe] = turn_rules.turns(pump_turns.marks(tmp_path))
    assert (probe.began, probe.ended) == (at(700), None)
    log.close()
    assert pump_turns.marks(tmp_path / "nowhere") == []


def test_a_busy_turn_that_wrote_megabytes_since_the_last_look_stays_open(tmp_path):
    # Tool results carrying images: more than the first read's tail and a read's chunk together
    # between two looks. The reader started again from the tail and lost the open turn's prompt.
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    log.append(transcript.IN, ts=T0 + 1, seq=1, origin="operator", ref="", text="look at these")
    log.append(transcript.OUT, ts=T0 + 2, event={"type": "system", "subtype": "init"})
    [turn] = turn_rules.turns(pump_turns.marks(tmp_path))
    assert (turn.began, turn.ended) == (at(1), None)
    image = "i" * 700_000
    for i in range(9):  # 6.3 MB: more than TAIL + CHUNK
        log.append(transcript.OUT, ts=T0 + 10 + i, event={"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": image}]}})
    assert os.path.getsize(path) > pump_turns.TAIL + pump_turns.CHUNK
    [turn] = turn_rules.turns(pump_turns.marks(tmp_path))
    assert (turn.began, turn.last, turn.ended) == (at(1), at(18), None)
    assert excuse([turn], at(5), at(30), QUIET, MAX_TURN) == BUSY
    log.close()


def test_a_reader_new_to_a_turn_that_printed_megabytes_since_its_line_still_sees_it_open(tmp_path):
    # A supervisor restarted during a busy turn reads the transcript for the first time: the last
    # MiB held only the turn's tool results, no start, so the turn was not seen and its probes
    # counted as misses, to a recycle mid-turn. The first read reaches back to the turn's `in`.
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    log.append(transcript.PUMP, ts=T0, what="started", pid=1, cli_pid=2, argv=["claude"])
    log.append(transcript.IN, ts=T0 + 1, seq=7, origin="telegram", ref="", text="refactor the module")
    log.append(transcript.OUT, ts=T0 + 2, event={"type": "system", "subtype": "init", "session_id": "s"})
    for i in range(40):  # 2 MB of Read results, the turn still running
        log.append(transcript.OUT, ts=T0 + 10 + i, event={"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}]}})
        log.append(transcript.OUT, ts=T0 + 10 + i, event={"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x" * 50_000}]}})
    log.close()
    assert os.path.getsize(path) > pump_turns.TAIL + 900_000
    [turn] = turn_rules.turns(pump_turns.marks(tmp_path))  # the first read of this path here
    assert (turn.began, turn.last, turn.ended, turn.tool) == (at(1), at(49), None, "Read")
    assert excuse([turn], at(5), at(60), QUIET, MAX_TURN) == BUSY


def test_a_first_read_widens_window_by_window_and_at_last_reads_the_whole_file(tmp_path, monkeypatch):
    # The windows' sizes made small (sizes, not functions): a turn whose `in` lies past the second
    # window is found in the whole file, one within it in that window, each still open.
    monkeypatch.setattr(pump_turns, "TAIL", 1_000)
    monkeypatch.setattr(pump_turns, "WIDER", (5_000, 20_000))
    for signs, name in ((20, "near"), (200, "far")):  # about 8 KB and 80 KB of output since the `in`
        path = transcript.path_in(tmp_path / name)
        path.parent.mkdir()
        log = transcript.Writer(path)
        log.append(transcript.IN, ts=T0 + 1, seq=1, origin="operator", ref="", text="go")
        for i in range(signs):
            log.append(transcript.OUT, ts=T0 + 2 + i, event={"type": "user", "message": {"content": "x" * 300}})
        log.close()
        [turn] = turn_rules.turns(pump_turns.marks(tmp_path / name))
        assert (turn.began, turn.last, turn.ended) == (at(1), at(1 + signs), None), name


def test_a_reader_new_to_a_transcript_that_ends_between_turns_starts_from_its_last_mib(tmp_path):
    # The last MiB holds a `result`: nothing before it is needed, and nothing before it is read.
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    for i in range(40):
        log.append(transcript.IN, ts=T0 + 10 * i, seq=i + 1, origin="operator", ref="", text="x" * 50_000)
        log.append(transcript.OUT, ts=T0 + 10 * i + 1, event={"type": "result", "is_error": False})
    log.close()
    turns_seen = turn_rules.turns(pump_turns.marks(tmp_path))
    assert 0 < len(turns_seen) < 40 and turns_seen[-1].ended == at(391)


# -- the canary, on a real store and a real transcript -------------------------------------------

BOOT = "b1"


def stream_ctx(tmp_path: Path, hooks: bool = False, **canary: str) -> Context:
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    extra = "".join(f'{k} = "{v}"\n' for k, v in canary.items())
    settings = "--settings {hook_settings} " if hooks else ""
    config.write_text(f'state_dir = {json.dumps(str(state))}\n[agent]\ndriver = "stream-json"\n'
                      f'fresh_command = "claude {settings}--session-id {{session_id}}"\n'
                      f'resume_command = "claude {settings}--resume {{session_id}}"\n'
                      f'[canary]\ninterval = "20m"\nack_timeout = "3m"\nmisses_to_recycle = 2\n{extra}')
    return Context.load(str(config), None, environ={})


def miss(ctx: Context, virtual: FakeClock, log: transcript.Writer, wait: float = 180.0) -> None:
    """A probe sent now that the pump queues behind the running turn and that gets no ack in time;
    the turn uses a tool meanwhile."""
    sent = clock.wall()
    run = insert_run(ctx, os.urandom(6).hex(), "canary", PENDING, sent, sent + 180.0)
    log.append(transcript.PUMP, ts=clock.wall(), what="queued", seq=9, position=1, origin="canary", ref="")
    virtual.advance(wait / 2)
    log.append(transcript.OUT, ts=clock.wall(), event={"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]}})
    virtual.advance(wait / 2)
    settle_run(ctx, run, MISS, why="no ack")


def test_without_hooks_the_pump_s_busy_turn_excuses_its_misses_until_it_goes_quiet(tmp_path):
    ctx = stream_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    assert turns.from_pump(ctx)
    virtual = FakeClock(T0, 5_000.0, BOOT)
    with clock.use(virtual):
        log = transcript.Writer(transcript.path_in(ctx.agent_dir))
        loop = CanaryLoop(ctx)
        log.append(transcript.IN, ts=clock.wall(), seq=1, origin="operator", ref="", text="/busy 3600")
        log.append(transcript.OUT, ts=clock.wall(), event={"type": "system", "subtype": "init"})
        virtual.advance(60)
        for _ in range(3):
            miss(ctx, virtual, log)
        assert not loop.misses_mean_deaf()
        assert {r.excused for r in turns.excused(ctx, recent_runs(ctx), clock.now()) if r.result == MISS} == {"busy"}
        virtual.advance(15 * 60)  # nothing from the turn for turn_quiet: a wedge, and its misses count,
        assert not loop.misses_mean_deaf()  # found late: one look more first, and the turn still quiet
        again = insert_run(ctx, os.urandom(6).hex(), "canary", PENDING, clock.wall(), clock.wall() + 180.0)
        virtual.advance(180)
        settle_run(ctx, again, MISS, why="no ack")
        assert loop.misses_mean_deaf()
        # The turn ends by itself after all: its misses are excused for good.
        log.append(transcript.OUT, ts=clock.wall(), event={"type": "result", "is_error": False, "subtype": "success"})
        assert not loop.misses_mean_deaf()
        log.close()


def test_with_hooks_configured_the_hooks_are_the_source_and_the_pump_s_turns_are_not_counted_twice(tmp_path):
    for name, hooks in (("hooked", True), ("plain", False)):
        (tmp_path / name).mkdir()
        ctx = stream_ctx(tmp_path / name, hooks=hooks)
        assert turns.from_pump(ctx) is not hooks
        log = transcript.Writer(transcript.path_in(ctx.agent_dir))
        log.append(transcript.IN, seq=1, origin="operator", ref="", text="/busy 3600")
        log.append(transcript.OUT, event={"type": "system", "subtype": "init"})
        log.close()
        # Hooked: no hook event came, so no turn, whatever the pump wrote. Plain: the pump's turn.
        assert [t.ended for t in turns.read(ctx)] == ([] if hooks else [None])


def test_status_says_the_turn_as_the_pump_tells_it_where_no_hooks_are_configured(tmp_path):
    from loomtui.report import status

    ctx = stream_ctx(tmp_path, turn_quiet="15m", max_turn="2h")
    virtual = FakeClock(T0, 5_000.0, BOOT)
    with clock.use(virtual):
        assert status.gather(ctx, look=False).turn.describe() == "idle; told by the pump (no hooks)"
        log = transcript.Writer(transcript.path_in(ctx.agent_dir))
        log.append(transcript.IN, ts=clock.wall(), seq=1, origin="operator", ref="", text="/busy 3600")
        log.append(transcript.OUT, ts=clock.wall(), event={"type": "system", "subtype": "init"})
        virtual.advance(240)
        log.append(transcript.OUT, ts=clock.wall(), event={"type": "assistant", "message": {"content": [
            {"type": "tool_use", "id": "t", "name": "Bash", "input": {}}]}})
        virtual.advance(5)
        gathered = status.gather(ctx, look=False)
        assert gathered.turn.describe() == "busy 4m5s, last tool Bash; told by the pump (no hooks)"
        assert gathered.turn.as_json() == {"state": "busy", "age": 245.0, "quiet": 5.0, "tool": "Bash",
                                           "waiting": None, "source": "pump"}
        virtual.advance(15 * 60)
        assert status.gather(ctx, look=False).turn.describe().startswith(
            "quiet 19m5s (nothing for 15m5s: its misses count), last tool Bash;")
        log.close()
