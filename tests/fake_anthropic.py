"""A loopback fake of the Anthropic Messages API, for running the real Claude Code CLI in tests.

It answers `POST /v1/messages` (streamed SSE or plain JSON), `count_tokens`, and any other call
the CLI makes at start with a minimal answer, and records every request so a test can see what
the CLI sent (a resumed session's first request carries the earlier turns).

What it answers:
- a user message ending in `touch PATH` (the canary's instruction) gets a `Bash` tool call
  `{"command": "touch PATH"}`; the tool's result, when it comes back, gets a short text;
- one saying `in the background: COMMAND` gets a `Bash` call of COMMAND with `run_in_background`;
  the CLI's own turn that tells of its end (a `<task-notification>`) gets a short text;
- anything else gets a short text that echoes the message (`heard: ...`);
- the CLI's side requests (a title, a topic, ...: no tools offered) get a short plain text.

Switches, changed while it runs: `silent` holds every messages request open, unanswered, until it
is cleared (a model that stopped answering); `slow` (seconds) delays each main request's answer
after its first event (a long turn); `notice_slow` the same for the turns that tell of a background
task's end only.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

MODEL = "claude-fake-1"
CLAUDE_DIR = Path(__file__).resolve().parent / "claude"
CLAUDE_BIN = CLAUDE_DIR / "node_modules" / ".bin" / "claude"
TOUCH = re.compile(r"\btouch (.+?)\s*$")
BACKGROUND = re.compile(r"\bin the background: (.+?)\s*$")
NOTICE = "<task-notification"
REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>", re.DOTALL)


@dataclass
class Request:
    """One HTTP request the CLI made, as it came (the body parsed when it is JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    ts: float = field(default_factory=time.time)

    @property
    def is_messages(self) -> bool:
        return self.method == "POST" and self.path.split("?")[0] == "/v1/messages"

    @property
    def is_main(self) -> bool:
        """A request of the agent's own turn (tools offered), not a side request (a title, ...)."""
        return self.is_messages and isinstance(self.body, dict) and bool(self.body.get("tools"))

    def texts(self) -> list[str]:
        """Every text the conversation in this request holds, user and assistant, in order."""
        if not isinstance(self.body, dict):
            return []
        return [t for m in self.body.get("messages", []) for t in block_texts(m.get("content"))]

    def user_texts(self) -> list[str]:
        """The user's own words in this request, in order, system reminders left out."""
        if not isinstance(self.body, dict):
            return []
        out = []
        for m in self.body.get("messages", []):
            if m.get("role") == "user":
                out += [t for t in (REMINDER.sub("", t).strip() for t in block_texts(m.get("content"))) if t]
        return out


def block_texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(block.get("text", ""))
    return out


def last_user_message(body: dict) -> dict | None:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            return message
    return None


def tool_results(message: dict) -> list[dict]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def plan(request: Request) -> list[dict]:
    """The content blocks to answer `request` with (pure: the same request, the same answer)."""
    body = request.body if isinstance(request.body, dict) else {}
    if not request.is_main:
        return [{"type": "text", "text": "Fake title"}]
    message = last_user_message(body) or {}
    if tool_results(message):
        return [{"type": "text", "text": "done."}]
    if is_notice(request):
        return [{"type": "text", "text": "noted: a background task ended."}]
    words = [REMINDER.sub("", t).strip() for t in block_texts(message.get("content"))]
    words = [w for w in words if w]
    said = words[-1] if words else ""
    background = BACKGROUND.search(said)
    if background:
        return [{"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": "Bash",
                 "input": {"command": background.group(1), "description": "A task in the background",
                           "run_in_background": True}}]
    touch = TOUCH.search(said)
    if touch:
        return [{"type": "tool_use", "id": "toolu_" + secrets.token_hex(12), "name": "Bash",
                 "input": {"command": f"touch {touch.group(1)}", "description": "Touch the ack file"}}]
    return [{"type": "text", "text": f"heard: {said[:200]}"}]


def is_notice(request: Request) -> bool:
    """A main request of the turn the CLI takes by itself to tell of a background task's end."""
    body = request.body if isinstance(request.body, dict) else {}
    message = last_user_message(body) or {}
    return request.is_main and any(NOTICE in t for t in block_texts(message.get("content")))


def stop_reason(blocks: list[dict]) -> str:
    return "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"


def usage(output: int = 1) -> dict:
    return {"input_tokens": 10, "output_tokens": output, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def sse_events(blocks: list[dict], model: str) -> list[tuple[str, dict]]:
    """The SSE events of one streamed answer, in the Messages API's order."""
    message_id = "msg_" + secrets.token_hex(12)
    events: list[tuple[str, dict]] = [("message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage()}})]
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                                   "delta": {"type": "text_delta", "text": block["text"]}}))
        else:
            events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {
        "stop_reason": stop_reason(blocks), "stop_sequence": None}, "usage": {"output_tokens": 5}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def whole_message(blocks: list[dict], model: str) -> dict:
    return {"id": "msg_" + secrets.token_hex(12), "type": "message", "role": "assistant", "model": model,
            "content": blocks, "stop_reason": stop_reason(blocks), "stop_sequence": None, "usage": usage(5)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A CLI killed mid-request resets its connection: expected here, not worth a traceback.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FakeAnthropic:
    """The fake, on 127.0.0.1 and a free port, served by a thread; use as a context manager."""

    def __init__(self, log: Path | None = None) -> None:
        self.requests: list[Request] = []
        self.log = log
        self.slow = 0.0
        self.notice_slow = 0.0
        # While set, every Messages request is refused with a 429 rate_limit_error (the CLI retries
        # as its CLAUDE_CODE_MAX_RETRIES says, then fails the turn: a StopFailure `rate_limit`).
        self.rate_limited = False
        self._silent = False
        self._changed = threading.Condition()
        self._closing = False
        self._held = 0
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-anthropic", daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- switches --------------------------------------------------------------------------

    @property
    def silent(self) -> bool:
        return self._silent

    @silent.setter
    def silent(self, value: bool) -> None:
        with self._changed:
            self._silent = value
            self._changed.notify_all()

    def held(self) -> int:
        """How many requests are being held unanswered right now."""
        with self._changed:
            return self._held

    # -- what the CLI sent -----------------------------------------------------------------

    def main_requests(self) -> list[Request]:
        with self._changed:
            return [r for r in self.requests if r.is_main]

    def record(self, request: Request) -> None:
        with self._changed:
            self.requests.append(request)
            if self.log is not None:
                with self.log.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"ts": request.ts, "method": request.method, "path": request.path,
                                          "headers": request.headers, "body": request.body}) + "\n")

    def wait_while_silent(self) -> bool:
        """Hold the caller while `silent` is set; False if the fake is closing."""
        with self._changed:
            self._held += 1
            try:
                while self._silent and not self._closing:
                    self._changed.wait(1)
                return not self._closing
            finally:
                self._held -= 1

    def env(self, home: Path) -> dict[str, str]:
        """What the CLI needs to talk to this fake and nothing else, with its config under `home`."""
        return cli_env(self.url, home)


