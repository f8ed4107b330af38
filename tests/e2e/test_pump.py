"""`loom pump` running the demo agent in stream-json mode: real processes, a real socket, real files.

No tmux and no daemon here: the pump runs as a plain subprocess whose stdout (the pane) goes to a
file. Every process is ended by pid when a test is done, failed or not.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psutil
import pytest
from conftest import REPO, loom_env
from harness import wait_for

from loomtui.pump import client, transcript

pytestmark = pytest.mark.e2e

STREAM_FLAGS = ["-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"]
EVIL = "\x1b]0;owned\x07\x1b[31mred\x1b[0m \x1b[2J\x9b31mmore\x1b[?1049h\rback\x08\x07"


class PumpRun:
    """One state dir and the pumps started on it (one at a time), ended by pid."""

    def __init__(self, root: Path, state: Path | None = None) -> None:
        self.root = root
        self.state = state or root / "state"
        self.data = root / "agent-data"
        self.pane = root / "pane.out"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.cli_pids: set[int] = set()
        self.stalled: list[int] = []  # read ends of panes nobody reads

    def start(self, *agent_args: str, cmd: list[str] | None = None, flags: list[str] = STREAM_FLAGS,
              stalled_pane: bool = False) -> subprocess.Popen[bytes]:
        """`stalled_pane`: the pump's stdout is a pipe nobody reads, as a pane stopped with Ctrl-S
        (or a tmux that stops reading): a write to it blocks once the pipe is full."""
        argv = cmd or [sys.executable, "-m", "loomtui.demo.agent", "--data-dir", str(self.data), "--bot", "",
                       *agent_args, *flags]
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.pane, "ab") as pane, open(self.root / "pump.err", "ab") as err:
            out: object = pane
            if stalled_pane:
                read_end, out = os.pipe()
                self.stalled.append(read_end)
            try:
                proc = subprocess.Popen([sys.executable, "-m", "loomtui", "pump", "--state-dir", str(self.state),
                                         "--", *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        env=loom_env(), cwd=REPO, start_new_session=True)
            finally:
                if stalled_pane:
                    os.close(out)  # type: ignore[arg-type]
        self.procs.append(proc)
        return proc

    def fresh(self, stalled_pane: bool = False) -> tuple[subprocess.Popen[bytes], str]:
        sid = str(uuid.uuid4())
        proc = self.start("--session-id", sid, stalled_pane=stalled_pane)
        self.wait_init(proc)
        return proc, sid

    def wait_init(self, proc: subprocess.Popen[bytes]) -> dict:
        """pump.json of this pump once the CLI said `init` (and so reads its stdin)."""
        def ready():
            status = client.status(self.state)
            return status if status and status["pid"] == proc.pid and status["session_id"] else None
        status = wait_for(ready, 60, what="the pump's status with the session id")
        self.cli_pids.add(status["cli_pid"])
        return status

    def records(self, dir: str | None = None) -> list[transcript.Record]:
        return [r for r in transcript.read(transcript.path_in(self.state)) if dir is None or r.dir == dir]

    def turns(self) -> list[tuple[str, str]]:
        """The transcript as (in, text) and (result, its text), in order."""
        out = []
        for r in self.records():
            if r.dir == "in":
                out.append(("in", r.data["text"]))
            elif r.dir == "out" and r.event.get("type") == "result":
                out.append(("result", r.event.get("result")))
        return out

    def results(self) -> int:
        return sum(1 for r in self.records("out") if r.event.get("type") == "result")

    def send(self, text: str, origin: str = "operator", ref: str = "") -> client.Reply:
        return client.send(self.state, text, origin=origin, ref=ref, timeout=30)

    def queue_files(self) -> list[str]:
        folder = client.queue_dir(self.state)
        return sorted(p.name for p in folder.iterdir()) if folder.exists() else []

    def wait_exit(self, proc: subprocess.Popen[bytes]) -> int:
        return proc.wait(timeout=60)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        for read_end in self.stalled:
            os.close(read_end)
        for pid in self.cli_pids:
            try:
                process = psutil.Process(pid)
                if "loomtui.demo.agent" in " ".join(process.cmdline()):
                    process.kill()
                    process.wait(timeout=30)
            except psutil.Error:
                pass


@pytest.fixture
def pumps(tmp_path):
    made: list[PumpRun] = []

    def make(root: Path | None = None, state: Path | None = None) -> PumpRun:
        run = PumpRun(root or tmp_path / f"p{len(made)}", state)
        made.append(run)
        return run

    yield make
    for run in made:
        run.cleanup()


def test_a_send_between_turns_is_delivered_and_answered(pumps):
    run = pumps()
    proc, sid = run.fresh()
    reply = run.send("hello there", ref="op-1")
    assert (reply.ok, reply.state, reply.position) == (True, "delivered", None) and reply.seq == 1
    wait_for(lambda: run.results() == 1, 60, what="the answer's result")
    assert run.turns() == [("in", "hello there"), ("result", "heard you (11 characters)")]
    (into,) = run.records("in")
    assert into.data == {"seq": 1, "origin": "operator", "ref": "op-1", "text": "hello there"}
    status = wait_for(lambda: (s := client.status(run.state)) and s["turns"] == 1 and s, 30, what="turns: 1")
    assert (status["session_id"], status["turn"], status["queue"], status["cli_exit"]) == (sid, "idle", 0, None)
    assert status["last_result"]["seq"] == 1 and status["last_result"]["is_error"] is False
    # The result's record names the line whose turn it ended (the bridge answers that line).
    assert [r.data.get("turn") for r in run.records("out") if r.event.get("type") == "result"] == [1]
    assert status["argv0"] == os.path.basename(sys.executable) and status["pid"] == proc.pid
    # The socket's status is pump.json's; the demo's own session file has the message.
    assert client.live_status(run.state) == client.status(run.state)
    session = (run.data / "sessions" / f"{sid}.jsonl").read_text()
    assert '"hello there"' in session
    pane = run.pane.read_text()
    assert "you › hello there" in pane and "assistant › heard you (11 characters)" in pane and "result ok" in pane
    # The CLI's init at start and at the turn: the pane names the session once.
    assert sum(1 for r in run.records("out") if r.event.get("subtype") == "init") == 2
    assert pane.count(f"session {sid}") == 1


def test_three_sends_during_a_long_turn_are_queued_and_arrive_after_it_in_order(pumps):
    run = pumps()
    proc, _ = run.fresh()
    gate = run.root / "gate"
    assert run.send(f"/wait-for {gate}").state == "delivered"
    # Its file stays until the CLI shows it read the line (its turn's `init`), later under load.
    wait_for(lambda: "1.json" not in run.queue_files(), 30, what="line 1 read by the CLI")
    replies = [run.send(f"queued {i}", origin="telegram", ref=f"tg-{i}") for i in range(3)]
    assert [(r.state, r.position) for r in replies] == [("queued", 1), ("queued", 2), ("queued", 3)]
    assert [r.seq for r in replies] == [2, 3, 4]
    # Persisted before the answer, and nothing was written to the CLI while its turn ran.
    assert run.queue_files() == ["2.json", "3.json", "4.json"]
    assert json.loads((client.queue_dir(run.state) / "3.json").read_text())["text"] == "queued 1"
    assert [r.data["text"] for r in run.records("in")] == [f"/wait-for {gate}"]
    status = client.status(run.state)
    assert (status["turn"], status["turn_seq"], status["queue"]) == ("running", 1, 3)
    gate.touch()
    wait_for(lambda: run.results() == 4, 60, what="four results")
    assert run.turns() == [
        ("in", f"/wait-for {gate}"), ("result", f"{gate} is there"),
        ("in", "queued 0"), ("result", "heard you (8 characters)"),
        ("in", "queued 1"), ("result", "heard you (8 characters)"),
        ("in", "queued 2"), ("result", "heard you (8 characters)"),
    ]
    assert [(r.data["seq"], r.data["origin"], r.data["ref"]) for r in run.records("in")][1:] == [
        (2, "telegram", "tg-0"), (3, "telegram", "tg-1"), (4, "telegram", "tg-2")]
    assert [r.data.get("turn") for r in run.records("out") if r.event.get("type") == "result"] == [1, 2, 3, 4]
    assert [(r.data["seq"], r.data["position"]) for r in run.records("pump") if r.data["what"] == "queued"] == [
        (2, 1), (3, 2), (4, 3)]
    wait_for(lambda: run.queue_files() == [], 30, what="the queue files removed")
    assert wait_for(lambda: (s := client.status(run.state)) and s["turns"] == 4 and s, 30)["queue"] == 0


def test_a_queued_message_survives_the_pump_and_the_cli_killed_and_the_next_pump_delivers_it(pumps):
    run = pumps()
    proc, sid = run.fresh()
    cli_pid = client.status(run.state)["cli_pid"]
    assert run.send(f"/wait-for {run.root / 'never'}").state == "delivered"
    # Read by the CLI before it is killed (else it is kept and delivered again, as it should be).
    wait_for(lambda: "1.json" not in run.queue_files(), 30, what="line 1 read by the CLI")
    assert [run.send(f"survivor {i}").state for i in range(2)] == ["queued", "queued"]
    assert run.send("touch the stale probe's ack", origin="canary").state == "queued"
    os.kill(proc.pid, signal.SIGKILL)
    os.kill(cli_pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_for(lambda: not psutil.pid_exists(cli_pid) or psutil.Process(cli_pid).status() == psutil.STATUS_ZOMBIE,
             30, what="the CLI gone")
    assert run.queue_files() == ["2.json", "3.json", "4.json"]
    again = run.start("--resume", sid)
    run.wait_init(again)
    wait_for(lambda: run.results() == 2, 60, what="the survivors' results")
    assert run.turns() == [("in", f"/wait-for {run.root / 'never'}"),
                           ("in", "survivor 0"), ("result", "heard you (10 characters)"),
                           ("in", "survivor 1"), ("result", "heard you (10 characters)")]
    assert [r.data["seq"] for r in run.records("in")] == [1, 2, 3]
    pending = [r.data for r in run.records("pump") if r.data["what"] in ("pending", "dropped_probe")]
    # The probe was the old launch's: dropped, not delivered to the new one.
    assert pending == [{"what": "dropped_probe", "seq": 4}, {"what": "pending", "seqs": [2, 3]}]
    wait_for(lambda: run.queue_files() == [], 30, what="the delivered files removed")
    # The resumed conversation holds them, and the new pump numbers on from the last.
    session = [json.loads(line) for line in (run.data / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    assert [t["text"] for t in session if t["role"] == "user"][-2:] == ["survivor 0", "survivor 1"]
    assert run.send("next").seq == 5


def test_the_clis_kill_9_ends_the_pump_with_137_and_cli_exit_recorded(pumps):
    run = pumps()
    proc, _ = run.fresh()
    cli_pid = client.status(run.state)["cli_pid"]
    os.kill(cli_pid, signal.SIGKILL)
    assert run.wait_exit(proc) == 137
    status = client.status(run.state)
    assert status["cli_exit"]["status"] is None and status["cli_exit"]["signal"] == 9
    last = run.records()[-1]
    assert (last.dir, last.data["what"], last.data["signal"], last.data["exit"]) == ("pump", "cli_exit", 9, 137)
    assert not client.socket_path(run.state).exists()
    with pytest.raises(client.PumpError, match="no pump is running"):
        run.send("anyone?")
    assert "the CLI was killed by signal 9" in run.pane.read_text()


def test_the_cli_exit_status_is_the_pumps_and_a_resume_of_an_unknown_session_is_in_the_transcript(pumps):
    run = pumps()
    unknown = str(uuid.uuid4())
    proc = run.start("--resume", unknown)
    assert run.wait_exit(proc) == 1
    errors = [r.data["line"] for r in run.records("err")]
    assert errors == [f"No conversation found with session ID: {unknown}"]
    status = client.status(run.state)
    assert status["cli_exit"]["status"] == 1 and status["session_id"] is None
    assert status["last_result"]["is_error"] is True and status["last_result"]["seq"] is None
    pane = run.pane.read_text()
    assert f"stderr: No conversation found with session ID: {unknown}" in pane
    assert "result error: error_during_execution (0.0s)\n  No conversation found with session ID: " in pane


def test_the_socket_is_the_users_alone(pumps):
    base = Path(tempfile.mkdtemp(prefix="pump-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)           # others may reach the socket: only its own mode keeps them out
        run = pumps(base / "run", base / "state")
        run.state.mkdir(mode=0o755)
        os.chmod(run.state, 0o755)
        run.fresh()
        sock = client.socket_path(run.state)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        for name in ("pump.json", "transcript.jsonl"):
            assert stat.S_IMODE((run.state / name).stat().st_mode) == 0o600
        if os.getuid() == 0:
            # A stranger (nobody) tries to send a line.
            stranger = subprocess.run(
                # Everything imported first: the interpreter's files need not be readable by nobody.
                [sys.executable, "-c", "import os, sys\nfrom loomtui.pump import client\n"
                 "os.setgid(65534); os.setuid(65534)\n"
                 "try:\n client.send(sys.argv[1], 'rm -rf ~', origin='operator')\n"
                 "except client.PumpError as e:\n print(e); sys.exit(3)\n"
                 "print('sent')", str(run.state)],
                capture_output=True, text=True, env=loom_env(), cwd=REPO, timeout=60)
            assert stranger.returncode == 3, stranger.stdout + stranger.stderr
            assert "not allowed to connect" in stranger.stdout
            assert [r for r in run.records("in")] == []
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_untrusted_text_reaches_the_pane_without_a_control_character(pumps):
    run = pumps()
    run.fresh()
    assert run.send(f"/say {EVIL}\nsecond {EVIL}").state == "delivered"
    wait_for(lambda: run.results() == 1, 60, what="the result")
    # The transcript keeps the text as it came; the pane shows it defanged.
    said = [b["text"] for r in run.records("out") if r.event.get("type") == "assistant"
            for b in r.event["message"]["content"]]
    assert said == [f"{EVIL}\nsecond {EVIL}"]
    wait_for(lambda: "result ok" in run.pane.read_text(), 30, what="the result on the pane")
    pane = run.pane.read_text()
    bad = {c for c in pane if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F}
    assert not bad, f"control characters on the pane: {sorted(map(hex, map(ord, bad)))}"
    assert "you › /say ]0;owned[31mred[0m [2J" in pane
    assert "assistant › ]0;owned[31mred" in pane and "second ]0;owned" in pane


def test_a_broken_pipe_to_the_cli_is_the_senders_error_not_the_pumps_end(pumps):
    run = pumps()
    proc, _ = run.fresh()
    assert run.send("/close-stdin").state == "delivered"
    wait_for(lambda: run.results() == 1, 60, what="the result")
    # Both refusals say why in a code (docs/STREAM.md): the CLI can never read a line again.
    with pytest.raises(client.PumpInputClosed, match="could not write to the agent's CLI"):
        run.send("into the void")
    assert proc.poll() is None
    failed = [r.data for r in run.records("pump") if r.data["what"] == "write_failed"]
    assert [f["seq"] for f in failed] == [2]
    # Its sender was told it failed (and may send it again): no file of it for the next launch.
    assert not (client.queue_dir(run.state) / "2.json").exists()
    with pytest.raises(client.PumpInputClosed, match="no longer reads its input"):
        run.send("and again")
    answer = client.request(run.state, {"op": "send", "text": "once more", "origin": "operator"})
    assert answer == {"ok": False, "error": "the agent's CLI no longer reads its input", "code": "input_closed"}
    assert client.live_status(run.state)["turn"] == "idle"


def test_sigterm_to_the_pump_stops_the_cli_and_exits_with_its_status(pumps):
    run = pumps()
    proc, _ = run.fresh()
    cli_pid = client.status(run.state)["cli_pid"]
    proc.send_signal(signal.SIGTERM)
    assert run.wait_exit(proc) == 143      # the demo ends on SIGTERM with 128+15, as a shell reports it
    assert not psutil.pid_exists(cli_pid) or psutil.Process(cli_pid).status() == psutil.STATUS_ZOMBIE
    whats = [r.data["what"] for r in run.records("pump")]
    assert whats[-2:] == ["signal", "cli_exit"]


def test_a_deep_state_dir_still_gets_its_socket(pumps, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    run = pumps(tmp_path / "deep", deep / "state")
    assert len(os.fsencode(client.socket_path(run.state))) > 108
    run.fresh()
    assert run.send("hello").state == "delivered"


def test_lines_that_are_not_json_and_stderr_are_kept(pumps):
    run = pumps()
    script = ("import sys\nprint('plain words', flush=True)\nprint('[1, 2]', flush=True)\n"
              "print('{\"type\": \"result\", \"subtype\": \"success\"}', flush=True)\n"
              "sys.stderr.write('careful\\x1b[31m\\n')\nsys.exit(4)\n")
    proc = run.start(cmd=[sys.executable, "-c", script])
    assert run.wait_exit(proc) == 4
    outs = [r.data for r in run.records("out")]
    assert outs == [{"raw": "plain words"}, {"raw": "[1, 2]"}, {"event": {"type": "result", "subtype": "success"}}]
    assert [r.data for r in run.records("err")] == [{"line": "careful\x1b[31m"}]
    assert "stderr: careful[31m" in run.pane.read_text()


def test_a_command_that_does_not_exist_ends_the_pump_with_127(pumps):
    run = pumps()
    proc = run.start(cmd=[str(run.root / "no-such-cli")])
    assert run.wait_exit(proc) == 127
    assert [r.data["what"] for r in run.records("pump")] == ["spawn_failed", "cli_exit"]
    assert client.status(run.state)["cli_exit"]["status"] == 127


@pytest.mark.parametrize("args, message", [
    (["--state-dir", "S", "--"], "no command given"),
    (["--state-dir", "S"], "no command given"),
    (["--", "true"], "no state dir"),
])
def test_loom_pump_refuses_a_missing_command_or_state_dir(tmp_path, args, message):
    args = [str(tmp_path / "s") if a == "S" else a for a in args]
    result = subprocess.run([sys.executable, "-m", "loomtui", "pump", *args], capture_output=True, text=True,
                            env=loom_env(), cwd=REPO, timeout=60)
    assert result.returncode == 2 and message in result.stderr


def test_a_cli_that_ignores_the_signal_is_killed_after_the_grace(pumps):
    run = pumps()
    script = ("import json, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "print(json.dumps({'type': 'system', 'subtype': 'init', 'session_id': 'stubborn'}), flush=True)\n"
              "time.sleep(600)\n")
    proc = run.start(cmd=[sys.executable, "-c", script])
    run.wait_init(proc)
    proc.send_signal(signal.SIGTERM)
    assert run.wait_exit(proc) == 137
    assert client.status(run.state)["cli_exit"]["signal"] == 9


def test_a_second_pump_on_the_same_state_dir_waits_for_the_first_to_end(pumps):
    run = pumps()
    first, sid = run.fresh()
    second = run.start("--resume", sid)
    wait_for(lambda: "waiting for it to end" in run.pane.read_text(), 60, what="the second pump waiting")
    assert run.send("still the first's").state == "delivered"
    # Answered before the stop: a line the CLI had not shown it read would be the second's `pending`.
    wait_for(lambda: run.results() == 1, 60, what="the first pump's answer")
    first.send_signal(signal.SIGTERM)
    assert run.wait_exit(first) == 143
    run.wait_init(second)
    assert run.send("hello").seq == 2
    started = [(r.data["what"], r.data.get("pid")) for r in run.records("pump") if r.data["what"] != "signal"]
    assert started == [("started", first.pid), ("cli_exit", None), ("started", second.pid)]


def test_a_pane_that_takes_nothing_never_stalls_the_pump(pumps):
    """A pane stopped with Ctrl-S takes no more output, and a write to it blocks. The pump's main loop
    showed every record itself, so the next one stopped it: sends waited out the pump's 30 s and
    failed, the agent unreachable for as long as the pane stayed stopped. The pane has a thread of
    its own now, and lines it has no room for are counted, never waited for."""
    run = pumps()
    proc, _ = run.fresh(stalled_pane=True)
    block = "\n".join(f"{i:02d} " + "x" * 390 for i in range(40))  # 40 lines of 400 shown per send
    for i in range(12):  # about 200 KB for the pane: more than a pipe holds
        reply = run.send(f"{i} {block}")
        assert reply.ok and reply.state in ("delivered", "queued"), reply  # answered at once, either way
    wait_for(lambda: run.results() == 12, 60, what="twelve results")
    assert client.live_status(run.state)["turns"] == 12 and proc.poll() is None
    # The pane takes its lines again: they come, in order, the first line of the first send first.
    pane = b""
    os.set_blocking(run.stalled[0], False)

    def shown() -> bool:
        nonlocal pane
        try:
            while chunk := os.read(run.stalled[0], 1 << 16):
                pane += chunk
        except BlockingIOError:
            pass
        return b"you \xe2\x80\xba 11 00 xxx" in pane
    wait_for(shown, 60, what="the last send's line on the pane")
    assert pane.index(b"you \xe2\x80\xba 0 00 xxx") < pane.index(b"you \xe2\x80\xba 11 00 xxx")


def test_half_an_emoji_from_a_sender_or_from_the_cli_is_kept_and_the_pump_goes_on(pumps):
    """A lone surrogate (half of an emoji cut by a JavaScript string index) is valid escaped JSON
    but has no UTF-8: the transcript's and the queue's writes raised and ended the pump, its CLI left
    running. Now it is kept, escaped, and reads back the same."""
    run = pumps()
    proc, _ = run.fresh()
    assert run.send("/say half \ud83d here").state == "delivered"
    wait_for(lambda: run.results() == 1, 60, what="the result")
    gate = run.root / "gate"
    assert run.send(f"/wait-for {gate}").state == "delivered"
    assert run.send("queued \udcff too").state == "queued"  # its queue file holds it
    gate.touch()
    wait_for(lambda: run.results() == 3, 60, what="three results")
    assert run.turns() == [("in", "/say half \ud83d here"), ("result", "half \ud83d here"),
                           ("in", f"/wait-for {gate}"), ("result", f"{gate} is there"),
                           ("in", "queued \udcff too"), ("result", "heard you (12 characters)")]
    assert proc.poll() is None and client.live_status(run.state)["turn"] == "idle"
    # On the pane as the replacement character, as text.printable shows every lone surrogate.
    assert "half \ufffd here" in run.pane.read_text(errors="replace")


def test_seqs_go_on_after_a_last_turn_of_megabytes(pumps):
    """The next pump numbers its messages on from the last pump's, read from the transcript's end:
    after a turn whose answer ran past the last MiB no seq was found there, and numbering began at 1
    again. It now reads further back until it finds one."""
    run = pumps()
    proc, _ = run.fresh()
    big = "y" * 700_000
    assert run.send(f"/say {big}").seq == 1  # its echo and its result: 1.4 MB after its record
    wait_for(lambda: run.results() == 1, 60, what="the big answer")
    proc.send_signal(signal.SIGTERM)
    run.wait_exit(proc)
    run.fresh()
    assert run.send("and after it").seq == 2
