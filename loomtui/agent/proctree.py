"""The agent's process tree, walked from the pane's pid, at a cost that does not grow with the machine.

On Linux the walk reads /proc/<pid>/task/<tid>/children for the tree's own processes only
(about 0.1 ms for a small tree); psutil's children(recursive=True) reads every process on the
machine. Anything that goes wrong mid-walk (a process vanished, access denied, a zombie) makes
the answer "unknown", never "missing": only a clean walk may report an absence.

The machine-wide look for foreign pollers reads /proc/<pid>/cmdline alone and tests its bytes
for the pattern's needles (logscan.pattern_needles) before decoding anything: no per-process
objects. psutil is imported only where a call needs it (other platforms), which keeps it out of
`loom` commands that never touch a process. This module only looks: ending a process is
loomtui.agent.kill's, which only the actions module and the driver may import.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loomtui import platform
from loomtui.errors import Ambiguous  # noqa: F401  (re-exported: callers say proctree.Ambiguous)
from loomtui.states import MISSING, PRESENT, UNKNOWN  # noqa: F401  (re-exported)

if TYPE_CHECKING:
    from loomtui.agent.ports import Processes
    from loomtui.context import Context

_PROC = "/proc"


def _proc_files() -> bool:
    """The /proc files are there to read (loomtui.platform; LOOM_PLATFORM=portable walks with psutil)."""
    return platform.current().proc_files


def _children_linux(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except FileNotFoundError:
        raise Ambiguous(f"process {pid} vanished during the walk") from None
    except PermissionError:
        raise Ambiguous(f"access denied to /proc/{pid}/task") from None
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/children", encoding="ascii") as fh:
                kids.extend(int(x) for x in fh.read().split())
        except FileNotFoundError:
            continue  # a thread that ended: its children moved to the process
        except PermissionError:
            raise Ambiguous(f"access denied to /proc/{pid}/task/{tid}/children") from None
    return kids


def _children_psutil(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children()]
    except psutil.NoSuchProcess:
        raise Ambiguous(f"process {pid} vanished during the walk") from None
    except psutil.AccessDenied:
        raise Ambiguous(f"access denied to process {pid}") from None


def children(pid: int) -> list[int]:
    return _children_linux(pid) if _proc_files() else _children_psutil(pid)


def cmdline(pid: int) -> str:
    """The command line joined by spaces; raises Ambiguous when it cannot be read."""
    if _proc_files():
        try:
            with open(f"{_PROC}/{pid}/cmdline", "rb") as fh:
                raw = fh.read()
        except FileNotFoundError:
            raise Ambiguous(f"process {pid} vanished during the walk") from None
        except PermissionError:
            raise Ambiguous(f"access denied to /proc/{pid}/cmdline") from None
        if not raw:
            raise Ambiguous(f"process {pid} has no command line (zombie or kernel thread)")
        return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    import psutil

    try:
        parts = psutil.Process(pid).cmdline()
    except psutil.NoSuchProcess:
        raise Ambiguous(f"process {pid} vanished during the walk") from None
    except (psutil.AccessDenied, psutil.ZombieProcess):
        raise Ambiguous(f"cannot read the command line of process {pid}") from None
    if not parts:
        raise Ambiguous(f"process {pid} has no command line (zombie or kernel thread)")
    return " ".join(parts)


def is_zombie(pid: int) -> bool:
    return _state(pid) == "Z"


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, Z, ...), None when it cannot be read (gone, denied)."""
    if _proc_files():
        try:
            with open(f"{_PROC}/{pid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            return None
        # The name in parentheses may hold anything, ")" included: the state follows the last ")".
        rest = raw[raw.rfind(b")") + 1:].split(None, 1)
        return rest[0].decode("ascii", "replace") if rest else None
    import psutil

    try:
        return "Z" if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE else "R"
    except psutil.Error:
        return None


def walk(root: int, limit: int = 2000) -> tuple[list[int], dict[int, int]]:
    """Every pid in the tree under `root` (root first, breadth first) and each one's parent."""
    pids: list[int] = []
    parents: dict[int, int] = {}
    queue = deque([root])
    while queue:
        pid = queue.popleft()
        pids.append(pid)
        if len(pids) > limit:
            raise Ambiguous(f"the tree under {root} has more than {limit} processes")
        for kid in children(pid):
            if kid not in parents and kid != root:
                parents[kid] = pid
                queue.append(kid)
    return pids, parents


@dataclass(frozen=True)
class Tree:
    """What the walk found. agent/poller are PRESENT, MISSING or UNKNOWN; why says what was ambiguous."""

    root: int
    pids: tuple[int, ...] = ()
    agent: str = UNKNOWN
    agent_pid: int | None = None
    poller: str = UNKNOWN
    poller_pids: tuple[int, ...] = ()
    why: str = ""
    cmdlines: dict[int, str] = field(default_factory=dict, compare=False)


def _deepest(matches: list[int], parents: dict[int, int], lines: dict[int, str] | None = None) -> int:
    # `sh -c 'claude …'` matches too when the shell did not exec; the real agent is the match
    # with no matching ancestor below it, i.e. the deepest. But a fork that has not exec'd yet
    # (Claude Code forks to run each hook and each tool) has its parent's very command line: that
    # is the agent's child for a moment, never the agent.
    if lines:
        matched = set(matches)
        own = [p for p in matches
               if not (parents.get(p) in matched and lines.get(parents[p]) == lines.get(p))]
        matches = own or matches

    def depth(pid: int) -> int:
        d = 0
        while pid in parents:
            pid = parents[pid]
            d += 1
        return d

    return max(matches, key=lambda p: (depth(p), -p))


def inspect(root: int, process_match: str, poller_match: str = "") -> Tree:
    agent_re = re.compile(process_match)
    poller_re = re.compile(poller_match) if poller_match else None
    try:
        pids, parents = walk(root)
    except Ambiguous as exc:
        return Tree(root, why=str(exc))
    lines: dict[int, str] = {}
    unreadable: list[str] = []
    for pid in pids:
        try:
            lines[pid] = cmdline(pid)
        except Ambiguous as exc:
            unreadable.append(str(exc))
    why = "; ".join(unreadable)
    agents = [p for p in lines if agent_re.search(lines[p]) and not is_zombie(p)]
    pollers = tuple(p for p in lines if poller_re is not None and poller_re.search(lines[p]) and not is_zombie(p))
    # A process we could not read might have been the one we look for: that is "unknown", not "missing".
    if agents:
        agent, agent_pid = PRESENT, _deepest(agents, parents, lines)
    else:
        agent, agent_pid = (UNKNOWN if unreadable else MISSING), None
    if poller_re is None:
        poller = UNKNOWN
    elif pollers:
        poller = PRESENT
    else:
        poller = UNKNOWN if unreadable else MISSING
    return Tree(root, tuple(pids), agent, agent_pid, poller, pollers, why, lines)


def foreign_pollers(poller_match: str, tree: set[int], exclude: set[int] | None = None) -> list[tuple[int, str]]:
    """Processes matching the poller pattern outside the agent's tree (one pass over the process table).

    A process that ends during the pass, one whose command line cannot be read and a kernel
    thread (an empty command line) are passed over: none is a poller we could end.
    """
    if not poller_match:
        return []
    pattern = re.compile(poller_match)
    skip = set(tree) | {os.getpid()} | (exclude or set())
    if not _proc_files():
        return _foreign_pollers_psutil(pattern, skip)
    # Imported here: the pattern parser is only for this scan, and every `loom status` imports proctree.
    from loomtui.sentinel.logscan import pattern_needles

    needles = pattern_needles(poller_match)
    plain = [n.text for n in needles if not n.caseless] if needles is not None else []
    folded = [n.text for n in needles if n.caseless] if needles is not None else []
    found = []
    for pid in _pids():
        if pid in skip:
            continue
        raw = _read_cmdline(pid)
        if not raw:
            continue
        line = raw.rstrip(b"\0").replace(b"\0", b" ")
        # A line the pattern matches holds one of its needles: most processes stop here, undecoded.
        if needles is not None and not (any(n in line for n in plain)
                                        or (folded and any(n in line.lower() for n in folded))):
            continue
        text = line.decode("utf-8", "replace")
        if pattern.search(text):
            found.append((pid, text))
    return found


def _pids() -> list[int]:
    try:
        names = os.listdir(_PROC)
    except OSError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


def _read_cmdline(pid: int) -> bytes:
    """/proc/<pid>/cmdline, or b"" when the process is gone, unreadable, a zombie or a kernel thread."""
    try:
        fd = os.open(f"{_PROC}/{pid}/cmdline", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        parts = []
        while True:
            block = os.read(fd, 65536)
            if not block:
                break
            parts.append(block)
        return b"".join(parts)
    except OSError:  # ESRCH: it ended between the open and the read
        return b""
    finally:
        os.close(fd)


def _foreign_pollers_psutil(pattern: re.Pattern[str], skip: set[int]) -> list[tuple[int, str]]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.info["pid"] in skip or not proc.info["cmdline"]:
                continue
            line = " ".join(proc.info["cmdline"])
        except (psutil.Error, TypeError):
            continue
        if pattern.search(line):
            found.append((proc.info["pid"], line))
    return found


def ancestors(pid: int) -> set[int]:
    """The pids above `pid`, up to init; Ambiguous if they cannot be read (gone, denied)."""
    import psutil

    try:
        return {p.pid for p in psutil.Process(pid).parents()}
    except psutil.Error:
        raise Ambiguous(f"cannot read the parents of process {pid}") from None


def name(pid: int) -> str:
    """A process's name for the record, "?" if it cannot be read."""
    import psutil

    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def start_time(pid: int) -> float | None:
    """A process's start, recorded beside its pid so that `alive_as` can tell it from a later
    process given the same pid. None when the process cannot be read (gone, hidden).

    On Linux this is the start in clock ticks since boot (/proc/<pid>/stat field 22), fixed for
    the process's life whatever the wall clock does. psutil's create_time() is that plus the boot
    time, which the kernel derives from the wall clock at each read: a step of the clock (NTP
    setting a Pi's clock after boot) moves every process's create_time by the step, so a recorded
    one no longer matches, and a comparison with slack ("started before X + 5 s") both misses a
    pid reused within the slack and disowns our own process after a step forward. Elsewhere
    (macOS) psutil's create_time is the start as the kernel stored it, to the hundredth.
    """
    if _proc_files():
        try:
            with open(f"{_PROC}/{pid}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            return float(fields[19])
        except (OSError, IndexError, ValueError):
            return None
    import psutil

    try:
        return round(psutil.Process(pid).create_time(), 2)
    except psutil.Error:
        return None


def alive_as(pid: int | None, started: float | None) -> bool:
    """The one check that a pid recorded earlier is still the process recorded then: the pid
    runs, its start is `started` (from `start_time` when it was recorded: a different process
    now holding the pid has another), and it is not a zombie. Without a recorded start there is
    no telling: not ours."""
    if not pid or started is None:
        return False
    if start_time(int(pid)) != started:
        return False
    state = _state(int(pid))
    return state is not None and state != "Z"


def alive_since(pid: int | None, started: float | None, wall_started: float) -> bool:
    """`alive_as` for a record that may predate the recorded start (`started` None: written
    before Loom kept one): then, once, the old test by wall time — the pid runs, is no zombie and
    was created no later than `wall_started` + 5 s (a slack for create_time's rounding). Weaker (a
    pid reused within the slack, a wall-clock step), but it keeps a job that was running across
    the upgrade from being taken for a dead one."""
    if started is not None:
        return alive_as(pid, started)
    if not pid:
        return False
    state = _state(int(pid))
    if state is None or state == "Z":
        return False
    import psutil

    try:
        return psutil.Process(int(pid)).create_time() <= wall_started + 5
    except psutil.Error:
        return False


def running(pid: int) -> bool:
    """The pid names a live process (any process: nothing says it is the one recorded)."""
    state = _state(int(pid))
    return state is not None and state != "Z"


def session_members(pid: int) -> list[int]:
    """Every process in `pid`'s session: the fallback when a tree walk cannot be trusted
    (tmux makes each pane's process a session leader, so the session is the pane's tree
    unless a child left it on purpose)."""
    try:
        sid = os.getsid(pid)
    except OSError:
        return [pid]
    return _in_session(sid) or [pid]


def _in_session(sid: int) -> list[int]:
    """Every process whose session is `sid`, in pid order."""
    if _proc_files():
        pids = _pids()
    else:
        import psutil

        pids = psutil.pids()
    members = []
    for other in pids:
        try:
            if os.getsid(other) == sid:
                members.append(other)
        except OSError:
            continue
    return members


def left_in_session(sid: int) -> list[int]:
    """The processes still in session `sid`, whose leader (a dead pane's process, reaped) is gone:
    what it started and left behind (a pump SIGKILLed leaves its CLI; a CLI its plugins). While a
    process of that session lives, the kernel gives nobody its number; a live process holding the
    number shows it was given again (the session ended, another began under it): then nothing is
    that pane's. (A later session whose leader has exited too cannot be told so: callers check
    that each process is theirs, `environ`.)"""
    state = _state(sid)
    if state is not None and state != "Z":
        return []
    return [pid for pid in _in_session(sid) if pid != sid]


def environ(pid: int) -> dict[str, str] | None:
    """A process's environment as it started, None when it cannot be read (gone, another user's)."""
    if _proc_files():
        try:
            with open(f"{_PROC}/{pid}/environ", "rb") as fh:
                raw = fh.read()
        except OSError:
            return None
        pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        return {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in pairs}
    import psutil

    try:
        return dict(psutil.Process(pid).environ())
    except psutil.Error:
        return None


class MachineProcesses:
    """The `Processes` port on this machine: the functions above."""

    def inspect(self, root: int, process_match: str, poller_match: str = "") -> Tree:
        return inspect(root, process_match, poller_match)

    def walk(self, root: int) -> tuple[list[int], dict[int, int]]:
        return walk(root)

    def foreign_pollers(self, poller_match: str, tree: set[int]) -> list[tuple[int, str]]:
        return foreign_pollers(poller_match, tree)

    def cmdline(self, pid: int) -> str:
        return cmdline(pid)

    def ancestors(self, pid: int) -> set[int]:
        return ancestors(pid)

    def name(self, pid: int) -> str:
        return name(pid)

    def start_time(self, pid: int) -> float | None:
        return start_time(pid)

    def alive_as(self, pid: int | None, started: float | None) -> bool:
        return alive_as(pid, started)

    def alive_since(self, pid: int | None, started: float | None, wall_started: float) -> bool:
        return alive_since(pid, started, wall_started)


MACHINE = MachineProcesses()


def of(ctx: Context) -> Processes:
    """The context's process table: the simulator's where it filled one in, else this machine's."""
    return ctx.processes if ctx.processes is not None else MACHINE
