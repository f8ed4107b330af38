"""Options every command takes, and the shared way a command gets its Context."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

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


def subcommand(sub: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help, description=help, **kwargs)
    add_common_options(parser)
    return parser


def context(args: argparse.Namespace, *, prepare: bool = True) -> Context:
    ctx = getattr(args, "_context", None)
    if ctx is None:
        from loomtui.context import Context  # only for commands that read the config

        ctx = Context.load(args.config, args.state_dir, prepare=prepare)
        args._context = ctx
    return ctx


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str, ensure_ascii=False)
    sys.stdout.write("\n")
