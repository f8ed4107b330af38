"""`loom status [--json]`."""

from __future__ import annotations

import argparse

from loomtui.cli.common import context, print_json, subcommand
from loomtui.cli.ledger_cmd import format_event
from loomtui.durations import format_duration
from loomtui.text import printable


def register(sub) -> None:
    parser = subcommand(sub, "status", "show the agent, supervisor and store at a glance")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.report import status as status_mod

    status = status_mod.gather(context(args))
    if args.json:
        print_json(status.as_json())
        return 0
    sup = status.supervisor
    print(f"state dir       {status.state_dir}")
    print(f"config          {status.config or '(defaults)'}")
    print(f"agent           {status.agent.describe()}")
    if status.hold:
        from loomtui.agent import hold_rules

        hold = hold_rules.Hold.from_record(status.hold)
        act = "loom release, or loom recycle" if hold.by == "ceiling" else "loom release"
        print(f"hold            HELD: {hold_rules.describe(hold, status.taken)}; Loom's own hands wait ({act})")
    print(f"pinned session  {status.pinned_session or '(none)'}")
    print(f"canary          {status.canary.describe() if status.canary else 'no probe yet'}")
    queue = status.queue
    print(f"queue           {queue.get('open', 0)} open, {queue.get('claimed', 0)} claimed, "
          f"{queue.get('witnessed', 0)} witnessed")
    print(f"supervisor      {'no heartbeat' if sup is None else 'heartbeat ' + format_duration(sup.age) + ' ago'}")
    print(f"ledger          {status.ledger_events} events")
    print(f"telegram        {_telegram_line(status.outbox, status.conflict)}")
    if status.last_events:
        print("last events:")
        for e in status.last_events:
            print("  " + format_event(e))
    return 0


def _telegram_line(box: dict, conflict: dict | None) -> str:
    line = f"outbox {box['pending']} pending, {box['failed']} failed, {box['sent']} sent"
    if box["last_error"]:
        # Telegram's own words: printable characters only on a terminal.
        line += "; last error: " + printable(box["last_error"])
    if conflict:
        line += f"; {conflict['note']}"
    return line