def cli_env(base_url: str, home: Path) -> dict[str, str]:
    config = home / ".claude"
    config.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(config),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-test-" + "0" * 32,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
        "NO_PROXY": "127.0.0.1,localhost",
    }


@functools.cache
def claude_bin() -> Path:
    """The pinned Claude Code CLI. A test that needs it fails, never skips, when it is missing or
    is not the version tests/claude/package.json pins."""
    pinned = json.loads((CLAUDE_DIR / "package.json").read_text())["dependencies"]["@anthropic-ai/claude-code"]
    how = "`make test` installs it (npm ci in tests/claude)"
    if not os.access(CLAUDE_BIN, os.X_OK):
        pytest.fail(f"the Claude Code CLI is not installed at {CLAUDE_BIN}: {how}", pytrace=False)
    try:
        with tempfile.TemporaryDirectory() as home:
            version = subprocess.run([str(CLAUDE_BIN), "--version"], capture_output=True, text=True, timeout=120,
                                     env={"PATH": os.environ.get("PATH", ""), "HOME": home,
                                          "DISABLE_AUTOUPDATER": "1"}).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"{CLAUDE_BIN} --version failed ({exc}): {how}", pytrace=False)
    if not version.startswith(pinned + " "):
        pytest.fail(f"{CLAUDE_BIN} is {version.strip()!r}, the tests pin {pinned}: {how}", pytrace=False)
    return CLAUDE_BIN


def _handler(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _read(self) -> Request:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            # The API key never goes to the record.
            headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in ("x-api-key", "authorization")}
            request = Request(self.command, self.path, headers, body)
            fake.record(request)
            return request

        def _json(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id", "req_" + secrets.token_hex(8))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_HEAD(self) -> None:
            self._read()
            self._json(200, {})

        def do_GET(self) -> None:
            request = self._read()
            if request.path.split("?")[0] == "/v1/models":
                self._json(200, {"data": [{"type": "model", "id": MODEL, "display_name": "Fake",
                                           "created_at": "2025-01-01T00:00:00Z"}],
                                 "has_more": False, "first_id": MODEL, "last_id": MODEL})
            else:
                self._json(200, {})

        def do_POST(self) -> None:
            request = self._read()
            path = request.path.split("?")[0]
            if path == "/v1/messages/count_tokens":
                self._json(200, {"input_tokens": 10})
            elif path == "/v1/messages":
                self._messages(request)
            else:
                self._json(200, {})

        def _messages(self, request: Request) -> None:
            try:
                self._answer(request)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the CLI went away (killed, or it gave up waiting)

        def _answer(self, request: Request) -> None:
            if not fake.wait_while_silent():
                return
            if fake.rate_limited:
                self._json(429, {"type": "error", "error": {
                    "type": "rate_limit_error", "message": "This request would exceed the rate limit for your "
                                                           "organization. Please try again later."}})
                return
            body = request.body if isinstance(request.body, dict) else {}
            blocks = plan(request)
            model = body.get("model", MODEL)
            if not body.get("stream"):
                self._json(200, whole_message(blocks, model))
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.send_header("request-id", "req_" + secrets.token_hex(8))
            self.end_headers()
            self.close_connection = True
            for n, (name, data) in enumerate(sse_events(blocks, model)):
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()
                if n == 0 and request.is_main and (fake.slow or (fake.notice_slow and is_notice(request))):
                    self._linger(lambda: fake.notice_slow if is_notice(request) else fake.slow)

        def _linger(self, slow) -> None:
            """A slow model: pings, a second apart, while the request is younger than `slow()`
            (read each time, so lowering it ends a long turn early); the stream stays open."""
            start = time.monotonic()
            while (left := slow() - (time.monotonic() - start)) > 0:
                time.sleep(min(1.0, left))
                self.wfile.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                self.wfile.flush()

    return Handler


if __name__ == "__main__":
    # For looking at the CLI by hand: serve until interrupted, logging requests to the named file.
    with FakeAnthropic(Path(sys.argv[1]) if len(sys.argv) > 1 else None) as served:
        print(served.url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
