"""The agent's tmux pane on Loom's private tmux server, with a timeout on every call.

A tmux server that stops answering must read as "unknown", never as "gone" (a hung server is
not a dead agent). So every command goes through `TimedServer.cmd`, with a deadline. (libtmux
is not a dependency: it runs tmux without a timeout, and importing it cost `loom status` ~60 ms.)

A look at the agent is a few tmux queries every couple of seconds; one `tmux` process per query
costs 3-5 ms (fork, exec, connect), most of a watchdog tick. A process that keeps asking (the
daemon, the console) can put its queries through one `tmux -C` control-mode client instead: a
line written to a pipe, a `%begin`/`%end` block read back, well under a millisecond. Only the
read-only queries go that way (`_CONTROL_COMMANDS`); typing, keys and every change to the pane
keep their one process per command. By default only on a tmux where connecting such a client
cannot crash the server (CONTROL_SAFE_FROM); `ControlClient` says what it must never do.
Without one, a look that wants the screen too (`AgentPane.look`) asks list-panes and
capture-pane in one process, not two.

tmux also has traps this module exists to keep in one place:
- `display-message -t` with a target that does not exist prints an empty line and exits 0;
  existence is checked with `list-panes`, which fails properly.
- `send-keys` drops text starting with `-` and strips a trailing `;`: text is loaded into a
  named buffer from stdin and pasted; only named keys go through `send-keys`.
- the output of an agent that prints and exits at once is pushed into the pane's history when
  the pane dies; history is cleared before each launch and captured with it afterwards.
- tmux runs a hook's command through its own parser (and `run-shell` through a shell), so the
  pane-died hook is one fixed string: it saves a fixed buffer to a path read from a window
  option, which is set from an argv list and never parsed.
"""

from __future__ import annotations

import math
import os
import re
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loomtui.errors import LoomError, TmuxError, TmuxTimeout  # noqa: F401  (TmuxError, TmuxTimeout: defined beside LoomError, raised here)

DEFAULT_TIMEOUT = 5.0
EXIT_BUFFER = "loom-pane-died"
EXIT_OPTION = "@loom_pane_died"
EXIT_HOOK = f'save-buffer -b {EXIT_BUFFER} "#{{{EXIT_OPTION}}}"'
# "server exited unexpectedly" and "lost server": the client reached a server that was exiting,
# which is a server that is gone, not a fault to report.
_GONE = re.compile(
    r"no server running|error connecting to|can't find (session|window|pane)|session not found"
    r"|server exited|lost server"
)

# LOOM_TMUX_CONTROL=0: never a control client (one process per command, as before). =1: one from
# the first query, whatever the tmux version (see CONTROL_SAFE_FROM: the operator takes that risk).
# Unset: on a tmux that is safe, from the third query a process makes of the same server and
# session, so a one-shot command that asks once or twice pays no client's start-up for nothing.
CONTROL_ENV = "LOOM_TMUX_CONTROL"
CONTROL_AFTER = 2
# Before tmux 3.7 the server crashes (SIGSEGV: the agent dies with it) when a notification (a
# session created or closed, a client detached, a pane entering copy mode ...) reaches a control
# client that is still connecting: it writes to the client's control state before there is one
# (tmux GitHub issue 4980, fixed by commit e5a2a25 in 3.7). With 3.3a here, connecting clients
# while sessions were created and closed crashed the server within 1-21 connects. So by default a
# control client is started only on a tmux that has the fix.
CONTROL_SAFE_FROM = (3, 7)
# Read-only queries: answered alike by either path, and safe to ask again the plain way when the
# control client is lost in the middle of one (a key or a paste would not be).
_CONTROL_COMMANDS = frozenset({"list-panes", "capture-pane", "display-message", "list-sessions"})
# A client that could not start (no session yet, a server that does not answer): the plain way
# meanwhile, trying again after 1 s, then 2, 4 ... 30 s, and after 1 s again once one started.
RETRY_FIRST, RETRY_MAX = 1.0, 30.0
# What tmux's parser reads inside single quotes exactly as the same argv element: no quote, no
# newline or other control character but tab, and no ';' (an argv element ending in ';' ends a
# command there; inside quotes it would not).
_QUOTABLE = re.compile(r"[^'\x00-\x08\x0a-\x1f\x7f;]*")
# LOOM_TMUX_UNIT=systemd (set by the unit `loom install-service` writes): a tmux server that is
# not running yet is started by the user's systemd, in a service of its own (`systemd-run --user`),
# so the agent is neither in loom.service's cgroup (a restart or crash of the daemon would kill it)
# nor under its sandbox (daemon/service.py says why not a scope). Unset: started as a child of
# whoever asks, as always (tests, a shell, launchd).
UNIT_ENV, UNIT_ENV_VALUE = "LOOM_TMUX_UNIT", "systemd"
# What the user manager sets for each unit itself: the daemon's own values would be wrong there.
_MANAGER_ENV = frozenset({"INVOCATION_ID", "JOURNAL_STREAM", "SYSTEMD_EXEC_PID", "MANAGERPID", "NOTIFY_SOCKET",
                          "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", "WATCHDOG_USEC",
                          UNIT_ENV})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class TmuxNotFound(TmuxError):
    pass


