"""`loom-tui --serve` in a real browser: headless Chromium (Debian's package, driven by Playwright)
opens the tokened URL the server printed, on a real demo agent, waits for the overview, presses
`c`, and sees the canary's outcome on its screen; the ledger says the probe came from the console.
Served on TCP, and on a unix socket reached through a loopback forwarder (what `ssh -L` does).
Every request the page makes stays on this machine and nothing breaks the page's CSP.

The terminal in the page draws on a canvas, so the test reads what the page was sent to draw: the
terminal bytes arriving on the page's websocket, recorded in the page by an init script.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from harness import free_port
from serve_client import Served

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


@contextmanager
def forwarder(path: Path):
    """A loopback TCP port piped to the unix socket, as `ssh -L PORT:PATH` would: yields the port."""
    port = free_port()
    started = threading.Event()

    async def pipe(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def client(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(path))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def main():
        server = await asyncio.start_server(client, "127.0.0.1", port)
        stop = asyncio.Event()
        running.append((asyncio.get_running_loop(), stop))
        started.set()
        await stop.wait()
        server.close()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()

    running: list = []
    thread = threading.Thread(target=lambda: asyncio.run(main()), daemon=True)
    thread.start()
    assert started.wait(30)
    try:
        yield port
    finally:
        loop, stop = running[0]
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)


@pytest.fixture
def chromium_path() -> str:
    if not CHROMIUM.exists() and not shutil.which("chromium"):
        pytest.skip(f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; .ci/run installs it)")
    return str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))


@contextmanager
def served_url(harness, tmp_path: Path, over: str):
    """The URL the operator opens, and the server behind it: TCP, or the socket through a forwarder."""
    if over == "tcp":
        server = Served(harness, tmp_path / "serve.log")
        try:
            yield server.record["url"], server
        finally:
            server.stop()
        return
    server = Served(harness, tmp_path / "serve.log", socket=tmp_path / "console.sock")
    try:
        with forwarder(tmp_path / "console.sock") as port:
            yield f"http://127.0.0.1:{port}/?token={server.token}", server
    finally:
        server.stop()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("over", ["tcp", "socket"])
def test_the_served_console_in_chromium_runs_a_canary(make_harness, chromium_path, tmp_path, over):
    from playwright.sync_api import sync_playwright

    harness = make_harness(sections={"canary": {"ack_timeout": "30s"}})
    harness.start()
    with served_url(harness, tmp_path, over) as (url, server):
        origin = urlsplit(url).netloc
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path, headless=True,
                                         args=["--no-sandbox", "--disable-dev-shm-usage"])
            try:
                # 1700 px wide: about 170 columns, so the first screen is the wide overview.
                page = browser.new_page(viewport={"width": 1700, "height": 1000})
                page.add_init_script(RECORD_SCREEN)
                requested: list[str] = []
                complaints: list[str] = []
                page.on("request", lambda request: requested.append(request.url))
                page.on("console", lambda msg: complaints.append(msg.text) if msg.type == "error" else None)
                response = page.goto(url)
                assert response is not None and response.status == 200

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
                assert requested and all(urlsplit(u).netloc == origin for u in requested), requested
                assert not [c for c in complaints if "Content Security Policy" in c], complaints
                assert server.consoles()  # the page's own console, started after the token let it in
                shot = os.environ.get("LOOM_BROWSER_SCREENSHOT")
                if shot:  # screenshots/make_screenshots.py keeps the page as an operator saw it
                    page.wait_for_timeout(500)
                    page.screenshot(path=shot)
            finally:
                browser.close()
