"""The cost of one hook event: Loom's fixed hook command (hooks/settings.py) run as Claude Code runs
it, `/bin/sh -c COMMAND` with the event as JSON on stdin, until the event file is in place.

Anchor, in the same run: `/bin/sh -c true` with the same stdin (the cost of any hook at all).
Target (issue 26): at most 5 ms per event, for a small event (a prompt) and a large one (a tool's
output of 200 KB).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from _common import bound_line, machine, median, summary, timed  # noqa: F401  (sets sys.path)

from loomtui.hooks import settings

N = 200
TARGET = 0.005


def run(command: str, payload: bytes) -> None:
    subprocess.run(["/bin/sh", "-c", command], input=payload, stdout=subprocess.DEVNULL, check=True)


def main() -> int:
    print(f"machine: {machine()}")
    root = Path(tempfile.mkdtemp(prefix="loom-bench-hooks-"))
    try:
        settings.write(root)
        command = settings.hook_command(root)
        small = json.dumps({"session_id": "0" * 36, "hook_event_name": "UserPromptSubmit", "cwd": str(root),
                            "prompt": "liveness check — run this one command and do not reply: touch /x"}).encode()
        large = json.dumps({"session_id": "0" * 36, "hook_event_name": "PostToolUse", "tool_name": "Read",
                            "tool_response": "x" * 200_000}).encode()
        anchor = median(timed(lambda: run("true", small), N))
        for label, payload in (("hook event, a prompt (%d B)" % len(small), small),
                               ("hook event, a tool's output (%d B)" % len(large), large)):
            samples = timed(lambda p=payload: run(command, p), N)
            print(summary(label, samples))
            print(bound_line(label, median(samples), TARGET, anchor=("sh -c true", anchor)))
            written = list(settings.events_dir(root).iterdir())
            assert len(written) == N and all(p.read_bytes() == payload for p in written), "an event was lost"
            for path in written:
                path.unlink()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
