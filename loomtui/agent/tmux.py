"""The agent's tmux pane on Loom's private tmux server, with a timeout on every call.

A tmux server that stops answering must read as "unknown", never as "gone" (a hung server is
not a dead agent). So every command goes through `TimedServer.cmd`, with a deadline. (libtmux
is not used: it runs tmux without a timeout, and importing it cost `loom status` ~60 ms.)

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

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from loomtui.errors import LoomError

DEFAULT_TIMEOUT = 5.0
EXIT_BUFFER = "loom-pane-died"
EXIT_OPTION = "@loom_pane_died"
EXIT_HOOK = f'save-buffer -b {EXIT_BUFFER} "#{{{EXIT_OPTION}}}"'
_GONE = re.compile(r"no server running|error connecting to|can't find (session|window|pane)|session not found")


class TmuxError(LoomError):
    pass


class TmuxNotFound(TmuxError):
    pass


class TmuxTimeout(TmuxError):
    """tmux did not answer in time: ambiguous, never evidence that anything is gone."""


class TmuxGone(TmuxError):
    """The server, session or pane does not exist (a definitive answer from tmux)."""


@dataclass
class Result:
    cmd: list[str]
    returncode: int
    stdout: list[str]
    stderr: list[str]


def tmux_binary() -> str:
    binary = shutil.which("tmux")
    if not binary:
        raise TmuxNotFound("tmux binary not found on PATH: install tmux (Loom runs the agent in a tmux pane)")
    return binary


def clean_env(drop: tuple[str, ...] = ()) -> dict[str, str]:
    """Our environment minus what must not leak into tmux (nesting markers, secrets)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_PANE") and k not in drop}
    return env


class TimedServer:
    """Loom's private tmux server: every command has a deadline and can take stdin."""

    def __init__(self, socket_name: str, timeout: float = DEFAULT_TIMEOUT, env_drop: tuple[str, ...] = ()) -> None:
        # -f /dev/null: the operator's ~/.tmux.conf must not change base-index or hooks under us.
        self.socket_name = socket_name
        self.config_file = "/dev/null"
        self.timeout = timeout
        self._env_drop = env_drop

    def cmd(  # type: ignore[override]
        self,
        cmd: str,
        *args: object,
        target: str | int | None = None,
        input: str | None = None,
        timeout: float | None = None,
    ) -> Result:
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
                timeout=self.timeout if timeout is None else timeout,
                env=clean_env(self._env_drop),
                stdin=None if input is not None else subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise TmuxTimeout(f"tmux -L {self.socket_name} {cmd} did not answer within {self.timeout:g}s") from None
        except FileNotFoundError:
            raise TmuxNotFound("tmux binary not found on PATH: install tmux") from None
        out = proc.stdout.split("\n")
        while out and out[-1] == "":
            out.pop()
        return Result(argv, proc.returncode, out, [line for line in proc.stderr.split("\n") if line])


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
        self.server = TimedServer(socket, timeout, env_drop)
        self.socket = socket
        self.session = session
        self.width = width
        self.height = height

    @property
    def target(self) -> str:
        return f"={self.session}:0.0"

    def _check(self, result: Result, what: str) -> Result:
        if result.returncode == 0:
            return result
        message = " ".join(result.stderr) or f"exit status {result.returncode}"
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
        for line in result.stdout:
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

    def ensure_session(self, cwd: str | os.PathLike[str]) -> bool:
        """Create the session (fixed size, remain-on-exit) when absent. True when created.

        The first pane runs a placeholder so remain-on-exit is in force before the agent starts:
        an agent that dies at once must leave a dead pane to read, not a vanished session.
        """
        if self.info() is not None:
            return False
        result = self.server.cmd(
            "new-session", "-d", "-s", self.session, "-n", "agent",
            "-x", self.width, "-y", self.height, "-c", os.fspath(cwd),
            "exec sleep 2147483647",
        )
        if result.returncode != 0 and "duplicate session" in " ".join(result.stderr):
            return False  # another process created it between our look and our create
        self._check(result, "new-session")
        self._check(self.server.cmd("set-option", "-w", "remain-on-exit", "on", target=f"={self.session}:0"),
                    "set-option remain-on-exit")
        self._check(self.server.cmd("set-option", "-w", "history-limit", "5000", target=f"={self.session}:0"),
                    "set-option history-limit")
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
        """Replace whatever runs in the pane with `command` (run by tmux's shell)."""
        self._check(self.server.cmd("clear-history", target=self.target), "clear-history")
        args: list[object] = ["-k", "-c", os.fspath(cwd)]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args.append(command)
        self._check(self.server.cmd("respawn-pane", *args, target=self.target), "respawn-pane")
        info = self.info()
        if info is None:
            raise TmuxGone(f"tmux -L {self.socket}: the pane vanished right after respawn")
        return info

    def capture(self, *, history: bool = False, ansi: bool = False, pane_id: str | None = None) -> str:
        """The pane's text; `ansi` keeps its colour escapes (the console renders them, never as markup)."""
        args = ["-p", "-J", *(["-e"] if ansi else [])]
        if history:
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

    def attach_argv(self) -> list[str]:
        return [tmux_binary(), f"-L{self.socket}", "attach-session", "-t", f"={self.session}"]
