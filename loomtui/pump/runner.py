"""`loom pump`: the process in the agent's pane that owns a stream-json CLI's stdin and stdout.

One main thread applies `pump.rules` to events in the order they happen; small threads only
read (the CLI's stdout and stderr, the socket), wait (for the CLI's exit) or write (the CLI's
stdin, so a CLI that stops reading cannot stall the pump's answers or its signals). Every event
goes to the transcript, pump.json is replaced on every change, and the pane shows it all as
safe text. This process imports no store, no config models and no actions: it must start fast
and outlive the supervisor's restarts (docs/STREAM.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, cast

from loomtui.appends import write_all
from loomtui.errors import LoomError
from loomtui.pump import render, rules, transcript
from loomtui.pump.client import MAX_REQUEST, queue_dir, socket_path, status_path, unix_address

STOP_GRACE = 5.0        # after forwarding a signal, how long the CLI has to exit before SIGKILL
DRAIN = rules.DRAIN     # after the CLI's exit, how long its last output may take to arrive
LOCK_WAIT = 15.0        # a previous pump of this state dir may still be stopping its CLI
SEND_WAIT = 30.0        # how long a send may wait for its write to the CLI
READ_TIMEOUT = 5.0      # a client has this long to send its request line
ORIGIN = re.compile(r"[a-z][a-z0-9_-]{0,31}")
STALE_ORIGIN = "canary"  # a queued line of this origin is not carried over to the next launch
QUEUE_FILE = re.compile(r"(\d{1,18})\.json")
SEQ_NAMED = re.compile(r"(\d{1,18})\.json\b")  # a queue file's seq, set aside (.undelivered, .bad) too
MAX_UNREAD = rules.MAX_UNREAD
SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
# Lines for the pane waiting to be shown: a pane that stops taking them (Ctrl-S, a tmux that stops
# reading) fills this, never the main loop; past it lines are counted and said to be left out.
PANE_BACKLOG = 2000
PANE_DRAIN = 1.0        # at the end, how long the last lines may take to reach the pane
# How far back the transcript is read for the last seq, widening while none is found (a last turn
# of megabytes of tool results leaves no seq in the last MiB).
SEQ_WINDOWS = (1 << 20, 16 << 20, 256 << 20)
# An event nested deeper than this is kept as the text it came as (`raw`), beside its top-level
# fields: a record that deep could be parsed by no reader whose own stack is deep (Python's parser
# recurses, up to about a thousand levels less the caller's frames), and one past that by nobody.
# Claude Code's events nest about ten deep; a tool's result may carry any JSON.
MAX_DEPTH = 400


@dataclass
class Message:
    seq: int
    text: str
    origin: str
    ref: str
    persisted: bool = False


@dataclass
class Pending:
    """A client's send, waiting in its connection's thread for the main loop's answer. The first
    answer is the one its sender hears: the main loop's, or its own when SEND_WAIT runs out
    (`give_up`); the main loop takes and writes it under `lock`, so the two never cross."""
    text: str
    origin: str
    ref: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: dict[str, Any] | None = None
    seq: int | None = None  # once the main loop took it, kept it and is writing it
    lock: threading.RLock = field(default_factory=threading.RLock)

    def reply(self, answer: dict[str, Any]) -> bool:
        """Answer the sender, unless it was answered already; whether this answer was the one."""
        with self.lock:
            if self.answer is not None:
                return False
            self.answer = answer
            self.done.set()
            return True

    def give_up(self) -> dict[str, Any]:
        """SEND_WAIT ran out. A line the main loop took is being written and is kept (its CLI reads
        it, or the next launch): its sender hears `queued`, not a failure that it would send again
        after. One the main loop has not taken is never taken now."""
        with self.lock:
            if self.seq is not None:
                self.reply({"ok": True, "state": "queued", "seq": self.seq, "position": 0})
            else:
                self.reply({"ok": False, "error": f"the pump could not take the message within {SEND_WAIT:g}s"})
            assert self.answer is not None
            return self.answer


def user_line(text: str) -> bytes:
    """One user message as Claude Code's stream-json input takes it: one JSON line, ASCII only so
    no byte of the text can end the line early."""
    message = {"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": text}]}}
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def exit_code(returncode: int) -> int:
    """The shell's convention: killed by signal N -> 128+N."""
    return returncode if returncode >= 0 else 128 - returncode


