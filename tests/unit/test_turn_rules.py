"""Issue 26, busy or deaf: the agent's turns as its hooks tell them (hooks.turn_rules), what they
say of a canary miss, and the canary's count of misses with late acks and excused misses in it."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from loomtui.canary.rules import MISS, OK, ProbeRun, consecutive_misses, due_in, should_recycle
from loomtui.hooks import turn_rules as tr
from loomtui.hooks.harness_rules import HOLDING
from loomtui.hooks.turn_rules import BUSY, REFUSED, WAITING, Mark, Turn, excuse, holds_back, state, turns, withholds_probe
from loomtui.timing import Instant

BOOT = "b1"
QUIET, MAX_TURN = 900.0, 7200.0


def at(t: float) -> Instant:
    return Instant(1_000_000.0 + t, 5_000.0 + t, BOOT)


def m(t: float, event: str, source: str = "", message: str = "") -> Mark:
    return Mark(at(t), event, source, message)


PROMPT = lambda t: m(t, tr.PROMPT)  # noqa: E731
STOP = lambda t: m(t, tr.STOP)  # noqa: E731
TOOL = lambda t, name="Bash": m(t, "PostToolUse", name)  # noqa: E731


# -- the turns -----------------------------------------------------------------------------------


def test_a_prompt_begins_a_turn_and_stop_failure_idle_or_a_new_session_ends_it():
    [done] = turns([PROMPT(0), TOOL(5), STOP(9)])
    assert (done.began, done.ended, done.outcome, done.tool) == (at(0), at(9), tr.STOPPED, "Bash")
    [failed] = turns([PROMPT(0), m(3, tr.STOP_FAILURE, "rate_limit")])
    assert (failed.outcome, failed.error) == (tr.FAILED, "rate_limit")
    [idle] = turns([PROMPT(0), m(70, tr.NOTIFICATION, tr.IDLE)])
    assert idle.outcome == tr.IDLE_END
    # An idle_prompt written late, after a new prompt: the minute of idleness it tells of came
    # before that turn, which goes on (closed, the busy turn's probes would count as misses).
    [late] = turns([PROMPT(0), TOOL(40), m(70, tr.NOTIFICATION, tr.IDLE)])
    assert late.ended is None and late.last == at(40)
    [stale] = turns([PROMPT(0), TOOL(40), m(100, tr.NOTIFICATION, tr.IDLE)])
    assert stale.outcome == tr.IDLE_END  # a minute without a word: idle after all
    # A new process: the old turn ended with it, at its last sign of life.
    gone, now_open = turns([PROMPT(0), TOOL(4), m(50, tr.SESSION_START, "resume"), PROMPT(60), TOOL(61, "Edit")])
    assert (gone.outcome, gone.ended) == (tr.GONE, at(4))
    assert (now_open.began, now_open.last, now_open.ended, now_open.tool) == (at(60), at(61), None, "Edit")


def test_loom_s_launch_is_the_boundary_and_the_launched_process_s_own_late_session_start_ends_nothing():
    """The hooked storm's seed 180 (ack_timeout 1 min): a turn began 18 s after a relaunch, its
    SessionStart written 33 s late, after the turn's prompt; taken for a new process, it ended the
    turn, and the busy agent's two misses recycled it."""
    launch = m(0, tr.SESSION_START, tr.LAUNCH)
    old, busy = turns([PROMPT(-100), TOOL(-50), launch, PROMPT(18), m(51, tr.SESSION_START, "resume"), TOOL(60)])
    assert (old.outcome, old.ended) == (tr.GONE, at(-50))
    assert (busy.began, busy.last, busy.ended) == (at(18), at(60), None)
    assert excuse([old, busy], at(90), at(150), QUIET, MAX_TURN) == BUSY
    # Its SessionStart on time changes nothing; a second one is another process, which ends the turn.
    assert turns([launch, m(1, tr.SESSION_START, "startup"), PROMPT(18)])[-1].ended is None
    *_, gone, fresh = turns([launch, m(1, tr.SESSION_START, "startup"), PROMPT(18), m(400, tr.SESSION_START, "startup"),
                             PROMPT(410)])
    assert (gone.outcome, fresh.began, fresh.ended) == (tr.GONE, at(410), None)
    # Without a launch of Loom's before it, a SessionStart is a new process, as ever.
    [gone] = turns([PROMPT(0), m(30, tr.SESSION_START, "startup")])
    assert gone.outcome == tr.GONE


