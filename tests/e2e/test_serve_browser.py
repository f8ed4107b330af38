"""`loom-tui --serve` in a real browser: headless Chromium (Debian's package, driven by Playwright)
opens the served console on a real demo agent, waits for the overview, presses `c`, and sees the
canary's outcome on its screen; the ledger says the probe came from the console.

The terminal in the page draws on a canvas, so the test reads what the page was sent to draw: the
terminal bytes arriving on the page's websocket, recorded in the page by an init script.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from harness import free_port, wait_for

pytestmark = pytest.mark.e2e

CHROMIUM = Path(os.environ.get("LOOM_CHROMIUM", "/usr/bin/chromium"))
ANSI = re.compile(r"\x1b\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")

# Every binary websocket message (the terminal's bytes) decoded and kept, in order.
RECORD_SCREEN = """
(() => {
  const Native = window.WebSocket;
  const decoder = new TextDecoder();
  window.__loomScreen = [];
  function Recording(url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") {
        window.__loomScreen.push(decoder.decode(new Uint8Array(e.data), {stream: true}));
      }
    });
    return ws;
  }
  Recording.prototype = Native.prototype;
  Object.assign(Recording, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
  window.WebSocket = Recording;
})();
"""


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def stop_group(proc: subprocess.Popen) -> None:
    """The server and the console it started for the page: one process group, ended by its id."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                os.killpg(proc.pid, 0)  # raises once every process of the group is gone
                time.sleep(0.1)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass


@pytest.fixture
def chromium_path() -> str:
    if not CHROMIUM.exists() and not shutil.which("chromium"):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; .ci/run installs it)")
    return str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))


@pytest.mark.timeout(300)
def test_the_served_console_in_chromium_runs_a_canary(make_harness, chromium_path, tmp_path):
    from playwright.sync_api import sync_playwright

    harness = make_harness(sections={"canary": {"ack_timeout": "30s"}})
    harness.start()
    port = free_port()
    log = open(tmp_path / "serve.log", "w")
    server = harness.popen("-m", "loomtui.tui.main", "--serve", "--port", str(port), stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: listening(port) or server.poll() is not None, 60, what="loom-tui --serve listening")
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path, headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                # 1700 px wide: about 170 columns, so the first screen is the wide overview.
                page = browser.new_page(viewport={"width": 1700, "height": 1000})
                page.add_init_script(RECORD_SCREEN)
                page.goto(f"http://127.0.0.1:{port}/")

                def seen(since: int = 0) -> str:
                    chunks = page.evaluate("window.__loomScreen || []")
                    return ANSI.sub("", "".join(chunks[since:]))

                def pump(predicate, what: str, timeout: float = 90):
                    deadline = time.monotonic() + timeout
                    while time.monotonic() < deadline:
                        if predicate():
                            return
                        page.wait_for_timeout(200)
                    raise AssertionError(f"timed out waiting for {what}; the page shows:\n{seen()[-3000:]}")

                pump(lambda: "Overview 1" in seen() and "supervisor" in seen() and "latest incidents" in seen(),
                     "the overview in the browser")
                assert "no probe yet" in seen()
                before = len(page.evaluate("window.__loomScreen"))
                page.locator(".xterm-helper-textarea").focus()
                page.keyboard.press("c")
                pump(lambda: "acked in" in seen(before), "the canary's outcome in the browser")
                assert [e["source"] for e in harness.events("canary_sent")] == ["tui"]
                shot = os.environ.get("LOOM_BROWSER_SCREENSHOT")
                if shot:  # screenshots/make_screenshots.py keeps the page as an operator saw it
                    page.wait_for_timeout(500)
                    page.screenshot(path=shot)
            finally:
                browser.close()
    finally:
        stop_group(server)
        log.close()
