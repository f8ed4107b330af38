"""`loom status [--json]`."""

from __future__ import annotations

import argparse

from .. import status as status_mod
from ..durations import format_duration
from ..ledger import Event
from .common import context, print_json, subcommand
from .ledger_cmd import format_event


def register(sub) -> None:
    parser = subcommand(sub, "status", "show the agent, supervisor and store at a glance")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    data = status_mod.gather(context(args))
    if args.json:
        print_json(data)
        return 0
    age = data["supervisor"]["heartbeat_age"]
    print(f"state dir       {data['state_dir']}")
    print(f"config          {data['config'] or '(defaults)'}")
    print(f"pinned session  {data['pinned_session'] or '(none)'}")
    print(f"supervisor      {'no heartbeat' if age is None else 'heartbeat ' + format_duration(age) + ' ago'}")
    print(f"ledger          {data['ledger']['events']} events")
    print(f"telegram        {_telegram_line(data['telegram'])}")
    if data["last_events"]:
        print("last events:")
        for e in data["last_events"]:
            print("  " + format_event(Event(**e)))
    return 0


def _telegram_line(tg: dict) -> str:
    box = tg["outbox"]
    line = f"outbox {box['pending']} pending, {box['failed']} failed, {box['sent']} sent"
    if box["last_error"]:
        # Telegram's own words: printable characters only on a terminal.
        line += "; last error: " + "".join(c if c.isprintable() else "?" for c in box["last_error"])
    if tg["conflict"]:
        line += f"; {tg['conflict']['note']}"
    return line