class TmuxGone(TmuxError):
    """The server, session or pane does not exist (a definitive answer from tmux)."""


class ControlLost(Exception):
    """The control client ended or fell out of step: the plain way answers instead."""


class ControlNoAnswer(Exception):
    """No reply from the control client by the deadline."""


@dataclass
class Result:
    cmd: list[str]
    returncode: int
    stdout: list[str]
    stderr: list[str]


_which: dict[str | None, str] = {}


def tmux_binary() -> str:
    # Looked up once per PATH: `shutil.which` walks PATH, a cost on every call of a hot path.
    path = os.environ.get("PATH")
    binary = _which.get(path)
    if binary is None:
        binary = shutil.which("tmux")
        if not binary:
            raise TmuxNotFound("tmux binary not found on PATH: install tmux (Loom runs the agent in a tmux pane)")
        _which[path] = binary
    return binary


_safe: dict[str, bool] = {}


_versions: dict[str, str] = {}


def version_of(binary: str) -> str:
    """`tmux -V` of this binary ("" when it does not say), asked once."""
    if binary not in _versions:
        try:
            _versions[binary] = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=5,
                                               stdin=subprocess.DEVNULL).stdout
        except (OSError, subprocess.TimeoutExpired):
            _versions[binary] = ""
    return _versions[binary]


def start_dir(cwd: str | os.PathLike[str]) -> str:
    """`cwd` as tmux's `-c` takes it: tmux expands formats in it (`#{session_name}`, `#S`, and
    `#(...)`, which runs a command), so a `#` is doubled to stand for itself."""
    return os.fspath(cwd).replace("#", "##")


def control_mode_safe(binary: str) -> bool:
    """Whether this tmux can take a control client connecting while notifications happen."""
    if binary not in _safe:
        _safe[binary] = version_has_fix(version_of(binary))
    return _safe[binary]


def version_at_least(version: str, wanted: tuple[int, int]) -> bool:
    """`tmux -V` says `wanted` or later ("tmux 3.7", "tmux 3.7b", "tmux next-3.8"). A development
    build `next-X.Y` is on its way to X.Y, not there: it is taken for the release before (master
    said `next-3.7` for months before the control client's fix went in). Anything else ("tmux
    master", "tmux openbsd-7.4") is taken as earlier."""
    found = re.match(r"tmux (next-)?(\d+)\.(\d+)", version)  # not "tmux openbsd-7.4": OpenBSD's numbering
    if found is None:
        return False
    major, minor = int(found[2]), int(found[3])
    if found[1]:
        major, minor = (major, minor - 1) if minor > 0 else (major - 1, 99)
    return (major, minor) >= wanted


def version_has_fix(version: str) -> bool:
    """`tmux -V` says CONTROL_SAFE_FROM or later."""
    return version_at_least(version, CONTROL_SAFE_FROM)