def test_a_compaction_is_the_same_process_a_sign_of_life_inside_its_turn():
    [turn] = turns([PROMPT(0), TOOL(10), m(600, tr.SESSION_START, tr.COMPACT)])
    assert (turn.ended, turn.last, turn.tool) == (None, at(600), "Bash")
    assert excuse([turn], at(20), at(600 + QUIET - 1), QUIET, MAX_TURN) == BUSY
    assert turns([m(5, tr.SESSION_START, tr.COMPACT)]) == []


def test_a_prompt_queued_into_a_running_turn_is_the_same_turn_and_events_outside_a_turn_are_none():
    [one] = turns([TOOL(0), STOP(1), PROMPT(10), PROMPT(20), TOOL(30)])
    assert (one.began, one.last, one.ended) == (at(10), at(30), None)
    assert turns([]) == [] and turns([STOP(1), TOOL(2), m(3, tr.NOTIFICATION, tr.PERMISSION)]) == []


def test_a_permission_prompt_leaves_the_turn_waiting_until_its_next_event():
    [waiting] = turns([PROMPT(0), m(5, tr.NOTIFICATION, tr.PERMISSION, "Claude needs your permission to use Bash")])
    assert (waiting.waiting, waiting.waiting_since) == ("Claude needs your permission to use Bash", at(5))
    [answered] = turns([PROMPT(0), m(5, tr.NOTIFICATION, tr.PERMISSION, "x"), TOOL(400)])
    assert answered.waiting == "" and answered.ended is None
    [no_message] = turns([PROMPT(0), m(5, tr.NOTIFICATION, tr.PERMISSION)])
    assert no_message.waiting == tr.PERMISSION  # still waiting, said by its type


def test_the_state_of_a_turn_now():
    busy = Turn(at(0), at(100))
    assert state(None, at(50), QUIET, MAX_TURN) == tr.NO_TURN
    assert state(Turn(at(0), at(9), at(9), tr.STOPPED), at(10), QUIET, MAX_TURN) == tr.NO_TURN
    assert state(busy, at(100 + QUIET - 1), QUIET, MAX_TURN) == tr.TURN_BUSY
    assert state(busy, at(100 + QUIET), QUIET, MAX_TURN) == tr.TURN_QUIET
    lively_but_long = Turn(at(0), at(MAX_TURN))
    assert state(lively_but_long, at(MAX_TURN), QUIET, MAX_TURN) == tr.TURN_LONG
    waiting = Turn(at(0), at(5), waiting="x", waiting_since=at(5))
    # Waiting on the operator is not quiet, however long, up to max_turn after the prompt opened.
    assert state(waiting, at(5 + QUIET * 3), QUIET, MAX_TURN) == tr.TURN_WAITING
    assert state(waiting, at(5 + MAX_TURN), QUIET, MAX_TURN) == tr.TURN_LONG


# -- what a turn says of a miss ------------------------------------------------------------------


def test_a_miss_typed_into_a_busy_turn_is_excused_while_it_is_busy_and_counts_once_it_goes_quiet():
    marks = [PROMPT(0), TOOL(100), TOOL(200)]
    assert excuse(turns(marks), at(150), at(300), QUIET, MAX_TURN) == BUSY
    assert excuse(turns(marks), at(150), at(200 + QUIET), QUIET, MAX_TURN) == ""  # quiet: a wedge
    assert excuse(turns([PROMPT(0), TOOL(MAX_TURN - 1)]), at(10), at(MAX_TURN), QUIET, MAX_TURN) == ""  # too long


