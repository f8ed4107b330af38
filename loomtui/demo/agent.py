"""`python -m loomtui.demo.agent`: an interactive line program that behaves like an agent CLI.

It keeps a transcript per session id, resumes one by id (an unknown id prints "No conversation
found" and exits non-zero, as Claude Code does), refuses a fresh id already in use, runs the
canary's `touch PATH`, keeps a poller child, and obeys fault switches sent as messages:

  /wedge            keep redrawing, never read input again
  /poison           wedge now, and wedge again right after every resume of this session
  /crash            exit 1            /exit0   exit 0
  /modal            a blocking trust prompt until Enter
  /kill-poller      kill the poller child
  /foreign-poller   start a poller outside this process tree
  /slow SECONDS     busy (not reading input) for SECONDS
  /late-acks N SECONDS
                    busy for SECONDS (not reading input) when each of the next N `touch`
                    commands arrives, then run it: exactly N probes ack late, counted from
                    their arrival, however slow the machine

Input is read with the terminal in non-canonical mode: a canonical tty line is capped at 4095
bytes, and a long pasted message must arrive whole.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path

TOUCH = re.compile(r"\btouch\s+(.+)$")
SPINNER = "|/-\\"


class Transcript:
    def __init__(self, path: Path) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists()

    def turns(self) -> list[dict]:
        out = []
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

    def add(self, role: str, text: str) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"ts": time.time(), "role": role, "text": text}, ensure_ascii=False) + "\n")
            fh.flush()

    def poisoned(self) -> bool:
        return any(t.get("role") == "fault" and t.get("text") == "poison" for t in self.turns())


class Terminal:
    """Reads whole lines from a tty without the canonical-mode length cap; echoes as it goes."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno()
        self.saved = None
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""
        if os.isatty(self.fd):
            self.saved = termios.tcgetattr(self.fd)
            mode = termios.tcgetattr(self.fd)
            mode[3] &= ~(termios.ICANON | termios.ECHO)
            mode[6][termios.VMIN] = 1
            mode[6][termios.VTIME] = 0
            termios.tcsetattr(self.fd, termios.TCSANOW, mode)

    def restore(self) -> None:
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)

    def readline(self, echo: bool = True) -> str | None:
        while True:
            for i, ch in enumerate(self.pending):
                if ch in "\r\n":
                    line, self.pending = self.pending[:i], self.pending[i + 1:]
                    if echo:
                        out("\n")
                    return line
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None if not self.pending else self._flush()
            text = self.decoder.decode(chunk)
            kept = []
            for ch in text:
                if ch in ("\x7f", "\b"):
                    if kept:
                        kept.pop()
                    elif self.pending:
                        self.pending = self.pending[:-1]
                    if echo:
                        out("\b \b")
                    continue
                kept.append(ch)
                if echo and ch not in "\r\n":
                    out(ch)
            self.pending += "".join(kept)

    def _flush(self) -> str:
        line, self.pending = self.pending, ""
        return line


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class Agent:
    def __init__(self, args: argparse.Namespace, transcript: Transcript, session_id: str) -> None:
        self.args = args
        self.transcript = transcript
        self.session_id = session_id
        self.poller: subprocess.Popen[bytes] | None = None
        self.term = Terminal()
        self.late_acks = 0
        self.late_by = 0.0

    def start_poller(self) -> None:
        if not self.args.bot:
            return
        self.poller = subprocess.Popen(
            [sys.executable, "-m", "loomtui.demo.poller", "--bot", self.args.bot, "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def foreign_poller(self) -> int:
        """A poller that is not ours: started through a middle process that exits, so it is re-parented."""
        pidfile = Path(self.args.data_dir) / "foreign" / f"{uuid.uuid4().hex}.pid"
        pidfile.parent.mkdir(parents=True, exist_ok=True)
        launcher = (
            "import subprocess, sys\n"
            "subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL,\n"
            "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        )
        subprocess.run(
            [sys.executable, "-c", launcher, sys.executable, "-m", "loomtui.demo.poller",
             "--bot", self.args.bot or "demo", "--max-life", "900", "--pidfile", str(pidfile)],
            check=True,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if pidfile.exists() and pidfile.read_text().strip():
                return int(pidfile.read_text())
            time.sleep(0.02)
        return 0

    def wedge(self) -> None:
        out("\nthinking ")
        i = 0
        while True:
            out("\b" + SPINNER[i % len(SPINNER)])
            i += 1
            time.sleep(0.2)

    def modal(self) -> None:
        out("\n Do you trust the files in this folder?\n\n"
            " > 1. Yes, I trust this folder\n   2. No, exit\n\n Enter to confirm\n")
        while True:
            line = self.term.readline(echo=False)
            if line is None:
                raise SystemExit(0)
            # Whatever was typed while the dialog was up went to the dialog, as in a real CLI.
            if line == "" or line.strip() == "1":
                # A real CLI redraws once the dialog closes; the dialog text must not linger on screen.
                out("\x1b[2J\x1b[H trusted.\n")
                return
            out(" (press Enter)\n")

    def handle(self, line: str) -> None:
        text = line.strip()
        self.transcript.add("user", line)
        if text == "/wedge":
            self.wedge()
        elif text == "/poison":
            self.transcript.add("fault", "poison")
            self.wedge()
        elif text == "/crash":
            out("Error: simulated crash\n")
            raise SystemExit(1)
        elif text == "/exit0":
            out("bye\n")
            raise SystemExit(0)
        elif text == "/modal":
            self.modal()
        elif text == "/kill-poller":
            if self.poller and self.poller.poll() is None:
                self.poller.kill()
                self.poller.wait()
                reply = f"killed my poller {self.poller.pid}"
            else:
                reply = "no poller to kill"
            self.reply(reply)
        elif text == "/foreign-poller":
            self.reply(f"started a foreign poller {self.foreign_poller()}")
        elif text.startswith("/slow"):
            try:
                seconds = float(text.split()[1])
            except (IndexError, ValueError):
                self.reply("usage: /slow SECONDS")
                return
            out(f"working for {seconds:g}s ...\n")
            time.sleep(seconds)
            self.reply(f"done after {seconds:g}s")
        elif text.startswith("/late-acks"):
            try:
                count, seconds = int(text.split()[1]), float(text.split()[2])
            except (IndexError, ValueError):
                self.reply("usage: /late-acks N SECONDS")
                return
            self.late_acks, self.late_by = count, seconds
            self.reply(f"the next {count} acks will be {seconds:g}s late")
        elif (match := TOUCH.search(text)) is not None:
            try:
                words = shlex.split(match.group(1))
            except ValueError as exc:
                self.reply(f"touch failed: {exc}")
                return
            target = words[0] if words else ""
            if not target:
                self.reply("touch failed: no path")
            else:
                if self.late_acks > 0:
                    self.late_acks -= 1
                    self.transcript.add("fault", f"late ack by {self.late_by:g}s")
                    time.sleep(self.late_by)
                self.touch(target)
        else:
            self.reply(f"heard you ({len(line)} characters)")

    def touch(self, target: str) -> None:
        try:
            Path(target).touch()
            self.transcript.add("tool", f"touch {target}")
        except OSError as exc:
            self.reply(f"touch failed: {exc}")

    def reply(self, text: str) -> None:
        self.transcript.add("agent", text)
        out(f"  {text}\n")

    def run(self, resumed: bool) -> int:
        self.start_poller()
        out(f"demo agent · session {self.session_id}\n")
        if resumed:
            turns = [t for t in self.transcript.turns() if t.get("role") in ("user", "agent")]
            out(f"resumed: {len(turns)} earlier turns\n")
            for turn in turns[-20:]:
                prefix = "> " if turn["role"] == "user" else "  "
                out(prefix + "".join(c if c.isprintable() else "?" for c in str(turn["text"]))[:200] + "\n")
            if self.transcript.poisoned():
                self.wedge()
        try:
            while True:
                out("> ")
                try:
                    line = self.term.readline()
                except KeyboardInterrupt:
                    out("^C\n")
                    continue
                if line is None:
                    return 0
                if line.strip():
                    self.handle(line)
        finally:
            self.term.restore()
            if self.poller and self.poller.poll() is None:
                self.poller.terminate()


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loomtui.demo.agent", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--session-id", help="start a new conversation with this id")
    group.add_argument("--resume", metavar="ID", help="continue the conversation with this id")
    parser.add_argument("--data-dir", default=os.environ.get("LOOM_DEMO_DATA", "~/.local/share/loom-demo"))
    parser.add_argument("--bot", default=os.environ.get("LOOM_DEMO_BOT", ""), help="poller identity; '' = no poller")
    args = parser.parse_args(argv)
    args.data_dir = os.path.expanduser(args.data_dir)
    sessions = Path(args.data_dir) / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    if args.resume:
        transcript = Transcript(sessions / f"{args.resume}.jsonl")
        if not transcript.exists():
            out(f"No conversation found with session ID: {args.resume}\n")
            return 1
        session_id, resumed = args.resume, True
        transcript.add("meta", "resume")
    else:
        session_id = args.session_id or str(uuid.uuid4())
        transcript = Transcript(sessions / f"{session_id}.jsonl")
        if transcript.exists():
            out(f"Error: Session ID {session_id} is already in use.\n")
            return 1
        transcript.add("meta", "start")
        resumed = False
    signal.signal(signal.SIGTERM, _terminated)
    return Agent(args, transcript, session_id).run(resumed)


if __name__ == "__main__":
    raise SystemExit(main())
