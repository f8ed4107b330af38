"""The stream-json driver's parts that need no tmux: the command it launches, the facts it reads,
the resume rule, whose line an injection is, the ledger's record of delivery and of denials, and
what `loom status` and `loom doctor` say in this mode."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.agent import inject as inject_mod
from loomtui.agent.driver import TmuxDriver
from loomtui.agent.drivers import make_driver
from loomtui.agent.stream_driver import (
    PumpRefused,
    StreamJsonDriver,
    origin_of,
    pump_command,
    stream_argv,
)
from loomtui.agent.tmux import TmuxError
from loomtui.agent.watchdog import Watchdog, record_denials
from loomtui.agent.watchdog_rules import DIED, FAILED, READY, WAIT, BootLook, settings_from, stream_boot_verdict
from loomtui.config import parse_config
from loomtui.context import Context
from loomtui.pump import transcript
from loomtui.pump.facts import Delivery, facts_from
from loomtui.report import doctor
from loomtui.report.status import AgentLook
from loomtui.store import ledger

FLAGS = ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]


def config(**agent):
    return parse_config({"agent": {"driver": "stream-json", **agent}}, "test", None)


# -- the command in the pane -------------------------------------------------------------------


def test_the_stream_flags_are_appended_when_missing():
    assert stream_argv("claude --session-id abc") == ["claude", "--session-id", "abc", *FLAGS]


@pytest.mark.parametrize("command", [
    "claude -p --input-format stream-json --output-format stream-json --verbose --resume abc",
    "claude --print --input-format=stream-json --output-format=stream-json --verbose --resume abc",
])
def test_flags_already_there_are_not_repeated(command):
    assert stream_argv(command) == shlex.split(command)


def test_only_the_missing_ones_are_added_and_quoting_survives():
    argv = stream_argv("claude --verbose --add-dir '/tmp/a dir/acks' --allowedTools 'Bash(touch:*)'")
    assert argv == ["claude", "--verbose", "--add-dir", "/tmp/a dir/acks", "--allowedTools", "Bash(touch:*)",
                    "-p", "--input-format", "stream-json", "--output-format", "stream-json"]


def test_an_unsplittable_command_is_a_clear_error():
    with pytest.raises(TmuxError, match="cannot be split"):
        stream_argv("claude --add-dir 'unbalanced")


def test_the_pane_runs_the_pump_exec_d_from_this_python(tmp_path):
    state = tmp_path / "state dir; rm -rf ~"
    line = pump_command(state, "claude --session-id abc")
    assert line.startswith("exec ")
    argv = shlex.split(line)[1:]
    assert argv[:6] == [sys.executable, "-m", "loomtui", "pump", "--state-dir", str(state)]
    assert argv[6] == "--" and argv[7:] == ["claude", "--session-id", "abc", *FLAGS]


# -- the driver ------------------------------------------------------------------------------


def test_make_driver_follows_agent_driver(tmp_path):
    stream = make_driver(config(), tmp_path)
    assert isinstance(stream, StreamJsonDriver) and stream.name == "stream-json" and stream.state_dir == tmp_path
    plain = make_driver(parse_config({}, "test", None), tmp_path)
    assert type(plain) is TmuxDriver and plain.name == "tmux"
    assert type(make_driver(parse_config({}, "test", None))) is TmuxDriver  # the old call still works


def test_a_stopped_tree_spares_the_pane_process_only_when_pump_json_names_it_the_pump(tmp_path):
    """The pump is ended last (it records what its CLI left unread once the CLI is gone): the
    pane's process, when pump.json says it is the pump; an agent the tmux driver launched before a
    switch to stream-json has no pump, and nothing is spared."""
    driver = make_driver(config(), tmp_path)
    assert driver._ends_last(4242) == ()                       # no pump.json
    (tmp_path / "pump.json").write_text(json.dumps({"pid": 4242}))
    assert driver._ends_last(4242) == (4242,)
    assert driver._ends_last(4243) == ()                       # another process in the pane
    assert StreamJsonDriver(config(), None)._ends_last(4242) == ()
    assert TmuxDriver(config())._ends_last(4242) == ()


def test_keys_are_refused_and_a_driver_without_a_state_dir_delivers_nothing():
    driver = StreamJsonDriver(config(), None)
    with pytest.raises(PumpRefused, match="no keys"):
        driver.send_keys(["Enter"])
    with pytest.raises(PumpRefused, match="without the state dir"):
        driver.type_line("hello")
    assert issubclass(PumpRefused, TmuxError)  # inject.py's one error path takes it
    assert driver.stream_facts(123) is None


@pytest.mark.parametrize("kind, source, origin", [
    ("canary_sent", "canary", "canary"), ("canary_sent", "cli", "canary"), ("canary_sent", "telegram", "canary"),
    ("queue_nudge", "sentinel", "sentinel"), ("queue_nudge", "tui", "sentinel"),
    ("inject", "telegram", "telegram"), ("inject", "cli", "operator"), ("inject", "tui", "operator"),
    ("inject", "demo", "operator"),
])
def test_whose_line_it_is(kind, source, origin):
    assert origin_of(kind, source) == origin


# -- facts from pump.json --------------------------------------------------------------------


PUMP_JSON = {"pid": 123, "cli_pid": 124, "started": 1764576000.0, "argv0": "claude", "session_id": "s-1",
             "turn": "running", "turn_started": 1764576010.5, "turn_seq": 7, "queue": 2, "turns": 5,
             "last_result": {"ts": 1764576009.0, "is_error": True, "subtype": "error_during_execution", "seq": 6,
                             "denials": ["Bash", "Write"]},
             "cli_exit": None}


def test_pump_json_as_facts():
    facts = facts_from(PUMP_JSON, pane_pid=123)
    assert facts is not None and facts.current and facts.running
    assert (facts.pump_pid, facts.cli_pid, facts.session_id, facts.queue, facts.turns) == (123, 124, "s-1", 2, 5)
    assert (facts.turn_started, facts.turn_seq) == (1764576010.5, 7)
    last = facts.last_result
    assert last is not None and last.is_error and last.subtype == "error_during_execution" and last.seq == 6
    assert last.denials == ("Bash", "Write")


def test_a_dead_or_replaced_pumps_file_is_not_current():
    assert not facts_from(PUMP_JSON, pane_pid=999).current
    assert not facts_from(PUMP_JSON, pane_pid=None).current


@pytest.mark.parametrize("doc", [{}, {"pid": "123"}, {"pid": None}])
def test_a_file_without_a_pid_is_no_facts(doc):
    assert facts_from(doc, 123) is None


def test_wrong_types_are_read_as_nothing_not_trusted():
    doc = {"pid": 5, "turn": "weird", "queue": "3", "session_id": 7, "last_result": {"denials": "Bash"},
           "cli_exit": "yes", "started": True}
    facts = facts_from(doc, 5)
    assert facts.turn == "idle" and facts.queue == 0 and facts.session_id is None and facts.started is None
    assert facts.last_result is not None and facts.last_result.denials == () and facts.cli_exit is None


def test_read_facts_goes_through_the_pumps_own_status_reader(tmp_path):
    from loomtui.pump.facts import read_facts

    assert read_facts(tmp_path, 123) is None
    (tmp_path / "pump.json").write_text(json.dumps(PUMP_JSON))
    facts = read_facts(tmp_path, 123)
    assert facts is not None and facts.current and facts.queue == 2


# -- the resume rule ---------------------------------------------------------------------------


def verdict(resume=True, check=5.0, **look):
    return stream_boot_verdict(BootLook(**{"elapsed": 0.0, **look}), resume=resume, resume_check=check)[0]


def test_a_resume_fails_only_on_the_clis_word_that_the_session_is_not_there():
    # Its stderr or its error result says so, or it answered an error before any init (the session
    # never loaded), as Claude Code's resume of an unknown session does, exiting 1 after.
    assert verdict(screen_failed=True, pump_up=True) == FAILED
    assert verdict(first_result_error=True, result_failed=True, init_seen=True, pump_up=True) == FAILED
    assert verdict(first_result_error=True, error_before_init=True, exited=True, exit_status=1) == FAILED
    assert verdict(first_result_error=True, error_before_init=True, pump_up=True) == FAILED


def test_an_exit_or_an_error_after_init_during_a_resume_keeps_the_conversation():
    # FAILED starts fresh and throws the conversation away: each of these once did. An exit that
    # says nothing of the session (status 0, a signal, a crash mid-turn) is the launch's death;
    # an error result after init (a queued message answered with a usage limit, or "prompt is too
    # long") is a turn that failed in a session that loaded.
    assert verdict(exited=True, exit_status=0) == DIED
    assert verdict(exited=True, exit_status=None) == DIED
    assert verdict(exited=True, exit_status=1, init_seen=True, pump_up=True) == DIED
    assert verdict(exited=True, exit_status=1, init_seen=True, first_result_error=True) == DIED
    assert verdict(first_result_error=True, init_seen=True, pump_up=True) == READY
    assert verdict(first_result_error=True, init_seen=True, pump_up=True, busy=True) == WAIT


def test_a_resume_is_ready_early_once_nothing_more_can_come():
    assert verdict(first_result_error=False, pump_up=True, init_seen=True) == READY
    assert verdict(init_seen=True, pump_up=True) == READY
    assert verdict(init_seen=True, pump_up=True, busy=True) == WAIT   # leftovers being delivered: wait for their result
    assert verdict(pump_up=True) == WAIT                               # no init yet: the check goes on


def test_a_silent_resume_is_ready_when_the_check_ends_and_left_to_the_canary():
    # Claude Code emits init with each turn, never before the first message: no init is no failure.
    assert verdict(pump_up=True, elapsed=4.9) == WAIT
    assert verdict(pump_up=True, elapsed=5.0) == READY
    assert verdict(pump_up=True, init_seen=True, busy=True, elapsed=5.0) == READY


def test_a_fresh_launch_fails_only_by_exiting():
    assert verdict(resume=False, exited=True) == DIED
    assert verdict(resume=False, exited=True, first_result_error=True, error_before_init=True,
                   result_failed=True) == DIED  # no resume to fail: a fresh launch only dies
    assert verdict(resume=False, screen_failed=True, pump_up=True, elapsed=9.0) == READY
    assert verdict(resume=False, first_result_error=True, pump_up=True) == WAIT
    assert verdict(resume=False, first_result_error=True, pump_up=True, elapsed=9.0) == READY
    assert verdict(resume=False, pump_up=True, elapsed=9.0) == READY


looks = st.builds(BootLook, elapsed=st.floats(0, 100), exited=st.booleans(), exit_status=st.none() | st.integers(0, 3),
                  screen_failed=st.booleans(), pump_up=st.booleans(), init_seen=st.booleans(),
                  first_result_error=st.none() | st.booleans(), busy=st.booleans(),
                  result_failed=st.booleans(), error_before_init=st.booleans())


@given(looks, st.booleans(), st.floats(0.1, 60))
def test_the_verdict_invariants(look, resume, check):
    result, why = stream_boot_verdict(look, resume=resume, resume_check=check)
    if look.exited:
        assert result in (FAILED, DIED)
    if result == DIED:
        assert look.exited and "exited" in why
    if result == FAILED:
        # Only the CLI's own word fails a resume (and discards its conversation); a fresh launch only dies.
        assert resume and (look.screen_failed or look.result_failed or look.error_before_init)
    if look.elapsed >= check:
        assert result != WAIT  # the check always ends
    if result == WAIT:
        assert look.elapsed < check


def test_the_watchdog_never_looks_for_dialogs_in_stream_mode(ctx):
    # The watchdog asks its driver: the stream-json one has no dialogs, so no modal is looked for.
    assert Watchdog(ctx).settings.modals == ()
    assert settings_from(ctx.config, has_dialogs=False).modals == ()
    assert settings_from(parse_config({}, "test", None), has_dialogs=True).modals != ()


def test_the_watchdog_looks_for_dialogs_with_the_tmux_driver(tmp_path):
    # The same real Watchdog on the tmux driver keeps its modals: dropping the dismissal path fails here.
    path = tmp_path / "config.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ndriver = "tmux"\n'
                    f'tmux_socket = "loomtest-unit-{tmp_path.name[-8:].replace(".", "")}"\n')
    tmux_ctx = Context.load(str(path), None, environ={})
    try:
        assert Watchdog(tmux_ctx).settings.modals != ()
    finally:
        tmux_ctx.close()


# -- through the store -------------------------------------------------------------------------


@pytest.fixture
def ctx(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'state_dir = "{tmp_path / "state"}"\n[agent]\ndriver = "stream-json"\n'
                    f'tmux_socket = "loomtest-unit-{tmp_path.name[-8:].replace(".", "")}"\n')
    context = Context.load(str(path), None, environ={})
    yield context
    context.close()


class Recorder(TmuxDriver):
    """A driver that takes the line and says what a pump would: the wiring of inject.py, not the pump."""

    def __init__(self, delivery: Delivery | None) -> None:
        self.delivery = delivery
        self.calls: list[tuple[str, str, str]] = []

    def pane_pid(self):
        return 42

    def type_line(self, text, expect_pane_pid=None, *, origin="operator", ref=""):
        self.calls.append((text, origin, ref))
        return self.delivery


def test_the_ledger_says_queued_with_its_place_and_the_origin_reaches_the_driver(ctx):
    driver = Recorder(Delivery("queued", seq=8, position=2))
    result = inject_mod.inject(ctx, "touch /x", source="cli", kind="canary_sent", driver=driver)
    assert result.ok and result.delivery == "queued" and result.position == 2
    assert driver.calls == [("touch /x", "canary", "")]
    [event] = ledger.tail(ctx.store, 10, kinds=["canary_sent"])
    assert event.detail["delivery"] == "queued" and event.detail["seq"] == 8 and event.detail["position"] == 2
    assert "touch /x" not in json.dumps(event.as_dict())


def test_delivered_and_an_explicit_origin_and_ref(ctx):
    driver = Recorder(Delivery("delivered", seq=3))
    result = inject_mod.inject(ctx, "hi", source="telegram", driver=driver, origin="telegram", ref="tg-9")
    assert result.delivery == "delivered" and result.position is None
    assert driver.calls == [("hi", "telegram", "tg-9")]
    [event] = ledger.tail(ctx.store, 10, kinds=["inject"])
    assert event.detail["delivery"] == "delivered" and "position" not in event.detail


def test_the_tmux_drivers_events_stay_as_they_were(ctx):
    inject_mod.inject(ctx, "hi", source="cli", driver=Recorder(None))
    [event] = ledger.tail(ctx.store, 10, kinds=["inject"])
    assert set(event.detail) == {"length", "digest", "ok"}


def write_transcript(state_dir: Path, records: list[tuple[str, dict]]) -> None:
    writer = transcript.Writer(transcript.path_in(state_dir))
    try:
        for direction, data in records:
            writer.append(direction, **data)
    finally:
        writer.close()


def result_event(denials):
    return {"event": {"type": "result", "subtype": "success", "is_error": False, "permission_denials": denials}}


def test_each_denial_is_recorded_once_with_names_only(ctx):
    secret_input = {"command": "touch /secret/path-with-token-abc"}
    write_transcript(ctx.state_dir, [
        ("in", {"seq": 1, "origin": "canary", "ref": "", "text": "touch /acks/n1"}),
        ("out", {"event": {"type": "system", "subtype": "init", "session_id": "s"}}),
        ("out", result_event([{"tool_name": "Bash", "tool_use_id": "t1", "tool_input": secret_input},
                              {"tool_name": "Bash", "tool_use_id": "t2", "tool_input": secret_input}])),
        ("in", {"seq": 2, "origin": "operator", "ref": "", "text": "hello"}),
        ("out", result_event([])),
    ])
    assert record_denials(ctx) == ["permission denied to Bash"]
    [event] = ledger.tail(ctx.store, 10, kinds=["permission_denied"])
    assert event.detail["tools"] == ["Bash"] and event.detail["count"] == 2
    assert event.detail["seq"] == 1 and event.detail["origin"] == "canary"
    assert "secret" not in json.dumps(event.as_dict()) and "acks" not in json.dumps(event.as_dict())
    assert record_denials(ctx) == []   # read once: nothing new
    write_transcript(ctx.state_dir, [
        ("in", {"seq": 3, "origin": "telegram", "ref": "", "text": "write it"}),
        ("out", result_event([{"tool_name": "Write\x1b[31m", "tool_input": {}}])),
    ])
    assert record_denials(ctx) == ["permission denied to Write␛[31m"]
    assert [e.detail["origin"] for e in ledger.tail(ctx.store, 10, kinds=["permission_denied"])] == ["canary",
                                                                                                     "telegram"]


def test_a_new_transcript_is_read_from_its_start(ctx):
    write_transcript(ctx.state_dir, [("out", result_event([{"tool_name": "Bash"}]))])
    assert len(record_denials(ctx)) == 1
    path = transcript.path_in(ctx.state_dir)
    path.unlink()
    write_transcript(ctx.state_dir, [("out", result_event([{"tool_name": "Edit"}]))])
    assert record_denials(ctx) == ["permission denied to Edit"]


def test_no_transcript_records_nothing(ctx):
    assert record_denials(ctx) == []


# -- loom status -------------------------------------------------------------------------------


def test_status_shows_the_turn_the_queue_and_the_last_turns_denials():
    stream = {"turn": "running", "turn_started": 100.0, "queue": 2,
              "last_result": {"is_error": False, "subtype": "success", "denials": ["Bash"]}, "cli_exit": None}
    look = AgentLook("up", pane={"pane_pid": 5, "dead": False}, tree={"process": "present", "pid": 6},
                     driver="stream-json", owns_turns=True, stream=stream, taken=112.0)
    line = look.describe()
    assert "stream-json: turn running 12s, 2 queued" in line and "last turn denied Bash" in line
    data = look.as_json()
    assert data["driver"] == "stream-json" and data["stream"]["queue"] == 2 and data["stream"]["turn"] == "running"
    idle = AgentLook("up", pane={"pane_pid": 5, "dead": False}, tree={"process": "present"}, driver="stream-json",
                     owns_turns=True, stream={"turn": "idle", "queue": 0, "last_result": None})
    assert "stream-json: idle, 0 queued" in idle.describe()
    assert "no word from the pump" in AgentLook("up", tree={"process": "present"}, driver="stream-json",
                                                 owns_turns=True).describe()
    tmux = AgentLook("up", tree={"process": "present"})
    assert "stream" not in tmux.describe() and "stream" not in tmux.as_json() and tmux.as_json()["driver"] == "tmux"


# -- loom doctor -------------------------------------------------------------------------------


GOOD = "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' "


@pytest.mark.parametrize("flags, ok", [
    ("--allowedTools 'Bash(touch:*)'", True), ("--allowed-tools=Read,Bash(touch:*)", True),
    ("--allowedTools Read 'Bash(touch *)'", True), ("--allowedTools Bash", True),
    ("--permission-mode bypassPermissions", True), ("--dangerously-skip-permissions", True),
    ("--allowedTools Read", False), ("--allowedTools 'Bash(git:*)'", False), ("--permission-mode acceptEdits", False),
    ("", False), ("--add-dir Bash(touch:*)", False),
])
def test_what_permits_the_canarys_touch(flags, ok):
    assert doctor.permits_touch(shlex.split("claude " + flags)) is ok


def test_doctor_passes_a_good_stream_setup_and_names_the_failing_check(tmp_path):
    good = config(fresh_command=GOOD + "--session-id {session_id}", resume_command=GOOD + "--resume {session_id}")
    assert doctor.check_canary_permissions(good, tmp_path).status == doctor.OK
    assert doctor.check_stream_flags(good).status == doctor.OK
    bare = config(fresh_command="claude --add-dir {state_dir}/acks --session-id {session_id}")
    check = doctor.check_canary_permissions(bare, tmp_path)
    assert check.status == doctor.FAIL and check.name == "canary"
    assert "agent.fresh_command lacks --allowedTools 'Bash(touch:*)'" in check.detail
    assert "agent.resume_command lacks" in check.detail  # the default resume command has neither


@pytest.mark.parametrize("command, says", [
    (GOOD + "--output-format text --session-id {session_id}", "--output-format text"),
    (GOOD + "--input-format=text --session-id {session_id}", "--input-format text"),
    (GOOD + "--session-id {session_id} --resume", "--resume without a session id"),
    (GOOD + "--session-id {session_id} 'unbalanced", "cannot be split"),
])
def test_doctor_names_flags_print_mode_cannot_take(command, says):
    check = doctor.check_stream_flags(config(fresh_command=command))
    assert check.status == doctor.FAIL and check.name == "stream-json" and says in check.detail
    assert "agent.fresh_command" in check.detail and "agent.resume_command" not in check.detail


def test_the_demo_takes_the_driver_from_its_caller_and_refuses_an_unknown_one(tmp_path, monkeypatch):
    from loomtui.demo.launcher import Demo
    from loomtui.errors import LoomError

    demo = Demo(tmp_path / "demo", driver="stream-json")
    assert 'driver = "stream-json"' in demo.write().read_text()
    assert parse_config({"agent": {"driver": "stream-json"}}, "t", None).agent.driver == "stream-json"
    monkeypatch.setenv("LOOM_DEMO_DRIVER", "stream-json")
    assert Demo.for_this_install().driver == "stream-json"
    monkeypatch.delenv("LOOM_DEMO_DRIVER")
    assert Demo.for_this_install().driver == "tmux"
    with pytest.raises(LoomError, match="LOOM_DEMO_DRIVER"):
        Demo(tmp_path / "other", driver="screen")


def test_the_boot_verdict_says_why_in_words_the_ledger_keeps():
    # The why goes into the relaunch's `resume_failed` or `launch_died` event and to the operator.
    from loomtui.agent.watchdog_rules import DIED, FAILED, READY, WAIT, BootLook, stream_boot_verdict

    def said(look: BootLook, resume: bool = True) -> tuple[str, str]:
        return stream_boot_verdict(look, resume=resume, resume_check=5.0)

    assert said(BootLook(1.0, exited=True, exit_status=3)) == (DIED, "the CLI exited during the resume check (status 3)")
    assert said(BootLook(1.0, exited=True), resume=False) == (DIED, "the CLI exited during the launch check (status None)")
    assert said(BootLook(1.0, screen_failed=True)) == (FAILED, "the CLI's stderr shows the resume failure")
    assert said(BootLook(1.0, first_result_error=True, result_failed=True, init_seen=True)) == (
        FAILED, "the CLI's error result says the resume failed")
    assert said(BootLook(1.0, first_result_error=True, error_before_init=True)) == (
        FAILED, "the CLI answered with an error result before any init: it loaded no session")
    assert said(BootLook(1.0, first_result_error=False)) == (READY, "a turn succeeded")
    assert said(BootLook(1.0, init_seen=True, pump_up=True)) == (READY, "init came and nothing is pending")
    assert said(BootLook(1.0, init_seen=True, pump_up=True, busy=True)) == (WAIT, "")
    assert said(BootLook(5.0)) == (READY, "the check passed")


def test_a_message_the_pump_set_aside_is_told_to_the_operator_once(ctx):
    # The pump sets aside a kept message three launches exited before reading (pump.rules.MAX_UNREAD):
    # it has no store and no outbox, and until 2026-12-07 only its transcript said so.
    from loomtui.store import outbox

    write_transcript(ctx.state_dir, [
        ("in", {"seq": 7, "origin": "operator", "ref": "", "text": "deploy the thing"}),
        ("pump", {"what": "set_aside", "seq": 7, "unread": 3, "name": "7.json.undelivered", "origin": "telegram"}),
    ])
    assert record_denials(ctx) == ["message #7 set aside by the pump"]
    [event] = ledger.tail(ctx.store, 10, kinds=["pump_set_aside"])
    assert event.detail["seq"] == 7 and event.detail["unread"] == 3 and event.detail["origin"] == "telegram"
    [told] = outbox.pending(ctx.store)
    assert "message #7 (from telegram)" in told.text and "3 launches" in told.text
    assert "deploy the thing" not in told.text
    assert record_denials(ctx) == [] and len(outbox.pending(ctx.store)) == 1  # read once: told once