def test_a_miss_typed_into_a_turn_that_then_ended_by_itself_stays_excused():
    for end in (STOP(400), m(400, tr.STOP_FAILURE, "server_error"), m(400, tr.NOTIFICATION, tr.IDLE)):
        assert excuse(turns([PROMPT(0), end]), at(150), at(400 + 10 * MAX_TURN), QUIET, MAX_TURN) == BUSY
    # Ended by the process going away: nothing says it was alive and working.
    gone = turns([PROMPT(0), TOOL(100), m(400, tr.SESSION_START, "startup")])
    assert excuse(gone, at(150), at(500), QUIET, MAX_TURN) == ""


def test_no_excuse_between_turns_or_from_a_turn_the_probe_began():
    marks = [PROMPT(0), STOP(10), PROMPT(100), TOOL(110)]
    assert excuse(turns(marks), at(50), at(120), QUIET, MAX_TURN) == ""     # between turns
    assert excuse(turns(marks), at(99), at(120), QUIET, MAX_TURN) == ""     # the probe's own prompt: it began it
    assert excuse(turns(marks), at(105), at(120), QUIET, MAX_TURN) == BUSY  # typed into the running turn
    assert excuse([], at(105), at(120), QUIET, MAX_TURN) == ""              # no hooks: every miss counts


def test_a_miss_whose_own_turn_the_api_refused_for_a_quota_or_a_login_is_excused():
    refused = [PROMPT(0), STOP(10), PROMPT(100), m(280, tr.STOP_FAILURE, "rate_limit")]
    assert excuse(turns(refused), at(99), at(300), QUIET, MAX_TURN) == REFUSED
    assert excuse(turns(refused), at(50), at(300), QUIET, MAX_TURN) == REFUSED   # between turns, then its own
    failed = [PROMPT(0), STOP(10), PROMPT(100), m(280, tr.STOP_FAILURE, "server_error")]
    assert excuse(turns(failed), at(99), at(300), QUIET, MAX_TURN) == ""          # a restart may fix that one
    retrying = [PROMPT(0), STOP(10), PROMPT(100)]
    assert excuse(turns(retrying), at(99), at(160), QUIET, MAX_TURN) == ""        # not refused yet: it counts


def test_a_permission_prompt_excuses_a_miss_and_withholds_the_next_probe():
    marks = [PROMPT(0), m(5, tr.NOTIFICATION, tr.PERMISSION, "Claude needs your permission to use Bash")]
    all_turns = turns(marks)
    assert excuse(all_turns, at(10), at(5 + 3 * QUIET), QUIET, MAX_TURN) == WAITING
    assert withholds_probe(all_turns, at(5 + 3 * QUIET), QUIET, MAX_TURN)
    assert not withholds_probe(all_turns, at(5 + MAX_TURN), QUIET, MAX_TURN)  # a prompt lost its close: bounded
    assert not withholds_probe(turns(marks + [TOOL(60)]), at(70), QUIET, MAX_TURN)
    assert not withholds_probe(turns([PROMPT(0), TOOL(3)]), at(10), QUIET, MAX_TURN)


def test_a_line_is_held_back_only_by_the_open_turn_it_was_typed_into():
    busy = turns([PROMPT(0), TOOL(100)])
    assert holds_back(busy, at(50), at(120), QUIET, MAX_TURN) == BUSY
    assert holds_back(busy, at(50), at(100 + QUIET), QUIET, MAX_TURN) == ""
    ended = turns([PROMPT(0), STOP(100)])
    assert holds_back(ended, at(50), at(120), QUIET, MAX_TURN) == ""  # it should have been taken after the stop
    assert holds_back(turns([PROMPT(60), TOOL(70)]), at(50), at(80), QUIET, MAX_TURN) == ""


def stepped(t: float, step: float) -> Instant:
    """`at(t)` read after the wall clock was stepped by `step` seconds: the monotonic clock ran on."""
    moment = at(t)
    return Instant(moment.wall + step, moment.mono, moment.boot)


