"""`loom run-job`, `loom queue`, `loom jobs`, `loom resolve` and `loom sentinel scan`: the fleet of jobs."""

from __future__ import annotations

import argparse
import sys
import time

from loomtui import text as text_mod
from loomtui.cli.common import choose_agent, context, count, print_json, row_id, subcommand
from loomtui.durations import format_duration
from loomtui.sentinel.queue_rules import CLAIMED, WITNESSED, Item


def register(sub) -> None:
    run = subcommand(sub, "run-job", "run a configured job's command (no shell), append its output to the job log "
                                     "and record the run; exits with the command's status")
    run.add_argument("name", help="the job's name in [[jobs]]")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command and its arguments")
    run.set_defaults(func=run_job)
    q = subcommand(sub, "queue", "list the sentinel queue: open, claimed and recently witnessed items")
    q.add_argument("--json", action="store_true", help="machine-readable output")
    q.add_argument("--witnessed", type=count, default=10, metavar="N", help="how many witnessed items to show (10)")
    # The queue is every agent's: without --agent, all of it, each item with its agent's name.
    q.add_argument("--agent", dest="only_agent", metavar="NAME", help="only the items of this agent's jobs")
    q.set_defaults(func=run_queue)
    jobs = subcommand(sub, "jobs", "every job of the agent: its last run, its open failures, when it is due next",
                      agent=True)
    jobs.add_argument("--json", action="store_true", help="machine-readable output")
    jobs.set_defaults(func=run_jobs)
    res = subcommand(sub, "resolve", "claim a queue item as handled; it is witnessed by the job's next clean run")
    res.add_argument("id", type=row_id, help="the queue item's id")
    note = res.add_mutually_exclusive_group(required=True)
    note.add_argument("--note", help="what you found and what you did")
    note.add_argument("--note-stdin", action="store_true", help="read the note from standard input")
    res.set_defaults(func=run_resolve)
    sen = subcommand(sub, "sentinel", "the sentinel by hand (the daemon runs it every sentinel.interval)")
    inner = sen.add_subparsers(dest="sentinel_command", metavar="scan", required=True)
    scan = subcommand(inner, "scan", "scan every job log now, update the queue, send due nudges and escalations")
    scan.add_argument("--no-nudge", action="store_true", help="only scan and update the queue")
    scan.add_argument("--json", action="store_true", help="machine-readable report")
    scan.set_defaults(func=run_scan)


def printable(text: object) -> str:
    # Job names, log lines and notes are untrusted: no control character reaches the terminal.
    return text_mod.printable(str(text))


def run_job(args: argparse.Namespace) -> int:
    from loomtui.sentinel import jobrun

    argv = list(args.cmd)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    result = jobrun.run_job(context(args), args.name, argv)
    if result.error:
        print(printable(f"loom: run-job {args.name!r}: {result.error}"), file=sys.stderr)
        # Never 0 after a failure: a clean job whose output could not be written to its log
        # (the disk full, the log's directory gone) exits 74 (EX_IOERR); a failing job keeps its code.
        return result.exit_code or jobrun.LOG_UNWRITTEN
    return result.exit_code


def run_queue(args: argparse.Namespace) -> int:
    from loomtui.sentinel import queue
    from loomtui.store import queue_items

    ctx = context(args)
    store = ctx.store
    only = choose_agent(ctx.config.agent_names, args.only_agent, {}) if args.only_agent else None
    if only is None:
        items = queue.listing(store, include_witnessed=args.witnessed)
        counts = queue.counts(store)
    else:
        items = [i for i in queue.listing(store, include_witnessed=1 << 30) if i.agent == only]
        done = [i for i in items if i.state == WITNESSED]
        items = [i for i in items if i.state != WITNESSED] + done[max(0, len(done) - max(0, args.witnessed)):]
        counts = queue_items.counts(store, only)
    if args.json:
        print_json({"counts": counts, "items": [queue.as_dict(i) for i in items]})
        return 0
    print(f"queue: {counts['open']} open, {counts['claimed']} claimed (awaiting a clean run), "
          f"{counts[WITNESSED]} witnessed")
    now = time.time()
    named = len(ctx.config.agent_names) > 1 and only is None
    for item in items:
        for line in format_item(item, now, with_agent=named):
            print(printable(line))
    return 0


