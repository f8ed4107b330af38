"""`loom-tui --demo`: a real Loom on the demo agent, so a newcomer sees it work within a minute.

It writes a config and a state directory, starts the demo agent in a private tmux server, runs
`loom supervise` with fast intervals, and runs a few jobs (one of them failing) through
`loom run-job`; about 25 seconds in it crashes the agent once, so a recovery shows up too.
Quitting the console stops all of it, and so does the console's going any other way (its terminal
closed, a kill): a reaper started with the demo watches it. Nothing here is a mock: these are the same commands an
operator runs.

`LOOM_DEMO_DRIVER=stream-json make demo` runs the same demo with the stream-json driver: the
demo agent in print mode behind `loom pump`, the console showing the conversation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import platformdirs
import psutil

from loomtui import actions
from loomtui.context import Context
from loomtui.errors import LoomError

JOBS = {
    # name: (every, python code)
    "backup": ("20s", "print('backup: 1204 files, 0 errors')"),
    "newsletter": ("30s", "import sys\nprint('Traceback (most recent call last):')\n"
                          "print('  File \"send.py\", line 12, in <module>')\n"
                          "print('ConnectionError: smtp.example.net refused the connection')\nsys.exit(1)"),
    "digest": ("45s", "print('digest: 3 sources, ERROR fetching [/feeds] (retrying) \\x1b[31mred\\x1b[0m')"),
}
CRASH_AFTER = 25.0
DRIVERS = ("tmux", "stream-json")
DEMO_READY = r"(?m)^> $"  # the demo agent's prompt, alone on its line (resumed history lines carry text)

MEMORY = {
    "MEMORY.md": "# Memory\n\n- [Operator](operator.md) — who runs this box and how to reach them\n"
                 "- [Newsletter job](newsletter.md) — the SMTP relay is flaky on Mondays\n"
                 "- [Backups](backups.md) — restore drill notes (file not written yet)\n",
    "operator.md": "# Operator\n\nPrefers short Telegram messages. Timezone: UTC.\n",
    "newsletter.md": "# Newsletter\n\nSMTP relay `smtp.example.net` refuses connections now and then; retry later.\n",
    "scratch.md": "# Scratch\n\nNot in the index yet: lint shows it as an orphan. Text like [/bold] stays literal.\n",
}


def checkout_state_dir() -> Path | None:
    """The repository's state/ folder when running from a checkout."""
    here = Path(__file__).resolve().parent.parent.parent / "state"
    return here if (here / "README.md").is_file() else None


def toml(value: object) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


