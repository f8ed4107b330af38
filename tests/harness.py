"""A real agent for tests: the demo agent in a tmux pane on a private socket, cleaned up by pid."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import psutil
from conftest import REPO, loom_env

from loomtui.context import Context


def free_port() -> int:
    """A loopback port nothing listens on right now (for a server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05, what: str = "",
             explain: Callable[[], str] | None = None) -> Any:
    """Poll until `predicate()` is truthy; fail with `what` after `timeout` (never a bare sleep),
    and with what `explain()` says of the moment (a daemon's log, the ledger), where it is given."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    message = f"timed out after {timeout}s waiting for {what or predicate} (last: {last!r})"
    raise AssertionError(message + ("\n" + explain() if explain is not None else ""))


def failures_at_once(work: Callable[[], object], threads: int) -> list[Exception]:
    """What `work` raised, run by `threads` threads at once (each begins when all are ready)."""
    ready = threading.Barrier(threads)
    failures: list[Exception] = []

    def run() -> None:
        ready.wait()
        try:
            work()
        except Exception as exc:  # noqa: BLE001 (every failure is the finding)
            failures.append(exc)

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return failures


def log_only_commits(directory: Path) -> bytes:
    """The bytes of a write-ahead log holding commits that never reached their database file (a
    scratch database in `directory`, never checkpointed): what a store's log looks like when its
    main file is lost."""
    with closing(sqlite3.connect(directory / "scratch.db", isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA wal_autocheckpoint = 0")
        db.execute("CREATE TABLE t(x)")
        db.execute("INSERT INTO t VALUES (1)")
        return (directory / "scratch.db-wal").read_bytes()


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


class LoomRunner:
    """`loom` and other Python processes run against `config_path`; what popen starts is in
    `_procs`, for the cleanup to end by pid."""

    config_path: Path
    _procs: list[subprocess.Popen]

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return loom_env({"LOOM_CONFIG": str(self.config_path), **(extra or {})})

    def loom(self, *args: str, timeout: float = 120, env: dict[str, str] | None = None,
             input: str = "") -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "loomtui", *args], capture_output=True, text=True,
                              env=self.env(env), timeout=timeout, cwd=REPO, input=input)

    def popen(self, *args: str, **kwargs: Any) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, *args], env=self.env(kwargs.pop("env", None)), cwd=REPO, **kwargs)
        self._procs.append(proc)
        return proc

    def stop_procs(self) -> None:
        """SIGTERM what popen started, SIGKILL what is still there 5 s later."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


