"""Screenshots of the real console on real demo states (run by `make screenshots`).

Starts the built-in demo (demo agent in tmux, `loom supervise`, jobs through `loom run-job`),
waits until it has canaries, a recovery and queue items to show, then saves every panel at
80x24 and 160x48 as SVG next to this script. Nothing is staged by hand.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from loomtui.context import Context  # noqa: E402
from loomtui.demo.launcher import Demo  # noqa: E402
from loomtui.store import ledger  # noqa: E402
from loomtui.store.db import Store  # noqa: E402
from loomtui.tui.app import LoomApp  # noqa: E402
from loomtui.tui.keymap import TABS  # noqa: E402

SIZES = [(80, 24), (160, 48)]


def ready(state_dir: Path) -> bool:
    """A crash recovered and acked, and the failing job in the queue."""
    with Store.in_dir(state_dir) as store:
        relaunched = [e for e in ledger.tail(store, 500, kinds=["relaunch"]) if e.cause in ("crash", "exit")]
        acked = store.query_one("SELECT COUNT(*) FROM canary_runs WHERE result = 'ok'")[0]
        items = store.query_one("SELECT COUNT(*) FROM queue_items")[0]
    return bool(relaunched) and acked >= 2 and items >= 2


async def shoot(ctx: Context, out: Path) -> list[Path]:
    saved = []
    for width, height in SIZES:
        app = LoomApp(ctx, watch=False)
        async with app.run_test(size=(width, height)) as pilot:
            deadline = time.monotonic() + 20
            while app.snapshot is None and time.monotonic() < deadline:
                await pilot.pause(0.2)
            for n, (tab, _) in enumerate(TABS, start=1):
                await pilot.press(str(n))
                await pilot.pause(1.5)
                path = out / f"{tab}-{width}x{height}.svg"
                app.save_screenshot(str(path))
                saved.append(path)
            await pilot.press("question_mark")
            await pilot.pause(0.5)
            path = out / f"help-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
    return saved


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="loom-screens-"))
    demo = Demo(root / "demo")
    try:
        config = demo.start()
        ctx = Context.load(str(config), None)
        deadline = time.monotonic() + 180
        while not ready(ctx.state_dir):
            if time.monotonic() > deadline:
                print("the demo did not reach a state worth showing within 3 minutes", file=sys.stderr)
                return 1
            time.sleep(1)
        for path in asyncio.run(shoot(ctx, HERE)):
            print(path.relative_to(HERE.parent))
        return 0
    finally:
        demo.stop()


if __name__ == "__main__":
    raise SystemExit(main())