def test_which_came_first_is_the_monotonic_clock_s_word_not_a_stepped_wall_clock_s():
    # The wall clock stepped back an hour during a busy turn: the probe sent a minute after the turn
    # began reads, by wall time, as sent before it. The turn still began first: the miss is excused.
    busy = turns([PROMPT(0), TOOL(30)])
    assert excuse(busy, stepped(60, -3600), stepped(90, -3600), QUIET, MAX_TURN) == BUSY
    assert holds_back(busy, stepped(60, -3600), stepped(90, -3600), QUIET, MAX_TURN) == BUSY
    # Stepped forward: a probe sent before the turn began reads as sent after it; it began that turn.
    assert excuse(turns([PROMPT(100), TOOL(130)]), stepped(60, 3600), stepped(140, 3600), QUIET, MAX_TURN) == ""
    ended = turns([PROMPT(0), STOP(50)])
    assert excuse(ended, stepped(60, -3600), stepped(90, -3600), QUIET, MAX_TURN) == ""  # between turns still
    # Another boot: only the wall clock speaks.
    other = Instant(at(60).wall - 3600, 1.0, "b2")
    assert excuse(busy, other, stepped(90, -3600), QUIET, MAX_TURN) == ""


EVENTS = st.sampled_from([tr.PROMPT, tr.STOP, tr.STOP_FAILURE, tr.SESSION_START, "PostToolUse",
                          tr.STOP_FAILURE + ":rate_limit", tr.STOP_FAILURE + ":server_error",
                          tr.SESSION_START + ":" + tr.LAUNCH, tr.SESSION_START + ":startup",
                          tr.SESSION_START + ":" + tr.COMPACT,
                          tr.NOTIFICATION + ":" + tr.PERMISSION, tr.NOTIFICATION + ":" + tr.IDLE])


def marks_of(steps: list[tuple[float, str]]) -> list[Mark]:
    out, t = [], 0.0
    for gap, name in steps:
        t += gap
        event, _, source = name.partition(":")
        out.append(m(t, event, source))
    return out


@given(st.lists(st.tuples(st.floats(0, 3000), EVENTS), max_size=30), st.floats(0, 60_000), st.floats(0, 60_000))
def test_an_excuse_only_ever_comes_from_a_turn_open_when_the_probe_was_typed(steps, sent_t, later):
    """... or from the probe's own turn, refused by the API for a cause that holds."""
    marks = marks_of(steps)
    all_turns = turns(marks)
    sent, now = at(sent_t), at(sent_t + later)
    why = excuse(all_turns, sent, now, QUIET, MAX_TURN)
    assert why in ("", BUSY, WAITING, REFUSED)
    spans = [t for t in all_turns if t.began.wall <= sent.wall and (t.ended is None or t.ended.wall >= sent.wall)]
    if why == REFUSED:
        own = [t for t in all_turns if t.began.wall > sent.wall][0]
        assert own.outcome == tr.FAILED and own.error in HOLDING
        assert not spans or spans[-1].ended is not None, "a refusal read past a turn that still spans the probe"
    elif why:
        assert spans, "an excuse without a turn that spans the probe"
    if why == WAITING:
        assert spans[-1].ended is None and spans[-1].waiting
    # Turns never overlap, and each ends no earlier than it began.
    for a, b in itertools.pairwise(all_turns):
        assert a.ended is not None and a.ended.wall <= b.began.wall
    for t in all_turns:
        assert t.ended is None or t.ended.wall >= t.began.wall
    # What is held back is also excused (the stricter of the two).
    if holds_back(all_turns, sent, now, QUIET, MAX_TURN):
        assert why


# -- the canary's count with late acks and excused misses ---------------------------------------


def run(t: float, result: str = MISS, **kw) -> ProbeRun:
    return ProbeRun(1_000_000.0 + t, result, 1, **kw)


def test_a_late_ack_ends_a_run_of_misses_and_an_excused_miss_neither_counts_nor_ends_one():
    assert consecutive_misses([run(0), run(1)], 1) == 2
    assert consecutive_misses([run(0), run(1, late=True)], 1) == 0
    assert consecutive_misses([run(0), run(1, late=True), run(2)], 1) == 1
    assert consecutive_misses([run(0), run(1, excused=BUSY), run(2)], 1) == 2
    assert consecutive_misses([run(0, OK), run(1, excused=BUSY), run(2, excused=WAITING)], 1) == 0
    assert not should_recycle([run(i, excused=BUSY) for i in range(10)], 1, 2)
    # A late ack of another launch says nothing of this one.
    assert consecutive_misses([run(0), ProbeRun(1_000_001.0, MISS, 0, late=True), run(2)], 1) == 2


