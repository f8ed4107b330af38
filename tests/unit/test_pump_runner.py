"""The pump's own process, in parts a test can hold still (tests/e2e/test_pump.py runs it whole):
the pane's thread when the pane takes nothing, and the refusals of sends the CLI's exit cut short."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading

from conftest import REPO, loom_env
from harness import wait_for

from loomtui.pump import rules, transcript
from loomtui.telegram import bridge
from loomtui.pump.runner import PANE_BACKLOG, Message, Pending, Pump


def test_lines_the_pane_has_no_room_for_are_counted_and_said_where_they_were(tmp_path):
    entered, gate = threading.Event(), threading.Event()
    shown: list[str] = []

    def show(line: str) -> None:  # a pane stopped with Ctrl-S: the write blocks until it is let go
        entered.set()
        gate.wait(60)
        shown.append(line)

    pump = Pump(tmp_path, ["true"], show=show)
    pump._show("line 0")
    assert entered.wait(60)  # the pane's thread holds line 0
    for i in range(1, PANE_BACKLOG + 51):  # the main loop never waits: the backlog's worth kept, 50 left out
        pump._show(f"line {i}")
    assert pump.left_out == 50
    gate.set()
    wait_for(lambda: pump.pane.empty(), 60, what="the pane taking its backlog")
    pump._show("after")
    pump._close_pane()
    note = "— 50 lines not shown: the pane took none for a while (the transcript has them all)"
    assert shown == [f"line {i}" for i in range(PANE_BACKLOG + 1)] + [note, "after"]


def test_sends_the_clis_exit_cut_short_are_refused_with_the_exited_code(tmp_path):
    pump = Pump(tmp_path, ["true"], show=lambda line: None)
    pump.log = transcript.Writer(transcript.path_in(tmp_path))
    (tmp_path / "pump-queue").mkdir()
    written, arrived = Pending("typed as it died", "operator", ""), Pending("too late", "canary", "")
    pump._persist(Message(1, written.text, written.origin, written.ref))  # kept, as a line written at once is
    pump.unread.append(1)
    pump.waiting[1] = written
    pump.events.put(("send", arrived))
    assert pump._finish(0) == 0
    refusal = {"ok": False, "error": rules.EXITED, "code": rules.EXITED_CODE}
    assert written.answer == refusal and arrived.answer == refusal
    # Its sender was told it failed (and may send it again): not kept for the next launch too.
    assert list((tmp_path / "pump-queue").iterdir()) == []
    assert not [r for r in transcript.read(transcript.path_in(tmp_path)) if r.data.get("what") == "unread"]
    pump.log.close()


# A CLI whose stdout says, in turn: a line nested deeper than Python's parser goes, one deeper than
# the pump keeps as an event, and a result whose duration no float holds; then it exits 0.
ODD_LINES = r"""
import json
print('{"type":"user","tool_use_result":' + '[' * 3000 + ']' * 3000 + '}', flush=True)
print('{"type":"user","tool_use_result":' + '[' * 600 + ']' * 600 + '}', flush=True)
print('{"type":"result","subtype":"success","is_error":false,"result":"done","duration_ms":' + '9' * 400 + '}',
      flush=True)
"""


def test_lines_no_parser_or_float_can_hold_are_kept_and_the_pump_runs_on(tmp_path):
    # Each of these ended the pump (RecursionError, OverflowError), its CLI killed with it; and a
    # record nested near the parser's limit, written back, was unreadable to any reader deeper in its
    # own stack (the console's, the bridge's), which it stopped for good.
    shown: list[str] = []
    pump = Pump(tmp_path, [sys.executable, "-c", ODD_LINES], show=shown.append)
    assert pump.run() == 0
    path = transcript.path_in(tmp_path)

    def deep_in_a_stack(frames: int) -> list[transcript.Record]:
        return list(transcript.read(path)) if frames == 0 else deep_in_a_stack(frames - 1)

    records = deep_in_a_stack(500)
    outs = [r for r in records if r.dir == transcript.OUT]
    assert [r.data.get("what") for r in records if r.dir == transcript.PUMP] == ["started", "cli_exit"]
    # Nothing lost: each line whole, as the text it came as where no event could hold it.
    assert outs[0].data["raw"].count("[") == 3000 and outs[0].event == {}
    assert outs[1].data["raw"].count("[") == 600 and outs[1].event == {"type": "user"}
    assert outs[2].event["type"] == "result" and outs[2].event["duration_ms"] == int("9" * 400)
    # The result ended nothing of ours but was taken in: the pump's rules saw it.
    status = json.loads((tmp_path / "pump.json").read_text())
    assert status["last_result"]["subtype"] == "success" and status["cli_exit"]["status"] == 0
    assert "result ok" in shown


# A `--resume` of a session Claude Code cannot find: an error result and exit 1, taking in none of
# the lines. What the pump can see is only what the CLI prints, so this one waits for each line to
# come before it goes on (the first, then the one its error result lets be written), never for a
# time: the pump's writes are not raced on a busy machine.
RESUME_FAILS = r"""
import sys
sys.stdin.readline()
print('{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,'
      '"errors":["No conversation found with session ID: s-1"]}', flush=True)
