"""`python -m loomtui.demo.agent`: an interactive line program that behaves like an agent CLI.

It keeps a transcript per session id, resumes one by id (an unknown id prints "No conversation
found" and exits non-zero, as Claude Code does), refuses a fresh id already in use, runs the
canary's `touch PATH`, keeps a poller child, and obeys fault switches sent as messages:

  /wedge            its turn ends, then it keeps redrawing and never reads input again (the
                    seed's outage: lines typed into the input box, never dispatched)
  /poison           wedge now, and wedge again right after every resume of this session
  /crash            exit 1            /exit0   exit 0
  /modal            a blocking trust prompt until Enter
  /kill-poller      kill the poller child
  /foreign-poller   start a poller outside this process tree
  /slow SECONDS     busy (not reading input) for SECONDS
  /busy SECONDS     a long turn: busy for SECONDS (not reading input), using a tool every
                    BUSY_TOOL_EVERY seconds (a PostToolUse hook event each time)
  /permission       a tool waits for permission: a Notification `permission_prompt` hook
                    event, then a dialog that takes the next line (1/y: allow, 2/n: deny)
  /late-acks N SECONDS
                    busy for SECONDS (not reading input) when each of the next N `touch`
                    commands arrives, then run it: exactly N probes ack late, counted from
                    their arrival, however slow the machine
  /ratelimit [N|off]
                    the next N turns (1 by default) fail at once with an API error line and a
                    StopFailure hook event `rate_limit` (no Stop); `/ratelimit off` ends it sooner

With `--settings PATH` (Claude Code's flag: a settings file's hooks) it runs the file's hook
commands at Claude Code's moments, each through /bin/sh with the event as JSON on stdin:
SessionStart (`source` startup or resume, with the session id) before the first prompt,
UserPromptSubmit with the prompt once a line is taken, Stop once its turn ends. A wedged agent
takes no line, so a line typed after `/wedge` gets no UserPromptSubmit (it is never dispatched).

Input is read with the terminal in non-canonical mode: a canonical tty line is capped at 4095
bytes, and a long pasted message must arrive whole.

With `--stream-json`, or Claude Code's own `-p --input-format stream-json --output-format
stream-json --verbose` (any order), it speaks Claude Code's print mode instead: one JSON user
message per stdin line; on stdout a `system`/`init` event at start, then per message another
`init` (Claude Code 2.1 sends one at the start of every turn, and none before the first message),
`assistant` events (text, or a `tool_use` with its `user` `tool_result`) and one `result`. Errors
go to stderr. The same switches work there, with what each means without a screen:

  /wedge /poison    stop answering (no result; stdin is not read again); a poisoned session
                    hangs on every resume before its `init`, as `--resume` sometimes does
  /crash /exit0     exit 1 mid-turn / end the turn, then exit 0
  /modal, /deny     no dialog exists in print mode: a Bash call refused by the permissions
                    instead (a `system`/`permission_denied` event, an error tool result, and
                    the tool in the result's `permission_denials`)
  /slow SECONDS     a turn that takes SECONDS; stdin is not read meanwhile
  /busy SECONDS     a long turn: SECONDS, stdin not read, a Bash call (a `tool_use` and its
                    `tool_result`) every BUSY_TOOL_EVERY seconds, and its PostToolUse hook
  /say TEXT         answer TEXT exactly as given (control characters and all)
  /error-result     end the turn with an error result (`is_error`: true)
  /wait-for PATH    a turn that lasts until PATH exists (a slow turn a test ends when it likes)
  /close-stdin      close stdin and keep running: the next write to it breaks the pipe
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
import textwrap
import termios
import time
import uuid
from pathlib import Path

TOUCH = re.compile(r"\btouch\s+(.+)$")
SPINNER = "|/-\\"
BUSY_TOOL_EVERY = 2.0  # seconds between the tool uses of a /busy turn


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
            fh.write(json_line({"ts": time.time(), "role": role, "text": text}))
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
            kept: list[str] = []
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


def json_line(obj: object) -> str:
    """One JSON line, UTF-8 where it can be; a text holding half an emoji (a lone surrogate, which
    UTF-8 has no bytes for) escaped, as JavaScript's JSON.stringify writes it."""
    line = json.dumps(obj, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(obj)
    return line + "\n"


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


class Base:
    """What both modes share: the session, its transcript, the poller child, the late-ack switch."""

    def __init__(self, args: argparse.Namespace, transcript: Transcript, session_id: str) -> None:
        self.args = args
        self.transcript = transcript
        self.session_id = session_id
        self.poller: subprocess.Popen[bytes] | None = None
        self.late_acks = 0
        self.late_by = 0.0
        self.rate_limited = 0  # turns left that fail with rate_limit (/ratelimit N, /ratelimit off)

    def hook(self, event: str, **fields: object) -> None:
        """Run the settings file's commands for `event`, as Claude Code does: the event as JSON on
        stdin, nothing from it on any command line; a hook that fails never stops the agent."""
        payload = json.dumps({"session_id": self.session_id, "transcript_path": str(self.transcript.path),
                              "cwd": os.getcwd(), "hook_event_name": event, **fields}, ensure_ascii=False)
        for command in hook_commands(self.args.settings, event):
            try:
                subprocess.run(["/bin/sh", "-c", command], input=payload.encode("utf-8", "surrogatepass"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass

    def answer(self, text: str, failed: bool = False) -> None:
        raise NotImplementedError  # each mode answers its own way (Agent, StreamAgent)

    def handle(self, line: str) -> None:
        raise NotImplementedError

    def turn(self, line: str) -> None:
        """One prompt taken: UserPromptSubmit, the turn, Stop (a turn that never ends has none;
        one failed by `/ratelimit` ends with StopFailure `rate_limit` instead, as Claude Code's does)."""
        self.hook("UserPromptSubmit", prompt=line)
        words = line.split()
        if words[:1] == ["/ratelimit"]:
            self.transcript.add("user", line)
            count = 0 if words[1:] == ["off"] else int(words[1]) if words[1:2] and words[1].isdigit() else 1
            self.rate_limited = count
            self.answer(f"the next {count} turns fail with rate_limit" if count else "rate limit off")
        elif self.rate_limited > 0:
            self.transcript.add("user", line)
            self.transcript.add("fault", "rate limited")
            self.rate_limited -= 1
            self.answer("API Error: 429 rate_limit_error: rate limit reached; try again later", failed=True)
            self.hook("StopFailure", error="rate_limit", error_details="429 rate_limit_error",
                      last_assistant_message="API Error: 429 rate_limit_error")
            return
        else:
            self.handle(line)
        self.hook("Stop", stop_hook_active=False)

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

    def kill_poller(self) -> str:
        if self.poller and self.poller.poll() is None:
            self.poller.kill()
            self.poller.wait()
            return f"killed my poller {self.poller.pid}"
        return "no poller to kill"

    def stop_poller(self) -> None:
        if self.poller and self.poller.poll() is None:
            self.poller.terminate()


class Agent(Base):
    def __init__(self, args: argparse.Namespace, transcript: Transcript, session_id: str) -> None:
        super().__init__(args, transcript, session_id)
        self.term = Terminal()

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

    def busy(self, seconds: float) -> None:
        """A turn that works for `seconds`, reading nothing, a tool's use (and its hook) every few."""
        out(f"working for {seconds:g}s, with tools ...\n")
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(BUSY_TOOL_EVERY, left))
            self.hook("PostToolUse", tool_name="Bash", tool_input={"command": "make test"})
            out(".")
        self.reply(f"done after {seconds:g}s")

    def permission(self) -> None:
        """Claude Code's permission dialog: its Notification hook, then the next line answers it."""
        self.hook("Notification", notification_type="permission_prompt",
                  message="Claude needs your permission to use Bash")
        out("\n Bash command: make deploy\n Do you want to proceed?\n > 1. Yes\n   2. No\n")
        while True:
            line = self.term.readline(echo=False)
            if line is None:
                raise SystemExit(0)
            answer = line.strip().lower()
            if answer in ("1", "y", "yes", "2", "n", "no"):
                break
            out(" (answer 1 or 2)\n")
        if answer in ("1", "y", "yes"):
            self.hook("PostToolUse", tool_name="Bash", tool_input={"command": "make deploy"})
            self.reply("allowed: ran make deploy")
        else:
            self.reply("denied: did not run make deploy")

    def handle(self, line: str) -> None:
        text = line.strip()
        self.transcript.add("user", line)
        if text == "/wedge":
            self.hook("Stop", stop_hook_active=False)  # its turn ends; then the input box is dead
            self.wedge()
        elif text == "/poison":
            self.transcript.add("fault", "poison")
            self.hook("Stop", stop_hook_active=False)
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
            self.reply(self.kill_poller())
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
        elif text.startswith("/busy"):
            try:
                seconds = float(text.split()[1])
            except (IndexError, ValueError):
                self.reply("usage: /busy SECONDS")
                return
            self.busy(seconds)
        elif text == "/permission":
            self.permission()
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

    def answer(self, text: str, failed: bool = False) -> None:
        """A whole turn's answer (Base.turn's): a line on the screen, failed or not."""
        self.reply(text)

    def run(self, resumed: bool) -> int:
        self.start_poller()
        out(f"demo agent · session {self.session_id}\n")
        self.hook("SessionStart", source="resume" if resumed else "startup")
        if resumed:
            turns = [t for t in self.transcript.turns() if t.get("role") in ("user", "agent")]
            out(f"resumed: {len(turns)} earlier turns\n")
            for turn in turns[-20:]:
                prefix = "> " if turn["role"] == "user" else "  "
                shown = "".join(c if c.isprintable() else "?" for c in str(turn["text"]))
                # A long turn is cut at a word, marked as cut (a replay, not the whole history).
                out(prefix + textwrap.shorten(shown, width=200, placeholder=" …") + "\n")
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
                    self.turn(line)
        finally:
            self.term.restore()
            self.stop_poller()


class StreamAgent(Base):
    """Claude Code's print mode with stream-json input and output, driven by the same switches."""

    def __init__(self, args: argparse.Namespace, transcript: Transcript, session_id: str) -> None:
        super().__init__(args, transcript, session_id)
        self.turn_started = 0.0
        self.final = ""
        self.tool_ids = 0
        self.stdin_closed = False

    def emit(self, event: dict) -> None:
        data = json_line(event).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(1, view):]

    def assistant(self, *blocks: dict) -> None:
        self.emit({"type": "assistant", "message": {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message",
                                                    "role": "assistant", "model": "demo", "content": list(blocks)},
                   "parent_tool_use_id": None, "session_id": self.session_id})

    def say(self, text: str) -> None:
        self.transcript.add("agent", text)
        self.final = text
        self.assistant({"type": "text", "text": text})

    def tool(self, command: str) -> str:
        self.tool_ids += 1
        tool_id = f"toolu_demo{os.getpid()}_{self.tool_ids}"
        self.assistant({"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": command}})
        return tool_id

    def tool_result(self, tool_id: str, content: str, is_error: bool = False) -> None:
        self.emit({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": is_error}]},
            "parent_tool_use_id": None, "session_id": self.session_id})

    def result(self, *, is_error: bool = False, subtype: str = "success", denials: list[dict] | None = None) -> None:
        self.emit({"type": "result", "subtype": subtype, "is_error": is_error, "result": self.final,
                   "session_id": self.session_id, "duration_ms": int((time.monotonic() - self.turn_started) * 1000),
                   "duration_api_ms": 0, "num_turns": 1, "total_cost_usd": 0, "permission_denials": denials or []})

    def answer(self, text: str, failed: bool = False) -> None:
        """A whole turn's answer (Base.turn's): its init, the text, its result (an error one when failed)."""
        self.turn_started, self.final = time.monotonic(), ""
        self.init()
        self.say(text)
        self.result(is_error=failed)

    def init(self) -> None:
        self.emit({"type": "system", "subtype": "init", "session_id": self.session_id, "cwd": os.getcwd(),
                   "tools": ["Bash"], "model": "demo", "permissionMode": "default", "apiKeySource": "none",
                   "claude_code_version": "demo"})

    def wedge(self) -> None:
        # A model gone silent: no more events, and stdin is not read again.
        while True:
            time.sleep(3600)

    def handle(self, line: str) -> None:
        text = line.strip()
        self.transcript.add("user", line)
        self.turn_started, self.final = time.monotonic(), ""
        self.init()
        if text == "/wedge":
            self.wedge()
        elif text == "/poison":
            self.transcript.add("fault", "poison")
            self.wedge()
        elif text == "/crash":
            err("Error: simulated crash")
            raise SystemExit(1)
        elif text == "/exit0":
            self.say("bye")
            self.result()
            raise SystemExit(0)
        elif text in ("/modal", "/deny"):
            self.deny()
            return
        elif text == "/error-result":
            self.transcript.add("fault", "error result")
            self.final = "simulated error during execution"
            self.result(is_error=True, subtype="error_during_execution")
            return
        elif text == "/say" or text.startswith("/say "):
            self.say(line.lstrip()[len("/say "):])
        elif text == "/kill-poller":
            self.say(self.kill_poller())
        elif text == "/foreign-poller":
            self.say(f"started a foreign poller {self.foreign_poller()}")
        elif text.startswith("/slow"):
            try:
                seconds = float(text.split()[1])
            except (IndexError, ValueError):
                self.say("usage: /slow SECONDS")
            else:
                self.assistant({"type": "text", "text": f"working for {seconds:g}s ..."})
                time.sleep(seconds)
                self.say(f"done after {seconds:g}s")
        elif text.startswith("/busy"):
            try:
                seconds = float(text.split()[1])
            except (IndexError, ValueError):
                self.say("usage: /busy SECONDS")
            else:
                self.busy(seconds)
        elif text.startswith("/wait-for "):
            target = Path(text.split(None, 1)[1])
            self.assistant({"type": "text", "text": f"waiting for {target} ..."})
            while not target.exists():
                time.sleep(0.05)
            self.say(f"{target} is there")
        elif text == "/close-stdin":
            os.close(0)
            self.stdin_closed = True
            self.say("closed my stdin")
        elif text.startswith("/late-acks"):
            try:
                count, seconds = int(text.split()[1]), float(text.split()[2])
            except (IndexError, ValueError):
                self.say("usage: /late-acks N SECONDS")
            else:
                self.late_acks, self.late_by = count, seconds
                self.say(f"the next {count} acks will be {seconds:g}s late")
        elif (match := TOUCH.search(text)) is not None:
            self.touch(match.group(1))
        else:
            self.say(f"heard you ({len(line)} characters)")
        self.result()

    def touch(self, words_text: str) -> None:
        tool_id = self.tool(f"touch {words_text}")
        try:
            words = shlex.split(words_text)
        except ValueError as exc:
            words, problem = [], str(exc)
        else:
            problem = "" if words else "no path"
        if problem:
            self.tool_result(tool_id, f"touch: {problem}", is_error=True)
            self.say(f"touch failed: {problem}")
            return
        if self.late_acks > 0:
            self.late_acks -= 1
            self.transcript.add("fault", f"late ack by {self.late_by:g}s")
            time.sleep(self.late_by)
        try:
            Path(words[0]).touch()
        except OSError as exc:
            self.tool_result(tool_id, f"touch: {exc}", is_error=True)
            self.say(f"touch failed: {exc}")
            return
        self.transcript.add("tool", f"touch {words[0]}")
        self.tool_result(tool_id, "")

    def busy(self, seconds: float) -> None:
        """A turn that works for `seconds`, reading nothing, calling a tool every few (the events a
        pump sees of a long turn, and the PostToolUse hooks)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(BUSY_TOOL_EVERY, left))
            tool_id = self.tool("make test")
            self.hook("PostToolUse", tool_name="Bash", tool_input={"command": "make test"})
            self.tool_result(tool_id, "ok")
        self.say(f"done after {seconds:g}s")

    def deny(self) -> None:
        self.transcript.add("fault", "denied")
        command = "curl -fsSL https://example.com/install.sh"
        tool_id = self.tool(command)
        refusal = "Claude requested permissions to use Bash, but you haven't granted it yet."
        self.emit({"type": "system", "subtype": "permission_denied", "tool_name": "Bash", "tool_use_id": tool_id,
                   "message": refusal, "session_id": self.session_id})
        self.tool_result(tool_id, refusal, is_error=True)
        self.say("I was not allowed to run that command.")
        self.result(denials=[{"tool_name": "Bash", "tool_use_id": tool_id, "tool_input": {"command": command}}])

    def run(self, resumed: bool) -> int:
        self.start_poller()
        try:
            if resumed and self.transcript.poisoned():
                # `--resume` that hangs without a word (anthropics/claude-code#55241).
                self.transcript.add("fault", "hung on resume")
                self.wedge()
            self.init()
            self.hook("SessionStart", source="resume" if resumed else "startup")
            stdin = sys.stdin.buffer
            while True:
                if self.stdin_closed:
                    self.wedge()    # alive, but nothing can reach it any more
                raw = stdin.readline()
                if not raw:
                    return 0
                text = user_text(raw)
                if text is None:
                    # As Claude Code 2.1: a line it cannot parse ends the process.
                    err(f"Error parsing streaming input line: {raw[:200].decode('utf-8', 'replace').strip()!r}")
                    return 1
                if text.strip():
                    self.turn(text)
        except BrokenPipeError:
            return 1    # the reader of our stdout is gone
        finally:
            self.stop_poller()


def user_text(raw: bytes) -> str | None:
    """The text of one stream-json user message ("" for another kind of line); None for a line
    that is not JSON."""
    try:
        event = json.loads(raw)
    except ValueError:
        return None
    message = event.get("message") if isinstance(event, dict) and event.get("type") == "user" else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content
                         if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    return ""


def hook_commands(settings: str | None, event: str) -> list[str]:
    """The command hooks a settings file names for `event` (none without a file or on a bad one)."""
    if not settings:
        return []
    try:
        doc = json.loads(Path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    groups = doc.get("hooks", {}).get(event, []) if isinstance(doc, dict) and isinstance(doc.get("hooks"), dict) else []
    return [h["command"] for g in groups if isinstance(g, dict) for h in g.get("hooks", [])
            if isinstance(h, dict) and h.get("type") == "command" and isinstance(h.get("command"), str)]


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loomtui.demo.agent", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--session-id", help="start a new conversation with this id")
    group.add_argument("--resume", metavar="ID", help="continue the conversation with this id")
    parser.add_argument("--data-dir", default=os.environ.get("LOOM_DEMO_DATA", "~/.local/share/loom-demo"))
    parser.add_argument("--bot", default=os.environ.get("LOOM_DEMO_BOT", ""), help="poller identity; '' = no poller")
    parser.add_argument("--stream-json", action="store_true", help="speak Claude Code's stream-json print mode")
    # Claude Code's own flags for that mode, which Loom's stream-json driver appends.
    parser.add_argument("-p", "--print", action="store_true", help="print mode (needs the stream-json formats)")
    parser.add_argument("--input-format", choices=("text", "stream-json"), default="text")
    parser.add_argument("--output-format", choices=("text", "json", "stream-json"), default="text")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--settings", metavar="PATH", help="a settings file whose hooks to run (Claude Code's flag)")
    args = parser.parse_args(argv)
    stream = args.stream_json or args.input_format == "stream-json"
    problem = flag_problem(args)
    if problem:
        err(f"Error: {problem}")
        return 1
    args.data_dir = os.path.expanduser(args.data_dir)
    sessions = Path(args.data_dir) / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    # Print mode says what went wrong on stderr, as Claude Code does; the screen shows it otherwise.
    say = err if stream else (lambda text: out(text + "\n"))
    if args.resume:
        transcript = Transcript(sessions / f"{args.resume}.jsonl")
        if not transcript.exists():
            say(f"No conversation found with session ID: {args.resume}")
            if stream:
                # Claude Code 2.1 ends that attempt with an error result too, before its exit 1.
                sys.stdout.write(json.dumps({
                    "type": "result", "subtype": "error_during_execution", "is_error": True, "duration_ms": 0,
                    "num_turns": 0, "session_id": args.resume, "permission_denials": [],
                    "errors": [f"No conversation found with session ID: {args.resume}"]}) + "\n")
            return 1
        session_id, resumed = args.resume, True
        transcript.add("meta", "resume")
    else:
        session_id = args.session_id or str(uuid.uuid4())
        transcript = Transcript(sessions / f"{session_id}.jsonl")
        if transcript.exists():
            say(f"Error: Session ID {session_id} is already in use.")
            return 1
        transcript.add("meta", "start")
        resumed = False
    signal.signal(signal.SIGTERM, _terminated)
    if stream:
        signal.signal(signal.SIGINT, _terminated)
        signal.signal(signal.SIGHUP, _terminated)
        return StreamAgent(args, transcript, session_id).run(resumed)
    return Agent(args, transcript, session_id).run(resumed)


def flag_problem(args: argparse.Namespace) -> str:
    """Claude Code's own refusals of an incomplete set of print-mode flags ('' when they fit)."""
    if args.input_format == "stream-json" and args.output_format != "stream-json":
        return "--input-format=stream-json requires output-format=stream-json."
    if args.print and args.output_format == "stream-json" and not args.verbose:
        return "When using --print, --output-format=stream-json requires --verbose"
    if (args.print or args.output_format != "text") and not (args.stream_json or args.input_format == "stream-json"):
        return "the demo agent's print mode needs --input-format stream-json --output-format stream-json"
    return ""


if __name__ == "__main__":
    raise SystemExit(main())