class Pump:
    def __init__(self, state_dir: Path, argv: Sequence[str], show: Callable[[str], None] | None = None) -> None:
        if not argv:
            raise LoomError("loom pump: no command to run (loom pump [--state-dir DIR] -- CMD ARGS...)", 2)
        self.state_dir = Path(state_dir)
        self.argv = list(argv)
        self.show_line = show or _show
        self.pane: queue.Queue[str | None] = queue.Queue(PANE_BACKLOG)
        self.pane_thread: threading.Thread | None = None
        self.left_out = 0       # lines the pane had no room for (said where they were, once it has)
        # SimpleQueue: its put() may be called from a signal handler.
        self.events: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.writes: queue.Queue[tuple[int, bytes] | None] = queue.Queue()
        self.messages: dict[int, Message] = {}
        # Kept messages written to the CLI that it has not yet shown it read (_shows_read): their
        # queue files stay until it does, so a CLI that dies first (a resume that fails without
        # reading its input) leaves them for the next pump, not lost.
        self.unread: list[int] = []
        self.waiting: dict[int, Pending] = {}
        self.state = rules.State()
        self.started = time.time()
        self.proc: subprocess.Popen[bytes] | None = None
        self.listener: socket.socket | None = None
        self.snapshot: dict[str, Any] = {}
        self.written_status: dict[str, Any] | None = None
        self.stop_deadline: float | None = None
        self.stop_signal: int | None = None
        self.readers: list[threading.Thread] = []
        self.serving: set[threading.Thread] = set()
        self.log: transcript.Writer | None = None
        self._lock_fd: int | None = None

    # The run.

    def run(self) -> int:
        self._prepare()
        assert self.log is not None
        try:
            pending = self._load_queue()
            self.state = rules.start(tuple(pending), self._next_seq(pending))
            self._listen()
            for signum in SIGNALS:
                signal.signal(signum, self._on_signal)
            code = self._spawn()
            if code is not None:
                return code
            return self._loop()
        finally:
            self._close_listener()
            self._end_cli()
            self.log.close()
            self._close_pane()

    def _prepare(self) -> None:
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            queue_dir(self.state_dir).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise LoomError(f"state dir {self.state_dir} is not usable: {exc.strerror or exc}") from None
        self._lock_fd = os.open(queue_dir(self.state_dir), os.O_RDONLY | os.O_DIRECTORY)
        deadline = time.monotonic() + LOCK_WAIT
        waiting = False
        while True:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Two pumps on one queue would deliver its messages twice.
                if not waiting:
                    self._show("— another loom pump still runs on this state dir: waiting for it to end")
                    waiting = True
                if time.monotonic() > deadline:
                    raise LoomError(f"another loom pump still runs on {self.state_dir} "
                                    f"(it holds {queue_dir(self.state_dir)})") from None
                time.sleep(0.1)
        self.log = transcript.Writer(transcript.path_in(self.state_dir))

    def _spawn(self) -> int | None:
        # The lines an earlier pump kept, which this one writes again, or leaves kept for the next
        # when its CLI cannot start: said on `started` or `cli_exit` (the bridge says they go again).
        kept: dict[str, Any] = {"pending": list(self.state.queue)} if self.state.queue else {}
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, bufsize=0)
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            self._record(transcript.PUMP, what="spawn_failed", argv=self.argv, error=exc.strerror or str(exc))
            self.state, _ = rules.step(self.state, rules.Exited(time.time(), code))
            self._record(transcript.PUMP, what="cli_exit", status=code, signal=None, exit=code, **kept)
            self._publish()
            return code
        self._record(transcript.PUMP, what="started", pid=os.getpid(), cli_pid=self.proc.pid, argv=self.argv, **kept)
        if self.state.queue:
            self._record(transcript.PUMP, what="pending", seqs=list(self.state.queue))
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.readers = [_thread(self._read, "out", self.proc.stdout), _thread(self._read, "err", self.proc.stderr)]
        _thread(self._wait_exit)
        _thread(self._write_loop)
        self._apply(rules.Ready(time.time()))
        self._publish()
        _thread(self._accept)       # only now: a send must find the CLI ready, not a queue for no turn
        return None

    def _loop(self) -> int:
        while True:
            try:
                item = self.events.get(timeout=0.25)
            except queue.Empty:
                self._check_stop()
                continue
            if item[0] == "exit":
                return self._finish(item[1])
            self._handle(item)
            self._check_stop()

    def _handle(self, item: tuple[Any, ...]) -> None:
        kind = item[0]
        if kind == "out":
            self._on_output(item[1])
        elif kind == "err":
            line = _decode(item[1])
            self._record(transcript.ERR, line=line)
        elif kind == "send":
            self._on_send(item[1])
        elif kind == "written":
            self._on_written(item[1], item[2])
        elif kind == "signal":
            self._on_stop(item[1])
        self._publish()

    # Events.

    def _on_output(self, raw: bytes) -> None:
        line = _decode(raw)
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes: raw
            event = None
        if isinstance(event, dict) and self.unread and _shows_read(event):
            self._read_through()  # before the rules: a result writes the next line, not read yet
        if isinstance(event, dict):
            # Claude Code repeats `init` at every turn: the pane shows the session when it changes.
            same = event.get("type") == "system" and event.get("subtype") == "init" \
                and event.get("session_id") == self.state.session_id
            # Lines still unread here are not this event's (an error result the CLI printed without
            # reading them: a resume that found no session): said so, for the bridge, which would
            # answer the operator's message with the error, and then again once delivered.
            unread: dict[str, Any] = {"unread": list(self.unread)} if self.unread else {}
            # A result names the line whose turn it ends (one line a turn): the bridge answers that
            # line, not the oldest one waiting, when an earlier result never reached the transcript.
            # A turn the CLI took by itself says so at its init and its result.
            unread.update(rules.result_turn(self.state, event))
            if _deeper(event, MAX_DEPTH):
                self._record(transcript.OUT, show=not same, event=_shallow(event), raw=line, **unread)
            else:
                self._record(transcript.OUT, show=not same, event=event, **unread)
            self._apply(rules.Output(time.time(), event))
        elif line.strip():
            self._record(transcript.OUT, raw=line)

    def _read_through(self) -> None:
        """The CLI read the lines written so far (in order, from one pipe): their files go."""
        for seq in self.unread:
            try:
                os.unlink(self._queue_file(seq))
            except FileNotFoundError:
                pass
        self.unread = []

    def _on_send(self, pending: Pending) -> None:
        with pending.lock:
            if pending.answer is None:  # else its sender stopped waiting (SEND_WAIT): never taken
                self._take(pending)

    def _take(self, pending: Pending) -> None:
        before = self.state
        self.state, actions = rules.step(self.state, rules.Send(time.time()))
        for action in actions:
            if isinstance(action, rules.Refused):
                pending.reply({"ok": False, "error": action.reason, "code": action.code})
            elif isinstance(action, rules.Queued):
                message = Message(action.seq, pending.text, pending.origin, pending.ref)
                try:
                    self._persist(message)
                except OSError as exc:
                    self.state = before     # not kept, so not accepted: the sender is told
                    pending.reply({"ok": False, "error": f"could not keep the message: {exc.strerror or exc}"})
                    return
                self.messages[action.seq] = message
                self._record(transcript.PUMP, what="queued", seq=action.seq, position=action.position,
                             origin=pending.origin, ref=pending.ref)
                self._publish()     # pump.json says so before the sender hears it: one story, in order
                pending.reply({"ok": True, "state": "queued", "seq": action.seq, "position": action.position})
            elif isinstance(action, rules.Write):
                message = Message(action.seq, pending.text, pending.origin, pending.ref)
                # Kept as a queued one is, until the CLI shows it read the line: a CLI that is
                # wedged, or dies, with the line in its pipe loses it otherwise, and its sender
                # was told "delivered" (the next launch delivers it). Not kept (a full disk), it
                # is written all the same: the sender loses nothing it had before.
                try:
                    self._persist(message)
                except OSError as exc:
                    self._record(transcript.PUMP, what="not_kept", seq=action.seq, error=exc.strerror or str(exc))
                self.messages[action.seq] = message
                self.waiting[action.seq] = pending
                if message.persisted:  # its sender may hear `queued` if the write outlasts its wait
                    pending.seq = action.seq
                self._write(action.seq)

    def _on_written(self, seq: int, error: str | None) -> None:
        self.messages.pop(seq, None)
        pending = self.waiting.pop(seq, None)
        if pending is None:
            self._written(seq, error, told=False)
            return
        with pending.lock:  # not answered meanwhile by its own SEND_WAIT
            self._written(seq, error, told=pending.answer is None)
            if error is not None:
                pending.reply({"ok": False, "error": f"could not write to the agent's CLI: {error}",
                               "code": rules.INPUT_CLOSED_CODE})
            else:
                pending.reply({"ok": True, "state": "delivered", "seq": seq})

    def _written(self, seq: int, error: str | None, told: bool) -> None:
        """Line `seq` went to the CLI's stdin, or failed to (`error`); `told`: a sender waits for
        this answer (else it was queued, or it heard `queued` when its wait ran out)."""
        if error is not None:
            self.unread = [s for s in self.unread if s != seq]
            if told:
                # Its sender is told the write failed (it may send again): not delivered later too.
                self._queue_file(seq).unlink(missing_ok=True)
            # An accepted one's file stays: never delivered, the next launch delivers it (`kept`:
            # the bridge says it goes again, not that it was lost).
            stays: dict[str, Any] = {"kept": True} if not told and self._queue_file(seq).exists() else {}
            self._record(transcript.PUMP, what="write_failed", seq=seq, error=error, **stays)
            self._apply(rules.InputClosed(time.time(), seq))
            return
        # A kept message's file stays until the CLI shows it read the line (_on_output): in the
        # pipe is not read (a CLI that fails its resume exits without reading a byte of it).
        if told:
            self._publish()

    def _on_stop(self, signum: int) -> None:
        self._record(transcript.PUMP, what="signal", signal=signum)
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.stop_deadline is not None:
            self.proc.kill()    # asked twice: no more grace
            return
        self.stop_signal = signum
        self.stop_deadline = time.monotonic() + STOP_GRACE
        try:
            os.kill(self.proc.pid, signum)
        except ProcessLookupError:
            pass

    def _check_stop(self) -> None:
        if self.stop_deadline is not None and time.monotonic() > self.stop_deadline and self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.stop_deadline = float("inf")

    def _finish(self, returncode: int) -> int:
        """The CLI has exited: take in what it wrote last, record the exit, answer who still waits."""
        deadline = time.monotonic() + DRAIN
        for reader in self.readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        later = []
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                break
            if item[0] in ("out", "err"):
                self._handle(item)
            else:
                later.append(item)
        code = exit_code(returncode)
        status, signum = (returncode, None) if returncode >= 0 else (None, -returncode)
        self.state, _ = rules.step(self.state, rules.Exited(time.time(), status, signum))
        for item in later:
            self._handle(item)
        with contextlib.ExitStack() as held:
            told = self._exit_told(held)
            try:
                self._record_exit(status, signum, code)
            finally:
                for pending in told:
                    pending.reply(_exited())  # after pump.json says so: one story, in order
        self._close_listener()
        # Sends that reached the socket after this are refused too, by a closed socket.
        while True:
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                break
            if item[0] == "send":
                item[1].reply(_exited())
        deadline = time.monotonic() + 2.0
        for thread in list(self.serving):
            thread.join(max(0.0, deadline - time.monotonic()))    # their answers are on their way
        return code

    def _exit_told(self, held: contextlib.ExitStack) -> list[Pending]:
        """The senders still waiting for a write, held (their locks, in `held`) until they are told
        the CLI exited: their lines dropped, not delivered later too (they may send again). One whose
        wait ran out heard `queued`: its line stays kept."""
        told = []
        for seq, pending in self.waiting.items():
            held.enter_context(pending.lock)
            if pending.answer is None:
                told.append(pending)
                self.unread = [s for s in self.unread if s != seq]
                self._queue_file(seq).unlink(missing_ok=True)
        return told

    def _record_exit(self, status: int | None, signum: int | None, code: int) -> None:
        kept = [seq for seq in self.unread if self._queue_file(seq).exists()]
        if kept:
            # Counted first: those this exit brings to MAX_UNREAD the next pump sets aside, not
            # writes again (`set_aside`: the bridge says they were not delivered).
            last = [seq for seq in kept if self._count_unread(seq) >= MAX_UNREAD]
            aside: dict[str, Any] = {"set_aside": last} if last else {}
            self._record(transcript.PUMP, what="unread", seqs=kept, **aside)
        self._record(transcript.PUMP, what="cli_exit", status=status, signal=signum, exit=code)
        self._publish()

    def _apply(self, event: rules.Event) -> None:
        self.state, actions = rules.step(self.state, event)
        for action in actions:
            if isinstance(action, rules.Write):
                self._write(action.seq)

    def _write(self, seq: int) -> None:
        message = self.messages[seq]
        # Recorded before the bytes go: the CLI's answer must never come before its question
        # in the transcript. A failed write follows as a `write_failed` record of the same seq.
        self._record(transcript.IN, seq=seq, origin=message.origin, ref=message.ref, text=message.text)
        if message.persisted:
            # From now: what the CLI prints next follows this write (one line per turn, written
            # between turns), even when it comes before the write thread says the bytes went.
            self.unread.append(seq)
        self.writes.put((seq, user_line(message.text)))

    # Files.

    def _record(self, dir: str, show: bool = True, **data: Any) -> None:
        assert self.log is not None
        try:
            self.log.append(dir, **data)
        except OSError as exc:
            self._show(f"— could not append to the transcript: {exc.strerror or exc}")
        for line in render.lines(dir, data) if show else ():
            self._show(line)

    def _show(self, line: str) -> None:
        """Hand a line to the pane's thread: the main loop never waits for the pane (one stopped
        with Ctrl-S blocks every write to it, and the agent would be unreachable meanwhile)."""
        if self.pane_thread is None:
            self.pane_thread = _thread(self._pane_loop)
        try:
            if self.left_out:   # where they were left out, once the pane takes lines again
                self.pane.put_nowait(f"— {self.left_out} lines not shown: the pane took none for a while "
                                     f"(the transcript has them all)")
                self.left_out = 0
            self.pane.put_nowait(line)
        except queue.Full:
            self.left_out += 1

    def _pane_loop(self) -> None:
        while (line := self.pane.get()) is not None:
            try:
                self.show_line(line)
            except (OSError, ValueError):
                pass    # the pane is gone (SIGHUP follows): the CLI must not die of it

    def _close_pane(self) -> None:
        """The last lines to the pane, for PANE_DRAIN at most (a stopped pane keeps the rest)."""
        if self.pane_thread is None:
            return
        try:
            self.pane.put(None, timeout=PANE_DRAIN)
        except queue.Full:
            return
        self.pane_thread.join(PANE_DRAIN)

    def _end_cli(self) -> None:
        """A pump that ends leaves no CLI behind (an error of its own, whatever it was: the CLI
        would run on unseen, its input closed, beside the agent the watchdog launches next)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.kill()
        try:
            self.proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            pass

    def _publish(self) -> None:
        """pump.json, replaced whole, when it changed; the socket's `status` answers the same."""
        status = {"pid": os.getpid(), "cli_pid": self.proc.pid if self.proc else None, "started": self.started,
                  "argv0": os.path.basename(self.argv[0]), **rules.status(self.state)}
        self.snapshot = status
        if status == self.written_status:
            return
        try:
            _replace(status_path(self.state_dir), json.dumps(status, indent=1).encode("ascii"))
            self.written_status = status
        except OSError as exc:
            self._show(f"— could not write pump.json: {exc.strerror or exc}")

    def _queue_file(self, seq: int) -> Path:
        return queue_dir(self.state_dir) / f"{seq}.json"

    def _persist(self, message: Message) -> None:
        data = {"seq": message.seq, "ts": time.time(), "origin": message.origin, "ref": message.ref,
                "text": message.text}
        # ASCII: a sender's text may hold a lone surrogate (half an emoji), which UTF-8 cannot encode.
        _replace(self._queue_file(message.seq), json.dumps(data).encode("ascii"), sync=True)
        message.persisted = True

    def _count_unread(self, seq: int) -> int:
        """One more CLI exited before showing it read kept message `seq`: counted in its file. The
        count now (0 when the file could not be read or written: delivered again, counted or not)."""
        path = self._queue_file(seq)
        try:
            data = json.loads(path.read_bytes())
            data["unread"] = int(data.get("unread", 0)) + 1
            _replace(path, json.dumps(data).encode("ascii"), sync=True)
            return int(data["unread"])
        except (OSError, ValueError, TypeError):
            return 0

    def _load_queue(self) -> list[int]:
        found = []
        folder = queue_dir(self.state_dir)
        for name in sorted(os.listdir(folder)):
            path = folder / name
            match = QUEUE_FILE.fullmatch(name)
            if match is None:
                if name.startswith(".") and name.endswith(".tmp"):
                    path.unlink(missing_ok=True)    # cut short before its `queued` answer: never accepted
                continue
            seq = int(match.group(1))
            try:
                data = json.loads(path.read_bytes())
                text, origin, ref = data["text"], data["origin"], data.get("ref", "")
                if not (isinstance(text, str) and isinstance(origin, str) and isinstance(ref, str)):
                    raise ValueError("not a message")
            except (OSError, ValueError, KeyError, TypeError):
                self._record(transcript.PUMP, what="bad_queue_file", name=name)
                try:
                    path.rename(_free(path.with_name(name + ".bad")))
                except OSError:
                    pass
                continue
            unread = data.get("unread", 0)
            if isinstance(unread, int) and unread >= MAX_UNREAD:
                aside = _free(path.with_name(name + rules.SET_ASIDE))
                self._record(transcript.PUMP, what="set_aside", seq=seq, unread=unread, name=aside.name,
                             origin=origin)
                try:
                    path.rename(aside)
                except OSError:
                    pass
                continue
            if origin == STALE_ORIGIN:
                # A probe belongs to the launch it was sent to, and the canary has settled it as
                # missed by now: delivered to this one it would cost a turn and leave an ack for a
                # run that is over. The canary probes this launch itself.
                self._record(transcript.PUMP, what="dropped_probe", seq=seq)
                path.unlink(missing_ok=True)
                continue
            self.messages[seq] = Message(seq, text, origin, ref, persisted=True)
            found.append(seq)
        return sorted(found)

    def _next_seq(self, pending: list[int]) -> int:
        """Seqs go on from the last pump's, so one seq names one message in the whole transcript: past
        the transcript's last (read from its end: none found in a transcript deleted, or behind a
        turn of hundreds of MiB) and past every queue file's, set-aside ones too (numbered from 1
        again, the next message set aside took the place of an earlier one's file, its text lost)."""
        named = [int(m.group(1)) for n in _names(queue_dir(self.state_dir)) if (m := SEQ_NAMED.match(n))]
        return max(max(pending, default=0), max(named, default=0), last_seq(transcript.path_in(self.state_dir))) + 1

    # The socket.

    def _listen(self) -> None:
        path = socket_path(self.state_dir)
        try:
            path.unlink()       # a dead pump's; the live one would hold the queue's lock
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)   # 0600 from the start: no moment in which another user may connect
        try:
            with unix_address(path) as address:
                listener.bind(address)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        listener.listen(16)
        self.listener = listener

    def _close_listener(self) -> None:
        if self.listener is None:
            return
        try:
            self.listener.close()
        finally:
            self.listener = None
            try:
                socket_path(self.state_dir).unlink()
            except FileNotFoundError:
                pass

    def _accept(self) -> None:
        listener = self.listener
        while listener is not None:
            try:
                conn, _ = listener.accept()
            except OSError:
                return      # closed: the pump is ending
            thread = _thread(self._serve, conn)
            self.serving.add(thread)
            self.serving = {t for t in self.serving if t.is_alive()}

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(READ_TIMEOUT)
                answer = self._answer(conn)
                conn.settimeout(READ_TIMEOUT)
                conn.sendall(json.dumps(answer, ensure_ascii=True, separators=(",", ":")).encode() + b"\n")
            except OSError:
                pass

    def _answer(self, conn: socket.socket) -> dict[str, Any]:
        if not _same_user(conn):
            return {"ok": False, "error": "not the pump's user"}
        data = b""
        while b"\n" not in data and len(data) <= MAX_REQUEST:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            request = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            return {"ok": False, "error": "the request is not one line of JSON"}
        if not isinstance(request, dict):
            return {"ok": False, "error": "the request is not a JSON object"}
        if request.get("op") == "status":
            return dict(self.snapshot)
        if request.get("op") != "send":
            return {"ok": False, "error": "unknown op (send or status)"}
        text, origin, ref = request.get("text"), request.get("origin"), request.get("ref", "")
        if not isinstance(text, str) or not text.strip():
            return {"ok": False, "error": "send needs a non-empty text"}
        if not isinstance(origin, str) or not ORIGIN.fullmatch(origin):
            return {"ok": False, "error": "send needs an origin (operator, telegram, canary, sentinel)"}
        if not isinstance(ref, str) or len(ref) > 200:
            return {"ok": False, "error": "ref must be a string of at most 200 characters"}
        if self.state.cli_exit is not None:
            return _exited()
        pending = Pending(text, origin, ref)
        self.events.put(("send", pending))
        if not pending.done.wait(SEND_WAIT):
            return pending.give_up()
        assert pending.answer is not None
        return pending.answer

    # Threads.

    def _read(self, kind: str, stream: BinaryIO) -> None:
        # Buffered: the pipe is unbuffered (bufsize=0, for stdin's sake), and a raw readline reads
        # one byte per system call (a megabyte's tool result, a million of them).
        reader = io.BufferedReader(cast(io.RawIOBase, stream), 1 << 16)
        for line in iter(reader.readline, b""):
            self.events.put((kind, line))

    def _wait_exit(self) -> None:
        assert self.proc is not None
        self.events.put(("exit", self.proc.wait()))

    def _write_loop(self) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        stdin = self.proc.stdin
        while True:
            item = self.writes.get()
            if item is None:
                return
            seq, data = item
            try:
                view = memoryview(data)
                while view:
                    view = view[stdin.write(view) or 0:]
                error = None
            except OSError as exc:
                error = exc.strerror or type(exc).__name__
            self.events.put(("written", seq, error))

    def _on_signal(self, signum: int, frame: object) -> None:
        self.events.put(("signal", signum))


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _free(path: Path) -> Path:
    """`path`, or the first of `path.2`, `path.3`... that is free: a file set aside never replaces another."""
    found, n = path, 1
    while os.path.lexists(found):
        n += 1
        found = path.with_name(f"{path.name}.{n}")
    return found


