"""A loopback fake of the Telegram Bot API: a real HTTP server on 127.0.0.1, in a thread.

Enough of getMe (the bot's username is `BOT_USER["username"]`), sendMessage and getUpdates (messages
in private or group chats, from any user) for python-telegram-bot, plus switches for the
failures Loom must survive: flood control (429 + retry_after), an outage (connections refused,
or 502 from a "proxy"), a second poller (409 on getUpdates), a group upgraded to a supergroup
(400 with migrate_to_chat_id) and a group the bot was removed from (403).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

BOT_USER = {"id": 777000111, "is_bot": True, "first_name": "Loom test bot", "username": "loom_test_bot"}


@dataclass
class Sent:
    chat_id: int
    text: str
    message_id: int
    at: float  # time.monotonic() of this process when the request arrived
    link_preview_options: Any = None  # as the request gave it (PTB sends it JSON-encoded)


@dataclass
class FakeBot:
    token: str
    messages: list[Sent] = field(default_factory=list)
    calls: list[tuple[str, float, int]] = field(default_factory=list)  # (method, monotonic, status)
    get_updates_offsets: list[int | None] = field(default_factory=list)
    flood: list[int] = field(default_factory=list)  # retry_after for each of the next sendMessage calls
    updates_flood: list[int] = field(default_factory=list)  # the same for the next getUpdates calls
    conflict: bool = False
    down_mode: str | None = None  # None, "502"
    migrated: dict[int, int] = field(default_factory=dict)  # a group's id -> the supergroup it became
    kicked: set[int] = field(default_factory=set)  # chats the bot was removed from (403 on send)
    unknown_chats: set[int] = field(default_factory=set)  # 400 "chat not found" (a wrong chat_id)
    rejects: list[str] = field(default_factory=list)  # a 400 with this description for each next send

    def __post_init__(self) -> None:
        self._cond = threading.Condition()
        self._updates: list[dict[str, Any]] = []
        self._next_update = 1000
        self._next_message = 1
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> FakeBot:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._cond:
            self._cond.notify_all()  # long polls in flight return

    def go_down(self, mode: str = "refuse") -> None:
        """"refuse": nothing listens on the port; "502": a proxy in front answers Bad Gateway."""
        if mode == "refuse":
            self.stop()
        else:
            self.down_mode = mode

    def come_back(self) -> None:
        self.down_mode = None
        if self._server is None:
            self.start()  # same port: ThreadingHTTPServer sets SO_REUSEADDR

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    # -- test helpers ---------------------------------------------------------------------

    def add_update(self, chat_id: int, text: str, *, age: float = 0.0, from_id: int | None = None) -> int:
        """A message in `chat_id` from user `from_id`. A positive chat id is a private chat, whose
        id is its user's (as in Telegram), so `from_id` defaults to it; a negative one is a group
        (a supergroup below -10**12) and needs `from_id`."""
        if chat_id < 0 and from_id is None:
            raise ValueError("a message in a group chat comes from some user: pass from_id")
        if chat_id > 0:
            chat = {"id": chat_id, "type": "private", "first_name": "someone"}
        else:
            chat = {"id": chat_id, "type": "supergroup" if chat_id < -10**12 else "group", "title": "the team"}
        with self._cond:
            uid = self._next_update
            self._next_update += 1
            self._updates.append({
                "update_id": uid,
                "message": {
                    "message_id": uid * 10,
                    "date": int(time.time() - age),
                    "chat": chat,
                    "from": {"id": chat_id if from_id is None else from_id, "is_bot": False, "first_name": "someone"},
                    "text": text,
                },
            })
            self._cond.notify_all()
            return uid

    def texts(self, chat_id: int | None = None) -> list[str]:
        with self._cond:
            return [m.text for m in self.messages if chat_id is None or m.chat_id == chat_id]

    # -- the API --------------------------------------------------------------------------

    def handle(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method == "getMe":
            return 200, {"ok": True, "result": BOT_USER}
        if method == "sendMessage":
            return self._send(params)
        if method == "getUpdates":
            return self._get_updates(params)
        if method in ("close", "logOut", "deleteWebhook"):
            return 200, {"ok": True, "result": True}
        return 404, {"ok": False, "error_code": 404, "description": "Not Found: method not found"}

    def _send(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._cond:
            if self.flood:
                wait = self.flood.pop(0)
                return 429, {"ok": False, "error_code": 429, "description": f"Too Many Requests: retry after {wait}",
                             "parameters": {"retry_after": wait}}
            text = str(params.get("text", ""))
            if not text:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message text is empty"}
            if len(text.encode("utf-16-le")) // 2 > 4096:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: message is too long"}
            chat_id = int(params["chat_id"])
            if chat_id in self.migrated:
                return 400, {"ok": False, "error_code": 400,
                             "description": "Bad Request: group chat was upgraded to a supergroup chat",
                             "parameters": {"migrate_to_chat_id": self.migrated[chat_id]}}
            if chat_id in self.unknown_chats:
                return 400, {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
            if self.rejects:
                return 400, {"ok": False, "error_code": 400, "description": self.rejects.pop(0)}
            if chat_id in self.kicked:
                return 403, {"ok": False, "error_code": 403,
                             "description": "Forbidden: bot was kicked from the group chat"}
            mid = self._next_message
            self._next_message += 1
            self.messages.append(Sent(chat_id, text, mid, time.monotonic(), params.get("link_preview_options")))
            self._cond.notify_all()
        chat = {"id": chat_id, "type": "private", "first_name": "operator"} if chat_id > 0 else \
            {"id": chat_id, "type": "supergroup" if chat_id < -10**12 else "group", "title": "the team"}
        message = {"message_id": mid, "date": int(time.time()), "text": text, "from": BOT_USER, "chat": chat}
        return 200, {"ok": True, "result": message}

    def _get_updates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = int(params["offset"]) if params.get("offset") not in (None, "") else None
        timeout = float(params.get("timeout") or 0)
        self.get_updates_offsets.append(offset)
        if self.updates_flood:
            wait = self.updates_flood.pop(0)
            return 429, {"ok": False, "error_code": 429, "description": f"Too Many Requests: retry after {wait}",
                         "parameters": {"retry_after": wait}}
        if self.conflict:
            return 409, {"ok": False, "error_code": 409, "description": "Conflict: terminated by other getUpdates "
                         "request; make sure that only one bot instance is running"}
        deadline = time.monotonic() + timeout
        with self._cond:
            if offset is not None:  # like Telegram: asking for `offset` confirms everything before it
                self._updates = [u for u in self._updates if u["update_id"] >= offset]
            while not self._updates and self._server is not None and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            return 200, {"ok": True, "result": list(self._updates)}


def bot_config(tmp_path: Path, token: str, telegram: str = "") -> tuple[FakeBot, Path]:
    """A started FakeBot for `token`, the token in a private file, and a loom.toml whose
    [telegram] (chat 42, and the lines `telegram`) reaches that bot: (the bot, the config's path)."""
    fake = FakeBot(token).start()
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    config = tmp_path / "loom.toml"
    config.write_text(f'[telegram]\nchat_id = 42\napi_base = "{fake.api_base}"\ntoken_file = "{token_file}"\n'
                      + telegram)
    return fake, config


def _handler(fake: FakeBot) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the request line holds the token; a test's output must never show it

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if fake._server is None:
                # "Down": a kept-alive connection from before the outage is cut, not served.
                self.close_connection = True
                return
            prefix = f"/bot{fake.token}/"
            method = self.path[len(prefix):].split("?")[0] if self.path.startswith(prefix) else None
            if fake.down_mode == "502":
                status, payload = 502, b"<html><body>502 Bad Gateway</body></html>"
            elif method is None:
                status, payload = 401, _json({"ok": False, "error_code": 401, "description": "Unauthorized"})
            else:
                code, data = fake.handle(method, _params(self.headers.get("Content-Type", ""), body))
                status, payload = code, _json(data)
            if fake._server is None:
                self.close_connection = True
                return
            fake.calls.append((method or "?", time.monotonic(), status))
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if status != 502 else "text/html")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()


def _params(content_type: str, body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    if "json" in content_type:
        return json.loads(body)
    if "multipart" in content_type:
        raise AssertionError("the fake does not take multipart uploads")
    return {k: v[-1] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
