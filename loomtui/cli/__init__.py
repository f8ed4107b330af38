"""`loom`: the command line. Each subcommand lives in its own module, listed here.

Only the module of the command being run is imported: the agent runs `loom resolve` and the
operator `loom status` often, and importing every command's dependencies (textual,
psutil, python-telegram-bot) for each would cost more than the work. The others get a stand-in
parser with the same name and help line, which is all `loom --help` shows of them;
tests/unit/test_cli_imports.py checks the stand-ins against what the modules register.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence

from loomtui import text
from loomtui.cli import common
from loomtui.cli import remote as _remote
from loomtui.errors import LoomError

# Order is the order of `loom --help`: (module under loomtui.cli, ((command, help line), ...)).
COMMANDS: list[tuple[str, tuple[tuple[str, str], ...]]] = [
    ("status", (("status", "show the agent, supervisor and store at a glance"),)),
    ("hosts_cmd", (
        ("hosts", "every host's agents: state, last canary, queue, hold, heartbeat (over ssh)"),
        ("prometheus-config", "print a Prometheus scrape configuration for this host and every [[hosts]] entry"),
    )),
    ("doctor", (("doctor", "check tmux, config, state dir, store and ledger, and simulate the config; "
                           "non-zero if any fails (2: the config)"),)),
    ("check", (("check", "one line and a monitoring plugin's exit code: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN"),)),
    ("ledger_cmd", (("ledger", "read or verify the hash-chained event ledger"),)),
    ("agent_cmds", (
        ("inject", "type one line into the agent's pane (through the one injection path)"),
        ("recycle", "relaunch the agent: resume the pinned session or start fresh"),
        ("pane", "print the agent's pane as tmux shows it (read only)"),
        ("attach", "attach this terminal to the agent's tmux session (detach: C-b d)"),
    )),
    ("canary_cmd", (("canary", "send a liveness probe now and wait for the ack (exit 0 on ack, 1 on miss)"),)),
    ("daemon", (
        ("supervise", "run the supervisor daemon (watchdog, canary, sentinel, notifications)"),
        ("install-service", "write a systemd user unit or a launchd agent for `loom supervise`"),
    )),
    ("memory", (("memory", "list, search, lint or add to the agent's memory index"),)),
    ("jobs", (
        ("run-job", "run a configured job's command (no shell), append its output to the job log "
                    "and record the run; exits with the command's status"),
        ("queue", "list the sentinel queue: open, claimed and recently witnessed items"),
        ("jobs", "every job of the agent: its last run, its open failures, when it is due next"),
        ("resolve", "claim a queue item as handled; it is witnessed by the job's next clean run"),
        ("sentinel", "the sentinel by hand (the daemon runs it every sentinel.interval)"),
    )),
    ("hold", (
        ("hold", "suspend automatic relaunches, reaps, modal dismissals and nudges "
                 "(observation, probes on request and recording go on)"),
        ("release", "end the hold in force (the operator's or the ceiling's)"),
    )),
    ("outbox_cmd", (("outbox", "the operator's messages not delivered yet, and those Telegram refused "
                                "(--retry them or --forget them)"),)),
    ("tick", (("tick", "run exactly one tick of one loop, as `loom supervise` would "
                       "(exit 0 ran, 1 failed, 74 the store is unusable, 75 another tick of that loop was running)"),)),
    ("sim", (("sim", "simulate months of faults in seconds against Loom's real rules"),)),
    ("pump", (("pump", "run a stream-json agent CLI in this pane: its transcript, queue and injection socket"),)),
]

# Options of `loom` itself that take a value: the command is the first word that is not one of these.
_VALUED = ("--config", "--state-dir", "--host", "--via-ssh")


def build_parser(argv: Sequence[str] | None = None, *, every: bool = False) -> argparse.ArgumentParser:
    """The parser: the module of the command named in argv (of every command, with `every`)
    registers its real subparsers; the others are stand-ins."""
    chosen = command_in(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="loom",
        description="Loom: keep an AI agent CLI alive, reachable and honest.",
        # `--ho NAME` read as --host by argparse, but not by cli/remote.split, ran the command on
        # this machine: Loom's own options are spelled out.
        allow_abbrev=False,
    )
    common.add_common_options(parser, top_level=True)
    # Read by main() before this parser (cli/remote.py); here for `loom --help`.
    parser.add_argument("--host", metavar="NAME", help="run the command on that host's own Loom, over ssh ([[hosts]])")
    # What another machine's `loom --host` adds: the source it records (cli/remote.py:check_via).
    parser.add_argument("--via-ssh", metavar="ORIGIN", default=None, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    known = any(name == chosen for _, commands in COMMANDS for name, _ in commands)
    for module, commands in COMMANDS:
        if every or any(name == chosen for name, _ in commands):
            importlib.import_module(f"loomtui.cli.{module}").register(sub)
        elif not known:
            # Only `loom --help` and a mistyped command show the others (argparse builds each
            # stand-in for a millisecond, and the chosen command never needs them).
            for name, help_line in commands:
                sub.add_parser(name, help=help_line, description=help_line)
    return parser


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand word in argv: the first that is neither an option nor an option's value."""
    args = iter(argv)
    for arg in args:
        if arg == "--":
            return next(args, None)
        if arg.startswith("-"):
            # argparse takes an unambiguous prefix of a long option, and its value in the next word.
            if "=" not in arg and len(arg) > 2 and any(o.startswith(arg) for o in _VALUED):
                next(args, None)
            continue
        return arg
    return None


# The commands whose output is meant for a terminal as it is: the pump draws the agent's pane.
_RAW_OUTPUT = ("pump",)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    refused = not_utf8(words)
    if refused:
        print(f"loom: {refused}", file=sys.stderr)
        return 2
    try:
        remote = _remote.split(words, _VALUED)
    except LoomError as exc:
        print(f"loom: {exc}", file=sys.stderr)
        return exc.exit_code
    if remote is None and command_in(words) in _RAW_OUTPUT:
        return _run(words)
    # Every other command's output is untrusted text at least in part (reasons, notes, job names,
    # log lines, pane text, another host's answer): whatever prints it, the terminal gets it
    # through text.printable.
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = text.PrintableStream(out), text.PrintableStream(err)
    try:
        return _run(words) if remote is None else _guarded(lambda: _remote.run(*remote))
    finally:
        sys.stdout, sys.stderr = out, err


def not_utf8(words: Sequence[str], environ: Mapping[str, str] | None = None) -> str:
    """Why the command line cannot be taken ("" when it can): an argument, or one of Loom's
    environment variables, that is not valid UTF-8 (the bytes are not echoed: they may be a secret)."""
    n = text.undecodable(words)
    if n is not None:
        return f"argument {n} is not valid UTF-8"
    env = os.environ if environ is None else environ
    for name in sorted(k for k in env if k.startswith("LOOM_")):
        if text.undecodable([name, env[name]]) is not None:
            return f"environment variable {text.printable(name)} is not valid UTF-8"
    return ""


def _run(argv: list[str]) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)

    def command() -> int:
        _remote.check_via(args)
        return args.func(args)

    try:
        return _guarded(command)
    finally:
        common.close_contexts(args)


def _guarded(command: Callable[[], int | None]) -> int:
    """Run a command: a LoomError is one line and its exit code, anything else non-zero."""
    try:
        code = command()
    except LoomError as exc:
        print(f"loom: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 1
    except Exception:  # an unexpected failure must still end non-zero, with the trace to fix it
        traceback.print_exc()
        code = 1
    return int(code or 0)


def entry() -> None:
    sys.exit(main())