class AgentHarness(LoomRunner):
    def __init__(self, root: Path, sections: dict[str, dict[str, Any]] | None = None, jobs: list[dict] | None = None,
                 modals: list[dict] | None = None) -> None:
        self.root = root
        self.tag = secrets.token_hex(4)
        self.socket = f"loomtest-{self.tag}"
        self.bot = f"bot-{self.tag}"
        self.state_dir = root / "state"
        self.data_dir = root / "demo-data"
        self.workdir = root / "work"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = root / "config.toml"
        py = sys.executable
        agent = {
            "tmux_socket": self.socket,
            "cwd": str(self.workdir),
            "fresh_command": f"{py} -m loomtui.demo.agent --session-id {{session_id}}",
            "resume_command": f"{py} -m loomtui.demo.agent --resume {{session_id}}",
            "process_match": r"loomtui\.demo\.agent",
            "poller_match": rf"loomtui\.demo\.poller --bot {self.bot}\b",
            "boot_grace": "2s",
            "resume_check": "1500ms",
            "stop_grace": "2s",
            "env": {"LOOM_DEMO_DATA": str(self.data_dir), "LOOM_DEMO_BOT": self.bot, "PYTHONPATH": str(REPO)},
        }
        merged = {"agent": agent}
        for name, values in (sections or {}).items():
            merged.setdefault(name, {}).update(values)
        lines = [f"state_dir = {toml_value(str(self.state_dir))}"]
        for name, values in merged.items():
            lines.append(f"[{name}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
        for modal in modals if modals is not None else [{"match": "Yes, I trust this folder", "keys": ["Enter"]}]:
            lines.append("[[agent.modals]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in modal.items()]
        for job in jobs or []:
            lines.append("[[jobs]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in job.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        self._contexts: list[Context] = []
        self._procs: list[subprocess.Popen] = []

    # -- driving ---------------------------------------------------------------------------

    def ctx(self) -> Context:
        ctx = Context.load(str(self.config_path), None, environ={})
        self._contexts.append(ctx)
        return ctx

    def tmux(self, *args: str, timeout: float = 10) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", f"-L{self.socket}", *args], capture_output=True, text=True, timeout=timeout)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "=agent:0.0").stdout

    def start(self) -> str:
        result = self.loom("recycle", "--fresh", "--reason", "test start")
        assert result.returncode == 0, result.stderr
        session_id = self.pinned()
        wait_for(lambda: "> " in self.screen(), 30, what="the demo agent's prompt")
        return session_id

    def pinned(self) -> str:
        from loomtui.store import session
        from loomtui.store.db import Store

        with Store.in_dir(self.state_dir) as store:
            return session.pinned(store)

    def events(self, kind: str | None = None) -> list[dict]:
        from loomtui.store import ledger
        from loomtui.store.db import Store

        with Store.in_dir(self.state_dir) as store:
            rows = ledger.tail(store, 100000, kinds=[kind] if kind else None)
        return [e.as_dict() for e in rows]

    def transcript(self, session_id: str, role: str | None = "user") -> list[str]:
        path = self.data_dir / "sessions" / f"{session_id}.jsonl"
        if not path.exists():
            return []
        turns = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return [t["text"] for t in turns if role is None or t["role"] == role]

    def agent_starts(self) -> int:
        """How many times the demo agent started, fresh or resumed, across every session."""
        sessions = self.data_dir / "sessions"
        turns = [json.loads(line) for path in sessions.glob("*.jsonl") if sessions.exists()
                 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return sum(1 for t in turns if t["role"] == "meta" and t["text"] in ("start", "resume"))

    def pane_pid(self) -> int | None:
        out = self.tmux("list-panes", "-t", "=agent:0", "-F", "#{pane_index} #{pane_pid} #{pane_dead}").stdout
        for line in out.splitlines():
            index, pid, dead = line.split()
            if index == "0" and dead == "0":
                return int(pid)
        return None

    def agent_pid(self) -> int | None:
        from loomtui.agent import proctree

        root = self.pane_pid()
        if root is None:
            return None
        tree = proctree.inspect(root, r"loomtui\.demo\.agent", rf"loomtui\.demo\.poller --bot {self.bot}\b")
        return tree.agent_pid

    def poller_pids(self) -> list[int]:
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            line = " ".join(proc.info["cmdline"] or [])
            if "loomtui.demo.poller" in line and f"--bot {self.bot}" in line:
                found.append(proc.info["pid"])
        return found

    # -- cleanup ---------------------------------------------------------------------------

    def server_pid(self) -> int | None:
        out = self.tmux("display-message", "-p", "#{pid}").stdout.strip()
        return int(out) if out.isdigit() else None

    def server_pids(self) -> set[int]:
        """Every tmux server of this test's socket, by pid: asked through the socket, and found by
        its command line too, for a test that deleted the socket (then nobody can ask)."""
        found = {pid for pid in [self.server_pid()] if pid}
        for proc in psutil.process_iter(["cmdline"]):
            argv = proc.info["cmdline"] or []
            if argv and os.path.basename(argv[0]) == "tmux" and (
                    f"-L{self.socket}" in argv or any(a == "-L" and b == self.socket for a, b in zip(argv, argv[1:]))):
                found.add(proc.pid)
        return found

    def cleanup(self) -> None:
        for ctx in self._contexts:
            ctx.close()
        self.stop_procs()
        victims: set[int] = set()
        for server in self.server_pids():
            try:
                victims.update(p.pid for p in psutil.Process(server).children(recursive=True))
                victims.add(server)
            except psutil.Error:
                pass
        victims.update(self.poller_pids())
        for pidfile in (self.data_dir / "foreign").glob("*.pid") if (self.data_dir / "foreign").exists() else []:
            text = pidfile.read_text().strip()
            if text.isdigit():
                victims.add(int(text))
        for pid in victims:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.tmux("kill-server")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(psutil.pid_exists(p) and not _zombie(p) for p in victims):
            time.sleep(0.05)


class LinePane:
    """A real tmux server on a private socket whose one pane reads lines, as an agent's prompt does:
    what Loom types into it (paste, then Enter) the pane's program appends to a file, `lines()`.
    A lower layer for tests of Loom's own paths that need a pane and no agent (the sentinel's
    nudges). `agent_keys()` are the `[agent]` keys that point Loom at it. Cleaned up by pid.
    """

    READER = ("import sys\n"
              "out = open(sys.argv[1], 'a', encoding='utf-8')\n"
              "print('reading lines', flush=True)\n"
              "for line in sys.stdin:\n"
              "    out.write(line)\n"
              "    out.flush()\n")

    def __init__(self, root: Path, session: str = "agent") -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.socket = f"loomtest-{secrets.token_hex(4)}"
        self.session = session
        self.typed = root / f"{self.socket}-{session}.typed"
        self.typed.touch()
        self._servers: set[int] = set()
        self._socket_path = ""

    def start(self) -> LinePane:
        argv = ["new-session", "-d", "-s", self.session, "-x", "200", "-y", "50", "exec sleep 2147483647"]
        assert self.tmux(*argv).returncode == 0
        pid, self._socket_path = self.tmux("display-message", "-p", "#{pid} #{socket_path}").stdout.split(" ", 1)
        self._socket_path = self._socket_path.strip()
        self._servers.add(int(pid))
        assert self.tmux("set-option", "-w", "-t", f"={self.session}:0", "remain-on-exit", "on").returncode == 0
        self.respawn()
        return self

    def agent_keys(self) -> dict[str, str]:
        return {"tmux_socket": self.socket, "session": self.session}

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["tmux", f"-L{self.socket}", "-f/dev/null", *args], capture_output=True, text=True,
                              timeout=10)

    def respawn(self) -> None:
        """(Re)start the reader in the pane and wait until it reads."""
        reader = f"exec {sys.executable} -u -c {shlex.quote(self.READER)} {shlex.quote(str(self.typed))}"
        assert self.tmux("clear-history", "-t", f"={self.session}:0.0").returncode == 0
        assert self.tmux("respawn-pane", "-k", "-t", f"={self.session}:0.0", reader).returncode == 0
        wait_for(lambda: "reading lines" in self.screen() and not self.dead(), 30, what="the pane's reader")

    def end_reader(self) -> None:
        """End the pane's program: the pane stays, dead (remain-on-exit), until `respawn()`."""
        assert self.tmux("respawn-pane", "-k", "-t", f"={self.session}:0.0", "exit 3").returncode == 0
        wait_for(self.dead, 30, what="a dead pane")

    def dead(self) -> bool:
        return self.tmux("display-message", "-p", "-t", f"={self.session}:0.0", "#{pane_dead}").stdout.strip() == "1"

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", f"={self.session}:0.0").stdout

    def lines(self) -> list[str]:
        """Every line the pane's program has read, in order."""
        return self.typed.read_text(encoding="utf-8").splitlines()

    def wait_lines(self, count: int) -> list[str]:
        """The lines read once there are at least `count` (Enter reaches the reader a moment after
        the injection returns)."""
        return wait_for(lambda: self.lines() if len(self.lines()) >= count else None, 30,
                        what=f"{count} lines read in the pane")

    def cleanup(self) -> None:
        victims: set[int] = set()
        for server in self._servers:
            try:
                victims.update(p.pid for p in psutil.Process(server).children(recursive=True))
                victims.add(server)
            except psutil.Error:
                pass
        self.tmux("kill-server")
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: not any(psutil.pid_exists(p) and not _zombie(p) for p in victims), 10,
                 what="the pane's processes gone")
        if self._socket_path:  # tmux 3.3a leaves its socket file behind
            Path(self._socket_path).unlink(missing_ok=True)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


class AgentsHarness(LoomRunner):
    """Several demo agents under one config, one state dir and one supervisor, each agent on a tmux
    socket of its own (so one agent's server can be stopped while the others run on).

    Each agent is an AgentHarness of its own (its socket, bot, data dir, and its cleanup by pid);
    its `[agent]` table becomes one `[[agents]]` entry here. Its own loom()/events() read its own
    unused state dir: use this harness's, which take the agent's name.
    """

    def __init__(self, root: Path, names: list[str], sections: dict[str, dict[str, Any]] | None = None) -> None:
        import tomllib

        self.root = root
        self.members = {name: AgentHarness(root / name) for name in names}
        self.state_dir = root / "state"
        self.config_path = root / "config.toml"
        lines = [f"state_dir = {toml_value(str(self.state_dir))}"]
        for section, values in (sections or {}).items():
            lines.append(f"[{section}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in values.items()]
        for name, member in self.members.items():
            agent = tomllib.loads(member.config_path.read_text())["agent"]
            modals = agent.pop("modals", [])
            agent["session"] = "agent"  # each on its own socket: the member's own look at its pane holds
            lines += ["[[agents]]", f"name = {toml_value(name)}"]
            lines += [f"{k} = {toml_value(v)}" for k, v in agent.items()]
            for modal in modals:
                lines.append("[[agents.modals]]")
                lines += [f"{k} = {toml_value(v)}" for k, v in modal.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        self._procs: list[subprocess.Popen] = []
        self._stopped: set[int] = set()

    def stop_server(self, name: str) -> int:
        """SIGSTOP agent `name`'s tmux server (a hung server: it takes connections, answers nothing)."""
        pid = self.members[name].server_pid()
        assert pid, f"agent {name}'s tmux server"
        self._stopped.add(pid)
        os.kill(pid, signal.SIGSTOP)
        return pid

    def resume_servers(self) -> None:
        for pid in self._stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._stopped.clear()

    def start(self, name: str) -> str:
        result = self.loom("recycle", "--agent", name, "--fresh", "--reason", "test start")
        assert result.returncode == 0, result.stderr
        member = self.members[name]
        wait_for(lambda: "> " in member.screen(), 30, what=f"agent {name}'s prompt")
        return self.pinned(name)

    def pinned(self, name: str) -> str:
        from loomtui.store import session
        from loomtui.store.db import Store

        with Store.in_dir(self.state_dir, agent=name) as store:
            return session.pinned(store)

    def events(self, kind: str | None = None, agent: str | None = None) -> list[dict]:
        from loomtui.store import ledger
        from loomtui.store.db import Store

        with Store.in_dir(self.state_dir) as store:
            rows = ledger.tail(store, 100000, kinds=[kind] if kind else None, agent=agent)
        return [e.as_dict() for e in rows]

    def cleanup(self) -> None:
        self.stop_procs()
        self.resume_servers()  # a stopped server would not answer the cleanup's questions
        for member in self.members.values():
            member.cleanup()


def clock_waiting_context(config_path: Path | str, state_dir: Path | str | None = None) -> Context:
    """The Context of `config_path` whose store waits out a locked store's busy timeout on the
    installed clock (as the simulator's do), its store opened and migrated before anyone locks it."""
    loaded = Context.load(str(config_path), None if state_dir is None else str(state_dir), environ={})
    ctx = Context(loaded.config, loaded.config_path, loaded.state_dir, store_waits_on_clock=True)
    loaded.close()
    ctx.store.query("SELECT 1")
    return ctx


def locked_by_another(store_path: Path) -> sqlite3.Connection:
    """Another process's connection holding the store's write lock until it is closed (readers go on)."""
    blocker = sqlite3.connect(store_path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    return blocker
