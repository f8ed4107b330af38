"""The one transport to another host: the system OpenSSH client running that host's own `loom`.

The system client, not a library: the operator's ~/.ssh/config, agent, ProxyJump and known_hosts
apply exactly as they do to their own `ssh`, and host keys are checked as it checks them (nothing
here turns that off; the config refuses StrictHostKeyChecking=no). BatchMode: a prompt for a
password or a new host key would hang a loop, so it fails instead, and says why. One master
connection per host (ControlMaster/ControlPersist) under the state dir's `ssh/` (0700): a read of
twenty hosts costs twenty round trips, not twenty handshakes.

The remote side is a shell: every word of the remote command is quoted (shlex.quote), whatever it
holds. What comes back is untrusted text: the caller shows it through `text.printable` and parses
JSON with `json.loads`, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loomtui import bounded_run
from loomtui.durations import format_duration
from loomtui.store.statedir import private_dir
from loomtui.text import printable

if TYPE_CHECKING:
    from loomtui.config import HostConfig

CONTROL_DIR = "ssh"
# How long an idle master connection stays up after its last use: `loom hosts` every few seconds
# from the console reuses it; an operator who walked away leaves nothing open for long.
PERSIST = "10m"
# A unix socket's path holds at most 104 bytes (macOS; 108 on Linux), and ssh first binds the
# master's socket at the path plus a 17-character random suffix.
MAX_CONTROL_PATH = 104 - 1 - 17
SSH_FAILED = 255  # ssh's own exit status for a failure of its own (the remote Loom never uses it)
# The most a host's answer may hold (stdout and stderr): its output is untrusted, and one streaming
# gigabytes within its timeout filled the console's memory before any parser's bound applied.
MAX_ANSWER = 64 * 2**20
_ORIGIN = re.compile(r"[A-Za-z0-9._-]{1,64}")


@dataclass(frozen=True)
class Reply:
    """What one call brought back. `reached`: the remote Loom ran (whatever its own exit status);
    otherwise `reason` says why not, in ssh's words or the timeout's."""

    host: str
    code: int | None          # the remote command's exit status; None when the call timed out
    stdout: str
    stderr: str
    reason: str = ""
    timed_out: bool = False   # no answer within the timeout (the host may be there, and slow)

    @property
    def reached(self) -> bool:
        return self.code is not None and self.code != SSH_FAILED


def origin() -> str:
    """This machine's name, as the remote ledger records who came over ssh (letters, digits, . _ -)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64]
    return name if _ORIGIN.fullmatch(name) else "unknown"


def valid_origin(value: str) -> bool:
    return _ORIGIN.fullmatch(value) is not None


def control_dir(state_dir: Path) -> Path:
    """The state dir's `ssh/`, 0700 (whoever can reach a master's socket can use its connection)."""
    path = private_dir(state_dir / CONTROL_DIR)
    os.chmod(path, 0o700)
    return path


def control_path(state_dir: Path, host: HostConfig) -> str | None:
    """The master's socket for `host` as ssh's ControlPath wants it ('%' doubled: ssh expands
    tokens there); None when the path is too long for a socket or cannot be written as one word
    (then each call connects on its own: slower, never wrong). Named by the host and the way to it
    (its destination and options): ssh's client uses any master at the path without asking where
    it leads, and a host's `ssh` or `ssh_options` edited while its master lived (the console reads
    every few seconds, so it never idled out) still sent reads and actions to the old machine."""
    route = hashlib.sha256(json.dumps([host.ssh, list(host.ssh_options)]).encode()).hexdigest()[:10]
    folder = Path(state_dir).absolute() / CONTROL_DIR
    # The route alone when the name makes it too long: two names of one route share a connection
    # to the same place, which is no harm.
    path = next((p for p in (str(folder / f"{host.name}-{route}"), str(folder / route))
                 if len(os.fsencode(p)) <= MAX_CONTROL_PATH), "")
    if not path or any(c.isspace() or c in "\"'\\" for c in path):
        return None
    return path.replace("%", "%%")


