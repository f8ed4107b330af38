"""Why Loom starts no control-mode client by default before tmux 3.7: a reproduction (not a
benchmark; `make bench` skips files starting with "_"). It crashes tmux servers on purpose, each
on its own private socket, never Loom's.

tmux < 3.7 (GitHub issue 4980, fixed by commit e5a2a25) writes a notification to every control
client, including one still connecting: it has the control flag (from MSG_IDENTIFY_FLAGS, the
first identify message) but no control state until MSG_IDENTIFY_DONE. The client's identify
messages reach the server in three reads at least (the kernel ends a read at each message carrying
a file descriptor: stdin, stdout), and the server's command queue, which delivers notifications,
runs between reads. So a notification that does not skip session-less clients (sessions changed,
session renamed, session window changed, client detached, pane mode changed, window pane changed)
in that window is a NULL dereference: `dmesg` says "tmux: server: segfault at 20".

Nothing on the connecting side closes that window: its flags, `-f no-output`, waiting for the
first %begin/%end, or the session it attaches to all act after identify. And the triggers are
not only the operator's (attach and detach, copy mode, a new session): every control client that
goes away sends %client-detached to the others, so Loom's own processes (the daemon, the console,
a CLI command) with one client each would crash the server between them. `--churn detach` shows
that one: Loom's exact control argv, connecting while other such clients leave.

    .venv/bin/python bench/_tmux_4980_repro.py [--churn detach|session] [--connects N] [--runs R]

A crashed server can linger as a zombie (its parent may not reap it), so a crash is read from
/proc/<pid>/stat, not from kill(pid, 0).
"""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loomtui.agent.tmux import TimedServer, clean_env, tmux_binary  # noqa: E402


def server_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def connect_once(argv: list[str], env: dict[str, str]) -> None:
    """A control client as Loom starts one: attach, read attach's own reply, leave."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None and proc.stdin is not None
    for line in proc.stdout:
        if line.startswith((b"%end", b"%error", b"%exit")):
            break
    proc.stdin.close()
    proc.wait(timeout=30)


def run(churn: str, connects: int) -> int | None:
    """Connects until the server crashes: how many it took, or None if it survived them all."""
    socket = f"loom-4980-{secrets.token_hex(4)}"
    tmux = tmux_binary()
    env = clean_env()
    subprocess.run([tmux, f"-L{socket}", "-f/dev/null", "new-session", "-d", "-s", "agent", "sleep 100000"],
                   check=True, env=env)
    pid = int(subprocess.run([tmux, f"-L{socket}", "display-message", "-p", "-t", "=agent", "#{pid}"],
                             capture_output=True, text=True, env=env, check=True).stdout)
    argv = TimedServer(socket, session="agent")._control_argv()
    one = " ".join(f"'{word}'" for word in argv)
    alive = f"{tmux} -L{socket} has-session -t =agent 2>/dev/null"
    if churn == "detach":  # control clients that attach and leave, as Loom's other processes' would
        loop = f"while {alive}; do echo | {one} >/dev/null 2>&1; done"
        churners = [subprocess.Popen(["bash", "-c", loop]) for _ in range(2)]
    else:  # sessions created and closed
        loop = (f"while {alive}; do {tmux} -L{socket} new-session -d -s x 'sleep 9'; "
                f"{tmux} -L{socket} kill-session -t =x; done")
        churners = [subprocess.Popen(["bash", "-c", loop], stderr=subprocess.DEVNULL)]
    crashed = None
    try:
        for n in range(1, connects + 1):
            connect_once(argv, env)
            if server_state(pid) in ("Z", "X", "gone"):
                crashed = n
                break
    finally:
        subprocess.run([tmux, f"-L{socket}", "kill-server"], env=env, capture_output=True)
        for proc in churners:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return crashed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--churn", choices=("detach", "session"), default="detach")
    parser.add_argument("--connects", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    version = subprocess.run([tmux_binary(), "-V"], capture_output=True, text=True).stdout.strip()
    crashes = 0
    for i in range(args.runs):
        crashed = run(args.churn, args.connects)
        crashes += crashed is not None
        print(f"{version}, churn {args.churn}, run {i + 1}: "
              + (f"server CRASHED after {crashed} connects" if crashed else f"survived {args.connects} connects"),
              flush=True)
    return 1 if crashes else 0


if __name__ == "__main__":
    raise SystemExit(main())