def test_a_miss_re_probes_at_once_unless_it_was_acked_late_or_excused():
    interval, timeout = 1200.0, 180.0
    assert due_in(run(0), 1_000_000.0 + 200, interval, timeout) == 0.0
    assert due_in(run(0, late=True), 1_000_000.0 + 200, interval, timeout) == interval - 200
    assert due_in(run(0, excused=BUSY), 1_000_000.0 + 200, interval, timeout) == interval - 200


def test_a_turn_a_probe_began_ends_with_its_ack_whatever_became_of_its_stop():
    from loomtui.hooks.turn_rules import closed_by_acks, current

    probe = [(at(100), at(103))]  # a probe sent at 100, acked at 103
    probe_turn = turns([PROMPT(101), TOOL(102)])  # the probe's own prompt at 101; its Stop was lost
    [closed] = closed_by_acks(probe_turn, probe)
    assert (closed.outcome, closed.ended) == (tr.STOPPED, at(103))
    assert current(closed_by_acks(probe_turn, probe)) is None
    # The operator's turn, begun before the probe: the probe's ack (queued behind it, or taken
    # inside it) says nothing of when that turn ends.
    operators = turns([PROMPT(50), TOOL(90), TOOL(120)])
    assert closed_by_acks(operators, probe) == operators
    # Events after the ack: the turn went on working (more was asked in it).
    assert closed_by_acks(turns([PROMPT(101), TOOL(200)]), probe)[-1].ended is None
    # The wall clock stepped back after that probe: a turn begun 200 s later reads, by wall time, as
    # begun and busy between the probe's send and its ack. The monotonic clock's order keeps it open.
    later = turns([Mark(stepped(300, -199), tr.PROMPT, "", ""), Mark(stepped(301, -199), "PostToolUse", "Bash", "")])
    assert closed_by_acks(later, probe)[-1].ended is None


def test_a_prompt_after_a_probes_ack_begins_a_turn_of_its_own_though_the_probes_stop_was_lost():
    # Hooked storm: a probe's Stop lost, then the operator's turn 18 minutes later. Taken as one turn
    # begun with the probe, it was aged from the probe: 101 minutes into the operator's turn Loom
    # read it as older than max_turn (2 h) and recycled an agent at work.
    from loomtui.hooks.turn_rules import closed_by_acks, current

    probe = [(at(100), at(103))]
    read = closed_by_acks(turns([PROMPT(101), PROMPT(1180), TOOL(1300), PROMPT(1400), TOOL(7300)]), probe)
    assert [(t.began, t.ended, t.outcome) for t in read[:-1]] == [(at(101), at(103), tr.STOPPED)]
    now = current(read)
    assert now is not None and (now.began, now.last, now.prompts) == (at(1180), at(7300), (at(1180), at(1400)))
    assert state(now, at(7400), 900.0, 7200.0) == tr.TURN_BUSY  # 104 minutes old, not 120
    # Only a prompt after the ack splits it: tools after it are the probe's turn going on (more was
    # asked in it), and a turn the probe did not begin is not the probe's to close.
    assert closed_by_acks(turns([PROMPT(101), TOOL(200), TOOL(300)]), probe)[-1].began == at(101)
    operators = turns([PROMPT(50), PROMPT(1180), TOOL(1300)])
    assert closed_by_acks(operators, probe) == operators
    # Two probes' Stops lost in a row, then the operator's turn: split at each ack in turn.
    two = [(at(100), at(103)), (at(1300), at(1304))]
    read = closed_by_acks(turns([PROMPT(101), PROMPT(1301), PROMPT(2000), TOOL(2100)]), two)
    assert [(t.began, t.ended) for t in read] == [(at(101), at(103)), (at(1301), at(1304)), (at(2000), None)]
