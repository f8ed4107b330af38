"""The metrics endpoint asks for `metrics.token_file`'s bearer token: a real server (daemon/metrics.
serve, as `loom supervise` starts it) on a loopback port, scraped over HTTP. Anything that listens
is authenticated: without the token any local user read the metrics, and with allow_remote the
network did."""

from __future__ import annotations

import http.client

import pytest
from harness import free_port

from loomtui.context import Context
from loomtui.daemon import metrics
from loomtui.errors import LoomError

TOKEN = "a-scrape-token-0123456789"


def served(tmp_path, token_mode: int = 0o600):
    port = free_port()
    token = tmp_path / "metrics-token"
    token.write_text(TOKEN + "\n")
    token.chmod(token_mode)
    config = tmp_path / "config.toml"
    config.write_text(f'[metrics]\nlisten = "127.0.0.1:{port}"\ntoken_file = "{token}"\n')
    ctx = Context.load(str(config), str(tmp_path / "state"), environ={})
    return ctx, port


def status_of(port: int, headers: dict[str, str]) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/metrics", headers={"Host": f"127.0.0.1:{port}", **headers})
        response = connection.getresponse()
        return response.status, response.getheader("WWW-Authenticate") or "", response.read()
    finally:
        connection.close()


def test_a_scrape_without_the_token_is_refused_and_with_it_answered(tmp_path):
    ctx, port = served(tmp_path)
    server = metrics.serve(ctx, lambda: {})
    try:
        status, challenge, body = status_of(port, {})
        assert (status, challenge) == (401, 'Bearer realm="loom"') and TOKEN.encode() not in body
        assert status_of(port, {"Authorization": "Bearer wrong-token"})[0] == 401
        assert status_of(port, {"Authorization": TOKEN})[0] == 401  # the scheme too
        assert status_of(port, {"Authorization": f"Bearer {TOKEN}x"})[0] == 401
        status, _, body = status_of(port, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and b"loom_" in body
        # The Host check still comes first: a rebinding page that somehow had the token is refused too.
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("GET", "/metrics", headers={"Host": f"evil.example:{port}",
                                                       "Authorization": f"Bearer {TOKEN}"})
        assert connection.getresponse().status == 403
        connection.close()
    finally:
        server.shutdown()
        server.server_close()
        ctx.close()


def test_a_token_file_others_may_read_stops_the_endpoint_from_starting(tmp_path):
    ctx, _ = served(tmp_path, 0o644)
    try:
        with pytest.raises(LoomError, match=r"metrics.token_file .*: mode 0644 is too open; run: chmod 600"):
            metrics.serve(ctx, lambda: {})
    finally:
        ctx.close()