def remote_command(host: HostConfig, words: list[str], via: str) -> str:
    """The command line the remote shell runs: the host's Loom with its config and state dir, the
    origin it records (`--via-ssh`), then `words`; every word quoted, but for a leading `~/` in the
    host's `loom` words, left to the remote shell to expand to its home (README's own
    `loom = "~/.local/bin/loom"`: quoted whole, the shell looked for a file named `~`)."""
    argv = []
    if host.config:
        argv += ["--config", host.config]
    if host.state_dir:
        argv += ["--state-dir", host.state_dir]
    argv += ["--via-ssh", via, *words]
    return " ".join([*(_program_word(word) for word in host.loom), *(shlex.quote(word) for word in argv)])


def _program_word(word: str) -> str:
    return '"$HOME"/' + shlex.quote(word[2:]) if word.startswith("~/") else shlex.quote(word)


def ssh_argv(host: HostConfig, words: list[str], *, control: str | None, via: str, tty: bool = False) -> list[str]:
    """`ssh` with Loom's options first (ssh keeps the first value it is given for an option, so
    the host's `ssh_options` cannot undo BatchMode), then the host's options, the destination after
    `--` (never read as an option) and the remote command as one word. `tty`: a terminal for it
    (an operator's attach), through the same master connection."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, math.ceil(host.connect_timeout))}",
            "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3"]
    if control is None:
        argv += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    else:
        argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control}", "-o", f"ControlPersist={PERSIST}"]
    return [*argv, *(["-t"] if tty else []), *host.ssh_options, "--", host.ssh, remote_command(host, words, via)]


def terminal_argv(host: HostConfig, words: list[str], *, state_dir: Path) -> list[str]:
    """The ssh command line that runs `words` on `host`'s Loom in this terminal (`loom attach`)."""
    control_dir(state_dir)
    return ssh_argv(host, words, control=control_path(state_dir, host), via=origin(), tty=True)


def run(host: HostConfig, words: list[str], *, state_dir: Path, timeout: float, via: str | None = None,
        stdin: bytes = b"") -> Reply:
    """Run `words` on `host`'s Loom and wait at most `timeout` seconds (ssh is then killed).
    `stdin`: what the remote command reads on its standard input (a line to inject, a note),
    carried inside the encrypted channel and never in any process's arguments."""
    control_dir(state_dir)
    argv = ssh_argv(host, words, control=control_path(state_dir, host), via=via or origin())
    try:
        # Never the terminal: the remote command reads no operator's keys, only what it is given. At
        # the timeout ssh goes with what it started (a ProxyCommand, a jump).
        done = bounded_run.run(argv, stdin=stdin, timeout=timeout, limit=MAX_ANSWER)
    except bounded_run.TooLong:
        return Reply(host.name, None, "", "", f"its answer was longer than {MAX_ANSWER // 2**20} MiB: cut off")
    except OSError as exc:
        return Reply(host.name, None, "", "", f"cannot run ssh: {exc.strerror or exc}")
    if done is None:
        return Reply(host.name, None, "", "", f"no answer within {format_duration(timeout)}", timed_out=True)
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    reason = (last_line(err) or f"ssh exited {done.code}") if done.code == SSH_FAILED else ""
    return Reply(host.name, done.code, out, err, reason)


def last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of untrusted text, safe for a terminal and bounded."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return printable(lines[-1][:limit]) if lines else ""


def close(host: HostConfig, state_dir: Path, timeout: float = 10.0) -> bool:
    """Ask `host`'s master connection to exit (`ssh -O exit`); whether one was there to ask."""
    control = control_path(state_dir, host)
    if control is None or not Path(control.replace("%%", "%")).exists():
        return False
    argv = ["ssh", "-o", f"ControlPath={control}", *host.ssh_options, "-O", "exit", "--", host.ssh]
    try:
        return subprocess.run(argv, input=b"", capture_output=True, timeout=timeout).returncode == 0
    except (subprocess.TimeoutExpired, OSError):
        return False
