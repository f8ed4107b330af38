"""`loom inject TEXT`, `loom recycle --resume|--fresh`, and the pane: `loom pane` (its screen, read)
and `loom attach` (the operator's terminal on it)."""

from __future__ import annotations

import argparse
import signal
import sys

from loomtui.cli.common import context, subcommand


def register(sub) -> None:
    inject = subcommand(sub, "inject", "type one line into the agent's pane (through the one injection path)",
                        agent=True)
    inject.add_argument("text", nargs="*", help="the message; several words are joined by spaces")
    inject.add_argument("--stdin", action="store_true",
                        help="read the one line from standard input (not in the process list; over ssh, not in its command)")
    inject.set_defaults(func=run_inject)
    recycle = subcommand(sub, "recycle", "relaunch the agent: resume the pinned session or start fresh",
                         agent=True)
    mode = recycle.add_mutually_exclusive_group(required=True)
    mode.add_argument("--resume", dest="mode", action="store_const", const="resume")
    mode.add_argument("--fresh", dest="mode", action="store_const", const="fresh")
    recycle.add_argument("--reason", help="why (recorded in the ledger)")
    recycle.set_defaults(func=run_recycle)
    pane = subcommand(sub, "pane", "print the agent's pane as tmux shows it (read only)", agent=True)
    pane.add_argument("--lines", type=int, default=0, metavar="N", help="and N lines of its scrollback (0)")
    pane.add_argument("--json", action="store_true", help="its state, screen (with its colours) and why")
    pane.set_defaults(func=run_pane)
    attach = subcommand(sub, "attach", "attach this terminal to the agent's tmux session (detach: C-b d)", agent=True)
    attach.set_defaults(func=run_attach)


MAX_LINES = 5000  # the scrollback `loom pane` prints at most


def run_pane(args: argparse.Namespace) -> int:
    from loomtui.agent import drivers
    from loomtui.cli.common import print_json
    from loomtui.errors import LoomError
    from loomtui.report import pane
    from loomtui.text import printable

    if not 0 <= args.lines <= MAX_LINES:
        raise LoomError(f"pane --lines takes 0 to {MAX_LINES}, not {args.lines}", exit_code=2)
    seen = pane.look(drivers.of(context(args)), args.lines, ansi=args.json)
    if args.json:
        print_json(seen.as_json())  # the escapes stay JSON-escaped text: the reader makes them safe
        return 0
    for line in seen.text.splitlines():
        print(printable(line))  # the pane's text is anyone's: no control character reaches this terminal
    if seen.why:
        print(printable(f"loom: the agent's pane is {seen.state}: {seen.why}"), file=sys.stderr)
    return 0 if seen.state in (pane.UP, pane.DEAD) else 1


def run_attach(args: argparse.Namespace) -> int:
    import subprocess

    from loomtui.agent import drivers
    from loomtui.agent.tmux import TmuxError, clean_env

    driver = drivers.of(context(args))
    code = subprocess.run(driver.attach_argv(), check=False, env=clean_env()).returncode
    try:
        driver.restore_size()  # the attach sized the agent's window to this terminal; tmux keeps that
    except TmuxError:
        pass  # no session left to resize
    return code


def run_inject(args: argparse.Namespace) -> int:
    from loomtui import actions

    from loomtui.cli.actor import of_cli, source_of

    from loomtui.cli.common import from_stdin
    from loomtui.errors import LoomError

    if bool(args.text) == args.stdin:
        raise LoomError("inject takes the line as words or with --stdin, one of the two", exit_code=2)
    text = from_stdin("inject --stdin", one_line=True) if args.stdin else " ".join(args.text)
    ctx = context(args)
    result = actions.inject(ctx, text, source=source_of(args), actor=of_cli(ctx, args))
    if not result.ok:
        print(f"loom: inject failed: {result.error}", file=sys.stderr)
        return 1
    print(f"injected {result.length} characters (digest {result.digest})")
    if result.unrecorded:
        # Typed: a non-zero exit must not read as "not sent", or a retry types the line twice.
        print(f"loom: the line was typed, but the ledger could not record it ({result.unrecorded}); "
              "do not send it again", file=sys.stderr)
        return 75
    return 0


def run_recycle(args: argparse.Namespace) -> int:
    from loomtui import actions

    from loomtui.cli.actor import of_cli, source_of

    ctx = context(args)
    # A relaunch cut in half leaves no agent, or a pin on a session never launched: a hangup (an SSH
    # session that drops; the agent's own pane closing, when the agent asked from inside it, with
    # `agent.may_hold`: its relaunch ends the tree this command runs in) must not end it, nor the
    # SIGTERM a parent in that tree passes on to what it ran as the relaunch ends it. (Ctrl-C still
    # does; the relaunch's own waits are bounded.)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    outcome = actions.recycle(ctx, args.mode, source=source_of(args), reason=args.reason, actor=of_cli(ctx, args))
    try:
        print(outcome.describe(), file=sys.stdout if outcome.ok else sys.stderr, flush=True)
    except OSError:
        pass  # the terminal went with the pane or the session: the ledger has the outcome
    return 0 if outcome.ok else 1
