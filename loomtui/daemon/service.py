"""`loom install-service`: a systemd user unit (Restart=always) or a launchd agent (KeepAlive).

The agent must outlive its supervisor: `systemctl --user restart loom`, a daemon crash or an
upgrade restarts the daemon, never the agent it guards. Under systemd the daemon therefore starts
Loom's tmux server in a unit of its own (`agent.tmux.UNIT_ENV`, set by this unit): a transient
`loom-tmux-SOCKET.service` that the user manager forks. Not `KillMode=process`, and not
`systemd-run --scope` either: both leave the tmux server (and so the agent) a descendant of
loom.service, inside its sandbox — a scope only moves a process to another cgroup, it keeps the
mount namespace and the no-new-privileges bit it was forked with — so `ProtectSystem=strict`
would make the agent's whole filesystem read-only. A service of its own is forked by the manager,
outside this unit's sandbox and cgroup. So loom.service keeps `KillMode=control-group`: whatever
else the daemon started (tmux clients, a systemd-run) dies with it.

Under launchd, `AbandonProcessGroup` keeps launchd from killing the daemon's process group (the
tmux server among it) when the daemon exits.
"""

from __future__ import annotations

import os
import plistlib
import sys
from collections.abc import Mapping
from pathlib import Path

from loomtui.agent.tmux import UNIT_ENV, UNIT_ENV_VALUE
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.store.statedir import open_private, private_dir

UNIT_NAME = "loom.service"
ENV_FILE = ".config/loom/env"  # under the home directory: the unit's EnvironmentFile, where its secrets go
PLIST_LABEL = "dev.loom.supervise"


def command(ctx: Context) -> list[str]:
    argv = [sys.executable, "-m", "loomtui", "supervise", "--state-dir", str(ctx.state_dir)]
    if ctx.config_path is not None:
        argv += ["--config", str(ctx.config_path)]
    return argv


# -- systemd's syntax (systemd.syntax(7), systemd.service(5) "Command lines") ------------------

def systemd_quote(word: str, *, exec_line: bool = False) -> str:
    """One word as systemd reads it back exactly: double-quoted, C escapes for `\\`, `"` and
    control characters, `%%` for `%` (every value here goes through specifier expansion), and on
    an Exec line `$$` for `$` (there `$NAME` is replaced by the environment). Not shlex: systemd
    is not a shell, and `'\\''` means nothing to it."""
    out = []
    for ch in word:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "$" and exec_line:
            out.append("$$")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def exec_start(argv: list[str]) -> str:
    """The program is never variable-expanded (a `$$` there stays `$$`), and systemd refuses one
    whose name holds a quote, a backslash or a control character: say so now, not at start."""
    program, *args = argv
    if any(ch in '"\\' or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in program):
        raise LoomError(f"install-service: systemd cannot run a program whose path holds a quote, a backslash "
                        f"or a control character: {program!r}")
    words = [systemd_quote(program)]
    for arg in args:
        # A lone ";" would end the command line there (systemd.service "Command lines").
        words.append("\\;" if arg == ";" else systemd_quote(arg, exec_line=True))
    return " ".join(words)


def environment(name: str, value: str) -> str:
    return "Environment=" + systemd_quote(f"{name}={value}")


def tmux_tmpdir(environ: Mapping[str, str] | None = None) -> Path:
    """Where tmux keeps its socket directory (tmux-UID): $TMUX_TMPDIR, else /tmp."""
    env = os.environ if environ is None else environ
    return Path(os.path.realpath(env.get("TMUX_TMPDIR") or "/tmp"))


def writable_paths(ctx: Context, environ: Mapping[str, str] | None = None) -> list[Path]:
    """What the daemon itself writes: the state dir (the store, locks, acks, signals, the pump's
    sockets: every agent's dir is inside it), the tmux temp dir (a tmux client makes the socket
    directory there when it is missing; SQLite and Python put temporary files there too, TMPDIR
    pointing there when it is not /tmp), and
    each memory dir replicated to a remote (the replica loop commits, pulls and checks out there:
    read-only, every sync failed and nothing was ever replicated). Not the agents' cwd nor an
    unreplicated memory dir: the agent writes those, from its own unit (above), and the cwd is the
    home directory by default: listing it would open most of what ProtectSystem=strict closes."""
    from loomtui.memory import replica  # only where a unit is written

    paths = [Path(ctx.state_dir), tmux_tmpdir(environ)]
    paths += [Path(target.memory.dir) for target in replica.targets(ctx.config, ctx.state_dir)]
    return list(dict.fromkeys(paths))


