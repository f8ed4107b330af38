"""`loom-tui --serve` lets in only whoever holds the token it printed, on its own Host and Origin.

A real demo agent and a real server. A refused client gets a 403, the server starts no console
process for it, and the ledger gains nothing. The operator's connection, with the token, starts a
console whose `c` is a canary from the console in the ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import subprocess

import pytest
from harness import wait_for
from serve_client import CLIENT, Served, get, operator_presses, upgrade

pytestmark = pytest.mark.e2e

SETPRIV = shutil.which("setpriv")
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


def ledger_kinds(harness) -> list[str]:
    return [e["kind"] for e in harness.events()]


def as_nobody(script: str) -> dict:
    """Run the stdlib client as `nobody`, which cannot read the operator's state dir or token file."""
    result = subprocess.run([SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups", SYSTEM_PYTHON, "-I",
                             "-c", CLIENT + script], capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def bad_frame(address, path: str, host: str, origin: str) -> None:
    """A WebSocket let in with the token, that sends a text frame of no JSON and goes."""
    import aiohttp

    async def run() -> None:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"http://{address[0]}:{address[1]}{path}", headers={"Origin": origin,
                                                                                           "Host": host}) as ws:
                await ws.send_str("x")
                with contextlib.suppress(asyncio.TimeoutError):
                    await ws.receive(timeout=5)

    asyncio.run(run())


@pytest.fixture
def served(make_harness, tmp_path):
    harness = make_harness(sections={"canary": {"ack_timeout": "30s"}})
    harness.start()
    server = Served(harness, tmp_path / "serve.log")
    yield harness, server
    server.stop()


@pytest.mark.timeout(240)
def test_only_the_token_on_this_host_and_origin_starts_a_console(served):
    harness, server = served
    host = f"127.0.0.1:{server.port}"
    ws = f"/t/{server.token}/ws?width=100&height=30"
    before = ledger_kinds(harness)

    # The token file: the operator's alone while the server runs.
    assert stat.S_IMODE(server.token_file.stat().st_mode) == 0o600
    assert server.record["url"] == f"http://{host}/?token={server.token}"
    assert server.record["url"] in server.output()  # printed once, as the URL to open
    assert server.output().count(server.token) == 1

    refused = {
        "no token": upgrade(server.address, "/t//ws", host, origin=f"http://{host}"),
        "no token at all": upgrade(server.address, "/ws", host),
        "wrong token": upgrade(server.address, "/t/" + "A" * len(server.token) + "/ws", host),
        "a cross-site page": upgrade(server.address, ws, host, origin="http://evil.example.com"),
        "another port's page": upgrade(server.address, ws, host, origin="http://127.0.0.1:1"),
        "a foreign Host (DNS rebinding)": upgrade(server.address, ws, f"evil.example.com:{server.port}"),
        "a Host of another port": upgrade(server.address, ws, "127.0.0.1:1"),
    }
    assert {what: r.get("status") for what, r in refused.items()} == {what: 403 for what in refused}
    assert get(server.address, "/", host) == 403
    assert get(server.address, "/t/x/static/js/textual.js", host) == 403
    assert get(server.address, f"/?token={server.token}", "evil.example.com") == 403
    assert get(server.address, f"/t/{server.token}/static/js/textual.js", host) == 200

    # Each refusal is one line on stderr that names why, never the token.
    out = server.output()
    for reason in ("no token", "wrong token", "Origin 'http://evil.example.com' does not match",
                   f"Host 'evil.example.com:{server.port}' is not this server"):
        assert reason in out
    assert out.count("loom-tui: refused") == len(refused) + 3
    assert "A" * len(server.token) not in out

    assert server.consoles() == []
    assert ledger_kinds(harness) == before

    # The operator's connection: let in, a console starts, and its `c` is a canary from the console.
    operator_presses(server.address, ws, host, f"http://{host}", "no probe yet", "c",
                     lambda: harness.events("canary_sent"))
    assert [e["source"] for e in harness.events("canary_sent")] == ["tui"]

    # A page that sends what is no message: textual-serve logs the exception, with each frame's
    # locals (the request, the token in its path). Logged, but never with the token.
    bad_frame(server.address, ws, host, f"http://{host}")
    wait_for(lambda: "Traceback" in server.output() or "Error" in server.output(), 60, what="the error logged")
    assert server.output().count(server.token) == 1

    # Stopped: the token file is gone with it.
    assert server.stop() == 0
    assert not server.token_file.exists()
    assert server.token_files() == []


@pytest.mark.timeout(180)
@pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV or not SYSTEM_PYTHON,
                    reason="needs root, setpriv and /usr/bin/python3 to run a client as nobody")
def test_another_user_cannot_read_the_token_and_is_refused(served):
    harness, server = served
    before = ledger_kinds(harness)
    host = f"127.0.0.1:{server.port}"
    script = f"""
import json
try:
    open({str(server.token_file)!r}).read()
    read = "read"
except OSError as exc:
    read = type(exc).__name__
guess = "x" * {len(server.token)}
print(json.dumps({{"read": read,
    "no token": upgrade({server.address!r}, "/t//ws?width=80&height=24", {host!r}),
    "a guess": upgrade({server.address!r}, "/t/" + guess + "/ws?width=80&height=24", {host!r}),
    "page": get({server.address!r}, "/", {host!r})}}))
"""
    seen = as_nobody(script)
    assert seen == {"read": "PermissionError", "no token": {"status": 403}, "a guess": {"status": 403},
                    "page": 403}
    assert server.consoles() == []
    assert ledger_kinds(harness) == before


@pytest.mark.timeout(240)
def test_over_a_unix_socket_the_token_still_applies_and_the_console_works(make_harness, tmp_path):
    harness = make_harness(sections={"canary": {"ack_timeout": "30s"}})
    harness.start()
    path = tmp_path / "console.sock"
    server = Served(harness, tmp_path / "serve.log", socket=path)
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.lstat().st_mode) == 0o600
        assert stat.S_IMODE(server.token_file.stat().st_mode) == 0o600
        assert server.record["listen"] == f"unix:{path}"
        assert f"ssh -L 8000:{path}" in server.output() and f"?token={server.token}" in server.output()
        before = ledger_kinds(harness)
        ws = f"/t/{server.token}/ws?width=100&height=30"
        # Whatever local port `ssh -L` forwards from is this server's Host; a foreign name is not.
        refused = [
            upgrade(server.address, "/t//ws", "127.0.0.1:41234"),
            upgrade(server.address, ws, "evil.example.com:41234"),
            upgrade(server.address, ws, "127.0.0.1:41234", origin="http://evil.example.com"),
            upgrade(server.address, ws, "127.0.0.1:41234", origin="http://127.0.0.1:41235"),
        ]
        assert refused == [{"status": 403}] * 4
        assert server.consoles() == [] and ledger_kinds(harness) == before
        if os.geteuid() == 0 and SETPRIV and SYSTEM_PYTHON:  # mode 0600: another user cannot even connect
            seen = as_nobody(f"import json; print(json.dumps(upgrade({str(path)!r}, '/t//ws', 'localhost:1')))")
            assert seen == {"error": "PermissionError"}
        operator_presses(server.address, ws, "localhost:41234", "http://localhost:41234", "no probe yet", "c",
                         lambda: harness.events("canary_sent"))
        assert [e["source"] for e in harness.events("canary_sent")] == ["tui"]
    finally:
        code = server.stop()
    assert code == 0
    assert not path.exists() and not server.token_file.exists()
