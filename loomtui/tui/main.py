"""`loom-tui`'s command line: load the context (or start the built-in demo), run the console."""

from __future__ import annotations

import argparse
import sys

from loomtui.context import Context
from loomtui.errors import LoomError


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="loom-tui", description="The Loom operator console.")
    parser.add_argument("--config", metavar="PATH", help="config file (also LOOM_CONFIG)")
    parser.add_argument("--state-dir", metavar="PATH", help="state directory (also LOOM_STATE_DIR)")
    parser.add_argument("--demo", action="store_true",
                        help="start the built-in demo (demo agent, supervisor, jobs) and stop it on quit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    demo = None
    try:
        if args.demo:
            from loomtui.demo.launcher import Demo

            demo = Demo.for_this_install()
            print(f"loom-tui: starting the demo in {demo.root} …", file=sys.stderr)
            config_path = demo.start()
            ctx = Context.load(str(config_path), None)
        else:
            ctx = Context.load(args.config, args.state_dir)
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
