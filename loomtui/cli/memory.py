"""`loom memory [--json] [search TERM | show REL | edit REL | lint | add TITLE --hook TEXT | sync]`: the
agent's memory directory.

Memory files are untrusted text: everything printed goes through `memory.printable`, JSON through
`text.dumps`. The reads (the listing, `show`, `search`) have JSON for another host's console, which
asks for them over ssh (tui/memory_source.py); `show` and `edit` take a path inside the directory
only, whoever asks.
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

from loomtui.cli.common import base_context, context, print_json, subcommand
from loomtui.errors import LoomError
from loomtui.memory import index as memory

SHOW_LIMIT = 64 * 1024  # characters of one file `show` prints: the console's preview shows no more


def register(sub) -> None:
    parser = subcommand(sub, "memory", "list, search, lint or add to the agent's memory index", agent=True)
    parser.add_argument("--json", action="store_true",
                        help="the listing as JSON: every row, its lint problems, the replica's lag")
    parser.set_defaults(func=run_list)
    inner = parser.add_subparsers(dest="memory_command", metavar="search|show|edit|lint|add|sync")
    search = subcommand(inner, "search", "case-insensitive search of titles, hooks and file bodies; 1 if none")
    search.add_argument("term", metavar="TERM")
    _agent_here(search)
    _json_here(search, "the hits as JSON")
    search.set_defaults(func=run_search)
    show = subcommand(inner, "show", f"print one file of the memory dir (its first {SHOW_LIMIT // 1024} KiB); "
                                     "1 if it is outside the dir, missing or not a regular file")
    show.add_argument("rel", metavar="REL", help="its path relative to the memory dir")
    _agent_here(show)
    _json_here(show, "the text as JSON, and whether it was cut")
    show.set_defaults(func=run_show)
    edit = subcommand(inner, "edit", "open one file of the memory dir in $VISUAL or $EDITOR (vi): the console's "
                                     "e for another host's agent runs this there over ssh -t")
    edit.add_argument("rel", metavar="REL", help="its path relative to the memory dir")
    _agent_here(edit)
    edit.set_defaults(func=run_edit)
    lint = subcommand(
        inner, "lint",
        f"report broken links, unindexed, duplicate and empty files, index lines over {memory.LINE_LIMIT} "
        "characters and lines that are not entries; 1 if any",
    )
    _agent_here(lint)
    lint.set_defaults(func=run_lint)
    add = subcommand(inner, "add", "create a memory file and append its index line (never overwrites)")
    add.add_argument("title", metavar="TITLE")
    add.add_argument("--hook", required=True, metavar="TEXT", help="the one-line hook after the link")
    add.add_argument("--file", metavar="NAME", help="file name inside the memory dir (default: a slug of TITLE)")
    add.add_argument("--body", metavar="TEXT", help="file content (default: the title and the hook)")
    _agent_here(add)
    add.set_defaults(func=run_add)
    sync = subcommand(inner, "sync", "commit, pull (rebase), push and checkpoint the ledger head now, for every "
                                     "memory directory with a memory.remote; 1 if a remote could not be reached")
    _agent_here(sync)
    sync.set_defaults(func=run_sync)


def _agent_here(parser: argparse.ArgumentParser) -> None:
    # `loom memory search X --agent beta` as well as `loom memory --agent beta search X`: SUPPRESS,
    # so the inner parser's default never undoes the outer one's value.
    parser.add_argument("--agent", metavar="NAME", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def _json_here(parser: argparse.ArgumentParser, help: str) -> None:
    # SUPPRESS as for --agent: `loom memory --json search X` and `loom memory search X --json` alike.
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=help)


def _say(text: str, stream=None) -> None:
    print(memory.printable(text), file=stream or sys.stdout)


def _where(args: argparse.Namespace):
    return _place(args)[:2]


def _place(args: argparse.Namespace):
    """The memory directory, its index's name, and the state dir (its replica's record is there)."""
    try:
        ctx = context(args, prepare=False)
    except LoomError:
        # Several agents and none named: no question which memory when they all share one.
        ctx = base_context(args, prepare=False)
        config = ctx.config
        places = {(m.dir, m.index) for m in (config.for_agent(n).memory for n in config.agent_names)}
        if len(places) != 1:
            raise
    cfg = ctx.config.memory
    return cfg.dir, cfg.index, ctx.state_dir


def run_list(args: argparse.Namespace) -> int:
    mem_dir, index, state_dir = _place(args)
    report = memory.survey(mem_dir, index)
    if args.json:
        print_json(_listing(mem_dir, report, state_dir))
        return 0
    for row in report.rows:
        if row.title:
            _say(f"{row.target}  {row.title} — {row.hook}".rstrip(" —"))
        elif row.line is not None:
            _say(f"{report.index_name}:{row.line}: not an entry: {row.hook}")
    bad = len(report.problems)
    tail = f"; {bad} lint problem{'s' * (bad != 1)} (loom memory lint)" if bad else ""
    print(f"{report.entries} entr{'ies' if report.entries != 1 else 'y'}{tail}", file=sys.stderr)
    return 0


def _listing(mem_dir, report: memory.Report, state_dir) -> dict:
    from loomtui.memory import replica

    state = replica.state_of(state_dir, mem_dir)
    return {"dir": str(mem_dir), "index": report.index_name, "entries": report.entries,
            "rows": [dataclasses.asdict(row) for row in report.rows],
            "problems": [dataclasses.asdict(problem) for problem in report.problems],
            "replica": None if state is None else replica.lag_line(state, short=True)}


def run_search(args: argparse.Namespace) -> int:
    where = _where(args)
    report = memory.survey(*where)
    bodies = memory.read_bodies(where[0], {r.path for r in report.rows if r.path})
    hits = memory.search(args.term, report, bodies)
    if args.json:
        print_json([dataclasses.asdict(hit) for hit in hits])
        return 0 if hits else 1
    for hit in hits:
        text = hit.text if len(hit.text) <= 160 else hit.text[:159] + "…"
        _say(f"{hit.path}: {hit.where}: {text}")
    return 0 if hits else 1


def run_show(args: argparse.Namespace) -> int:
    mem_dir, _ = _where(args)
    text, clipped = memory.show_text(mem_dir, args.rel, SHOW_LIMIT)
    if args.json:
        print_json({"path": args.rel, "text": text, "clipped": clipped})
        return 0
    sys.stdout.write(memory.printable(text, keep_newlines=True))
    if text and not text.endswith("\n"):
        sys.stdout.write("\n")
    if clipped:
        print(f"… (first {SHOW_LIMIT // 1024} KiB shown)", file=sys.stderr)
    return 0


def run_edit(args: argparse.Namespace) -> int:
    import os

    mem_dir, _ = _where(args)
    try:
        argv = memory.editor_argv(os.environ, memory.edit_path(mem_dir, args.rel))
    except ValueError as exc:  # $VISUAL with an unclosed quote: one line, not a traceback
        raise LoomError(f"memory edit: cannot tell which editor to run ($VISUAL or $EDITOR): {exc}") from None
    try:
        # The editor owns this terminal (the console's ssh -t): its stdin, stdout and stderr.
        return subprocess.run(argv, check=False).returncode
    except OSError as exc:
        raise LoomError(f"memory edit: cannot run {argv[0]} ($VISUAL or $EDITOR): {exc.strerror or exc}") from None


def run_lint(args: argparse.Namespace) -> int:
    report = memory.survey(*_where(args))
    for problem in report.problems:
        _say(problem.describe(report.index_name))
    if report.problems:
        print(f"{len(report.problems)} problem(s)", file=sys.stderr)
        return 1
    files = len({r.path for r in report.rows if r.path})
    print(f"ok: {report.entries} entries, {files} files")
    return 0


def run_add(args: argparse.Namespace) -> int:
    mem_dir, index = _where(args)
    path, line = memory.add_entry(mem_dir, index, args.title, args.hook, args.file, args.body)
    _say(f"created {path}")
    _say(f"{index}: {line}")
    return 0


def run_sync(args: argparse.Namespace) -> int:
    from loomtui.memory import replica

    ctx = base_context(args)
    found = replica.targets(ctx.config, ctx.state_dir)
    if not found:
        where = ctx.config_path or "the config"
        raise LoomError(f"{where}: memory.remote: not set, so there is no replica to sync", exit_code=2)
    failed = 0
    for target in found:
        outcome, state = replica.sync_once(ctx.store, target, forced=True)
        for line in outcome.lines() or ["nothing to do"]:
            _say(f"{target.memory.dir}: {line}")
        _say(f"{target.memory.dir}: {replica.lag_line(state)}")
        failed += bool(outcome.error)
    return 1 if failed else 0
