"""The pump's files are written whole or not at all: a transcript line cut short (a pump killed
mid-write, a full disk) never swallows the record after it, and a queue file the disk cuts short is
never said to be kept. Real files; a full disk is a real process under a file-size limit."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO, loom_env

from loomtui.hooks import pump_marks
from loomtui.pump import transcript
from loomtui.telegram import bridge


def run(code: str, *args: str) -> dict:
    """`code` in a process of its own, its last stdout line read as JSON (a limit set there stays there)."""
    prelude = "import json, os, resource, signal, sys\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
    done = subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True, text=True,
                          env=loom_env(), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_next_pump_s_records_are_not_glued_onto_a_line_its_killed_predecessor_cut_short(tmp_path):
    path = transcript.path_in(tmp_path)
    log = transcript.Writer(path)
    log.append(transcript.PUMP, what="started", pid=1, cli_pid=2, argv=["claude"])
    log.append(transcript.IN, seq=1, origin="telegram", ref="tg-1", text="deploy the fix?")
    log.append(transcript.OUT, event={"type": "system", "subtype": "init", "session_id": "s"})
    log.close()
    with open(path, "ab") as fh:  # the pump SIGKILLed while it wrote a large tool result
        fh.write(b'{"ts":1,"dir":"out","event":{"type":"user","message":{"content":[{"type":"tool_result"')
    log = transcript.Writer(path)  # the next pump
    log.append(transcript.PUMP, what="started", pid=3, cli_pid=4, argv=["claude", "--resume", "s"])
    log.append(transcript.IN, seq=2, origin="canary", ref="", text="touch /acks/n1")
    log.append(transcript.OUT, event={"type": "system", "subtype": "init", "session_id": "s"})
    log.append(transcript.OUT, event={"type": "result", "subtype": "success", "is_error": False,
                                      "result": "Done - touched the ack file."})
    log.close()
    records = list(transcript.read(path))
    assert [(r.dir, r.data.get("what") or r.data.get("seq") or r.event.get("type")) for r in records] == [
        ("pump", "started"), ("in", 1), ("out", "system"), ("pump", "started"), ("in", 2), ("out", "system"),
        ("out", "result")]
    assert [m.event for m in pump_marks.marks(records)[0]].count("SessionStart") == 2
    # The new pump's start ended the operator's turn: the canary's answer is not sent as its reply.
    _, answers = bridge.advance(bridge.Cursor(), records)
    assert [a.what for a in answers] == ["lost"]
    assert not any("ack file" in a.text for a in answers)


def test_a_record_the_disk_takes_only_part_of_is_cut_back_off(tmp_path):
    path = transcript.path_in(tmp_path)
    said = run("""
from loomtui.pump import transcript
log = transcript.Writer(sys.argv[1])
log.append("in", seq=1, origin="operator", ref="", text="hello")
size = os.path.getsize(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, size + 100))  # a disk with 100 bytes left
try:
    log.append("out", event={"type": "result", "result": "x" * 500})
    error = None
except OSError as exc:
    error = exc.errno
print(json.dumps({"size": size, "error": error, "after": os.path.getsize(sys.argv[1])}))
""", str(path))
    assert said["error"] is not None  # the writer is told (the pump says so on its pane)
    assert said["after"] == said["size"]  # and nothing of the record is left behind
    log = transcript.Writer(path)
    log.append(transcript.OUT, event={"type": "result", "subtype": "success"})
    log.close()
    assert [(r.dir, r.event.get("type")) for r in transcript.read(path)] == [("in", None), ("out", "result")]


def test_a_queue_file_the_disk_cuts_short_is_not_said_to_be_kept(tmp_path):
    said = run("""
from pathlib import Path
from loomtui.pump import runner
pump = runner.Pump(Path(sys.argv[1]), ["true"], show=lambda line: None)
pump._prepare()
resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))
message = runner.Message(7, "the operator's message " + "x" * 300, "telegram", "tg-1")
try:
    pump._persist(message)
    error = None
except OSError as exc:
    error = exc.errno
print(json.dumps({"error": error, "persisted": message.persisted}))
""", str(tmp_path))
    assert said["error"] is not None and not said["persisted"]  # the sender hears it was not kept
    assert sorted(p.name for p in (tmp_path / "pump-queue").iterdir()) == []  # nothing cut short left behind
