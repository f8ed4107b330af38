"""`loom-tui --serve`: the same console in a browser, through textual-serve, for the operator only.

Each browser tab gets its own `loom-tui` process (textual-serve starts the command below with
Textual's web driver), so every key and action is the terminal console's own. That console types
into the agent and relaunches it, so reaching it is code execution as the operator: the server
listens on a loopback address (or a unix socket, mode 0600, for `ssh -L`), makes a fresh random
token each time it starts, and refuses with 403 every request and WebSocket upgrade without it or
with a Host or Origin that does not name this server (serve_guard.py), before any console starts.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import secrets
import shlex
import signal
import socket
import stat
import struct
import sys
from pathlib import Path

from loomtui import redact
from loomtui.agent import proctree
from loomtui.daemon import scrub
from loomtui.config import host_header_name
from loomtui.errors import LoomError
from loomtui.text import printable
from loomtui.tui.serve_guard import Listen, is_loopback, loggable_path, refusal, token_of
from loomtui.tui.serve_page import STATIC_FILES, render, security_headers

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "check_host", "check_socket_path", "console_command", "is_loopback",
           "serve", "token_file_path"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
TOKEN_FILE_GLOB = "tui-serve.*.json"


class NotLoopback(LoomError):
    exit_code = 2


class SocketInUse(LoomError):
    exit_code = 2


def check_host(host: str, port: int) -> None:
    if not is_loopback(host):
        raise NotLoopback(
            f"--host {host} is not a loopback address: the served console can type into the agent and relaunch "
            f"it, so it listens on 127.0.0.1 only; from another machine run "
            f"ssh -L {port}:127.0.0.1:{port} THIS_HOST and open the URL it prints")


def check_socket_path(path: str) -> None:
    """Refuse a path that exists and is not a stale socket of ours; remove a stale one."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SocketInUse(f"--socket {path} cannot be checked: {exc.strerror or exc}") from None
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketInUse(f"--socket {path} exists and is not a socket: refusing to replace it")
    if st.st_uid != os.getuid():
        raise SocketInUse(f"--socket {path} is a socket of uid {st.st_uid}: refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(5)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        os.unlink(path)  # nothing listens: left by a server that was killed
        return
    except OSError as exc:
        raise SocketInUse(f"--socket {path} cannot be checked: {exc.strerror or exc}") from None
    finally:
        probe.close()
    raise SocketInUse(f"--socket {path}: a server already listens on it")


def console_command(config: str | None, state_dir: str) -> str:
    """The command textual-serve runs per browser tab (it runs it through a shell: every part quoted)."""
    argv = [sys.executable, "-m", "loomtui.tui.main", "--state-dir", state_dir]
    if config:
        argv += ["--config", config]
    return shlex.join(argv)


def token_file_path(state_dir: Path, pid: int | None = None) -> Path:
    return Path(state_dir) / f"tui-serve.{os.getpid() if pid is None else pid}.json"


def _remove_stale_token_files(state_dir: Path) -> None:
    """A server killed with SIGKILL leaves its token file: remove those whose server is gone, or
    whose pid another process now holds (the file records the server's start beside its pid)."""
    for path in Path(state_dir).glob(TOKEN_FILE_GLOB):
        try:
            pid = int(path.name.split(".")[1])
        except ValueError:
            continue  # not one of ours: left alone
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            record = None  # half-written or unreadable: its pid alone decides
        started = record.get("started") if isinstance(record, dict) else None
        if isinstance(started, (int, float)):
            stale = not proctree.alive_as(pid, started)
        else:  # no start recorded (an older server's file, or one being written): the pid decides
            stale = not proctree.running(pid)
        if stale:
            path.unlink(missing_ok=True)


def _write_token_file(path: Path, record: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def _bind_tcp(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every loopback address `host` names (localhost: 127.0.0.1 and ::1)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise LoomError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    socks: list[socket.socket] = []
    seen: set = set()
    failure: OSError | None = None
    for family, kind, proto, _, addr in infos:
        if addr in seen or not is_loopback(str(addr[0])):
            continue
        seen.add(addr)
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                for s in socks:
                    s.close()
                raise LoomError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
            failure = exc  # this machine has no such address (IPv6 off): the others serve
            continue
        socks.append(sock)
    if not socks:
        reason = (failure.strerror if failure else None) or "no loopback address"
        raise LoomError(f"cannot serve on {host}:{port}: {reason}")
    return socks


def _bind_unix(path: str) -> socket.socket:
    check_socket_path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600: no moment when another user could connect
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise LoomError(f"cannot serve on --socket {path}: {exc.strerror or exc}") from None
    finally:
        os.umask(old)
    return sock


def _peer(request) -> str:
    """Who sent a request, for the refusal log: its address, or over the unix socket its uid."""
    if request.remote:
        return request.remote
    sock = request.transport.get_extra_info("socket") if request.transport else None
    option = getattr(socket, "SO_PEERCRED", None)  # Linux; elsewhere the socket's mode is the guard
    if sock is None or option is None:
        return "the unix socket"
    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    except OSError:
        return "the unix socket"
    return f"uid {uid} (pid {pid}) on the unix socket"


def _make_server(command: str, listen: Listen, token: str):
    """textual-serve's Server behind the guard: its WebSocket handler (which starts the console)
    is reached only through the middleware, its page is ours, and its banner and access log
    (which would print every path, tokens included) are off."""
    from aiohttp import web
    from textual_serve.server import Server, to_int

    class GuardedServer(Server):
        def __init__(self) -> None:
            super().__init__(command, title="Loom")
            self._sessions: set[asyncio.Task] = set()

        async def _make_app(self) -> web.Application:
            app = web.Application(middlewares=[self.guard])
            app.add_routes([
                web.get("/", self.handle_page),
                web.get("/t/{token}/ws", self.handle_session),
                web.get("/t/{token}/static/{name:.+}", self.handle_static),
            ])
            app.on_response_prepare.append(self.add_headers)
            app.on_shutdown.append(self.end_sessions)
            return app

        @web.middleware
        async def guard(self, request: web.Request, handler):
            reason = refusal(listen, token, request.headers.get("Host"), request.headers.get("Origin"),
                             token_of(request.path, request.query.get("token")))
            if reason is not None:
                print(printable(f"loom-tui: refused {request.method} {loggable_path(request.path)} "
                                f"from {_peer(request)}: {reason}"), file=sys.stderr, flush=True)
                raise web.HTTPForbidden(text="403: this console needs the URL loom-tui --serve printed\n")
            return await handler(request)

        async def add_headers(self, request: web.Request, response: web.StreamResponse) -> None:
            response.headers.update(security_headers(request.get("loom_nonce"), request.get("loom_ws")))

        async def handle_page(self, request: web.Request) -> web.Response:
            # The Host was checked by the guard: the WebSocket goes back to the address the browser used.
            ws_url = f"ws://{request.host}/t/{token}/ws"
            request["loom_nonce"] = nonce = secrets.token_urlsafe(16)
            request["loom_ws"] = ws_url
            size = min(max(to_int(request.query.get("fontsize", "16"), 16), 6), 64)
            page = render(title="Loom", static=f"/t/{token}/static", ws_url=ws_url, nonce=nonce, font_size=size)
            return web.Response(text=page, content_type="text/html")

        async def handle_static(self, request: web.Request) -> web.StreamResponse:
            name = request.match_info["name"]
            if name not in STATIC_FILES:
                raise web.HTTPNotFound()
            return web.FileResponse(self.statics_path / name, headers={"Content-Type": STATIC_FILES[name]})

        async def handle_session(self, request: web.Request) -> web.StreamResponse:
            task = asyncio.current_task()
            assert task is not None  # a request is always handled in a task of its own
            self._sessions.add(task)
            try:
                return await self.handle_websocket(request)
            finally:
                self._sessions.discard(task)

        async def end_sessions(self, app: web.Application) -> None:
            """On stop, each page's console is stopped too (textual-serve's handler stops it on cancel)."""
            for task in list(self._sessions):
                task.cancel()

    return GuardedServer()


def serve(command: str, listen: Listen, state_dir: Path) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP; the token file and the socket are removed on the way out."""
    from aiohttp import web

    socks = [_bind_unix(listen.socket_path)] if listen.socket_path else _bind_tcp(listen.host, listen.port)
    token = secrets.token_urlsafe(32)
    server = _make_server(command, listen, token)
    loop = asyncio.new_event_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, server.request_exit)
    if listen.socket_path:
        where = f"unix:{listen.socket_path}"
        url = None
        hint = (f"from another machine: ssh -L 8000:{listen.socket_path} THIS_HOST, "
                f"then open http://127.0.0.1:8000/?token={token}")
    else:
        where = f"{host_header_name(listen.host)}:{listen.port}"
        url = f"http://{where}/?token={token}"
        hint = f"open {url}"
    _remove_stale_token_files(state_dir)
    token_file = token_file_path(state_dir)
    try:
        try:
            token_file.unlink(missing_ok=True)  # our own pid's: left by a killed server whose pid we got
            _write_token_file(token_file, {"pid": os.getpid(), "started": proctree.start_time(os.getpid()),
                                           "listen": where, "url": url, "token": token})
        except OSError as exc:
            raise LoomError(f"cannot write the token file {token_file}: {exc.strerror or exc}") from None
        print(f"loom-tui: serving the console on {where} (the token in this URL, and in {token_file}, "
              f"lets a browser in; Ctrl+C stops it)", file=sys.stderr, flush=True)
        print(f"loom-tui: {hint}", flush=True)
        server.initialize_logging()
        # Its handler prints a session's exception with each frame's locals: the request, and the
        # token in its path. Scrubbed of the token (and of locals: the traceback is made text first).
        redact.register(token)
        scrub.install()
        web.run_app(server._make_app(), sock=socks, handle_signals=False, loop=loop, print=None,
                    access_log=None, shutdown_timeout=5)
    finally:
        token_file.unlink(missing_ok=True)
        for sock in socks:
            sock.close()
        if listen.socket_path:
            Path(listen.socket_path).unlink(missing_ok=True)
