"""`loom-tui --serve`: the same console in a browser, through textual-serve.

Each browser tab gets its own `loom-tui` process (textual-serve starts the command below with
Textual's web driver), so every key and action is the terminal console's own. The server has no
login and the console can type into the agent and relaunch it, so it listens on a loopback
address only; an operator elsewhere reaches it through `ssh -L`.
"""

from __future__ import annotations

import ipaddress
import shlex
import sys

from loomtui.errors import LoomError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


class NotLoopback(LoomError):
    exit_code = 2


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def check_host(host: str, port: int) -> None:
    if not is_loopback(host):
        raise NotLoopback(
            f"--host {host} is not a loopback address: the served console has no login and can type into the "
            f"agent and relaunch it, so it listens on 127.0.0.1 only; from another machine run "
            f"ssh -L {port}:127.0.0.1:{port} THIS_HOST and open http://127.0.0.1:{port}")


def console_command(config: str | None, state_dir: str) -> str:
    """The command textual-serve runs per browser tab (it runs it through a shell: every part quoted)."""
    argv = [sys.executable, "-m", "loomtui.tui.main", "--state-dir", state_dir]
    if config:
        argv += ["--config", config]
    return shlex.join(argv)


def serve(command: str, host: str, port: int) -> None:
    from textual_serve.server import Server

    print(f"loom-tui: serving the console on http://{host}:{port} (from elsewhere: "
          f"ssh -L {port}:127.0.0.1:{port} THIS_HOST, then open http://127.0.0.1:{port}); Ctrl+C stops it",
          file=sys.stderr)
    try:
        Server(command, host=host, port=port, title="Loom").serve()
    except OSError as exc:
        raise LoomError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from exc
