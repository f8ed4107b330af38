"""The pump's turn and queue rules: one message per turn, in the order accepted, never during a turn."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loomtui.pump import rules
from loomtui.pump.rules import Exited, InputClosed, Output, Queued, Ready, Refused, Send, Write

RESULT = {"type": "result", "subtype": "success", "is_error": False, "permission_denials": []}
ASSISTANT = {"type": "assistant", "message": {"content": [{"type": "text", "text": "hi"}]}}


def run(state, *events):
    actions = []
    for event in events:
        state, done = rules.step(state, event)
        actions.extend(done)
    return state, actions


def ready(now=0.0, **kwargs):
    state, _ = rules.step(rules.start(**kwargs), Ready(now))
    return state


def test_a_send_between_turns_is_written_at_once_and_starts_the_turn():
    state, actions = rules.step(ready(), Send(10.0))
    assert actions == (Write(1),)
    assert (state.turn_seq, state.turn_started, state.next_seq, state.queue) == (1, 10.0, 2, ())
    assert rules.status(state)["turn"] == "running"


def test_sends_during_a_turn_are_queued_in_order_with_their_positions():
    state, actions = run(ready(), Send(1), Send(2), Send(3), Send(4))
    assert actions == [Write(1), Queued(2, 1), Queued(3, 2), Queued(4, 3)]
    assert state.queue == (2, 3, 4) and state.turn_seq == 1


def test_a_result_ends_the_turn_and_writes_the_next_in_line():
    state, _ = run(ready(), Send(1), Send(2), Send(3))
    state, actions = rules.step(state, Output(5.0, RESULT))
    assert actions == (Write(2),)
    assert (state.turn_seq, state.turn_started, state.queue, state.turns) == (2, 5.0, (3,), 1)
    assert state.last_result == rules.LastResult(5.0, False, "success", 1, ())
    state, actions = run(state, Output(6.0, ASSISTANT), Output(7.0, RESULT), Output(8.0, RESULT))
    assert actions == [Write(3)]
    assert (state.turn_seq, state.turns, rules.status(state)["turn"]) == (None, 3, "idle")


def test_events_other_than_result_do_not_end_a_turn():
    state, _ = run(ready(), Send(1), Send(2))
    for event in (ASSISTANT, {"type": "user"}, {"type": "system", "subtype": "init", "session_id": "s"}, {}):
        state, actions = rules.step(state, Output(3.0, event))
        assert actions == () and state.turn_seq == 1


def test_init_names_the_session_and_a_later_init_renames_it():
    state, _ = run(ready(), Output(1, {"type": "system", "subtype": "init", "session_id": "a"}))
    assert state.session_id == "a"
    state, _ = run(state, Output(1, {"type": "system", "subtype": "init", "session_id": "b"}))
    assert state.session_id == "b"
    state, _ = run(state, Output(1, {"type": "system", "subtype": "init", "session_id": ""}),
                   Output(1, {"type": "system", "subtype": "init"}), Output(1, {"type": "system", "session_id": "c"}))
    assert state.session_id == "b"


INIT = {"type": "system", "subtype": "init", "session_id": "s"}
TASK_ENDED = {"type": "system", "subtype": "task_notification", "task_id": "b1", "status": "completed"}


def test_a_turn_the_cli_takes_by_itself_holds_the_lines_until_its_result():
    """A background task's end is told to the model in a turn no line began (Claude Code 2.1.332:
    its `task_notification`, then `init` ... `result`). Taken for idle, a line went in at once: the
    CLI merged it into that turn, and the turn's result was taken for the line's answer."""
    # A CLI that speaks at its start (Loom's demo agent) has no task of its own yet.
    assert rules.result_turn(ready(), INIT) == {}
    state, _ = run(ready(), Output(0.1, INIT))
    assert not state.running
    state, _ = run(state, Send(0.2), Output(0.3, INIT), Output(0.4, RESULT))  # its first line's turn
    state, actions = run(state, Output(1.0, TASK_ENDED))
    assert not state.running and actions == []  # a task's event begins no turn
    assert rules.result_turn(state, INIT) == {"own_turn": True}  # its record says so (hooks.pump_marks)
    state, actions = run(state, Output(2.0, INIT))
    assert state.running and state.turn_seq is None and state.own_since == 2.0 and actions == []
    assert rules.result_turn(state, INIT) == {}  # an init within it begins nothing more
    assert (rules.status(state)["turn"], rules.status(state)["turn_started"], rules.status(state)["turn_seq"]) == (
        "running", 2.0, None)
    state, actions = run(state, Send(3.0), Send(4.0), Output(5.0, ASSISTANT))
    assert actions == [Queued(2, 1), Queued(3, 2)]
    assert rules.result_turn(state, RESULT) == {"own_turn": True}
    state, actions = rules.step(state, Output(6.0, RESULT))
    assert actions == (Write(2),) and state.own_since is None and state.turn_seq == 2 and state.turns == 2
    assert state.last_result == rules.LastResult(6.0, False, "success", None, ())
    # The init of the line's own turn is that turn's, not one of the CLI's.
    state, _ = rules.step(state, Output(7.0, INIT))
    assert state.own_since is None and rules.result_turn(state, RESULT) == {"turn": 2}
    # The CLI gone mid-turn of its own: nothing runs.
    state, _ = run(ready(), Send(0.5), Output(0.6, RESULT), Output(1.0, INIT), Exited(2.0, 0))
    assert state.own_since is None
    assert not state.running and rules.step(state, Output(3.0, INIT))[0].own_since is None


def test_a_result_outside_a_turn_is_recorded_but_ends_nothing():
    state, actions = run(ready(), Output(2.0, {**RESULT, "is_error": True, "subtype": "error_during_execution"}))
    assert actions == [] and state.turns == 0
    assert state.last_result == rules.LastResult(2.0, True, "error_during_execution", None, ())


def test_a_results_record_names_the_line_whose_turn_it_ends_and_nothing_else_does():
    state, _ = run(ready(), Send(1), Send(2))
    assert rules.result_turn(state, RESULT) == {"turn": 1}
    assert [rules.result_turn(state, event) for event in (ASSISTANT, {"type": "user"}, {})] == [{}, {}, {}]
    state, _ = rules.step(state, Output(3.0, RESULT))
    assert rules.result_turn(state, RESULT) == {"turn": 2}
    state, _ = rules.step(state, Output(4.0, RESULT))
    assert rules.result_turn(state, RESULT) == {}  # a result outside a turn of the pump's
    # An error printed before the line was read still names it (the record's `unread` says the rest);
    # after a write that failed (InputClosed) no turn runs, and a result names none.
    state, _ = run(ready(), Send(1))
    assert rules.result_turn(state, {**RESULT, "is_error": True}) == {"turn": 1}
    state, _ = rules.step(state, InputClosed(2.0, 1))
    assert rules.result_turn(state, RESULT) == {}


def test_only_a_literal_true_is_error_is_an_error():
    state, _ = run(ready(), Send(1), Output(2.0, {"type": "result", "is_error": "yes", "subtype": 3}))
    assert state.last_result == rules.LastResult(2.0, False, "", 1, ())


def test_permission_denials_are_kept_as_tool_names():
    event = {**RESULT, "permission_denials": [{"tool_name": "Bash", "tool_use_id": "t"}, "Edit", {"x": 1}, 5,
                                              {"tool_name": ""}, {"tool_name": "W" * 300}]}
    assert rules.denials(event) == ("Bash", "Edit", "W" * 100)
    assert rules.denials({"permission_denials": "Bash"}) == ()
    state, _ = run(ready(), Send(1), Output(4.0, event))
    assert rules.status(state)["last_result"] == {"ts": 4.0, "is_error": False, "subtype": "success", "seq": 1,
                                                  "denials": ["Bash", "Edit", "W" * 100]}


def test_nothing_is_written_before_the_cli_is_ready_then_the_oldest_first():
    state, actions = run(rules.start(), Send(1), Send(2))
    assert actions == [Queued(1, 1), Queued(2, 2)] and not state.running
    state, actions = rules.step(state, Ready(3.0))
    assert actions == (Write(1),) and state.turn_seq == 1 and state.queue == (2,)


def test_a_new_pump_delivers_what_an_earlier_one_left_in_order_and_numbers_on():
    state = rules.start((9, 4, 7, 4), next_seq=3)
    assert state.queue == (4, 7, 9) and state.next_seq == 10
    assert rules.start((), next_seq=12).next_seq == 12
    state, actions = run(state, Ready(1.0), Send(2.0))
    assert actions == [Write(4), Queued(10, 3)]
    state, actions = run(state, Output(3.0, RESULT), Output(4.0, RESULT), Output(5.0, RESULT), Output(6.0, RESULT))
    assert actions == [Write(7), Write(9), Write(10)] and state.turns == 4


def test_after_the_cli_exits_nothing_is_accepted_and_nothing_written():
    state, _ = run(ready(), Send(1), Send(2))
    state, actions = rules.step(state, Exited(5.0, None, 9))
    assert actions == () and state.cli_exit == rules.CliExit(5.0, None, 9)
    status = rules.status(state)
    assert (status["turn"], status["queue"], status["cli_exit"]) == ("idle", 1, {"ts": 5.0, "status": None,
                                                                                  "signal": 9})
    state, actions = run(state, Send(6), Output(7, RESULT), Ready(8))
    assert actions == [Refused(rules.EXITED, rules.EXITED_CODE)] and not state.running and state.next_seq == 3


def test_a_broken_stdin_ends_the_turn_it_was_for_and_refuses_what_follows():
    state, _ = run(ready(), Send(1), Send(2))
    state, actions = rules.step(state, InputClosed(3.0, 1))
    assert actions == () and not state.running and state.input_closed and state.queue == (2,)
    state, actions = run(state, Send(4), Output(5, RESULT), Ready(6))
    assert actions == [Refused(rules.INPUT_CLOSED, rules.INPUT_CLOSED_CODE)]


def test_a_broken_stdin_for_another_seq_leaves_the_running_turn_alone():
    state, _ = run(ready(), Send(1))
    state, _ = rules.step(state, InputClosed(2.0, 7))
    assert state.turn_seq == 1 and state.turn_started == 1.0 and state.input_closed


def test_the_status_fields():
    state, _ = run(ready(), Send(2.0), Output(2.5, {"type": "system", "subtype": "init", "session_id": "s-1"}),
                   Send(3.0))
    assert rules.status(state) == {"session_id": "s-1", "turn": "running", "turn_started": 2.0, "turn_seq": 1,
                                   "queue": 1, "turns": 0, "last_result": None, "cli_exit": None}


def test_an_unknown_event_is_a_programming_error():
    with pytest.raises(TypeError):
        rules.step(rules.start(), object())  # type: ignore[arg-type]


# Properties over any order of events.

EVENTS = st.lists(st.sampled_from(["send", "send", "send", "result", "assistant", "init", "ready", "exit", "closed"]),
                  max_size=60)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.integers(1, 30), max_size=5), st.integers(1, 40), EVENTS)
def test_one_write_per_turn_in_the_order_accepted_each_once_and_none_after_exit(pending, next_seq, kinds):
    state = rules.start(tuple(pending), next_seq)
    accepted = list(state.queue)        # the order in which messages were accepted
    written: list[int] = []
    turn_open = False                   # a write happened and no result has ended its turn yet
    own_open = False                    # an init came with no turn open: the CLI's own turn
    wrote = False                       # a line was written: only then can the CLI take turns of its own
    exited = closed = False
    for now, kind in enumerate(kinds):
        before = state
        if kind == "send":
            event: rules.Event = Send(float(now))
        elif kind == "result":
            event = Output(float(now), RESULT)
        elif kind == "assistant":
            event = Output(float(now), ASSISTANT)
        elif kind == "init":
            event = Output(float(now), {"type": "system", "subtype": "init", "session_id": f"s{now}"})
        elif kind == "ready":
            event = Ready(float(now))
        elif kind == "exit":
            event = Exited(float(now), 0)
        elif state.turn_seq is not None:
            event = InputClosed(float(now), state.turn_seq)
        else:
            continue
        state, actions = rules.step(state, event)
        assert len(actions) <= 1
        if kind == "init" and wrote and not (turn_open or own_open or exited):
            own_open = True
        if kind == "result" and (turn_open or own_open):
            turn_open = own_open = False  # a result ends the turn
            assert state.turns == before.turns + 1
        if kind == "closed":
            turn_open, closed = False, True
        if kind == "exit":
            turn_open, own_open, exited = False, False, True
        for action in actions:
            if isinstance(action, Write):
                assert not turn_open and not own_open, "written while a turn runs"
                assert not exited and not closed
                written.append(action.seq)
                turn_open = wrote = True
                assert state.turn_seq == action.seq
            elif isinstance(action, Queued):
                assert kind == "send" and not exited and not closed
                accepted.append(action.seq)
                assert action.position == len(state.queue) and state.queue[-1] == action.seq
            else:
                assert isinstance(action, Refused) and kind == "send" and (exited or closed)
            if kind == "send" and isinstance(action, Write):
                accepted.append(action.seq)
        assert state.running == (turn_open or own_open)
        # Written in the order accepted, each once; the rest wait in that order.
        assert written == accepted[:len(written)]
        assert len(set(accepted)) == len(accepted)
        assert list(state.queue) == [s for s in accepted[len(written):] if s != state.turn_seq] or closed
        assert rules.status(state)["queue"] == len(state.queue)
    # Enough turns end and everything accepted has been written, unless the CLI is gone.
    if not (exited or closed):
        state, actions = rules.step(state, Ready(1000.0))
        written.extend(a.seq for a in actions if isinstance(a, Write))
        for _ in range(len(accepted) + 1):
            state, actions = rules.step(state, Output(1001.0, RESULT))
            written.extend(a.seq for a in actions if isinstance(a, Write))
        assert written == accepted and not state.running and state.queue == ()
