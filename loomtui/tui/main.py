"""`loom-tui`'s command line: load the context (or start the built-in demo), run the console in
this terminal, or serve it to a browser on a loopback address (`--serve`)."""

from __future__ import annotations

import argparse
import sys

from loomtui.context import Context
from loomtui.errors import LoomError


def port_number(raw: str) -> int:
    try:
        port = int(raw)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a TCP port (1-65535)")
    return port


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from loomtui.tui.serve import DEFAULT_HOST, DEFAULT_PORT

    parser = argparse.ArgumentParser(prog="loom-tui", description="The Loom operator console.")
    parser.add_argument("--config", metavar="PATH", help="config file (also LOOM_CONFIG)")
    parser.add_argument("--state-dir", metavar="PATH", help="state directory (also LOOM_STATE_DIR)")
    parser.add_argument("--demo", action="store_true",
                        help="start the built-in demo (demo agent, supervisor, jobs) and stop it on quit")
    parser.add_argument("--serve", action="store_true",
                        help="serve the console to a web browser instead of this terminal (loopback only: use ssh -L)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, metavar="N",
                        help=f"with --serve: the port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST, metavar="H",
                        help=f"with --serve: a loopback address to listen on (default {DEFAULT_HOST})")
    args = parser.parse_args(argv)
    if not args.serve and (args.port != DEFAULT_PORT or args.host != DEFAULT_HOST):
        parser.error("--port and --host go with --serve")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    demo = None
    try:
        if args.serve:
            from loomtui.tui.serve import check_host

            check_host(args.host, args.port)  # before anything starts: a refused address starts no demo
        if args.demo:
            from loomtui.demo.launcher import Demo

            demo = Demo.for_this_install()
            print(f"loom-tui: starting the demo in {demo.root} …", file=sys.stderr)
            config_path = demo.start()
            ctx = Context.load(str(config_path), None)
        else:
            ctx = Context.load(args.config, args.state_dir)
        if args.serve:
            from loomtui.tui.serve import console_command, serve

            # The config is known good here; each browser tab runs its own console with it.
            command = console_command(str(ctx.config_path) if ctx.config_path else None, str(ctx.state_dir))
            ctx.close()
            serve(command, args.host, args.port)
            return 0
        from loomtui.tui.app import LoomApp  # after the config is known good: a bad one fails fast

        app = LoomApp(ctx)
        app.run()
        return app.return_code or 0
    except LoomError as exc:
        print(f"loom-tui: {exc}", file=sys.stderr)
        return exc.exit_code
    finally:
        if demo is not None:
            demo.stop()


if __name__ == "__main__":
    raise SystemExit(main())