def _single_line(what: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise LoomError(f"install-service: {what} holds a line break; a unit file cannot carry it: {value!r}")
    return value


def systemd_unit(ctx: Context, environ: dict[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    token_env = ctx.config.telegram.token_env
    # "-": a path that is missing at start is skipped, not a failure to start at all (226/NAMESPACE
    # at every restart); the daemon then names what it cannot write, in the journal.
    rw = " ".join(systemd_quote("-" + _single_line("a path", str(p))) for p in writable_paths(ctx, env))
    path = _single_line("PATH", env.get("PATH", "/usr/bin:/bin"))
    # The daemon must find the socket where the operator's `tmux -L` does.
    # And its temporary files (Python's tempfile, SQLite's) where it may write: they look at TMPDIR,
    # then /tmp, which is not writable here when TMUX_TMPDIR takes its place among the paths.
    tmux_tmpdir_line = ("\n" + environment("TMUX_TMPDIR", _single_line("TMUX_TMPDIR", env["TMUX_TMPDIR"]))
                        + "\n" + environment("TMPDIR", str(tmux_tmpdir(env)))
                        if env.get("TMUX_TMPDIR") else "")
    return f"""[Unit]
Description=Loom supervisor: keeps the agent alive, reachable and honest
After=default.target

[Service]
Type=simple
ExecStart={exec_start(command(ctx))}
# A supervisor that exits at all has failed: always start it again.
Restart=always
RestartSec=5
{environment("PATH", path)}
# The daemon starts Loom's tmux server in a unit of its own (loom-tmux-SOCKET.service), outside
# this unit's cgroup and sandbox: a restart or crash of the daemon leaves the agent running.
{environment(UNIT_ENV, UNIT_ENV_VALUE)}{tmux_tmpdir_line}
# Put secrets such as {token_env} in this file (mode 0600), never in the unit itself.
EnvironmentFile=-%h/{ENV_FILE}
# Everything the daemon started dies with it (the agent is not among it, see above).
KillMode=control-group

# Hardening that fits a user service (docs/SERVICE.md has the score before and after). The agent
# is not under it: it runs in its own unit. Not PrivateTmp: it would hide the tmux socket in /tmp.
# Not MemoryDenyWriteExecute or CapabilityBoundingSet: see docs/SERVICE.md.
NoNewPrivileges=yes
UMask=0077
ProtectSystem=strict
ProtectHome=read-only
ReadWritePaths={rw}
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
PrivateMounts=yes
KeyringMode=private
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
# A call outside the filter fails with EPERM (a logged error) rather than killing the daemon.
SystemCallErrorNumber=EPERM
# Unix sockets (tmux, the user bus, the pump), IP (Telegram, metrics), netlink (getaddrinfo).
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK

[Install]
WantedBy=default.target
"""


def launchd_plist(ctx: Context, environ: dict[str, str] | None = None) -> str:
    """The launchd agent, made by plistlib (every value escaped as launchd reads it back).

    launchd starts a job with PATH=/usr/bin:/bin:/usr/sbin:/sbin, where neither Homebrew's tmux
    nor `claude` is: the PATH of the install goes in, with the config and state dir it names (and
    TMUX_TMPDIR, so the daemon finds the socket the operator's `tmux -L` does).
    AbandonProcessGroup: the tmux server (and the agent in it) must outlive the daemon, which
    launchd would otherwise kill with the daemon's whole process group. Umask 0077: what the daemon
    creates (its log among it) is the operator's alone."""
    env = os.environ if environ is None else environ
    variables = {"PATH": env.get("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"), "LOOM_STATE_DIR": str(ctx.state_dir)}
    if ctx.config_path is not None:
        variables["LOOM_CONFIG"] = str(ctx.config_path)
    if env.get("TMUX_TMPDIR"):
        variables["TMUX_TMPDIR"] = env["TMUX_TMPDIR"]
    plist = {
        "Label": PLIST_LABEL,
        "ProgramArguments": command(ctx),
        "EnvironmentVariables": variables,
        "KeepAlive": True,
        "RunAtLoad": True,
        "ThrottleInterval": 5,
        "AbandonProcessGroup": True,
        "Umask": 0o077,
        "StandardErrorPath": str(ctx.state_dir / "supervise.log"),
    }
    return plistlib.dumps(plist, sort_keys=False).decode("utf-8")


def target_path(kind: str) -> Path:
    if kind == "systemd":
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        return base / "systemd" / "user" / UNIT_NAME
    return Path.home() / "Library" / "LaunchAgents" / f"{PLIST_LABEL}.plist"


def render(ctx: Context, kind: str) -> str:
    return systemd_unit(ctx) if kind == "systemd" else launchd_plist(ctx)


def install(ctx: Context, kind: str, *, force: bool = False) -> tuple[Path, str, Path | None]:
    """Write the unit (or plist): (its path, "written", "unchanged" or "replaced", where the old one
    was kept). One already there that says something else (another Loom's, or edited by hand) is
    replaced only with `force`, and kept beside it as .bak, or .bak.1, .bak.2 ... when an earlier
    --force left one (a second replaced the first's backup: the hand-edited unit was lost); without,
    LoomError naming it."""
    path = target_path(kind)
    private_dir(path.parent)
    text = render(ctx, kind).encode("utf-8")
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise LoomError(f"{path}: cannot read the unit already there: {exc.strerror or exc}") from None
    if old == text:
        return path, "unchanged", None
    backup = None
    if old is not None:
        if not force:
            raise LoomError(f"{path} exists and says something else (another Loom's, or edited by hand): "
                            "loom install-service --print shows what it would write; --force replaces it "
                            "(keeping the old one as .bak)")
        backup = _free_backup(path)
        _write(backup, old)
    _write(path, text)
    return path, "written" if old is None else "replaced", backup


def _free_backup(path: Path) -> Path:
    """The first of `path`.bak, .bak.1, .bak.2 ... not there yet."""
    for n in range(1000):
        candidate = path.with_suffix(path.suffix + (".bak" if n == 0 else f".bak.{n}"))
        if not os.path.lexists(candidate):
            return candidate
    raise LoomError(f"{path}: a thousand backups beside it already; remove some and try again")


def _write(path: Path, text: bytes) -> None:
    """`text` in `path`, 0600, atomically (a reader sees the old file or the new, never half)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.fchmod(fd, 0o600)  # a leftover .tmp keeps no wider mode
        while text:
            text = text[os.write(fd, text):]
    finally:
        os.close(fd)
    os.replace(tmp, path)
