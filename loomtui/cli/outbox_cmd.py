"""`loom outbox [--retry | --forget] [--json]`: the messages for the operator that have not reached
them, and the operator's two decisions about the ones Telegram refused for good.

A message is given up after three refusals of its own (a chat the bot was removed from, a
chat id that is wrong); `loom check` warns while any is kept. `--retry` puts them back in line
(after fixing `telegram.chat_id`, say), `--forget` deletes them (a chat that will never take them).
With Telegram off (`telegram.chat_id = 0`) nothing is ever sent: `loom outbox` is where the
operator reads the messages, and `--read` deletes the pending ones once read (`loom check` warns
while any waits). Each decision is a ledger event naming the messages.
"""

from __future__ import annotations

import argparse
import sys
import time

from loomtui.cli.common import base_context, print_json, subcommand
from loomtui.durations import format_duration
from loomtui.text import one_line, printable

SHOWN = 100  # messages listed at most (the oldest first: the head of the line)


def register(sub) -> None:
    box = subcommand(sub, "outbox", "the operator's messages not delivered yet, and those Telegram refused "
                                    "(--retry them or --forget them)")
    what = box.add_mutually_exclusive_group()
    what.add_argument("--retry", action="store_true", help="put every refused message back in line")
    what.add_argument("--forget", action="store_true", help="delete every refused message")
    what.add_argument("--read", action="store_true",
                      help="Telegram off: show every pending message whole and delete it (nothing would send them)")
    box.add_argument("--json", action="store_true", help="machine-readable output")
    box.set_defaults(func=run_outbox)


def run_outbox(args: argparse.Namespace) -> int:
    from loomtui.cli.actor import source_of
    from loomtui.store import outbox

    ctx = base_context(args)
    if args.read:
        if ctx.config.telegram.chat_id:
            print("loom outbox: --read is for Telegram off (telegram.chat_id = 0): with a chat the pending "
                  "messages are sent", file=sys.stderr)
            return 2
        try:
            gone = outbox.forget_read(ctx.store, source=source_of(args), now=time.time())
        except outbox.Sending as exc:
            print(f"loom outbox: {exc}", file=sys.stderr)
            return 2
        # What is deleted is shown whole here, each as it was to be sent: the operator reads it now.
        if args.json:
            print_json({"action": "read", "outbox_ids": [m.id for m in gone],
                        "messages": [{**m.as_dict(with_text=False), "text": m.text} for m in gone]})
        else:
            now = time.time()
            for m in gone:
                print(printable(f"{m.id:>6}  {format_duration(max(now - m.created, 0.0))} old"))
                for line in m.text.splitlines() or [""]:
                    print(printable(f"        {line}"))
            print(f"{len(gone)} pending message{'' if len(gone) == 1 else 's'} read and deleted"
                  + (f": {', '.join(str(m.id) for m in gone)}" if gone else ""))
        return 0
    if args.retry or args.forget:
        change = outbox.requeue_failed if args.retry else outbox.forget_failed
        ids = change(ctx.store, source=source_of(args))
        done = "put back in line" if args.retry else "deleted"
        if args.json:
            print_json({"action": "retry" if args.retry else "forget", "outbox_ids": ids})
        else:
            print(f"{len(ids)} refused message{'' if len(ids) == 1 else 's'} {done}"
                  + (f": {', '.join(map(str, ids))}" if ids else ""))
        return 0
    messages = outbox.unsent(ctx.store, SHOWN)
    now = time.time()
    if args.json:
        print_json({"messages": [{**m.as_dict(with_text=False), "text": m.text} for m in messages]})
        return 0
    if not messages:
        print("every message has reached the operator")
        return 0
    for m in messages:
        error = f"  last error: {one_line(m.last_error, 120)}" if m.last_error else ""
        print(printable(f"{m.id:>6}  {m.state:<7}  {format_duration(max(now - m.created, 0.0))} old  "
                        f"{m.attempts} attempt{'' if m.attempts == 1 else 's'}  {one_line(m.text, 80)}{error}"))
    return 0