sys.stdin.readline()
raise SystemExit(1)
"""
# A CLI that takes three lines, each a turn that opens with init, then exits 0.
TAKES_THREE = r"""
import json, sys
for n in range(3):
    text = json.loads(sys.stdin.readline())["message"]["content"][0]["text"]
    print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"}), flush=True)
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "got " + text}), flush=True)
"""


def pump_process(state_dir, cli_code: str) -> subprocess.CompletedProcess[str]:
    """`loom pump` in a process of its own, as in the agent's pane, in front of a CLI of `cli_code`."""
    return subprocess.run([sys.executable, "-m", "loomtui", "pump", "--state-dir", str(state_dir), "--",
                           sys.executable, "-c", cli_code], capture_output=True, text=True, env=loom_env(),
                          cwd=REPO, timeout=120)


@contextlib.contextmanager
def live_pump(state_dir, *cli: str, pump: tuple[str, ...] = ()):
    """`loom pump` (or `pump`, a launcher of it) in a process of its own in front of `cli`, up and
    its CLI ready once this yields it; killed at the end whatever the test left of it."""
    from loomtui.pump import client

    launcher = pump or (sys.executable, "-m", "loomtui", "pump", "--state-dir", str(state_dir), "--")
    proc = subprocess.Popen([*launcher, *cli], env=loom_env(), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: client.status(state_dir) is not None, 60, what="the pump up, its CLI ready")
        yield proc
    finally:
        proc.kill()
        proc.wait(60)


def test_kept_messages_a_cli_never_read_are_kept_for_the_next_launch(tmp_path):
    # Their files went as soon as the bytes reached the pipe: a CLI that failed its resume without
    # reading a byte ate one message per launch (two here: its error result let the next one be written).
    queue = tmp_path / "pump-queue"
    queue.mkdir()
    for seq in (1, 2, 3):
        (queue / f"{seq}.json").write_text(json.dumps(
            {"seq": seq, "ts": 0, "origin": "telegram", "ref": f"tg-{seq}", "text": f"message {seq}"}))
    assert pump_process(tmp_path, RESUME_FAILS).returncode == 1
    assert sorted(p.name for p in queue.iterdir()) == ["1.json", "2.json", "3.json"]
    path = transcript.path_in(tmp_path)
    unread = [r.data["seqs"] for r in transcript.read(path) if r.data.get("what") == "unread"]
    assert unread == [[1, 2]]
    # Its error result came before it read message 1: said on the record, not taken for 1's answer.
    [error] = [r for r in transcript.read(path) if r.event.get("type") == "result"]
    assert error.data["unread"] == [1]
    # The next launch's CLI reads them: each, in order, once, and only then is its file gone.
    end = transcript.tail_offset(path, 0)
    assert pump_process(tmp_path, TAKES_THREE).returncode == 0
    answers = [r.event.get("result") for r in transcript.read(path, end) if r.event.get("type") == "result"]
    assert answers == ["got message 1", "got message 2", "got message 3"]
    assert list(queue.iterdir()) == []
    # The operator reads that 1 and 2 go again (3 was never written to the first CLI), then each answer.
    _, said = bridge.advance(bridge.Cursor(), transcript.read(path))
    assert [(a.what, a.text) for a in said] == [("again", bridge.AGAIN)] * 2 + [
        ("answer", f"got message {n}") for n in (1, 2, 3)]


# A wedged CLI: it reads nothing and says nothing, and exits 1 once told to (its recycle).
WEDGED = r"""
import os, sys, time
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
raise SystemExit(1)
"""