def last_seq(path: Path) -> int:
    """The highest seq in the transcript's last records that carry one (0: none): read from the last
    MiB back, and further while none is found (SEQ_WINDOWS), never the whole of a huge file."""
    start = transcript.reaching_back(path, SEQ_WINDOWS, lambda record: _seq(record) is not None)
    if start is None:
        return 0
    return max((seq for record in _all_from(path, start) if (seq := _seq(record)) is not None), default=0)


def _seq(record: transcript.Record) -> int | None:
    seq = record.data.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _all_from(path: Path, offset: int) -> Iterator[transcript.Record]:
    """Every complete record from `offset` on, read a chunk at a time."""
    while True:
        read = False
        for record in transcript.read(path, offset):
            read, offset = True, record.end
            yield record
        if not read:
            return


def _shows_read(event: dict[str, Any]) -> bool:
    """Whether an event the CLI printed after a write shows it read the line: any but an error
    `result`, which Claude Code also prints without reading a byte (a resume of a session it cannot
    find), and but a `system` event other than `init`: a background task's progress and end
    (`task_updated`, `task_notification`, `background_tasks_changed`) come whenever the task does,
    between turns too, and took the files of lines the CLI had not read yet (lost if it then died).
    A turn it took opens with `system/init` (docs/STREAM.md)."""
    if event.get("type") == "system":
        return event.get("subtype") == "init"
    return not (event.get("type") == "result" and event.get("is_error") is True)


