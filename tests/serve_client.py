"""Drive `loom-tui --serve` as an attacker and as the operator: the served server started on a real
harness, its token file read, and a WebSocket upgrade sent byte by byte (so Host and Origin are
whatever the test says). The client is stdlib only and its source runs as-is under another uid
(`setpriv ... python3 -I -c CLIENT`), where neither the repository nor the venv can be read."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from harness import free_port, wait_for

# One WebSocket upgrade (its HTTP status) and one GET, as an attacker would send them.
CLIENT = r'''
import base64, os, socket

def upgrade(address, path, host, origin=None):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(30)
    try:
        sock.connect(address)
    except OSError as exc:
        return {"error": type(exc).__name__}
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    sock.close()
    return {"status": status}

def get(address, path, host):
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(address)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    sock.close()
    return int(data.split(b" ", 2)[1])
'''

_namespace: dict = {}
exec(compile(CLIENT, "serve_client.CLIENT", "exec"), _namespace)
upgrade = _namespace["upgrade"]
get = _namespace["get"]


ANSI = re.compile(r"\x1b\[[0-9;?<=>]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]")


def operator_presses(address, path: str, host: str, origin: str | None, ready: str, key: str,
                     done: Callable[[], object], timeout: float = 90) -> str:
    """The operator's page, without a browser: a WebSocket (aiohttp) that waits for `ready` on the
    console's screen, presses `key`, and stays connected until `done()`. Returns what it saw."""
    import aiohttp

    async def run() -> str:
        connector = aiohttp.UnixConnector(path=address) if isinstance(address, str) else None
        headers = {"Origin": origin} if origin else {}
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.ws_connect(f"http://{host}{path}", headers=headers) as ws:
                screen, pressed = "", False
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    if pressed and await asyncio.to_thread(done):
                        return screen
                    try:
                        msg = await ws.receive(timeout=0.5)
                    except asyncio.TimeoutError:
                        continue
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        screen += msg.data.decode("utf-8", "replace")
                    elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                        raise AssertionError(f"the console closed; it showed:\n{ANSI.sub('', screen)[-2000:]}")
                    if not pressed and ready in ANSI.sub("", screen):
                        await ws.send_str(json.dumps(["stdin", key]))
                        pressed = True
                raise AssertionError(f"timed out (pressed: {pressed}); the console showed:\n"
                                     f"{ANSI.sub('', screen)[-2000:]}")

    return asyncio.run(run())


class Served:
    """`loom-tui --serve` on a harness: TCP on a free port, or `socket=PATH`."""

    def __init__(self, harness, log: Path, socket: Path | None = None) -> None:
        self.harness = harness
        self.socket = socket
        self.port = 0 if socket else free_port()
        where = ["--socket", str(socket)] if socket else ["--port", str(self.port)]
        self.log = open(log, "w")
        self.log_path = log
        self.proc = harness.popen("-m", "loomtui.tui.main", "--serve", *where, stdout=self.log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: self.token_files() or self.proc.poll() is not None, 60, what="the token file")
        assert self.proc.poll() is None, log.read_text()
        self.token_file = self.token_files()[0]
        # The server creates the file (O_EXCL, 0600) and then writes it: wait for the whole record.
        self.record = wait_for(self._record, 60, what="the token file written")
        self.token = self.record["token"]
        wait_for(self.listening, 60, what="loom-tui --serve listening")

    def _record(self) -> dict | None:
        try:
            record = json.loads(self.token_file.read_text())
        except ValueError:
            return None  # not written yet
        return record if isinstance(record, dict) and "token" in record else None

    @property
    def address(self):
        return str(self.socket) if self.socket else ("127.0.0.1", self.port)

    def token_files(self) -> list[Path]:
        return sorted(self.harness.state_dir.glob("tui-serve.*.json"))

    def listening(self) -> bool:
        import socket as sk

        family = sk.AF_UNIX if self.socket else sk.AF_INET
        with sk.socket(family, sk.SOCK_STREAM) as s:
            try:
                s.connect(self.address)
                return True
            except OSError:
                return False

    def consoles(self) -> list[psutil.Process]:
        """The console processes the server started (one per connection it let in)."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        """SIGTERM the server (it stops its consoles), then anything of its group still there."""
        import os
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = self.proc.wait(30)
        self.log.close()
        return code