def test_a_line_written_at_once_to_a_cli_that_never_read_it_is_kept_for_the_next_launch(tmp_path):
    # Between turns the pump writes a line at once and answers `delivered`; it kept no file of it,
    # so a wedged CLI recycled with the line in its pipe lost the operator's message for good.
    from loomtui.pump import client

    go = tmp_path / "go"
    with live_pump(tmp_path, sys.executable, "-c", WEDGED, str(go)) as pump:
        reply = client.send(tmp_path, "are you there?", origin="telegram", ref="tg-9", timeout=60)
        assert reply.state == "delivered"
        kept = tmp_path / "pump-queue" / f"{reply.seq}.json"
        assert json.loads(kept.read_text())["text"] == "are you there?"
        go.touch()
        assert pump.wait(60) == 1
    path = transcript.path_in(tmp_path)
    assert [r.data["seqs"] for r in transcript.read(path) if r.data.get("what") == "unread"] == [[reply.seq]]
    # The next launch's CLI reads it, and only then is its file gone.
    end = transcript.tail_offset(path, 0)
    assert pump_process(tmp_path, TAKES_THREE.replace("range(3)", "range(1)")).returncode == 0
    later = list(transcript.read(path, end))
    assert [r.data.get("pending") for r in later if r.data.get("what") == "started"] == [[reply.seq]]
    answers = [r.event.get("result") for r in later if r.event.get("type") == "result"]
    assert answers == ["got are you there?"]
    # What the operator reads of it (telegram.bridge): it goes again, then its answer.
    _, said = bridge.advance(bridge.Cursor(), transcript.read(path))
    assert [a.what for a in said] == ["again", "answer"] and said[1].text == "got are you there?"
    assert list((tmp_path / "pump-queue").iterdir()) == []


# A CLI whose background task ends (its event printed) while a line waits unread in its stdin; it
# exits 1 once told to, never having read the line.
TASK_ENDS_UNREAD = r"""
import json, os, sys, time
def wait(name):
    while not os.path.exists(os.path.join(sys.argv[1], name)):
        time.sleep(0.05)
wait("sent")
print(json.dumps({"type": "system", "subtype": "task_notification", "task_id": "b1", "status": "completed"}),
      flush=True)
wait("go")
raise SystemExit(1)
"""


def test_a_background_tasks_event_does_not_show_the_cli_read_a_line(tmp_path):
    """Claude Code prints a background task's events whenever they come, between turns too: one just
    after a write took the line's file, and a CLI that then died with the line unread lost it."""
    from loomtui.pump import client

    with live_pump(tmp_path, sys.executable, "-c", TASK_ENDS_UNREAD, str(tmp_path)) as pump:
        reply = client.send(tmp_path, "are you there?", origin="telegram", ref="tg-9", timeout=60)
        assert reply.state == "delivered"
        (tmp_path / "sent").touch()
        path = transcript.path_in(tmp_path)
        wait_for(lambda: any(r.event.get("subtype") == "task_notification" for r in transcript.read(path)), 60,
                 what="the task's event in the transcript")
        assert (tmp_path / "pump-queue" / f"{reply.seq}.json").exists()
        (tmp_path / "go").touch()
        assert pump.wait(60) == 1
    assert [r.data["seqs"] for r in transcript.read(path) if r.data.get("what") == "unread"] == [[reply.seq]]
    assert (tmp_path / "pump-queue" / f"{reply.seq}.json").exists()  # for the next launch


def test_a_line_written_at_once_that_the_cli_read_leaves_no_file(tmp_path):
    from loomtui.pump import client

    with live_pump(tmp_path, sys.executable, "-c", TAKES_THREE.replace("range(3)", "range(1)")) as pump:
        assert client.send(tmp_path, "hello", origin="telegram", timeout=60).state == "delivered"
        assert pump.wait(60) == 0
    records = list(transcript.read(transcript.path_in(tmp_path)))
    assert [r.event.get("result") for r in records if r.event.get("type") == "result"] == ["got hello"]
    assert not [r for r in records if r.data.get("what") == "unread"]
    assert list((tmp_path / "pump-queue").iterdir()) == []


# A CLI that takes one line, a turn that waits for <dir>/go, closes its input and ends the turn, and
# exits once <dir>/end is there.
CLOSES_ITS_INPUT = r"""
import json, os, sys, time
def wait(name):
    while not os.path.exists(os.path.join(sys.argv[1], name)):
        time.sleep(0.05)
sys.stdin.readline()
print(json.dumps({"type": "system", "subtype": "init", "session_id": "s-1"}), flush=True)
wait("go")
os.close(0)
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": "closed"}), flush=True)
wait("end")
"""


