"""`python -m loomtui.telegram`: the sender (and the command poller and the bridge, when enabled) until SIGTERM.

A stand-in for `loom supervise`, which runs the same two coroutines as tasks of its own; this
runner exists so the loops can be run, killed and restarted as real processes.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import traceback
from collections.abc import Sequence

from loomtui import redact
from loomtui.context import Context
from loomtui.daemon import scrub as logs
from loomtui.errors import LoomError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loomtui.telegram", description=__doc__.splitlines()[0])
    parser.add_argument("--config", metavar="PATH", help="config file (also LOOM_CONFIG)")
    parser.add_argument("--state-dir", metavar="PATH", help="state directory (also LOOM_STATE_DIR)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logs.install()
    logs.quiet_http(debug=args.log_level == "debug")
    try:
        ctx = Context.load(args.config, args.state_dir)
        try:
            return asyncio.run(_run(ctx))
        finally:
            ctx.close()
    except LoomError as exc:
        print(f"loom: {redact.scrub(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception:  # the trace is needed to fix it, the token in it is not
        print(redact.scrub(traceback.format_exc()), file=sys.stderr)
        return 1


async def _run(ctx: Context) -> int:
    # Imported here so a config error is reported before python-telegram-bot is even loaded.
    from loomtui.telegram.bridge import run_bridge
    from loomtui.telegram.commands import OperatorActions, run_commands
    from loomtui.telegram.sender import run_sender

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.create_task(run_sender(ctx, stop), name="telegram-sender")]
    if ctx.config.telegram.commands or ctx.config.telegram.bridge:
        tasks.append(asyncio.create_task(run_commands(ctx, OperatorActions(ctx), stop), name="telegram-commands"))
    if ctx.config.telegram.bridge:
        tasks.append(asyncio.create_task(run_bridge(ctx, stop), name="telegram-bridge"))
    logging.getLogger("loomtui.telegram").info("telegram runner started: %s", ", ".join(t.get_name() for t in tasks))
    await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        failed = task.exception()
        if failed is not None:
            raise failed
    return 0


if __name__ == "__main__":
    sys.exit(main())