def clean_env(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """Our environment minus what must not leak into tmux (nesting markers, secrets)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE") and k not in drop}
    return env


def output_lines(raw: bytes) -> list[str]:
    """tmux's output as lines, read the way `subprocess.run(text=True)` reads it (universal
    newlines), without the trailing empty ones: both paths give the same lines."""
    out = raw.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while out and out[-1] == "":
        out.pop()
    return out


def read_block(next_line: Callable[[], bytes],
               notice: Callable[[bytes], object] | None = None) -> tuple[bool, list[bytes]]:
    """One command's reply from a control-mode stream: (succeeded, its output lines).

    Notifications (`%sessions-changed`, `%window-renamed @1 x`, ...) come only between blocks and
    are skipped. Inside a block only the guard with its `%begin`'s time, number and flags ends
    it: a pane line that looks like a guard is output. `%exit`, or text outside a block (the
    stream is out of step), raises ControlLost.
    """
    begin: bytes | None = None
    out: list[bytes] = []
    while True:
        line = next_line()
        if begin is None:
            if line.startswith(b"%begin "):
                begin = line[len(b"%begin "):]
            elif line == b"%exit" or line.startswith(b"%exit "):
                raise ControlLost(line.decode("utf-8", "replace"))
            elif not line.startswith(b"%"):
                raise ControlLost("control mode out of step: text outside a reply")
            elif notice is not None:
                notice(line)
            continue
        if line == b"%end " + begin:
            return True, out
        if line == b"%error " + begin:
            return False, out
        out.append(line)


def _file_id(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


def unit_name(socket: str) -> str:
    """The systemd unit Loom's tmux server on `socket` runs in (systemd-escape's \\xNN for the rest)."""
    safe = "".join(chr(b) if b < 0x80 and (chr(b).isalnum() or chr(b) in "_.-") else f"\\x{b:02x}" for b in socket.encode())
    return f"loom-tmux-{safe}.service"


def systemd_run_argv(socket: str, tmux_argv: list[str], env: dict[str, str]) -> list[str]:
    """systemd-run starting `tmux_argv` (a command that starts the server) as its own user service.
    Type=forking: the client forks the server and exits, the unit lives on with the server.
    `--setenv=NAME` takes the value from systemd-run's own environment (`env`): the server sees
    what a server started by us would, and no value is written into an argv."""
    argv = ["systemd-run", "--user", "--quiet", "--collect", f"--unit={unit_name(socket)}",
            "--description=Loom's tmux server (the agent's pane)", "--property=Type=forking"]
    argv += [f"--setenv={name}" for name in env if name not in _MANAGER_ENV and _ENV_NAME.fullmatch(name)]
    return [*argv, "--", *tmux_argv]


def socket_path(name: str, env: dict[str, str]) -> str:
    """Where `tmux -L name` finds its server (tmux's own rule: $TMUX_TMPDIR or /tmp, tmux-UID)."""
    return os.path.join(os.path.realpath(env.get("TMUX_TMPDIR") or "/tmp"), f"tmux-{os.getuid()}", name)


def quote_words(words: list[str]) -> str | None:
    """One control-mode command line meaning exactly this argv, or None if it cannot say it."""
    if not all(_QUOTABLE.fullmatch(word) for word in words):
        return None
    return " ".join(words[:1] + [f"'{word}'" for word in words[1:]])


def command_line(words: list[str]) -> str:
    """One line of tmux's command language meaning exactly this argv, whatever each word holds:
    double-quoted, with its backslash, quote, $ and ~ escaped (no variable expanded, no home
    directory put in), and its control characters written as escapes. For `source-file`. A NUL
    cannot be said (tmux ends the word there): ValueError."""
    def quoted(word: str) -> str:
        if "\0" in word:
            raise ValueError("a NUL character cannot be passed to tmux")
        out = []
        for ch in word:
            if ch in '\\"$~':
                out.append("\\" + ch)
            elif ch == "\n":
                out.append("\\n")
            elif ord(ch) < 32 or ord(ch) == 127:
                out.append(f"\\{ord(ch):03o}")
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    return " ".join(quoted(word) for word in words) + "\n"


class ControlClient:
    """One `tmux -C` client attached to the agent's session; one command at a time (its
    `_Channel` lets one thread ask).

    What it must not do to the agent or the server:
    - take the pane's output or resize it: it attaches with `-f no-output,ignore-size`. Without
      no-output, tmux would keep every byte the agent writes until this client read it (it reads
      replies only), queue each reply behind them, and drop the client after five minutes as
      too far behind. A control client that never sets its size (this one never does) is left
      out of the window's size, and ignore-size keeps it out;
    - change the session: `-E`, the session's environment is not updated from ours;
    - start a server: `-N`. With no server there is nothing to attach to, and the plain path
      says so the way it always did.
    It is an attached client: `list-clients` shows it (flags control-mode,no-output,ignore-size)
    and `#{session_attached}` counts it; nothing in Loom reads either. It runs queries only
    (`_CONTROL_COMMANDS`): nothing is typed through it.
    """

    def __init__(self, argv: list[str], env: dict[str, str], deadline: float, socket: str) -> None:
        self.socket = socket
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=env)
        except FileNotFoundError:
            raise TmuxNotFound("tmux binary not found on PATH: install tmux") from None
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        # A server that stops reading must cost us a timeout, never a write blocked forever.
        os.set_blocking(self._in, False)
        self._writable, self._readable = select.poll(), select.poll()
        self._writable.register(self._in, select.POLLOUT)
        self._readable.register(self._out, select.POLLIN)
        self._buf = b""
        self._pos = 0
        self.notices = 0  # notifications skipped between replies
        try:
            # The first reply is attach-session's own.
            attached, _ = read_block(lambda: self._line(deadline), self._notice)
            if not attached:
                raise ControlLost("attach-session failed")
            try:
                self._socket_id = _file_id(socket)
            except OSError as exc:
                raise ControlLost(f"{socket}: {exc.strerror}") from None
        except BaseException:
            self.close()
            raise

    def socket_unchanged(self) -> bool:
        """The socket it connected through is still there. A client once connected never looks at
        the path again, but every other tmux command does: a socket deleted (a /tmp cleaner) or
        replaced must read as it does to them, so the watchdog sees it and repairs it."""
        try:
            return _file_id(self.socket) == self._socket_id
        except OSError:
            return False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, line: str, deadline: float) -> tuple[bool, list[bytes]]:
        self._write(line.encode("utf-8") + b"\n", deadline)
        return read_block(lambda: self._line(deadline), self._notice)

    def _notice(self, line: bytes) -> None:
        self.notices += 1

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._in, view):]
            except BlockingIOError:
                self._wait(self._writable, deadline)
            except OSError as exc:  # the client and the server are both gone (EPIPE)
                raise ControlLost(str(exc)) from None

    def _line(self, deadline: float) -> bytes:
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                line = self._buf[self._pos:end]
                self._pos = end + 1
                return line
            self._wait(self._readable, deadline)
            try:
                chunk = os.read(self._out, 1 << 16)
            except OSError as exc:
                raise ControlLost(str(exc)) from None
            if not chunk:
                raise ControlLost("the control client ended")
            self._buf = self._buf[self._pos:] + chunk
            self._pos = 0

    @staticmethod
    def _wait(poller: select.poll, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not poller.poll(math.ceil(left * 1000)):
            raise ControlNoAnswer()

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is None:
                continue
            try:
                pipe.close()
            except OSError:
                pass
        if self.proc.poll() is None:
            try:
                self.proc.kill()  # a hung server would never tell it to go
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass


class _Channel:
    """This process's control client for one server and session, shared by every pane object
    (the daemon's loops each build a driver; one client serves them)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client: ControlClient | None = None
        self.queries = 0
        self.retry_at = 0.0
        self.retry = RETRY_FIRST
        self.pid = os.getpid()

    def failed(self) -> None:
        self.retry_at = time.monotonic() + self.retry
        self.retry = min(self.retry * 2, RETRY_MAX)

    def drop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


_channels: dict[tuple[object, ...], _Channel] = {}
_channels_guard = threading.Lock()


def _channel(key: tuple[object, ...]) -> _Channel:
    with _channels_guard:
        channel = _channels.get(key)
        if channel is None or channel.pid != os.getpid():  # a forked child never shares its parent's
            channel = _channels[key] = _Channel()
        return channel


def close_control_clients() -> None:
    """End this process's control clients (they come back on the next queries)."""
    with _channels_guard:
        channels = list(_channels.values())
    for channel in channels:
        with channel.lock:
            channel.drop()


class TimedServer:
    """Loom's private tmux server: every command has a deadline and can take stdin.

    With a `session`, queries may go through a control-mode client attached to it (module
    docstring); without one, or whenever that client is busy, starting or gone, one `tmux`
    process per command, as always.
    """

    def __init__(self, socket_name: str, timeout: float = DEFAULT_TIMEOUT, env_drop: tuple[str, ...] = (),
                 session: str | None = None) -> None:
        # -f /dev/null: the operator's ~/.tmux.conf must not change base-index or hooks under us.
        self.socket_name = socket_name
        self.config_file = "/dev/null"
        self.timeout = timeout
        self.session = session
        self._env_drop = env_drop

    def cmd(
        self,
        cmd: str,
        *args: object,
        target: str | int | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
        limit = self.timeout if timeout is None else timeout
        if input is None and self.session is not None and cmd in _CONTROL_COMMANDS:
            deadline = time.monotonic() + limit
            result = self._by_control(cmd, args, target, deadline)
            if result is not None:
                return result
            limit = max(deadline - time.monotonic(), 0.01)
        return self._by_process(cmd, args, target, input, limit)

    def by_control(self, cmd: str, *args: object, target: str | int | None = None,
                   timeout: float | None = None) -> Result | None:
        """The reply through this process's control client, or None: then the caller asks the plain
        way (`by_process`), alone or together with other commands."""
        if self.session is None or cmd not in _CONTROL_COMMANDS:
            return None
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        return self._by_control(cmd, args, target, deadline)

    def by_process(self, cmd: str, *args: object, target: str | int | None = None,
                   timeout: float | None = None) -> Result:
        """One `tmux` process, whatever the command: also a sequence (`";"` as its own argv word)."""
        return self._by_process(cmd, args, target, None, self.timeout if timeout is None else timeout)

    def _timeout(self, cmd: str) -> TmuxTimeout:
        return TmuxTimeout(f"tmux -L {self.socket_name} {cmd} did not answer within {self.timeout:g}s")

    def _by_process(self, cmd: str, args: tuple[object, ...], target: str | int | None, input: str | None,
                    limit: float) -> Result:
        argv = [tmux_binary(), f"-L{self.socket_name}", f"-f{self.config_file}", cmd]
        if target is not None:
            argv += ["-t", str(target)]
        argv += [str(a) for a in args]
        try:
            proc = subprocess.run(
                argv,
                input=input,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=limit,
                env=clean_env(self._env_drop),
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise self._timeout(cmd) from None
        except FileNotFoundError:
            raise TmuxNotFound("tmux binary not found on PATH: install tmux") from None
        out = proc.stdout.split("\n")
        while out and out[-1] == "":
            out.pop()
        return Result(argv, proc.returncode, out, [line for line in proc.stderr.split("\n") if line])

    # -- the control-mode path --------------------------------------------------------------

    def _channel(self) -> _Channel:
        return _channel((self.socket_name, self.config_file, self.session, self._env_drop))

    def control_client(self) -> ControlClient | None:
        """This process's control client of this server and session, while one runs."""
        client = self._channel().client
        return client if client is not None and client.proc.poll() is None else None

    def _control_argv(self) -> list[str]:
        return [tmux_binary(), f"-L{self.socket_name}", f"-f{self.config_file}", "-N", "-C",
                "attach-session", "-E", "-f", "no-output,ignore-size", "-t", f"={self.session}"]

    def _by_control(self, cmd: str, args: tuple[object, ...], target: str | int | None,
                    deadline: float) -> Result | None:
        """The reply through the control client, or None: ask the plain way."""
        channel = self._channel()
        channel.queries += 1  # every query counts, whichever way it goes (a race only miscounts one)
        mode = os.environ.get(CONTROL_ENV, "")
        if mode == "0" or (target is None and cmd != "list-sessions"):
            return None  # untargeted, a command would default to the client's session, not tmux's pick
        words = [cmd, *(["-t", str(target)] if target is not None else []), *(str(a) for a in args)]
        line = quote_words(words)
        if line is None:
            return None
        if not channel.lock.acquire(blocking=False):
            return None  # another thread's query is in flight: this one goes the plain way
        try:
            if channel.client is None:
                if mode != "1" and (channel.queries <= CONTROL_AFTER or not control_mode_safe(tmux_binary())):
                    return None
                if time.monotonic() < channel.retry_at:
                    return None
                env = clean_env(self._env_drop)
                try:
                    channel.client = ControlClient(self._control_argv(), env, deadline,
                                                   socket_path(self.socket_name, env))
                except ControlNoAnswer:
                    channel.failed()
                    raise self._timeout(cmd) from None
                except ControlLost:
                    channel.failed()  # no server or no session yet: the plain way says which
                    return None
                channel.retry = RETRY_FIRST
            elif not channel.client.socket_unchanged():
                channel.drop()  # the plain way meets the missing socket, as the watchdog must
                return None
            try:
                ok, out = channel.client.ask(line, deadline)
            except ControlNoAnswer:
                channel.drop()  # its reply may still come: the stream is out of step
                channel.failed()
                raise self._timeout(cmd) from None
            except ControlLost:
                channel.drop()  # the server, the session or the client went: the plain way says which
                return None
        finally:
            channel.lock.release()
        argv = ["tmux", f"-L{self.socket_name}", "-C", line]
        lines = output_lines(b"\n".join(out))
        if ok:
            return Result(argv, 0, lines, [])
        return Result(argv, 1, [], [text for text in lines if text])


@dataclass(frozen=True)
class PaneInfo:
    pane_id: str
    pane_pid: int
    dead: bool
    dead_status: int | None
    width: int
    height: int
    dead_signal: int | None = None


_FIELDS = ("#{pane_index}\t#{pane_id}\t#{pane_pid}\t#{pane_dead}\t#{pane_dead_status}\t#{pane_width}\t"
           "#{pane_height}\t#{pane_dead_signal}")


# A look's list-panes lines start with the window's pane count: the number of lines that are
# list-panes' own, so whatever the pane's text holds (it may imitate these lines exactly), the
# screen captured after them is split off by counting, never by reading it.
_LOOK_FIELDS = "#{window_panes}\t" + _FIELDS


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


class AgentPane:
    """Pane 0 of window 0 of one session on a private tmux server."""

    def __init__(
        self,
        socket: str,
        session: str,
        *,
        width: int = 200,
        height: int = 50,
        timeout: float = DEFAULT_TIMEOUT,
        env_drop: tuple[str, ...] = (),
    ) -> None:
        self.server = TimedServer(socket, timeout, env_drop, session=session)
        self.socket = socket
        self.session = session
        self.width = width
        self.height = height

    @property
    def target(self) -> str:
        return f"={self.session}:0.0"

    def _source(self, line: str) -> Result:
        """`line` run by tmux's `source-file`: from stdin (tmux 3.1 and later read `-` so), else from
        a file of this user's alone (0600), removed at once: never among a process's arguments."""
        if version_at_least(version_of(tmux_binary()), (3, 1)):
            return self.server.cmd("source-file", "-", input=line)
        import tempfile  # only here: it loads `random`, which `loom status` on every host need not

        fd, path = tempfile.mkstemp(prefix="loom-tmux-", suffix=".conf")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(line)
            return self.server.cmd("source-file", path)
        finally:
            os.unlink(path)

    def _check(self, result: Result, what: str, *, stdout_too: bool = False) -> Result:
        if result.returncode == 0:
            return result
        said = [*result.stderr, *(result.stdout if stdout_too else [])]
        message = " ".join(said) or f"exit status {result.returncode}"
        if _GONE.search(message):
            raise TmuxGone(f"tmux -L {self.socket}: {what}: {message}")
        raise TmuxError(f"tmux -L {self.socket}: {what}: {message}")

    def info(self) -> PaneInfo | None:
        """The pane, or None when tmux says the server, session or pane is not there.

        Raises TmuxTimeout when tmux does not answer: the caller must treat that as unknown.
        """
        result = self.server.cmd("list-panes", "-F", _FIELDS, target=f"={self.session}:0")
        try:
            self._check(result, "list-panes")
        except TmuxGone:
            return None
        return self._pane_zero(result.stdout)

    @staticmethod
    def _pane_zero(lines: list[str]) -> PaneInfo | None:
        for line in lines:
            parts = line.split("\t")
            if len(parts) != 8 or parts[0] != "0":
                continue
            _, pane_id, pid, dead, status, width, height, dead_signal = parts
            return PaneInfo(
                pane_id=pane_id,
                pane_pid=int(pid),
                dead=dead == "1",
                dead_status=_int_or_none(status),
                width=int(width),
                height=int(height),
                dead_signal=_int_or_none(dead_signal),
            )
        return None

    def look(self) -> tuple[PaneInfo | None, str | None]:
        """The pane (`info()`) and, while it lives, its visible screen (`capture()`), asked together.

        The same answers as `info()` then `capture()`, in one tmux process instead of two where
        each query costs a process (the watchdog looks every few seconds, and a process is most of
        a look). The screen is None when there is none to give: no pane, a dead pane (its history
        is another capture), or a capture that failed, which `capture()` would have raised.
        Raises as `info()` does: TmuxTimeout when tmux does not answer, TmuxError when it fails.
        """
        window = f"={self.session}:0"
        listed = self.server.by_control("list-panes", "-F", _FIELDS, target=window)
        if listed is not None:  # a control client answers: two queries cost less than one process
            try:
                info = self._pane_zero(self._check(listed, "list-panes").stdout)
            except TmuxGone:
                return None, None
            if info is None or info.dead:
                return info, None
            try:
                return info, self.capture()
            except TmuxError:
                return info, None
        result = self.server.by_process("list-panes", "-F", _LOOK_FIELDS, ";",
                                        "capture-pane", "-p", "-J", "-t", self.target, target=window)
        # tmux skips the rest of a sequence after a failing command: no list-panes line means
        # list-panes failed (what info() reads as gone or raises); lines and a failure, the capture.
        count = result.stdout[0].split("\t", 1)[0] if result.stdout else ""
        if not count.isdigit():
            try:
                self._check(result, "list-panes")
            except TmuxGone:
                return None, None
            raise TmuxError(f"tmux -L {self.socket}: list-panes: an answer without its pane count")
        panes = int(count)
        listing = [line.split("\t", 1)[1] for line in result.stdout[:panes] if "\t" in line]
        if not 0 < panes <= len(result.stdout) or len(listing) != panes:
            raise TmuxError(f"tmux -L {self.socket}: list-panes: {panes} panes said, {len(listing)} listed")
        info = self._pane_zero(listing)
        if info is None or info.dead or result.returncode != 0:
            return info, None
        return info, "\n".join(result.stdout[panes:])

    def ensure_session(self, cwd: str | os.PathLike[str]) -> bool:
        """Create the session (fixed size, remain-on-exit) when absent. True when created.

        The first pane runs a placeholder so remain-on-exit is in force before the agent starts:
        an agent that dies at once must leave a dead pane to read, not a vanished session.
        """
        if self.info() is not None:
            return False
        new = ("new-session", "-d", "-s", self.session, "-n", "agent",
               "-x", self.width, "-y", self.height, "-c", start_dir(cwd), "exec sleep 2147483647")
        if os.environ.get(UNIT_ENV) == UNIT_ENV_VALUE and not self.server_running():
            if not self._new_session_in_unit(new):
                return False
        else:
            result = self.server.cmd(*new)
            if result.returncode != 0 and "duplicate session" in " ".join(result.stderr):
                return False  # another process created it between our look and our create
            self._check(result, "new-session")
        self._check(self.server.cmd("set-option", "-w", "remain-on-exit", "on", target=f"={self.session}:0"),
                    "set-option remain-on-exit")
        self._check(self.server.cmd("set-option", "-w", "history-limit", "5000", target=f"={self.session}:0"),
                    "set-option history-limit")
        return True

    def _new_session_in_unit(self, new: tuple[object, ...]) -> bool:
        """Start the server with its first session through systemd-run (UNIT_ENV). False when the
        session turned out to be someone else's: another process created it first."""
        server = self.server
        tmux_argv = [tmux_binary(), f"-L{server.socket_name}", f"-f{server.config_file}", *map(str, new)]
        env = clean_env(server._env_drop)
        unit = unit_name(self.socket)
        try:
            proc = subprocess.run(systemd_run_argv(self.socket, tmux_argv, env), capture_output=True, text=True,
                                  errors="replace", env=env, stdin=subprocess.DEVNULL, timeout=server.timeout * 4)
        except FileNotFoundError:
            raise TmuxError(f"{UNIT_ENV}={UNIT_ENV_VALUE} but systemd-run is not on PATH: "
                            "cannot start the tmux server in a unit of its own") from None
        except subprocess.TimeoutExpired:
            raise TmuxTimeout(f"systemd-run --user --unit={unit} did not answer within {server.timeout * 4:g}s") from None
        if proc.returncode != 0:
            if self.info() is not None:
                return False
            why = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
            raise TmuxError(f"tmux -L {self.socket}: systemd-run --user could not start the tmux server as "
                            f"{unit}: {why} (journalctl --user -u {unit} says more)")
        return True

    def watch_exit(self, path: str | os.PathLike[str]) -> None:
        """Have tmux write `path` the moment the pane's process exits (the `pane-died` hook)."""
        window = f"={self.session}:0"
        self._check(self.server.cmd(
            "set-buffer", "-b", EXIT_BUFFER, "x", ";",
            "set-option", "-w", "-t", window, EXIT_OPTION, os.fspath(path), ";",
            "set-hook", "-w", "-t", window, "pane-died", EXIT_HOOK,
        ), "set-hook pane-died")

    def respawn(self, command: str, cwd: str | os.PathLike[str], env: dict[str, str]) -> PaneInfo:
        """Replace whatever runs in the pane with `command` (run by tmux's shell).

        The pane's environment (`agent.env`: an API key, as often as not) goes to tmux on stdin, as
        a command line `source-file -` reads: as `-e` words of a tmux process, any local user
        reading /proc/PID/cmdline while it ran read each value."""
        self._check(self.server.cmd("clear-history", target=self.target), "clear-history")
        words = ["respawn-pane", "-k", "-t", self.target, "-c", start_dir(cwd)]
        for key, value in env.items():
            words += ["-e", f"{key}={value}"]
        words.append(command)
        try:
            line = command_line(words)
        except ValueError as exc:
            raise TmuxError(f"tmux -L {self.socket}: respawn-pane: {exc}") from None
        # A parse error is said on tmux's stdout (`-:1: syntax error`), not its stderr.
        self._check(self._source(line), "respawn-pane", stdout_too=True)
        info = self.info()
        if info is None:
            raise TmuxGone(f"tmux -L {self.socket}: the pane vanished right after respawn")
        return info

    def capture(self, *, history: bool | int = False, ansi: bool = False, pane_id: str | None = None) -> str:
        """The pane's text; `ansi` keeps its colour escapes (the console renders them, never as markup).
        `history`: True for all of it, a number N for the last N lines above the screen (the console's
        scrollback, bounded whatever the history-limit)."""
        args = ["-p", "-J", *(["-e"] if ansi else [])]
        if history is not False and history is not True and history > 0:
            args += ["-S", f"-{int(history)}"]
        elif history:
            args += ["-S", "-"]
        result = self._check(self.server.cmd("capture-pane", *args, target=pane_id or self.target), "capture-pane")
        return "\n".join(result.stdout)

    def paste(self, pane_id: str, text: str, buffer: str) -> None:
        """Type `text` into exactly `pane_id` through a named buffer (never through send-keys).

        tmux 3.3a crashes (the whole server, every pane with it) when pasting into a dead pane,
        and an agent can die between any look and the paste. So the server itself checks and
        pastes in one command sequence: a pane that died first gets nothing (the caller's next
        look says so) and the server lives.
        """
        if not re.fullmatch(r"%\d+", pane_id) or not re.fullmatch(r"[A-Za-z0-9_-]+", buffer):
            raise TmuxError(f"not a pane id and buffer name: {pane_id!r} {buffer!r}")
        try:
            # -d deletes the buffer once pasted; -p wraps in bracketed-paste only if the app asked for it.
            self._check(self.server.cmd(
                "load-buffer", "-b", buffer, "-", ";",
                "if-shell", "-F", "-t", pane_id, "#{pane_dead}",
                f"delete-buffer -b {buffer}", f"paste-buffer -d -p -b {buffer} -t {pane_id}",
                input=text), "paste-buffer")
        except TmuxError:
            self.server.cmd("delete-buffer", "-b", buffer)
            raise

    def send_key(self, pane_id: str, key: str) -> None:
        """One named key (Enter, Escape, C-c ...); never literal text."""
        if not re.fullmatch(r"[A-Za-z0-9-]{1,20}", key) or key.startswith("-"):
            raise TmuxError(f"not a key name: {key!r}")
        self._check(self.server.cmd("send-keys", key, target=pane_id), "send-keys")

    def server_running(self) -> bool:
        result = self.server.cmd("list-sessions", "-F", "#{session_name}")
        return result.returncode == 0

    def kill_server(self) -> None:
        self.server.cmd("kill-server")

    def restore_size(self) -> None:
        """The window back at its configured size. tmux sizes a window to the last client that
        attached (window-size `latest`) and keeps that size once it detached: an attach from an
        80-column terminal would leave the agent drawing at 80 columns for good. resize-window
        makes the window's window-size manual, so it is unset again: the next attach still fits
        its own terminal."""
        window = f"={self.session}:0"
        self._check(self.server.by_process("resize-window", "-t", window, "-x", self.width, "-y", self.height, ";",
                                           "set-option", "-w", "-u", "-t", window, "window-size"), "resize-window")

    def end_session(self) -> None:
        """Close this session (a server left with none exits); nothing when it is not there."""
        self.server.cmd("kill-session", "-t", f"={self.session}")

    def attach_argv(self) -> list[str]:
        return [tmux_binary(), f"-L{self.socket}", "attach-session", "-t", f"={self.session}"]
