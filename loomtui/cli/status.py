"""`loom status [--json]`."""

from __future__ import annotations

import argparse

from loomtui.cli.common import context, print_json, subcommand
from loomtui.cli.ledger_cmd import format_event
from loomtui.durations import format_duration
from loomtui.report import status as status_mod
from loomtui.text import printable


def register(sub) -> None:
    parser = subcommand(sub, "status", "show the agent, supervisor and store at a glance")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    status = status_mod.gather(context(args))
    if args.json:
        print_json(status.as_json())
        return 0
    sup = status.supervisor
    print(f"state dir       {status.state_dir}")
    print(f"config          {status.config or '(defaults)'}")
    print(f"agent           {_agent_line(status.agent.as_json(), status.hold)}")
    print(f"pinned session  {status.pinned_session or '(none)'}")
    print(f"canary          {_canary_line(status.canary)}")
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


def _agent_line(agent: dict, hold: dict | None) -> str:
    if hold:
        return "HELD at the ceiling: automatic relaunching stopped until an operator acts (loom recycle)"
    if agent["tmux"] != "up":
        return f"tmux {agent['tmux']}: {agent['why']}"
    if agent.get("dead"):
        return f"exited (status {agent.get('exit_status')})"
    line = f"process {agent.get('process')}" + (f" (pid {agent['pid']})" if agent.get("pid") else "")
    if agent.get("poller") and agent["poller"] != "unknown":
        line += f", poller {agent['poller']}"
    return line


def _canary_line(last: status_mod.CanaryLast | None) -> str:
    if last is None:
        return "no probe yet"
    line = f"{last.result} {format_duration(max(last.age, 0))} ago"
    if last.latency is not None:
        line += f" (acked in {last.latency:.2f}s)"
    return line


def _telegram_line(box: dict, conflict: dict | None) -> str:
    line = f"outbox {box['pending']} pending, {box['failed']} failed, {box['sent']} sent"
    if box["last_error"]:
        # Telegram's own words: printable characters only on a terminal.
        line += "; last error: " + printable(box["last_error"])
    if conflict:
        line += f"; {conflict['note']}"
    return line