def run_jobs(args: argparse.Namespace) -> int:
    from loomtui.report import fleet

    ctx = context(args)
    now = time.time()
    rows = fleet.rows(ctx, ctx.store, None, now)
    if args.json:
        print_json([row.as_json() for row in rows])
        return 0
    if not rows:
        print(f"no [[jobs]] for agent {ctx.agent}")
    for row in rows:
        print(printable(format_job(row, now)))
    return 0


def format_job(row, now: float) -> str:
    """One job in a line: its name, how its last run went and when, and when it is due next."""
    if row.running:
        last = "running"
    elif row.last_exit is None:
        last = "never ran"
    else:
        last = "ok" if row.last_exit == 0 else f"exit {row.last_exit}"
    if row.last_start is not None:
        last += f", started {format_duration(max(now - row.last_start, 0))} ago"
        if row.last_duration is not None:
            last += f", took {format_duration(row.last_duration)}"
    due = ""
    if row.next_due is not None:
        due = (f"  next in {format_duration(row.next_due - now)}" if row.next_due >= now
               else f"  next {format_duration(now - row.next_due)} late")
    open_ = f"  {row.open_items} open" if row.open_items else ""
    return f"{row.name[:24]:<24}  {last}{open_}{due}  ({row.schedule or 'no schedule'})"


def format_item(item: Item, now: float, with_agent: bool = False) -> list[str]:
    age = format_duration(max(0.0, now - item.first_seen))
    who = f"{item.agent[:12]:<12}  " if with_agent else ""
    head = (f"{item.id:>5}  {item.state:<9}  {who}{item.job[:24]:<24}  {age:>6}  seen {item.count}x  "
            f"nudged {item.nudges}x  {item.kind}: {item.signature[:80]}")
    lines = [head]
    if item.state in (CLAIMED, WITNESSED) or item.reopens:
        who = item.claimed_by or "?"
        if item.claimed_session:
            who += f" (session {item.claimed_session})"
        if item.state == CLAIMED and item.claimed_at is not None:
            lines.append(f"       claimed by {who} {format_duration(max(0.0, now - item.claimed_at))} ago; "
                         "waiting for the job's next clean run")
        elif item.state == WITNESSED:
            lines.append(f"       claimed by {who}; witnessed by run {item.witness_run}")
        else:
            lines.append(f"       reopened {item.reopens}x: the claim did not hold")
    if item.note:
        lines.append(f"       note: {item.note[:200]}")
    return lines


def run_resolve(args: argparse.Namespace) -> int:
    from loomtui import actions
    from loomtui.cli.actor import source_of
    from loomtui.sentinel import queue

    from loomtui.cli.common import from_stdin

    note = from_stdin("resolve --note-stdin", one_line=False) if args.note_stdin else args.note
    item, changed = actions.resolve(context(args), args.id, note, source=source_of(args),
                                    session_id=queue.claimer_session())
    if not changed:
        print(f"queue item {item.id} was already witnessed; nothing to do")
        return 0
    print(printable(f"claimed queue item {item.id} (job {item.job!r}); it is witnessed when the job's next run "
                    "exits 0 with no failure lines, and reopened if that run fails"))
    return 0


def run_scan(args: argparse.Namespace) -> int:
    from loomtui.sentinel.tick import sentinel_tick

    report = sentinel_tick(context(args), notify=not args.no_nudge)
    if args.json:
        print_json(report.as_dict())
    else:
        print(printable(report.describe()))
        for error in report.errors:
            print(printable(f"loom: {error}"), file=sys.stderr)
    return 1 if report.errors else 0