class Demo:
    def __init__(self, root: Path, crash_after: float = CRASH_AFTER, driver: str = "tmux") -> None:
        if driver not in DRIVERS:
            raise LoomError(f"LOOM_DEMO_DRIVER={driver!r}: use one of {', '.join(DRIVERS)}")
        self.root = root
        self.crash_after = crash_after  # seconds from the job runner's start to the agent's one crash
        self.driver = driver
        self.config_path = root / "config.toml"
        self.procs: list[subprocess.Popen] = []
        # Stable across processes (str hashes are salted per process): a later run must find this one.
        self.socket = f"loom-demo-{os.getuid()}-{hashlib.sha256(str(root).encode()).hexdigest()[:6]}"

    @classmethod
    def for_this_install(cls) -> Demo:
        """The demo of this checkout (its state/demo) or install; LOOM_DEMO_DIR puts it elsewhere."""
        chosen = os.environ.get("LOOM_DEMO_DIR")
        base = checkout_state_dir() or Path(platformdirs.user_state_dir("loom"))
        return cls(Path(chosen) if chosen else base / "demo", driver=os.environ.get("LOOM_DEMO_DRIVER") or "tmux")

    # -- set-up ------------------------------------------------------------------------------

    def write(self) -> Path:
        self._stop_leftovers()
        if self.root.exists():
            shutil.rmtree(self.root)
        (self.root / "logs").mkdir(parents=True)
        memory = self.root / "memory"
        memory.mkdir()
        for name, text in MEMORY.items():
            (memory / name).write_text(text)
        py = sys.executable
        bot = f"demo-{self.socket}"
        agent_re = r"loomtui\.demo\.agent"
        poller_re = rf"loomtui\.demo\.poller --bot {bot}\b"
        lines = [
            f"state_dir = {toml(str(self.root / 'state'))}",
            "[agent]",
            f"tmux_socket = {toml(self.socket)}",
            f"cwd = {toml(str(self.root))}",
            f"fresh_command = {toml(py + ' -m loomtui.demo.agent --session-id {session_id}')}",
            f"resume_command = {toml(py + ' -m loomtui.demo.agent --resume {session_id}')}",
            f"process_match = {toml(agent_re)}",
            f"poller_match = {toml(poller_re)}",
            'boot_grace = "5s"',
            'resume_check = "2s"',
            # The demo agent's prompt on a line of its own: seen, the agent is ready, and the
            # canary witnesses a relaunch at once instead of after the boot grace.
            f"ready_match = {toml(DEMO_READY)}",
            f"env = {toml({'LOOM_DEMO_DATA': str(self.root / 'agent-data'), 'LOOM_DEMO_BOT': bot})}",
            f"driver = {toml(self.driver)}",
            "[[agent.modals]]",
            'match = "Yes, I trust this folder"',
            'keys = ["Enter"]',
            "[watchdog]",
            'interval = "5s"\nexit_check = "1s"\npoller_grace = "20s"\nforeign_scan = "10s"',
            'backoff_base = "2s"\nbackoff_max = "20s"',
            "[canary]",
            # Longer than the simulated CLI's slowest answer (40 s under load): `loom doctor`
            # simulates Claude Code's timing, not the demo agent's own second.
            'interval = "30s"\nack_timeout = "45s"',
            "[sentinel]",
            'interval = "10s"\nrenudge = "2m"\nbackstop = "3m"\nmissed_grace = "1m"',
            "[memory]",
            f"dir = {toml(str(memory))}",
        ]
        for name, (every, _) in JOBS.items():
            lines += ["[[jobs]]", f"name = {toml(name)}", f"log = {toml(str(self.root / 'logs' / (name + '.log')))}",
                      f"schedule = {toml('every ' + every)}"]
        self.config_path.write_text("\n".join(lines) + "\n")
        return self.config_path

    def start(self) -> Path:
        self.write()
        ctx = Context.load(str(self.config_path), None)
        try:
            outcome = actions.recycle(ctx, "fresh", source="demo", reason="demo start")
        finally:
            ctx.close()
        if not outcome.ok:
            raise LoomError(f"the demo agent did not start: {outcome.describe()}")
        log = open(self.root / "supervise.log", "ab")
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "loomtui", "--config", str(self.config_path), "supervise"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "loomtui.demo.launcher", str(self.config_path), str(self.crash_after)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        # Last, so it outlives nothing it should stop: when the console goes without quitting (its
        # terminal closed, an SSH drop, a kill), this stops the demo as `q` would.
        self.procs.append(subprocess.Popen(
            [sys.executable, "-m", "loomtui.demo.launcher", "--reap", str(os.getpid()), str(self.root)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        (self.root / "pids").write_text(" ".join(str(p.pid) for p in self.procs))
        return self.config_path

    # -- tear-down ---------------------------------------------------------------------------

    def stop(self) -> None:
        for proc in self.procs:
            _end(proc.pid)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()
        self._kill_tmux()

    def _stop_leftovers(self) -> None:
        """A demo that was not quit cleanly (a killed terminal) must not keep running beside a new one."""
        pids = self.root / "pids"
        if pids.exists():
            for text in pids.read_text().split():
                if text.isdigit() and int(text) != os.getpid():  # the reaper, stopping the rest, is one
                    _end(int(text), only_if=f"{self.root}")
        self._kill_tmux()

    def _kill_tmux(self) -> None:
        try:
            out = subprocess.run(["tmux", f"-L{self.socket}", "display-message", "-p", "#{pid}"],
                                 capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return  # no tmux binary, or a server that does not answer: nothing we can stop through it
        server = out.stdout.strip()
        if server.isdigit():
            try:
                tree = psutil.Process(int(server)).children(recursive=True)
            except psutil.Error:
                tree = []
            for child in tree:
                _end(child.pid)
        subprocess.run(["tmux", f"-L{self.socket}", "kill-server"], capture_output=True, timeout=10)


def _end(pid: int, only_if: str = "") -> None:
    try:
        proc = psutil.Process(pid)
        if only_if and only_if not in " ".join(proc.cmdline()):
            return  # the pid was reused by something that is not ours
        proc.send_signal(signal.SIGTERM)
        proc.wait(5)
    except psutil.TimeoutExpired:
        try:
            proc.kill()
        except psutil.Error:
            pass
    except psutil.Error:
        pass


def run_jobs(config_path: Path, crash_after: float = CRASH_AFTER) -> int:
    """The demo's job scheduler: each job through `loom run-job`, and one crash to recover from."""
    started = time.monotonic()
    crashed = False
    due = {name: started + 3 + i * 4 for i, name in enumerate(JOBS)}
    every = {name: _seconds(spec[0]) for name, spec in JOBS.items()}
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping:
        now = time.monotonic()
        for name, (_, code) in JOBS.items():
            if now >= due[name]:
                due[name] = now + every[name]
                subprocess.run([sys.executable, "-m", "loomtui", "--config", str(config_path), "run-job", name, "--",
                                sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120)
        if not crashed and now - started >= crash_after:
            crashed = True
            subprocess.run([sys.executable, "-m", "loomtui", "--config", str(config_path), "inject", "/crash"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        time.sleep(0.5)
    return 0


def _seconds(text: str) -> float:
    from loomtui.durations import parse_duration

    return parse_duration(text)


def reap(console: int, root: Path) -> int:
    """Wait for the console that started the demo in `root` to go, however it went, then stop what
    it started. A console quit with `q` stops the demo itself (and this with it, by SIGTERM)."""
    try:
        born = psutil.Process(console).create_time()
    except psutil.Error:
        born = None
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    while not stopping and born is not None and _same(console, born):
        time.sleep(0.5)
    if not stopping:
        Demo(root)._stop_leftovers()
    return 0


def _same(pid: int, born: float) -> bool:
    """`pid` is still the process that started at `born` (and not a zombie: it has gone)."""
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == born and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


if __name__ == "__main__":
    if sys.argv[1:2] == ["--reap"]:
        raise SystemExit(reap(int(sys.argv[2]), Path(sys.argv[3])))
    raise SystemExit(run_jobs(Path(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else CRASH_AFTER))
