"""`loom-tui`'s command line: load the context (or start the built-in demo), run the console in
this terminal, or serve it to a browser on a loopback address or a unix socket (`--serve`)."""

from __future__ import annotations

import argparse
import os
import sys

from loomtui import text
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
                        help="serve the console to a web browser instead of this terminal: loopback only, behind a "
                             "token printed as the URL to open (from elsewhere: ssh -L)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT, metavar="N",
                        help=f"with --serve: the port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default=DEFAULT_HOST, metavar="H",
                        help=f"with --serve: a loopback address to listen on (default {DEFAULT_HOST})")
    parser.add_argument("--socket", metavar="PATH",
                        help="with --serve: listen on this unix socket (mode 0600) instead of TCP, for "
                             "ssh -L PORT:PATH")
    args = parser.parse_args(argv)
    if not args.serve and (args.port != DEFAULT_PORT or args.host != DEFAULT_HOST or args.socket):
        parser.error("--port, --host and --socket go with --serve")
    if args.socket and (args.port != DEFAULT_PORT or args.host != DEFAULT_HOST):
        parser.error("--socket replaces --port and --host")
    return args


def main(argv: list[str] | None = None) -> int:
    # Python hands undecodable bytes over as lone surrogates; refused here in one line, before they
    # reach a path or a message (the bytes are not echoed: they may be a secret).
    bad = text.undecodable(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        print(f"loom-tui: argument {bad} is not valid UTF-8", file=sys.stderr)
        return 2
    args = parse_args(argv)
    demo = None
    try:
        if args.serve:
            from loomtui.tui.serve import check_host, check_socket_path

            # Before anything starts: a refused address starts no demo and touches no state dir.
            if args.socket:
                args.socket = os.path.abspath(args.socket)
                check_socket_path(args.socket)
            else:
                check_host(args.host, args.port)
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
            from loomtui.tui.serve_guard import Listen

            # The config is known good here; each browser tab runs its own console with it.
            command = console_command(str(ctx.config_path) if ctx.config_path else None, str(ctx.state_dir))
            ctx.close()
            listen = Listen(socket_path=args.socket) if args.socket else Listen(host=args.host, port=args.port)
            serve(command, listen, ctx.state_dir)
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
