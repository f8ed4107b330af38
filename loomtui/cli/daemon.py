"""`loom supervise` and `loom install-service`."""

from __future__ import annotations

import argparse
import sys

from loomtui.cli.common import context, subcommand


def register(sub) -> None:
    parser = subcommand(sub, "supervise", "run the supervisor daemon (watchdog, canary, sentinel, notifications)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.set_defaults(func=run_supervise)
    install = subcommand(sub, "install-service", "write a systemd user unit or a launchd agent for `loom supervise`")
    kind = install.add_mutually_exclusive_group()
    kind.add_argument("--systemd", dest="kind", action="store_const", const="systemd")
    kind.add_argument("--launchd", dest="kind", action="store_const", const="launchd")
    install.add_argument("--print", action="store_true", help="print it instead of writing it")
    install.add_argument("--force", action="store_true",
                         help="replace a unit already there that says something else (kept as .bak)")
    install.set_defaults(func=run_install)


def run_supervise(args: argparse.Namespace) -> int:
    from loomtui.cli import _guarded
    from loomtui.daemon import loops
    from loomtui.daemon.logs import setup_logging
    from loomtui.daemon.supervise import leave, supervise

    setup_logging(args.log_level)
    ctx = context(args)
    # Its error said here, as every command's: the process may end in `leave`, a thread stuck.
    return leave(_guarded(lambda: supervise(ctx, loops.tick_loops(ctx), loops.services(ctx))))


def run_install(args: argparse.Namespace) -> int:
    from loomtui.daemon import service

    kind = args.kind or ("launchd" if sys.platform == "darwin" else "systemd")
    ctx = context(args)
    if args.print:
        sys.stdout.write(service.render(ctx, kind))
        return 0
    path, how, backup = service.install(ctx, kind, force=args.force)
    print({"written": f"wrote {path}", "replaced": f"replaced {path} (the old one is kept in {backup})",
           "unchanged": f"unchanged, already as it would be written: {path}"}[how])
    if kind == "systemd":
        print("enable it with: systemctl --user daemon-reload && systemctl --user enable --now loom.service")
        print("and keep it running after you log out: loginctl enable-linger $USER")
    else:
        print(f"load it with: launchctl load -w {path}")
    return 0
