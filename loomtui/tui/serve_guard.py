"""Who may reach the served console: the checks every request and WebSocket upgrade passes first.

Pure functions of the request's Host, Origin and token and of where the server listens (stdlib
only, no I/O), so each refusal is a unit test. The model is Jupyter's: a token per server, and a
Host and an Origin that must name this server. The token stops another local user and any web
page that cannot read it; the Host check stops DNS rebinding (a foreign name resolved to
127.0.0.1); the Origin check stops a page elsewhere from driving a WebSocket it opened with a
token it somehow learned.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass

from loomtui.config import loopback_names
from loomtui.config import is_loopback as config_is_loopback

# The token travels in the page's URL (`/?token=…`) and, after that, in the path of everything the
# page loads (`/t/TOKEN/ws`, `/t/TOKEN/static/…`). Not in a cookie: a browser sends a cookie for
# 127.0.0.1 to every port of 127.0.0.1, so any other local user's server the operator's browser
# visits would receive it. A URL is sent only where it points.
TOKEN_PATH = re.compile(r"^/t/([^/]*)(/.*)?$")
_HOST = re.compile(r"^(?P<name>\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?$")


def is_loopback(host: str) -> bool:
    """The config's rule (config.is_loopback), for an address as a URL writes it: IPv6 in brackets."""
    return config_is_loopback(host.strip("[]"))


@dataclass(frozen=True)
class Listen:
    """Where the server listens: a loopback TCP address, or a unix socket (reached through
    `ssh -L LOCALPORT:/path`, so the browser's Host is the forwarder's loopback port)."""

    host: str = ""
    port: int = 0
    socket_path: str = ""

    def hosts(self) -> frozenset[str]:
        """The Host headers that name this TCP server (a unix socket's are checked by `host_ok`)."""
        names = loopback_names(self.host)
        hosts = {f"{n}:{self.port}" for n in names}
        if self.port == 80:  # a browser leaves the default port out
            hosts |= names
        return frozenset(hosts)


def host_ok(listen: Listen, host: str) -> bool:
    host = host.lower()
    if not listen.socket_path:
        return host in listen.hosts()
    match = _HOST.match(host)
    return match is not None and is_loopback(match["name"]) and (match["port"] is None or 0 < int(match["port"]) < 65536)


def token_of(path: str, query_token: str | None) -> str | None:
    """The token a request carries: `/t/TOKEN/…` in its path, else `?token=` (the first page)."""
    match = TOKEN_PATH.match(path)
    if match:
        return match[1]
    return query_token


def token_ok(given: str | None, token: str) -> bool:
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode("ascii"))


def refusal(listen: Listen, token: str, host: str | None, origin: str | None, given: str | None) -> str | None:
    """Why this request is refused (one line, never the token), or None when it may go on."""
    if not host:
        return "no Host header"
    if not host_ok(listen, host):
        return f"Host {host!r} is not this server"
    if origin is not None and origin.lower() != f"http://{host.lower()}":
        return f"Origin {origin!r} does not match Host {host!r}"
    if not given:
        return "no token"
    if not token_ok(given, token):
        return "wrong token"
    return None


def loggable_path(path: str) -> str:
    """The request's path with any token taken out (a wrong guess is still someone's secret)."""
    match = TOKEN_PATH.match(path)
    return f"/t/…{match[2] or ''}" if match else path
