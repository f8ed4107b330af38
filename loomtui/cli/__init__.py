"""`loom`: the command line. Each subcommand lives in its own module and registers itself here."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from loomtui.cli import agent_cmds, canary_cmd, common, daemon, doctor, jobs, ledger_cmd, memory, status
from loomtui.errors import LoomError

# Order is the order of `loom --help`.
COMMANDS = [status, doctor, ledger_cmd, agent_cmds, canary_cmd, daemon, memory, jobs]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loom",
        description="Loom: keep an AI agent CLI alive, reachable and honest.",
    )
    common.add_common_options(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except LoomError as exc:
        print(f"loom: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = 1
    except Exception:  # an unexpected failure must still end non-zero, with the trace to fix it
        traceback.print_exc()
        code = 1
    finally:
        ctx = getattr(args, "_context", None)
        if ctx is not None:
            ctx.close()
    return int(code or 0)


def entry() -> None:
    sys.exit(main())