def test_a_queued_line_whose_write_fails_is_kept_and_said_to_go_again(tmp_path):
    # The CLI closed its input while a line waited behind its turn: the write fails. The line was
    # accepted (its sender told `queued`), so its file stays for the next launch, and the bridge,
    # which had said "lost, send again", now says it goes again.
    from loomtui.pump import client

    path = transcript.path_in(tmp_path)
    with live_pump(tmp_path, sys.executable, "-c", CLOSES_ITS_INPUT, str(tmp_path)) as pump:
        assert client.send(tmp_path, "first", origin="telegram", timeout=60).state == "delivered"
        wait_for(lambda: any(r.event.get("subtype") == "init" for r in transcript.read(path)), 60, what="its turn")
        queued = client.send(tmp_path, "second", origin="telegram", timeout=60)
        assert queued.state == "queued"
        (tmp_path / "go").touch()
        wait_for(lambda: any(r.data.get("what") == "write_failed" for r in transcript.read(path)), 60,
                 what="the queued line's write failing")
        (tmp_path / "end").touch()
        assert pump.wait(60) == 0
    [failed] = [r.data for r in transcript.read(path) if r.data.get("what") == "write_failed"]
    assert failed["seq"] == queued.seq and failed["kept"] is True
    assert json.loads((tmp_path / "pump-queue" / f"{queued.seq}.json").read_text())["text"] == "second"
    _, said = bridge.advance(bridge.Cursor(), transcript.read(path))
    assert [a.what for a in said] == ["answer", "again"]


def test_a_kept_line_a_killed_pump_left_is_said_to_go_again_when_the_next_cli_cannot_start(tmp_path):
    # The last pump was killed (no `unread`, no `cli_exit` of its own) with the operator's line written;
    # the next one's CLI cannot start: its `cli_exit` said nothing of the line, which the bridge called
    # lost, and a later pump delivered it.
    queue = tmp_path / "pump-queue"
    queue.mkdir()
    (queue / "4.json").write_text(json.dumps({"seq": 4, "ts": 0, "origin": "telegram", "ref": "tg-4", "text": "hi"}))
    log = transcript.Writer(transcript.path_in(tmp_path))
    log.append(transcript.PUMP, what="started", pid=1, cli_pid=2, argv=["claude"])
    log.append(transcript.IN, seq=4, origin="telegram", ref="tg-4", text="hi")
    log.close()
    done = subprocess.run([sys.executable, "-m", "loomtui", "pump", "--state-dir", str(tmp_path), "--",
                           str(tmp_path / "no-such-cli")], capture_output=True, text=True, env=loom_env(), cwd=REPO,
                          timeout=120)
    assert done.returncode == 127 and (queue / "4.json").exists()
    records = list(transcript.read(transcript.path_in(tmp_path)))
    [end] = [r.data for r in records if r.data.get("what") == "cli_exit"]
    assert end["pending"] == [4]
    _, said = bridge.advance(bridge.Cursor(), records)
    assert [a.what for a in said] == ["again"]


# `loom pump` with a SEND_WAIT of a second: argv[1] the state dir, the rest the CLI.
SHORT_WAIT = r"""
import sys
from pathlib import Path
from loomtui.pump import runner
runner.SEND_WAIT = 1.0
sys.exit(runner.Pump(Path(sys.argv[1]), sys.argv[2:], show=lambda line: None).run())
"""


