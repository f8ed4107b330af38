"""Screenshots of the real console on real demo states (run by `make screenshots`).

Starts the built-in demo (demo agent in tmux, `loom supervise`, jobs through `loom run-job`),
waits until it has canaries, a recovery and queue items to show, then saves the first screen
(the overview) and every panel at 80x24 and 160x48 as SVG next to this script, and the console
served to headless Chromium (`loom-tui --serve`, Debian's chromium driven by Playwright) after a
canary from the browser, as PNG. Nothing is staged by hand.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
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
CHROMIUM = "/usr/bin/chromium"
BROWSER_SIZE = {"width": 1700, "height": 1000}  # about 170 columns: the wide overview


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
            await pilot.pause(1.5)  # the overview's lists fill from the first snapshot
            path = out / f"overview-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
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


def browser_shot(config: Path, out: Path) -> Path:
    """The console as a browser shows it: `loom-tui --serve`, a canary pressed in the page."""
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "loomtui.tui.main", "--serve", "--port", str(port), "--config",
                               str(config)], cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True, start_new_session=True)
    try:
        # Its first line on stdout, once it listens: "loom-tui: open http://127.0.0.1:PORT/?token=…".
        line = server.stdout.readline()
        if " open http://" not in line:
            raise RuntimeError("loom-tui --serve did not start listening")
        url = line.split(" open ", 1)[1].strip()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport=BROWSER_SIZE)
                page.goto(url)
                page.wait_for_selector("body.-first-byte", timeout=60_000)
                page.wait_for_timeout(4000)  # the first snapshot and the overview's lists
                page.locator(".xterm-helper-textarea").focus()
                page.keyboard.press("c")
                page.wait_for_timeout(6000)  # the demo agent acks within a second or two
                path = out / "browser-overview.png"
                page.screenshot(path=str(path))
            finally:
                browser.close()
        return path
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(server.pid, sig)
                server.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass


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
        print(browser_shot(config, HERE).relative_to(HERE.parent))
        return 0
    finally:
        demo.stop()


if __name__ == "__main__":
    raise SystemExit(main())
