"""`loom-tui --serve`'s rules: loopback only, refused in one line otherwise; the guard every request
passes (Host, Origin, token); the page that loads nothing from elsewhere; the unix socket's path;
and an argument that is not UTF-8."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys

import pytest
from conftest import REPO, loom_env

from harness import wait_for

from loomtui.agent import proctree
from loomtui.errors import LoomError
from loomtui.tui.serve import (
    _remove_stale_token_files, check_socket_path, console_command, is_loopback, token_file_path,
)
from loomtui.tui.serve_guard import Listen, host_ok, loggable_path, refusal, token_of, token_ok
from loomtui.tui.serve_page import STATIC_FILES, render, security_headers

TOKEN = "s3cr3t-Token_0123456789abcdefghijklmnopqrstu"
TCP = Listen(host="127.0.0.1", port=8123)
UNIX = Listen(socket_path="/run/user/1000/loom-console.sock")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST", "::1", "[::1]"])
def test_loopback_addresses_are_allowed(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1", "example.com", "localhost.evil",
                                  "", "127.0.0.1.nip.io"])
def test_anything_else_is_not(host):
    assert not is_loopback(host)


def test_the_console_command_quotes_every_part():
    command = console_command("/tmp/a b/con'fig.toml", "/tmp/state; rm -rf x")
    argv = shlex.split(command)
    assert argv[0] == sys.executable and argv[1:3] == ["-m", "loomtui.tui.main"]
    assert argv[3:] == ["--state-dir", "/tmp/state; rm -rf x", "--config", "/tmp/a b/con'fig.toml"]


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loomtui.tui.main", *args], capture_output=True, text=True,
                          env=loom_env(), cwd=REPO, timeout=60)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "example.com"])
def test_a_non_loopback_host_is_refused_in_one_line_before_anything_starts(host, tmp_path):
    result = serve("--serve", "--host", host, "--port", "8123", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loom-tui: --host {host} is not a loopback address")
    assert "ssh -L 8123:127.0.0.1:8123" in lines[0]
    assert not (tmp_path / "state").exists()  # refused before the state dir was touched


def test_port_and_host_need_serve_and_a_real_port():
    assert serve("--port", "9000").returncode == 2
    bad = serve("--serve", "--port", "70000")
    assert bad.returncode == 2 and "not a TCP port" in bad.stderr


@pytest.mark.parametrize("listen, host, ok", [
    (TCP, "127.0.0.1:8123", True),
    (TCP, "localhost:8123", True),
    (TCP, "LOCALHOST:8123", True),
    (TCP, "127.0.0.1:8124", False),       # another port: another server
    (TCP, "127.0.0.1", False),
    (TCP, "evil.example.com:8123", False),  # DNS rebinding: a foreign name that resolves here
    (TCP, "[::1]:8123", False),           # not the address served
    (Listen(host="::1", port=9000), "[::1]:9000", True),
    (Listen(host="[::1]", port=9000), "localhost:9000", True),
    (Listen(host="::1", port=9000), "127.0.0.1:9000", False),
    (Listen(host="0:0:0:0:0:0:0:1", port=9000), "[::1]:9000", True),  # the form a browser writes
    (Listen(host="localhost", port=9000), "[::1]:9000", True),
    (Listen(host="127.0.0.2", port=9000), "127.0.0.2:9000", True),
    (Listen(host="127.0.0.2", port=9000), "localhost:9000", False),
    (Listen(host="127.0.0.1", port=80), "127.0.0.1", True),
    (UNIX, "127.0.0.1:41234", True),      # ssh -L 41234:/path: whatever local port forwards
    (UNIX, "localhost:8000", True),
    (UNIX, "[::1]:8000", True),
    (UNIX, "localhost", True),
    (UNIX, "evil.example.com:8000", False),
    (UNIX, "127.0.0.1.nip.io:8000", False),
    (UNIX, "127.0.0.1:99999", False),
    (UNIX, "127.0.0.1:8000/x", False),
])
def test_the_host_must_name_this_server(listen, host, ok):
    assert host_ok(listen, host) is ok


def test_a_request_goes_on_only_with_host_origin_and_token_right():
    host = "127.0.0.1:8123"
    assert refusal(TCP, TOKEN, host, None, TOKEN) is None
    assert refusal(TCP, TOKEN, host, f"http://{host}", TOKEN) is None
    assert refusal(TCP, TOKEN, None, None, TOKEN) == "no Host header"
    assert refusal(TCP, TOKEN, "evil.example.com:8123", None, TOKEN) == "Host 'evil.example.com:8123' is not this server"
    assert refusal(TCP, TOKEN, host, "http://evil.example.com", TOKEN).startswith("Origin 'http://evil.example.com'")
    assert refusal(TCP, TOKEN, host, "http://127.0.0.1:9999", TOKEN).startswith("Origin")  # another port's page
    assert refusal(TCP, TOKEN, host, "https://127.0.0.1:8123", TOKEN).startswith("Origin")
    assert refusal(TCP, TOKEN, host, "null", TOKEN).startswith("Origin")  # a sandboxed frame
    assert refusal(TCP, TOKEN, host, None, None) == "no token"
    assert refusal(TCP, TOKEN, host, None, "") == "no token"
    assert refusal(TCP, TOKEN, host, None, TOKEN[:-1]) == "wrong token"
    assert refusal(TCP, TOKEN, host, None, TOKEN + "x") == "wrong token"
    assert refusal(TCP, TOKEN, host, None, "\udcff" + TOKEN[1:]) == "wrong token"  # undecodable bytes: no crash
    assert refusal(UNIX, TOKEN, "localhost:5555", "http://localhost:5555", TOKEN) is None
    assert refusal(UNIX, TOKEN, "localhost:5555", "http://localhost:5556", TOKEN).startswith("Origin")
    for reason in (refusal(TCP, TOKEN, host, None, TOKEN[:-1] + "Z"), refusal(TCP, TOKEN, "x", None, TOKEN)):
        assert TOKEN not in reason


def test_the_token_comes_from_the_path_or_the_first_pages_query():
    assert token_of(f"/t/{TOKEN}/ws", None) == TOKEN
    assert token_of(f"/t/{TOKEN}/static/js/textual.js", "other") == TOKEN
    assert token_of("/", TOKEN) == TOKEN
    assert token_of("/ws", None) is None
    assert token_ok(TOKEN, TOKEN) and not token_ok(None, TOKEN) and not token_ok("", TOKEN)


def test_a_logged_path_never_holds_a_token():
    assert loggable_path(f"/t/{TOKEN}/ws") == "/t/…/ws"
    assert loggable_path(f"/t/{TOKEN}") == "/t/…"
    assert loggable_path("/download/x") == "/download/x"


def test_the_page_loads_nothing_from_elsewhere():
    page = render(title="Loom", static=f"/t/{TOKEN}/static", ws_url=f"ws://127.0.0.1:8123/t/{TOKEN}/ws",
                  nonce="n0nce", font_size=16)
    assert "googleapis" not in page and "https://" not in page
    urls = re.findall(r'(?:src|href)="([^"]*)"|url\("([^"]*)"\)', page)
    assert urls and all((a or b).startswith(f"/t/{TOKEN}/static/") for a, b in urls)
    for a, b in urls:
        assert (a or b).split("/static/", 1)[1] in STATIC_FILES
    assert 'data-session-websocket-url="ws://127.0.0.1:8123/t/' in page
    assert "onClick" not in page and '<script nonce="n0nce">' in page
    headers = security_headers("n0nce", f"ws://127.0.0.1:8123/t/{TOKEN}/ws")
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self' 'nonce-n0nce'" in csp
    assert "frame-ancestors 'none'" in csp and "https:" not in csp and "*" not in csp
    assert headers["Referrer-Policy"] == "no-referrer" and headers["Cache-Control"] == "no-store"


def test_a_socket_path_that_is_not_a_stale_socket_is_refused(tmp_path):
    check_socket_path(str(tmp_path / "absent.sock"))  # nothing there: fine
    regular = tmp_path / "file"
    regular.write_text("keep me")
    with pytest.raises(LoomError, match="exists and is not a socket"):
        check_socket_path(str(regular))
    assert regular.read_text() == "keep me"
    live_path = tmp_path / "live.sock"
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(live_path))
        live.listen(1)
        with pytest.raises(LoomError, match="a server already listens on it"):
            check_socket_path(str(live_path))
    assert live_path.exists()  # closed now, but still there: stale
    check_socket_path(str(live_path))
    assert not live_path.exists()


def tui(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loomtui.tui.main", *args], capture_output=True, env=loom_env(),
                          cwd=REPO, timeout=60)


@pytest.mark.parametrize("args, n", [([b"\xff"], 1), ([b"--config", b"/tmp/\xc3(x.toml"], 2),
                                     ([b"--serve", b"--socket", b"/tmp/\xfe"], 3)])
def test_an_argument_that_is_not_utf8_is_exit_2_in_one_line(args, n, tmp_path):
    result = tui(*args, b"--state-dir", str(tmp_path / "state").encode())
    assert result.returncode == 2
    assert result.stderr.decode("utf-8").splitlines() == [f"loom-tui: argument {n} is not valid UTF-8"]
    assert "Traceback" not in result.stderr.decode() and not (tmp_path / "state").exists()


def test_socket_replaces_port_and_host_and_a_bad_socket_path_is_one_line(tmp_path):
    assert serve("--socket", str(tmp_path / "s")).returncode == 2  # needs --serve
    both = serve("--serve", "--socket", str(tmp_path / "s"), "--port", "9000")
    assert both.returncode == 2 and "--socket replaces --port and --host" in both.stderr
    regular = tmp_path / "taken"
    regular.write_text("")
    taken = serve("--serve", "--socket", str(regular), "--state-dir", str(tmp_path / "state"))
    assert taken.returncode == 2
    assert taken.stderr.strip().splitlines() == [f"loom-tui: --socket {regular} exists and is not a socket: "
                                                 "refusing to replace it"]
    assert not (tmp_path / "state").exists()


def test_an_older_servers_token_file_stays_while_its_pid_runs_and_goes_after(tmp_path):
    # Written before token files recorded the server's start: only the pid can say; a live one
    # keeps its file (its URL still works), a gone one loses it, readable or not.
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        wait_for(lambda: proctree.start_time(live.pid), what="the older server running")
        older = token_file_path(tmp_path, live.pid)
        older.write_text(json.dumps({"pid": live.pid}))
        garbled = token_file_path(tmp_path, gone.pid)
        garbled.write_text("{not json")
        _remove_stale_token_files(tmp_path)
        assert older.exists() and not garbled.exists()
    finally:
        live.kill()
        live.wait()


def test_a_token_file_goes_when_its_server_is_gone_or_its_pid_is_another_process(tmp_path):
    def token_file(pid: int, **record) -> object:
        path = token_file_path(tmp_path, pid)
        path.write_text(json.dumps({"pid": pid, **record}))
        return path

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_started = wait_for(lambda: proctree.start_time(gone.pid), what="the first server's start")
    gone.wait()
    later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        wait_for(lambda: proctree.start_time(later.pid), what="the later process running")
        ours = token_file(os.getpid(), started=proctree.start_time(os.getpid()))
        dead = token_file(gone.pid, started=gone_started)
        reused = token_file(later.pid, started=gone_started)  # a live pid, but not the server's
        # A pid no process can hold: above Linux's PID_MAX_LIMIT (2**22) and macOS's 99,998. A pid
        # merely free now may be another test's process by the time the files are swept (xdist).
        free = 2**22 + 1
        unstarted = token_file(free)
        half = token_file_path(tmp_path, 1)
        half.write_text("")  # a server between creating its file and writing it
        _remove_stale_token_files(tmp_path)
        assert ours.exists() and half.exists()
        assert not dead.exists() and not reused.exists() and not unstarted.exists()
    finally:
        later.kill()
        later.wait()
