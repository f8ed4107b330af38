"""Options every command takes, and the shared way a command gets its Context."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from loomtui.errors import LoomError

if TYPE_CHECKING:
    from loomtui.context import Context


def add_common_options(parser: argparse.ArgumentParser, top_level: bool = False) -> None:
    # On subcommands the default is SUPPRESS so `loom --config X status` is not undone by the
    # subparser's own default.
    default = None if top_level else argparse.SUPPRESS
    parser.add_argument("--config", metavar="PATH", default=default, help="config file (also LOOM_CONFIG)")
    parser.add_argument(
        "--state-dir", metavar="PATH", default=default, help="state directory (also LOOM_STATE_DIR)"
    )


AGENT_ENV = "LOOM_AGENT"  # set by Loom in each agent's pane: a command run there means that agent


SQLITE_MAX = 2**63 - 1  # the largest integer the store takes: a larger one was a traceback


def count(text: str) -> int:
    """An argument that is a number of rows: 0 or more, as the store can take it."""
    return _bounded(text, 0)


def row_id(text: str) -> int:
    """An argument that is a row's id: 1 or more, as the store can take it."""
    return _bounded(text, 1)


def _bounded(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text[:40]!r}") from None
    if not low <= value <= SQLITE_MAX:
        raise argparse.ArgumentTypeError(f"{text[:40]}: a whole number from {low} to {SQLITE_MAX}")
    return value


def subcommand(sub: Any, name: str, help: str, *, agent: bool = False, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand with the common options; `agent=True` for one that acts on one agent (--agent)."""
    # Options spelled out: `loom --host b hold --conf X` was read there as --config, which a
    # command sent to another host may not carry (cli/remote.py checks the exact words).
    parser = sub.add_parser(name, help=help, description=help, allow_abbrev=False, **kwargs)
    add_common_options(parser)
    if agent:
        add_agent_option(parser)
    return parser


def add_agent_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument("--agent", metavar="NAME", default=None,
                        help=help or f"which agent (default: the only one, or {AGENT_ENV})")


@overload
def choose_agent(names: Sequence[str], named: str | None, environ: Mapping[str, str] | None = None, *,
                 required: Literal[True] = True) -> str: ...


@overload
def choose_agent(names: Sequence[str], named: str | None, environ: Mapping[str, str] | None = None, *,
                 required: bool) -> str | None: ...


def choose_agent(names: Sequence[str], named: str | None, environ: Mapping[str, str] | None = None, *,
                 required: bool = True) -> str | None:
    """The agent a command acts on: --agent, else LOOM_AGENT, else the only one. With several and
    none named: exit 2 naming them (None instead when not `required`: the command means them all)."""
    env = os.environ if environ is None else environ
    name = named or env.get(AGENT_ENV) or None
    listed = ", ".join(names)
    if name is not None:
        if name not in names:
            raise LoomError(f"no agent named {name!r} (agents: {listed})", exit_code=2)
        return name
    if len(names) == 1:
        return names[0]
    if not required:
        return None
    raise LoomError(f"several agents ({listed}): name one with --agent NAME", exit_code=2)


def base_context(args: argparse.Namespace, *, prepare: bool = True) -> Context:
    """The context as loaded (the first agent's view), whatever --agent says: for what is the host's."""
    ctx = getattr(args, "_base_context", None)
    if ctx is None:
        from loomtui.context import Context  # only for commands that read the config

        ctx = Context.load(args.config, args.state_dir, prepare=prepare)
        args._base_context = ctx
    return ctx


def context(args: argparse.Namespace, *, prepare: bool = True) -> Context:
    """The context of the agent the command acts on (`choose_agent`), for a command with --agent;
    the loaded one otherwise."""
    ctx = getattr(args, "_context", None)
    if ctx is None:
        ctx = base_context(args, prepare=prepare)
        if hasattr(args, "agent"):
            name = choose_agent(ctx.config.agent_names, args.agent)
            if name != ctx.agent:
                ctx = agent_context(ctx, name, prepare=prepare)
        args._context = ctx
    return ctx


def agent_context(ctx: Context, name: str, *, prepare: bool = True) -> Context:
    """`ctx` seen as agent `name` (a known one); without `prepare`, nothing is made on disk."""
    if prepare:
        return ctx.for_agent(name)
    return type(ctx)(ctx.config.for_agent(name), ctx.config_path, ctx.state_dir)


def close_contexts(args: argparse.Namespace) -> None:
    seen: set[int] = set()
    for ctx in (getattr(args, "_context", None), getattr(args, "_base_context", None),
                *getattr(args, "_more_contexts", ())):
        if ctx is not None and id(ctx) not in seen:
            seen.add(id(ctx))
            ctx.close()


MAX_STDIN = 64 * 1024  # a line or a note from standard input: the console's prompt sends far less


def from_stdin(what: str, *, one_line: bool) -> str:
    """The text a command takes on standard input instead of in its arguments (which every user of
    the machine can read in its process list, and ssh carries in its own): without its final
    newline; exit 2 when there is none, or more than one line where one is asked for."""
    raw = sys.stdin.buffer.read(MAX_STDIN + 1)
    if len(raw) > MAX_STDIN:
        raise LoomError(f"{what} on standard input is longer than {MAX_STDIN} bytes", exit_code=2)
    text = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise LoomError(f"{what}: nothing on standard input", exit_code=2)
    if one_line and ("\n" in text or "\r" in text):
        raise LoomError(f"{what}: one line on standard input, not several", exit_code=2)
    return text


def print_json(data: Any) -> None:
    # Stored text (reasons, notes, job names) may hold control characters: escaped, not raw.
    from loomtui.text import dumps

    sys.stdout.write(dumps(data, indent=2, sort_keys=True, default=str) + "\n")