def _deeper(value: Any, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` deep (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _shallow(event: dict[str, Any]) -> dict[str, Any]:
    """An event's top-level fields that are not containers: what the transcript's readers read of
    it (its type, a result's text and flags), when the whole of it is kept as text."""
    return {k: v for k, v in event.items() if not isinstance(v, (dict, list))}


def _exited() -> dict[str, Any]:
    """The refusal of a send the CLI can no longer take: it has exited (docs/STREAM.md's code)."""
    return {"ok": False, "error": rules.EXITED, "code": rules.EXITED_CODE}


def _thread(target: Callable[..., None], *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r\n")


def _show(line: str) -> None:
    write_all(1, (line + "\n").encode("utf-8", "replace"))


def _replace(path: Path, data: bytes, sync: bool = False) -> None:
    """Write a sibling temp file (0600) and rename it over `path`: a reader sees the old or the new,
    whole. A write that falls short (a full disk) raises, and leaves `path` as it was: a queue file
    cut short was said to be kept, and the next pump set it aside as unreadable (a message lost)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _same_user(conn: socket.socket) -> bool:
    """The socket is 0600 already; on Linux the peer's uid is checked as well."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return True
    try:
        _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return False
    return uid in (os.getuid(), 0)


def main(state_dir: Path, argv: Sequence[str]) -> int:
    return Pump(state_dir, argv).run()

