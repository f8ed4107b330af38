"""`loom ledger tail|verify|head`."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from loomtui.cli.common import choose_agent, context, count, row_id, subcommand
from loomtui.errors import LoomError
from loomtui.store import ledger
from loomtui.store.ledger import Event
from loomtui.text import json_safe, printable


def register(sub) -> None:
    parser = subcommand(sub, "ledger", "read or verify the hash-chained event ledger")
    inner = parser.add_subparsers(dest="ledger_command", metavar="tail|verify|head", required=True)
    tail = subcommand(inner, "tail", "print the last events")
    tail.add_argument("-n", type=count, default=20, metavar="N", help="how many events (default 20)")
    tail.add_argument("--kind", action="append", help="only events of this kind (repeatable)")
    tail.add_argument("--json", action="store_true", help="JSON lines")
    tail.add_argument("--before", type=row_id, metavar="ID", help="only events older than event ID (a page further back)")
    tail.add_argument("--text", metavar="WORDS", help="only events whose kind, cause or detail holds WORDS")
    # Not the usual --agent: the ledger is every agent's, and without it tail shows them all.
    tail.add_argument("--agent", dest="only_agent", metavar="NAME", help="only this agent's events")
    tail.set_defaults(func=run_tail)
    verify = subcommand(inner, "verify", "check the hash chain; non-zero naming the first bad event")
    verify.add_argument("--head", metavar="SEQ:HASH",
                        help="also prove the chain still leads to this head, kept earlier off the machine "
                             "(from `loom ledger head`, an escalation or the daily Telegram line)")
    verify.add_argument("--remote", action="store_true",
                        help="also fetch the replica's checkpoints (ledger.remote, or the memory remote) and prove "
                             "the chain still leads to every one of them")
    verify.set_defaults(func=run_verify)
    head = subcommand(inner, "head", "print SEQ:HASH of the newest event: keep it elsewhere, "
                                     "then `loom ledger verify --head` proves nothing before it was rewritten")
    head.set_defaults(func=run_head)


def format_event(event: Event, with_agent: bool = False) -> str:
    """One event on one line; `with_agent` adds whose it is (where several agents share the ledger)."""
    when = dt.datetime.fromtimestamp(event.ts).strftime("%Y-%m-%d %H:%M:%S")
    cause = f" cause={event.cause}" if event.cause else ""
    detail = " ".join(f"{k}={v}" for k, v in sorted(event.detail.items()))
    who = f" {event.agent:<10}" if with_agent else ""
    line = f"{event.id:>7} {when}{who} {event.kind:<18} {event.source:<10}{cause} {detail}".rstrip()
    # The ledger holds untrusted text (pane lines, job names): keep control characters off the terminal.
    return printable(line)


def run_tail(args: argparse.Namespace) -> int:
    ctx = context(args)
    names = ctx.config.agent_names
    only = choose_agent(names, args.only_agent, {}) if args.only_agent else None
    events = list(reversed(ledger.page(ctx.store, before_id=args.before, limit=max(args.n, 0), kinds=args.kind,
                                       text=args.text or None, agent=only)))
    if args.json:
        for e in events:
            # The canonical form, its control characters escaped (json_safe): the same data.
            sys.stdout.write(json_safe(ledger.canonical(e.as_dict())) + "\n")
    else:
        for e in events:
            print(format_event(e, with_agent=len(names) > 1 and only is None))
    return 0


def run_verify(args: argparse.Namespace) -> int:
    kept = None
    if args.head is not None:
        try:
            kept = ledger.parse_head(args.head)
        except ValueError as exc:
            raise LoomError(f"ledger verify --head: {exc}", exit_code=2) from None
    from loomtui.store import earlier_chains

    ctx = context(args)
    checkpoints = _remote_checkpoints(ctx) if args.remote else []
    # A head kept or checkpointed before a salvage is of the ledger the salvage moved aside: proven there.
    heads = [*checkpoints, *([kept] if kept is not None else [])]
    earlier = earlier_chains.prove(ctx.store, heads) if heads else earlier_chains.Proof()
    checkpoints = earlier.unproven(checkpoints)
    kept_here = kept if kept is not None and kept not in earlier.proven else None
    verdict = ledger.verify(ctx.store, kept=kept_here, checkpoints=checkpoints)
    line = verdict.describe()
    if verdict.ok and kept_here is not None:
        line += f", and it leads to the kept head {ledger.format_head(*kept_here)}"
    if verdict.ok and checkpoints:
        newest = max(checkpoints)
        line += (f", and to all {len(checkpoints)} checkpoint{'s' * (len(checkpoints) != 1)} on the remote "
                 f"(the newest {ledger.format_head(*newest)})")
    if verdict.ok:
        for chain in earlier.chains:
            held = sorted(h for h, c in earlier.proven.items() if c.path == chain.path)
            if held:
                line += (f"; {len(held)} head{'s' * (len(held) != 1)} kept off the box before the salvage of "
                         f"{_when(chain.salvaged_at)} proven against the ledger it moved aside, {chain.path} "
                         f"(the newest {ledger.format_head(*held[-1])})")
    print(line, file=sys.stdout if verdict.ok else sys.stderr)
    for chain in earlier.chains:
        if verdict.ok:
            # Exit 0 says the history before the salvage is intact in that file, not in this ledger, and a
            # salvage is written by whoever can write the store: Loom's own tells the operator at once.
            print(f"loom: note: this ledger begins at a salvage on {_when(chain.salvaged_at)}; the history before "
                  f"it is in {chain.path}. Loom told the operator of its own salvage when it made it: one you were "
                  "never told of was made by someone else", file=sys.stderr)
        else:
            reads = f"cannot be read ({chain.error})" if chain.error else f"holds its chain to event {chain.reads_to}"
            print(f"loom: note: this ledger begins at a salvage on {_when(chain.salvaged_at)}; the ledger before it, "
                  f"{chain.path}, {reads}: a head of that ledger beyond it cannot be proven", file=sys.stderr)
    return 0 if verdict.ok else 1


def _when(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def run_head(args: argparse.Namespace) -> int:
    print(ledger.format_head(*ledger.head(context(args).store)))
    return 0


def _remote_checkpoints(ctx) -> list[tuple[int, str]]:
    from loomtui.memory import replica

    target = replica.checkpoint_target(ctx.config, ctx.state_dir)
    if target is None:
        raise LoomError(f"{ctx.config_path or 'the config'}: ledger.remote and memory.remote: neither is set, "
                        "so there are no checkpoints off the box", exit_code=2)
    work = target.replica()
    with work.lock():
        found = work.remote_checkpoints()
    if not found:
        raise LoomError(f"{target.memory.remote}: no ledger checkpoint of host {target.memory.host} there yet "
                        f"({work.checkpoint_path()}): nothing to prove against")
    return found