def test_a_line_still_being_written_when_its_senders_wait_runs_out_is_said_queued_and_kept(tmp_path):
    # A line longer than the pipe holds, to a CLI that reads nothing: the write cannot finish. Its
    # sender heard "could not write the message" after SEND_WAIT and could send it again, while the
    # pump kept it and the next launch delivered it too.
    from loomtui.pump import client

    go = tmp_path / "go"
    path = transcript.path_in(tmp_path)
    with live_pump(tmp_path, sys.executable, "-c", WEDGED, str(go),
                   pump=(sys.executable, "-c", SHORT_WAIT, str(tmp_path))) as pump:
        reply = client.send(tmp_path, "x" * (1 << 18), origin="telegram", timeout=60)
        assert reply.state == "queued" and reply.seq is not None
        kept = tmp_path / "pump-queue" / f"{reply.seq}.json"
        assert kept.exists()
        go.touch()
        assert pump.wait(60) == 1
    assert kept.exists()
    # Said as the write's failure (kept), or as a line the exiting CLI never read, as the pump's
    # threads happen to tell it; either way the bridge says it goes again.
    records = list(transcript.read(path))
    failed = [r.data for r in records if r.data.get("what") == "write_failed"]
    unread = [r.data["seqs"] for r in records if r.data.get("what") == "unread"]
    assert [(f["seq"], f.get("kept")) for f in failed] == [(reply.seq, True)] or unread == [[reply.seq]]
    _, said = bridge.advance(bridge.Cursor(), records)
    assert [a.what for a in said] == ["again"]


# A CLI that exits, status 1, as soon as it is written a line: before it shows it read a byte.
DIES_ON_A_LINE = r"""
import sys
sys.stdin.readline()
raise SystemExit(1)
"""


def test_a_message_every_launch_exits_before_reading_is_set_aside_after_three(tmp_path):
    # Kept for the next launch, a message that ends the CLI before it reads it (or a CLI that cannot
    # start with it) was written to every launch, each ending the same way, until the watchdog's
    # ceiling held the agent. After MAX_UNREAD launches it is set aside, kept on disk, and said.
    from loomtui.pump import render, runner

    queue = tmp_path / "pump-queue"
    queue.mkdir()
    (queue / "1.json").write_text(json.dumps({"seq": 1, "ts": 0, "origin": "telegram", "ref": "tg-1", "text": "huge"}))
    for launch in range(1, runner.MAX_UNREAD + 1):
        assert pump_process(tmp_path, DIES_ON_A_LINE).returncode == 1
        assert json.loads((queue / "1.json").read_text())["unread"] == launch
    path = transcript.path_in(tmp_path)
    # Each exit said so, the last one that the next pump sets it aside (the bridge says it is lost then).
    unread = [r.data for r in transcript.read(path) if r.data.get("what") == "unread"]
    assert [u.get("set_aside") for u in unread] == [None] * (runner.MAX_UNREAD - 1) + [[1]]
    end = transcript.tail_offset(path, 0)
    assert pump_process(tmp_path, "pass").returncode == 0  # the next launch: nothing written to it
    records = list(transcript.read(path, end))
    assert not [r for r in records if r.data.get("what") == "unread"]
    [aside] = [r for r in records if r.data.get("what") == "set_aside"]
    assert aside.data["seq"] == 1 and aside.data["unread"] == runner.MAX_UNREAD and aside.data["origin"] == "telegram"
    assert sorted(p.name for p in queue.iterdir()) == ["1.json.undelivered"]
    assert json.loads((queue / "1.json.undelivered").read_text())["text"] == "huge"  # nothing lost
    assert render.lines(transcript.PUMP, aside.data) == [
        "— set aside #1: 3 launches exited before reading it (kept as 1.json.undelivered in the pump's queue)"]


def test_seqs_go_on_past_the_messages_set_aside_when_the_transcript_has_none(tmp_path):
    """Seqs went on from the transcript's last alone: with the transcript gone (or its last seq
    behind a turn of hundreds of MiB) they began at 1 again, and the next message set aside took an
    earlier one's file, its text lost, and the operator was told of two messages as one "#5"."""
    from loomtui.pump import client

    queue = tmp_path / "pump-queue"
    queue.mkdir()
    (queue / "5.json.undelivered").write_text(json.dumps({"seq": 5, "ts": 0, "origin": "telegram", "ref": "",
                                                          "text": "an earlier message set aside", "unread": 3}))
    (queue / "7.json.bad").write_text("not json")
    with live_pump(tmp_path, sys.executable, "-c", TAKES_THREE.replace("range(3)", "range(1)")) as pump:
        reply = client.send(tmp_path, "hello", origin="telegram", timeout=60)
        assert reply.state == "delivered" and reply.seq == 8
        assert pump.wait(60) == 0
    assert json.loads((queue / "5.json.undelivered").read_text())["text"] == "an earlier message set aside"
    # A file set aside never replaces another.
    from loomtui.pump.runner import _free

    assert _free(queue / "5.json.undelivered") == queue / "5.json.undelivered.2"
    assert _free(queue / "6.json.undelivered") == queue / "6.json.undelivered"
