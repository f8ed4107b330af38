"""`loom doctor`."""

from __future__ import annotations

import argparse

from loomtui.cli.common import subcommand


def register(sub) -> None:
    parser = subcommand(sub, "doctor", "check tmux, config, state dir, store and ledger, and simulate the config; "
                        "non-zero if any fails (2: the config)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.report.doctor import FAIL, run_checks

    checks = run_checks(args.config, args.state_dir)
    for check in checks:
        print(check.line())
    if any(c.status == FAIL and c.name == "config" for c in checks):
        return 2  # a bad config, as every other command says it (its line names the file and key)
    return 1 if any(c.status == FAIL for c in checks) else 0
