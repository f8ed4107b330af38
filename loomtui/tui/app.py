"""loom-tui entry point. The console is being built (issue 8); until then it prints the status."""

from __future__ import annotations

import sys

from ..cli import main as loom_main


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    args = [a for a in args if a != "--demo"]
    print("loom-tui: the full-screen console is not built yet; showing `loom status` instead.", file=sys.stderr)
    return loom_main([*args, "status"])
