"""`loom status [--agent NAME] [--json]`: one agent in full, or every agent at a glance.

JSON: a single-agent setup prints the object `loom status --json` has always printed; with
several agents, `--agent NAME` prints that agent's object with its `name`, `state` and
`relaunches_last_hour` added, and no --agent a list of those objects, one per agent. `--list`
prints that list whatever the number of agents (`loom hosts` reads it from every host).
"""

from __future__ import annotations

import argparse

from loomtui.cli.common import add_agent_option, base_context, choose_agent, context, print_json, subcommand
from loomtui.cli.ledger_cmd import format_event
from loomtui.durations import format_duration
from loomtui.text import printable


def register(sub) -> None:
    parser = subcommand(sub, "status", "show the agent, supervisor and store at a glance")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--list", action="store_true",
                        help="with --json: a list of every agent's object (with its name and state), one agent or several")
    add_agent_option(parser, "only this agent, in full (default: every agent; LOOM_AGENT in an agent's pane)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.report import status as status_mod

    base = base_context(args)
    if args.list and args.json:
        # Every agent, or the one named: always the same shape, for a reader on another host.
        named = args.agent is not None
        statuses = [status_mod.gather(context(args))] if named else status_mod.gather_all(base)
        print_json([s.as_agent_json() for s in statuses])
        return 0
    if choose_agent(base.config.agent_names, args.agent, required=False) is None:
        return run_all(args, status_mod.gather_all(base), base.config.telegram.chat_id)
    status = status_mod.gather(context(args))
    if args.json:
        print_json(status.as_json() if len(base.config.agent_names) == 1 else status.as_agent_json())
        return 0
    print(f"state dir       {status.state_dir}")
    print(f"config          {status.config or '(defaults)'}")
    if len(base.config.agent_names) > 1:
        print(f"agent name      {status.name}")
    print(f"agent           {printable(status.agent.describe()) if status.agent else 'not looked at'}")
    if status.turn is not None:
        print(f"turn            {status.turn.describe()}")
    if status.hold:
        print(f"hold            HELD: {_hold_line(status)}")
    print(f"pinned session  {printable(status.pinned_session or '(none)')}")
    print(f"canary          {printable(status.canary.describe()) if status.canary else 'no probe yet'}")
    queue = status.queue
    print(f"queue           {queue.get('open', 0)} open, {queue.get('claimed', 0)} claimed, "
          f"{queue.get('witnessed', 0)} witnessed")
    print(f"supervisor      {_supervisor_line(status)}")
    print(f"ledger          {status.ledger_events} events")
    if status.replica is not None:
        print(f"memory replica  {printable(status.replica.describe())}")
    print(f"telegram        {_telegram_line(status.outbox, status.conflict, base.config.telegram.chat_id)}")
    _print_pushes(status)
    if status.last_events:
        print("last events:")
        for e in status.last_events:
            print("  " + format_event(e))
    return 0


def run_all(args: argparse.Namespace, statuses: list, chat_id: int) -> int:
    """Several agents, none named: a line each, then what they share."""
    if args.json:
        print_json([s.as_agent_json() for s in statuses])
        return 0
    first = statuses[0]
    print(f"state dir       {first.state_dir}")
    print(f"config          {first.config or '(defaults)'}")
    print(f"supervisor      {_supervisor_line(first)}")
    print(f"ledger          {first.ledger_events} events")
    shown: set[str] = set()
    for s in statuses:  # one line per replicated memory directory (agents may share one)
        if s.replica is not None and s.replica.dir not in shown:
            shown.add(s.replica.dir)
            print(printable(f"memory replica  {s.replica.describe()}" + (f" ({s.replica.dir})" if len(statuses) > 1 else "")))
    print(f"telegram        {_telegram_line(first.outbox, first.conflict, chat_id)}")
    _print_pushes(first)
    width = max(len("AGENT"), *(len(s.name) for s in statuses))
    print(f"{'AGENT':<{width}}  {'STATE':<16}  {'LAST CANARY':<24}  {'RELAUNCHES 1H':>13}  {'QUEUE':>5}  HOLD")
    for s in statuses:
        canary = f"{s.canary.result} {format_duration(max(s.canary.age, 0))} ago" if s.canary else "no probe yet"
        hold = _hold_line(s) if s.hold else "-"
        print(f"{s.name:<{width}}  {s.state:<16}  {canary:<24}  {s.relaunches_last_hour:>13}  {s.unresolved:>5}  "
              f"{hold}")
    for s in statuses:
        if s.agent is not None and s.agent.tmux != "up":
            print(printable(f"{s.name}: {s.agent.describe()}"))
    print("loom status --agent NAME shows one agent in full")
    return 0


def _print_pushes(status) -> None:
    from loomtui.hosts.view import push_beats

    for (name, beat), push in zip(status.pushes.items(), push_beats(status.pushes, limit=None)):
        print(printable(f"heartbeat       {name} to {beat['url']}: {push.words()}"))


def _hold_line(status) -> str:
    from loomtui.agent import hold_rules

    hold = status.hold
    act = "loom release, or loom recycle" if hold.by == "ceiling" else "loom release"
    # The reason is anyone's words (CLI, console, Telegram): one line, nothing a terminal obeys.
    return printable(f"{hold_rules.describe(hold, status.moment)}; Loom's own hands wait ({act})")


def _supervisor_line(status) -> str:
    sup = status.supervisor
    return "no heartbeat" if sup is None else "heartbeat " + format_duration(sup.age) + " ago"


def _telegram_line(box: dict, conflict: dict | None, chat_id: int) -> str:
    line = f"outbox {box['pending']} pending, {box['failed']} failed, {box['sent']} sent"
    if not chat_id:
        # Nothing will send them: say so, rather than leave "pending" to read as "on its way".
        line = "off (telegram.chat_id = 0): " + line + ("; the pending stay unsent" if box["pending"] else "")
    if box["last_error"]:
        # Telegram's own words: printable characters only on a terminal.
        line += "; last error: " + printable(box["last_error"])
    if conflict:
        line += f"; {printable(conflict['note'])}"
    return line
