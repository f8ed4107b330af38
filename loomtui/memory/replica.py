"""The memory directory replicated with git: committed after a quiet period, pulled with rebase,
pushed; the ledger's head checkpointed beside it. The decisions are `replica_rules`; this is git.

The memory directory is its own git work tree (`git init` on the first sync), its remote `origin`.
A rebase that conflicts never loses a side: for each conflicting file the remote's version stays
as FILE and this box's is kept as FILE.conflict-HOST-TIME, both committed, and a queue item asks
the agent to reconcile them (its nudges come from the sentinel, as for a failing job's). A remote
that cannot be reached leaves the commits local; the next try (with a backoff) pushes them.

The repository is not in the work tree: it is a git directory of Loom's under the state dir
(`replicas/NAME-HASH.git`, `git_dir_of`), named on every git call. The agent writes the memory
directory; a `.git` there would be a config (filters, fsmonitor, credential helpers, an upload-pack)
and hooks of its making, run by the daemon with the daemon's environment. A `.git` directory an
older Loom made there is adopted once: its objects, refs and index copied, nothing that runs, then
moved aside into the state dir (`ensure_repository`); any other `.git` there is refused.

What the last sync left (push and pull times, commits not pushed, the error while offline) is kept
in `loom-replica.json` in that git directory: `loom status` and the console read it without running
git, and the daemon and `loom memory sync` share the work under a lock beside it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loomtui import clock
from loomtui.memory import replica_rules as rules
from loomtui.memory.git import Git, GitError, Result, as_text
from loomtui.sentinel.queue_rules import CLAIMED, MEMORY_CONFLICT, WITNESSED
from loomtui.states import MEMORY_QUEUE
from loomtui.store import ledger, queue_items
from loomtui.store.db import Store
from loomtui.store.locks import FileLock

STATE_FILE = "loom-replica.json"
REPLICAS_DIR = "replicas"      # under the state dir: each replica's git directory
# What is adopted of a `.git` directory an older Loom made in the work tree: data, nothing git runs
# (no config, hooks, info/ or a rebase's todo, whose `exec` lines would run).
ADOPTED = ("objects", "refs", "packed-refs", "index", STATE_FILE)
OLD_LOCK_FILE = "loom-replica.lock"  # an older Loom's lock, in its `.git`
OLD_MARKERS = (STATE_FILE, OLD_LOCK_FILE)  # what tells a `.git` an older Loom made from the operator's own
CHECKPOINTS = ".loom/checkpoints"
JOB = MEMORY_QUEUE             # the queue's name for the replica, where a job's name stands
CONFLICT = MEMORY_CONFLICT      # the queue item kind (sentinel.queue_rules words its nudge)
MAX_REBASE_STOPS = 200         # stops one sync takes a rebase through (one per conflicting commit); the next goes on


class RebaseLeft(GitError):
    """A rebase that stopped MAX_REBASE_STOPS times in one sync, left in progress for the next, with
    the conflicts kept so far: their copies are in the tree, the agent's to reconcile now."""

    def __init__(self, message: str, conflicts: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.conflicts = conflicts


@dataclass
class State:
    """The replica as the last sync left it (stored as JSON in .git)."""

    last_push: float | None = None
    last_pull: float | None = None
    last_try: float | None = None
    failures: int = 0
    ahead: int = 0
    error: str = ""
    error_since: float | None = None
    error_kind: str = ""  # rules.REMOTE (fetch, push) or rules.LOCAL; "" from an older Loom: remote
    rejected: bool = False
    fingerprint: str = ""
    changed_at: float | None = None
    conflicts: int = 0
    checkpoint_seq: int | None = None
    checkpoint_at: float | None = None

    @classmethod
    def from_json(cls, data: Any) -> State:
        if not isinstance(data, dict):
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        try:
            return cls(**known)
        except TypeError:
            return cls()

    def lag(self) -> rules.Lag:
        return rules.Lag(self.last_push, self.last_pull, self.ahead, self.error, self.error_since, self.conflicts,
                         self.error_kind or rules.REMOTE)


@dataclass
class Outcome:
    """What one sync did, in lines for `loom memory sync` and the daemon's log."""

    committed: bool = False
    pulled: bool = False
    pushed: bool = False
    checkpoint: str = ""
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # (file, where this box's side went)
    error: str = ""
    error_kind: str = ""  # rules.REMOTE or rules.LOCAL, with `error`
    ahead: int = 0

    def lines(self) -> list[str]:
        out = []
        if self.committed:
            out.append("committed the memory directory's changes")
        if self.checkpoint:
            out.append(f"checkpointed the ledger head {self.checkpoint}")
        if self.pulled:
            out.append("pulled (rebased onto the remote)")
        for path, copy in self.conflicts:
            path = as_text(path)
            out.append(f"conflict in {path}: the remote's version kept as {path}, this box's as {copy}")
        if self.pushed:
            out.append("pushed")
        if self.error:
            what = "remote unreachable" if self.error_kind != rules.LOCAL else rules.LOCAL_WORDS
            out.append(f"{what}: {self.error}; {self.ahead} commit{'s' * (self.ahead != 1)} kept "
                       "locally until the next try")
        return out


def git_dir_of(state_dir: Path, work_tree: Path) -> Path:
    """The git directory of the replica of `work_tree`: under the state dir, named for the work
    tree's absolute path (agents may share a memory directory, and so its replica)."""
    tree = os.path.abspath(os.path.expanduser(str(work_tree)))
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(tree))[:40] or "root"
    return Path(state_dir) / REPLICAS_DIR / f"{name}-{hashlib.sha256(tree.encode()).hexdigest()[:12]}.git"


def read_state(git_dir: Path) -> State | None:
    """The last sync's record, or None where none was made (no replica, or never synced)."""
    try:
        return State.from_json(json.loads((Path(git_dir) / STATE_FILE).read_text()))
    except (OSError, ValueError):
        return None


def state_of(state_dir: Path, work_tree: Path) -> State | None:
    return read_state(git_dir_of(state_dir, work_tree))


class Replica:
    """One work tree and its remote."""

    def __init__(self, directory: Path, remote: str, *, git_dir: Path, branch: str = "main", host: str,
                 timeout: float, ignored: tuple[str, ...] = ()) -> None:
        self.dir = Path(directory)
        self.git_dir = Path(git_dir)
        # Names never replicated (git's info/exclude): Loom's own files in the work tree. A lock file
        # committed conflicted on every box that took it, and a pull replaced its inode under a holder.
        self.ignored = ignored
        self.remote = remote
        self.branch = branch
        self.host = host
        self.git = Git(self.dir, host, timeout, git_dir=self.git_dir)

    @classmethod
    def of_memory(cls, memory: Any, state_dir: Path) -> Replica:
        return cls(memory.dir, memory.remote, git_dir=git_dir_of(state_dir, memory.dir), branch=memory.branch,
                   host=memory.host, timeout=memory.git_timeout,
                   ignored=(f".{Path(memory.index).name}.lock",))  # `loom memory add`'s lock, beside the index

    @property
    def remote_ref(self) -> str:
        return f"refs/remotes/origin/{self.branch}"

    def lock(self, timeout: float | None = None) -> FileLock:
        """The daemon's loop and `loom memory sync` never run git in this tree at once (LockHeld
        after `timeout`, by default the git timeout)."""
        self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.git_dir.parent, self.git_dir.name + ".lock")
        lock.acquire(timeout=self.git.timeout if timeout is None else timeout)
        try:
            self.ensure_repository()
        except BaseException:
            lock.release()
            raise
        return lock

    # -- the repository ---------------------------------------------------------------------------

    def ensure_repository(self) -> None:
        """The replica's own git directory, made whole or not at all (built beside it, then renamed
        into place). A `.git` an older Loom made in the work tree is adopted into it: its data,
        under its own lock, then moved aside into the state dir, kept and never run. Any other
        `.git` there is the operator's: refused, never touched."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.git_dir / "HEAD").exists():
            if self._exclusions(self.git_dir) is not None:
                # Excluded now, perhaps committed before (an index renamed since): no longer tracked,
                # wherever in the tree (an exclude without a slash matches at any depth). The list is
                # written once that is done: a refusal here (a stale index.lock) is tried again.
                self.git.run("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--",
                             *(f":(glob)**/{_glob_escaped(name)}" for name in self.ignored))
                self._exclude(self.git_dir)
            return
        old = self.dir / ".git"
        adopting = old.is_dir() and not old.is_symlink() and any((old / n).exists() for n in OLD_MARKERS)
        if os.path.lexists(old) and not adopting:
            raise GitError(f"{self.dir}: its .git is not a Loom replica's, and Loom neither writes into it nor "
                           "removes it: move it elsewhere, or set memory.dir to another directory")
        self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=f"{self.git_dir.name}.new-", dir=self.git_dir.parent))
        try:
            Git(self.dir, self.host, self.git.timeout, git_dir=building).run("init", "-q", "-b", self.branch)
            self._exclude(building)
            if adopting:
                # An older Loom still running syncs under this lock: not in the middle of one of its.
                with FileLock(old, OLD_LOCK_FILE):
                    self._adopt(old, building)
            os.rename(building, self.git_dir)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        if adopting:
            shutil.move(str(old), str(self.git_dir.parent / f"{self.git_dir.name}.adopted-{_stamp(clock.wall())}"))
            # An older Loom committed them: no longer tracked (the next commit says so).
            self.git.run("rm", "-r", "-q", "--cached", "--ignore-unmatch", "--", *self.ignored, check=False)

    def _exclusions(self, git_dir: Path) -> str | None:
        """The exclude list the config asks for, when the repository's differs (None: the same)."""
        if not self.ignored:
            return None
        text = "".join(f"{name}\n" for name in self.ignored)
        try:
            if (git_dir / "info" / "exclude").read_text() == text:
                return None
        except (FileNotFoundError, UnicodeDecodeError):
            pass
        return text

    def _exclude(self, git_dir: Path) -> None:
        """The names never committed (`loom memory add`'s lock beside the index), as the config says
        now: written only when the repository was made, a renamed `memory.index`'s lock was
        committed, its holder's pid in it, and conflicted between boxes."""
        text = self._exclusions(git_dir)
        if text is None:
            return
        (git_dir / "info").mkdir(exist_ok=True)
        _write_atomic(git_dir / "info" / "exclude", text)

    @staticmethod
    def _adopt(old: Path, building: Path) -> None:
        """The data of an older Loom's `.git` (ADOPTED) into the git directory being built: nothing
        git runs (its config, hooks, info/, a rebase's todo) comes with it."""
        for name in ADOPTED:
            source = old / name
            if source.is_symlink() or not source.exists():
                continue
            if source.is_dir():
                shutil.copytree(source, building / name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(source, building / name, follow_symlinks=False)

    def ensure(self, now: float | None = None, *, settle: bool = True) -> list[tuple[str, str]]:
        """A work tree on the branch with `origin` at the configured remote, no rebase left half
        done: one an earlier sync left (killed, timed out, interrupted) is finished as that sync
        would have, each conflict kept both ways, what the agent wrote meanwhile with it. (It was
        aborted: the abort put back the tracked files as they were before the rebase, and the
        agent's edits since were lost.) The conflicts it kept, if any."""
        self.ensure_repository()
        # The URL as configured, not as `remote get-url` rewrites it (url.*.insteadOf, which README
        # suggests): compared with that, it differed at every look and was set again each time.
        found = self.git.run("config", "--get", "remote.origin.url", check=False)
        if not found.ok:
            self.git.run("remote", "add", "origin", "--", self.remote)
        elif found.out.strip() != self.remote:
            self.git.run("remote", "set-url", "origin", "--", self.remote)
        if not settle or not self._rebasing():
            return []  # (a read of the remote leaves a half-done rebase to the next sync)
        return self._settle(None, clock.wall() if now is None else now)

    def _rebasing(self) -> bool:
        return (self.git_dir / "rebase-merge").exists() or (self.git_dir / "rebase-apply").exists()

    def _has(self, ref: str) -> bool:
        return self.git.run("rev-parse", "-q", "--verify", ref + "^{commit}", check=False).ok

    def status(self) -> tuple[bool, str]:
        """(changes not committed, a fingerprint of them: what changed and each file's size and mtime)."""
        out = self.git.run("status", "--porcelain=v1", "-z", "--untracked-files=all").out
        if not out:
            return False, ""
        parts = [out]
        for entry in out.split("\0"):
            rel = entry[3:]
            if not rel:
                continue
            try:
                st = os.lstat(self.dir / rel)
                parts.append(f"{rel}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append(f"{rel}:gone")
        return True, "\n".join(parts)

    def commit(self, now: float, message: str | None = None) -> bool:
        self.git.run("add", "-A")
        if self.git.run("diff", "--cached", "--quiet", check=False).ok:
            return False
        self.git.run("commit", "-q", "--no-verify", "-m", message or f"memory on {self.host} at {_stamp(now)}")
        return True

    def ahead(self) -> int:
        """This box's commits the remote has not got: HEAD's, or while a rebase is left half done
        (HEAD wherever it stopped) the branch's it rebases, which keeps them until it ends."""
        tip = self._rebased_branch() or "HEAD"
        if not self._has(tip):
            return 0
        spec = f"{self.remote_ref}..{tip}" if self._has(self.remote_ref) else tip
        return int(self.git.run("rev-list", "--count", spec).out.strip() or 0)

    def _rebased_branch(self) -> str | None:
        """The branch a rebase under way rebases (its `head-name`), or None."""
        for backend in ("rebase-merge", "rebase-apply"):
            try:
                name = (self.git_dir / backend / "head-name").read_text(errors="replace").strip()
            except OSError:
                continue
            return name if name.startswith("refs/heads/") else None
        return None

    def fetch(self) -> None:
        if not self.git.run("fetch", "-q", "--no-tags", "origin", f"+refs/heads/{self.branch}:{self.remote_ref}",
                            check=False).ok:
            self._fetch_empty()

    def _fetch_empty(self) -> None:
        """The branch may not exist yet (a new, empty remote): that is a reachable remote. Anything
        else (the remote missing, refusing, timing out) is an error."""
        probe = self.git.run("ls-remote", "--heads", "origin", check=False)
        if not probe.ok:
            raise GitError(f"{self.dir}: git fetch from {self.remote} failed: {probe.first_error_line()}")
        if f"refs/heads/{self.branch}" in probe.out:
            self.git.run("fetch", "-q", "--no-tags", "origin", f"+refs/heads/{self.branch}:{self.remote_ref}")

    def integrate(self, now: float) -> list[tuple[str, str]]:
        """Rebase onto the fetched remote; every conflict resolved by keeping both sides."""
        if not self._has(self.remote_ref):
            return []
        if not self._has("HEAD"):
            self.git.run("checkout", "-q", "-B", self.branch, self.remote_ref)
            return []
        result = self.git.run("rebase", "-q", self.remote_ref, check=False)
        if not result.ok and not self._rebasing():
            raise GitError(f"{self.dir}: git rebase onto {self.remote_ref} failed: {result.first_error_line()}")
        return self._settle(result, now)

    def _settle(self, result: Any, now: float) -> list[tuple[str, str]]:
        """Take a rebase under way to its end: at each stop every conflict kept both ways, what the
        work tree holds added, then on; a step that will not go on with nothing unmerged is
        unstuck (`_unstick`), never reset. Past MAX_REBASE_STOPS, left in progress (RebaseLeft,
        quoting git's last word: `result`, the rebase's own, until a step has one)."""
        conflicts: list[tuple[str, str]] = []
        stops = 0
        while self._rebasing():
            for path, stages in self._unmerged().items():
                conflicts.append((path, self._keep_both(path, stages, now)))
            self.git.run("add", "-A")
            stops += 1
            if stops > MAX_REBASE_STOPS:
                # Left as it is, this stop's conflicts kept both ways first (no markers in the tree
                # meanwhile). It was aborted: a hard reset, and the agent's writes since the rebase
                # began (added at the stops, committed by `_unstick`, or not added yet), this box's
                # picks and the copies kept so far went with it, while the next sync began the same
                # rebase again and stopped at the same place. Left, the next sync's `ensure` goes on
                # from here (a long history takes a few syncs), nothing else is done meanwhile (no
                # commit or push mid-rebase) and the operator sees why.
                said = result.first_error_line() if result is not None else "a rebase left half done"
                raise RebaseLeft(f"{self.dir}: git rebase onto {self.remote_ref} stopped {MAX_REBASE_STOPS} "
                                 f"times in one sync, left in progress for the next: {said}", conflicts)
            result = self.git.run("-c", "core.editor=true", "rebase", "--continue", check=False)
            if not result.ok and not self._unmerged() and self._rebasing():
                result = self._unstick(now) or result
        return conflicts

    def _unstick(self, now: float) -> Result | None:
        """`--continue` stopped with nothing unmerged. Nothing of Loom's own rebases is reset: what
        is staged but cannot be committed by the rebase itself (stopped between picks, or killed
        inside one: no author-script) is committed here (the agent's writes or this box's pick,
        which a `--skip` reset away), and so is a pick left empty (the index and the tree HEAD's),
        as an empty commit; only a rebase of the apply backend skips one. Files written since the
        `add` (the agent writes at any time) are added at the next stop round."""
        if self._unstaged():
            return None
        if self.git.run("diff", "--cached", "--quiet", "HEAD", check=False).ok:
            if (self.git_dir / "rebase-apply").exists():
                # A rebase of git's older backend (begun by hand, or by a git that defaulted to it):
                # it goes on past an empty pick only by skipping it, an empty commit stopping it at
                # the same place again. Its own rebases Loom runs on the merge backend (git.PINNED).
                return self.git.run("rebase", "--skip", check=False)
            # An empty pick that the merge backend will not go on past: committed empty, never
            # skipped. `--skip` resets hard, and a file the agent wrote since the look above was
            # reset away with it.
            self.git.run("commit", "-q", "--no-verify", "--allow-empty", "-m",
                         f"memory on {self.host} at {_stamp(now)}: a change the remote's side replaced")
            return None
        self.git.run("commit", "-q", "--no-verify", "-m",
                     f"memory on {self.host} at {_stamp(now)}, written while a rebase was stopped")
        return None

    def _unstaged(self) -> bool:
        """Anything `add -A` would take: a tracked file changed, an untracked one not ignored."""
        if not self.git.run("diff", "--quiet", check=False).ok:
            return True
        return bool(self.git.run("ls-files", "-z", "--others", "--exclude-standard").out)

    def _unmerged(self) -> dict[str, dict[int, str]]:
        found: dict[str, dict[int, str]] = {}
        for entry in self.git.run("ls-files", "-u", "-z").out.split("\0"):
            if not entry:
                continue
            info, _, path = entry.partition("\t")
            _mode, sha, stage = info.split()
            found.setdefault(path, {})[int(stage)] = sha
        return found

    def _keep_both(self, path: str, stages: dict[int, str], now: float) -> str:
        """In a rebase stage 2 is the remote's side (the commits replayed onto), 3 this box's."""
        copy = ""
        if 3 in stages:
            # Named in text (a name that is not UTF-8 made so): the queue item and the log hold it.
            copy = self._free_name(rules.conflict_name(as_text(path), self.host, _stamp(now)))
            target = self.dir / copy
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self._blob(stages[3]))
        if 2 in stages:
            self.git.run("checkout", "-q", "--ours", "--", path)
        else:
            self.git.run("rm", "-q", "--cached", "--", path)
            (self.dir / path).unlink(missing_ok=True)
        return copy or "(deleted here)"

    def _free_name(self, name: str) -> str:
        candidate, n = name, 1
        while (self.dir / candidate).exists():
            n += 1
            candidate = f"{name}-{n}"
        return candidate

    def _blob(self, sha: str) -> bytes:
        return self.git.run("cat-file", "blob", sha).data

    def push(self) -> Result:
        return self.git.run("push", "-q", "--no-verify", "origin", f"HEAD:refs/heads/{self.branch}", check=False)

    def conflict_copies(self) -> int:
        listed = self.git.run("ls-files", "-z").out.split("\0")
        return sum(1 for p in listed if p and rules.is_conflict_copy(p))

    def own_conflicts(self) -> list[tuple[str, str]]:
        """The conflict copies this box made that the tree holds, each with the file it is a side of
        (as a sync reports them: the name as git gave it, the copy in text): another box's copies
        are its own agent's to reconcile, and one deleted (not committed yet) is reconciled. None
        when git cannot say (the next sync asks again)."""
        try:
            listed = self.git.run("ls-files", "-z").out.split("\0")
        except GitError:
            return []
        return [(rules.conflicted_file(p), as_text(p)) for p in listed
                if p and rules.is_conflict_copy(p) and rules.copy_host(p) == self.host
                and os.path.lexists(self.dir / p)]

    # -- the ledger's checkpoints -----------------------------------------------------------------

    def checkpoint_path(self, host: str | None = None) -> str:
        return f"{CHECKPOINTS}/{host or self.host}"

    def write_checkpoint(self, seq: int, digest: str, now: float) -> bool:
        """The head in `.loom/checkpoints/HOST`, committed alone (the memory's own changes keep their
        quiet period); pushed with the next push."""
        rel = self.checkpoint_path()
        target = self.dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        _write_atomic(target, ledger.format_head(seq, digest) + "\n")
        # -f: a .gitignore in the memory (the agent's, or one pulled) or the operator's own excludes
        # matching `.loom` refused the add, and every sync stopped there, replicating nothing.
        self.git.run("add", "-f", "--", rel)
        if self.git.run("diff", "--cached", "--quiet", "--", rel, check=False).ok:
            return False
        self.git.run("commit", "-q", "--no-verify", "-m", f"ledger head {seq} on {self.host}", "--only", "--", rel)
        return True

    def remote_checkpoints(self, host: str | None = None) -> list[tuple[int, str]]:
        """Every head ever checkpointed for `host` on the remote's branch, as fetched now (an error
        when the remote cannot be reached: a proof needs the remote's word, not a stale copy)."""
        self.ensure(settle=False)  # its conflicts are a sync's to keep and tell (open_conflicts)
        self.fetch()
        if not self._has(self.remote_ref):
            return []
        log = self.git.run("log", "-p", "--no-renames", "--format=", self.remote_ref, "--",
                           self.checkpoint_path(host)).out
        found: list[tuple[int, str]] = []
        for line in log.splitlines():
            if line.startswith("+") and not line.startswith("+++"):
                try:
                    found.append(ledger.parse_head(line[1:]))
                except ValueError:
                    continue
        return found

    # -- one sync ---------------------------------------------------------------------------------

    def sync(self, settings: rules.Settings, *, forced: bool = False, starting: bool = False,
             now: float | None = None, checkpoint: tuple[int, str] | None = None) -> tuple[Outcome, State]:
        """One look and whatever is due (everything, `forced`); `checkpoint` is a ledger head to commit
        first. Returns what was done and the state now stored. The caller holds `lock()`."""
        now = clock.wall() if now is None else now
        state = read_state(self.git_dir) or State()
        outcome = Outcome()
        try:
            self._sync(state, outcome, settings, forced=forced, starting=starting, now=now, checkpoint=checkpoint)
        except GitError as exc:
            # Git here refused (a rebase left half done it could not finish, a leftover index.lock
            # at the commit): recorded as any failed sync is, where `loom status` and `loom memory`
            # look, never the loop's error (the status, commit and count of commits ahead ran
            # outside a try, and the state went on saying the last good sync's). Nothing else this
            # round: mid-rebase, `add -A` marks a conflicted file resolved with its markers, and a
            # commit, a checkpoint or a push would carry them onto the remote.
            try:
                # Counted afresh (the last good sync's count, kept, said 0 of a whole rebase's commits).
                state.ahead = self.ahead()
            except GitError:
                pass  # the last count stands
            outcome.ahead = state.ahead
            _failed(state, outcome, exc, rules.LOCAL, now)
        _write_atomic(self.git_dir / STATE_FILE, json.dumps(asdict(state), sort_keys=True))
        return outcome, state

    def _sync(self, state: State, outcome: Outcome, settings: rules.Settings, *, forced: bool, starting: bool,
              now: float, checkpoint: tuple[int, str] | None) -> None:
        """`sync`'s round, `state` and `outcome` filled in as it goes; a GitError not the remote's
        raised (the fetch's and the push's are recorded here, as the remote's)."""
        # A rebase an earlier sync left half done, finished: its conflicts too.
        outcome.conflicts = self.ensure(now)
        if self._rebasing():
            raise GitError(f"{self.dir}: a rebase is left half done")
        if checkpoint is not None and self.write_checkpoint(*checkpoint, now):
            outcome.checkpoint = ledger.format_head(*checkpoint)
            state.checkpoint_seq, state.checkpoint_at = checkpoint[0], now
        dirty, fingerprint = self.status()
        if fingerprint != state.fingerprint:
            state.fingerprint, state.changed_at = fingerprint, (now if dirty else None)
        look = rules.Look(dirty=dirty, changed_at=state.changed_at, ahead=self.ahead(), last_pull=state.last_pull,
                          last_try=state.last_try, failures=state.failures, forced=forced, starting=starting,
                          rejected=state.rejected)
        plan = rules.plan(look, now, settings)
        if plan.commit and self.commit(now):
            outcome.committed = True
            state.fingerprint, state.changed_at = "", None
        elif plan.commit:
            state.changed_at = None  # nothing git would take (a submodule's own changes): none waits
        tried = plan.pull
        if plan.pull:
            state.last_try = now
            try:
                self.fetch()
            except GitError as exc:  # fetch and ls-remote: the remote's, and its backoff grows
                _failed(state, outcome, exc, rules.REMOTE, now)
            else:
                try:
                    outcome.conflicts += self.integrate(now)
                    outcome.pulled, state.last_pull, state.rejected = True, now, False
                except GitError as exc:  # the rebase here refused (a dirty tree): not the remote
                    _failed(state, outcome, exc, rules.LOCAL, now)
        ahead = self.ahead()
        if not outcome.error and ahead and (plan.push or outcome.pulled):
            state.last_try, tried = now, True
            pushed = self.push()
            if pushed.ok:
                outcome.pushed, state.last_push, ahead = True, now, 0
            elif _rejected(pushed):
                state.rejected = True  # the remote moved since the fetch: the next look pulls first
            else:
                _failed(state, outcome, GitError(pushed.first_error_line()), rules.REMOTE, now)
        if tried and outcome.error_kind != rules.REMOTE:
            state.failures = 0  # the remote answered
        if tried and not outcome.error:
            state.error, state.error_kind, state.error_since = "", "", None
        state.ahead = outcome.ahead = ahead
        state.conflicts = self.conflict_copies()


def _failed(state: State, outcome: Outcome, exc: Exception, kind: str, now: float) -> None:
    """The sync stopped at `exc`: the remote's (it counts towards the backoff) or a refusal here
    (a dirty tree, a path git did not know), which no wait for the remote would mend. A rebase
    left in progress brings the conflicts it kept both ways so far: they go into the outcome."""
    if isinstance(exc, RebaseLeft):
        outcome.conflicts += exc.conflicts
    outcome.error, outcome.error_kind = _short(exc), kind
    if kind == rules.REMOTE:
        state.failures += 1
    if not state.error or state.error_since is None or (state.error_kind or rules.REMOTE) != kind:
        state.error_since = now
    state.error, state.error_kind = outcome.error, kind


def _rejected(result: Result) -> bool:
    text = result.err + result.out
    return "[rejected]" in text or "non-fast-forward" in text or "fetch first" in text


def _short(exc: Exception) -> str:
    # "DIR: git fetch failed: WHY" → the part after the directory: the state says whose it is.
    text = str(exc)
    return text.split(": ", 1)[1][:300] if ": " in text else text[:300]


def _glob_escaped(name: str) -> str:
    """A file name as a git glob pathspec matches it alone (its `*`, `?`, `[` and `\\` escaped)."""
    return re.sub(r"([*?\[\\])", r"\\\1", name)


def _stamp(now: float) -> str:
    return dt.datetime.fromtimestamp(now).strftime("%Y%m%dT%H%M%S")


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the queue: a conflict is the agent's to reconcile ---------------------------------------------


def open_conflicts(store: Store, agent: str, directory: Path, conflicts: list[tuple[str, str]], now: float) -> list[int]:
    """A queue item per copy a conflict kept in `directory` (the same copy reported again adds to
    its item's count; a second conflict of a file, a copy of its own, an item of its own: folded
    into the first, the older copy, which may hold edits the newer lacks, was no item's)."""
    opened = []
    with store.write() as db:
        live = {(r["kind"], r["signature"]): r for r in queue_items.live_in(db, JOB)}
        for name, copy in conflicts:
            # SQLite takes text; a name may not be UTF-8
            path, signature = as_text(name), _signature(name, directory, copy)
            sample = (f"{path} in {directory}: the remote's version kept as {path}, this box's as {copy}; "
                      "merge them into the file and delete the copy")
            row = live.get((CONFLICT, signature))
            if row is not None:
                queue_items.update_in(db, row["id"], {"count": row["count"] + 1, "last_seen": now, "sample": sample,
                                                      "log": str(directory / copy)})
                continue
            row = queue_items.insert_in(db, job=JOB, kind=CONFLICT, signature=signature, sample=sample,
                                        log=str(directory / copy), now=now, count=1, agent=agent)
            ledger.append_in(db, "queue_new", source="replica", ts=now, agent=agent,
                             detail={"item": row["id"], "job": JOB, "kind": CONFLICT, "count": 1})
            live[(CONFLICT, signature)] = row
            opened.append(int(row["id"]))
    return opened


def _signature(name: str, directory: Path, copy: str) -> str:
    """A conflict's queue signature: its copy (or the file, deleted here) in its directory (two
    agents' memories each with a MEMORY.md in conflict shared one item: the second's copy took the
    first's place in it, and the second agent was never told); a name not UTF-8 (its text has U+FFFD
    where its bytes were) with its bytes' digest too, so that two such names never share one item."""
    raw = os.fsencode(name)
    text = as_text(name)
    where = f" in {as_text(str(directory))}"
    side = copy[len(text):] if copy.startswith(text) else f" {copy}"  # `.conflict-HOST-TIME`, or (deleted here)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"{text} #{hashlib.sha256(raw).hexdigest()[:12]}{side}{where}"
    return text + side + where


def witness_reconciled(store: Store, directory: Path, pushed_all: bool, now: float) -> list[int]:
    """A claimed conflict whose copy is gone from the tree, with nothing left unpushed, is done:
    the replica itself is the clean run that witnesses it."""
    if not pushed_all:
        return []
    done = []
    prefix = str(directory) + os.sep
    for row in queue_items.unwitnessed(store):
        if row["job"] != JOB or row["kind"] != CONFLICT or row["state"] != CLAIMED:
            continue
        copy = str(row["log"])
        if not copy.startswith(prefix) or os.path.lexists(copy):
            continue
        with store.write() as db:
            queue_items.update_in(db, row["id"], {"state": WITNESSED, "witnessed_at": now})
            ledger.append_in(db, "queue_witness", source="replica", ts=now, agent=row["agent"],
                             detail={"item": row["id"], "job": JOB, "claimed_by": row["claimed_by"]})
        done.append(int(row["id"]))
    return done


# -- what is replicated where, from the configuration ----------------------------------------------

LEDGER_DIR = "ledger-replica"  # under the state dir: the work tree of `ledger.remote`


@dataclass(frozen=True)
class Target:
    """One replicated work tree: its loop's name, the agent its conflicts go to, its settings (a
    `[memory]` table's), and whether the ledger's checkpoints are committed there."""

    name: str
    agent: str
    memory: Any
    checkpoints: bool
    interval: float  # ledger.checkpoint_interval
    state_dir: Path  # where its git directory is (git_dir_of)

    def replica(self) -> Replica:
        return Replica.of_memory(self.memory, self.state_dir)

    def state(self) -> State | None:
        return state_of(self.state_dir, self.memory.dir)

    @property
    def settings(self) -> rules.Settings:
        return rules.Settings(quiet=self.memory.sync_quiet, pull_interval=self.memory.pull_interval)


def targets(config: Any, state_dir: Path) -> list[Target]:
    """Every memory directory with a remote, once (agents may share one), and the ledger's own
    work tree where `ledger.remote` is set. The checkpoints go to `ledger.remote`, or else to the
    first memory remote."""
    out: list[Target] = []
    seen: set[Path] = set()
    interval = config.ledger.checkpoint_interval
    for name in config.agent_names:
        memory = config.for_agent(name).memory
        if not memory.remote or Path(memory.dir) in seen:
            continue
        seen.add(Path(memory.dir))
        first = not out and not config.ledger.remote
        out.append(Target("replica" if not out else f"replica-{name}", name, memory, first, interval, Path(state_dir)))
    if config.ledger.remote:
        own = config.memory.replace(dir=Path(state_dir) / LEDGER_DIR, remote=config.ledger.remote)
        out.append(Target("ledger_replica", config.agent_names[0], own, True, interval, Path(state_dir)))
    return out


def checkpoint_target(config: Any, state_dir: Path) -> Target | None:
    return next((t for t in targets(config, state_dir) if t.checkpoints), None)


# -- one sync as the daemon and `loom memory sync` do it --------------------------------------------


def due_checkpoint(store: Store, target: Target, now: float) -> tuple[int, str] | None:
    if not target.checkpoints:
        return None
    state = target.state() or State()
    seq, digest = ledger.head(store)
    escalated = state.checkpoint_seq is not None and ledger.escalated_after(store, state.checkpoint_seq,
                                                                            rules.ESCALATIONS)
    if rules.checkpoint_due(seq, state.checkpoint_seq, state.checkpoint_at, escalated, now, target.interval):
        return seq, digest
    return None


def sync_once(store: Store, target: Target, *, forced: bool = False, starting: bool = False,
              lock_timeout: float | None = None) -> tuple[Outcome, State]:
    """One sync of `target` under its lock, its conflicts queued and reconciled ones witnessed: the
    daemon's tick and `loom memory sync` alike."""
    replica = target.replica()
    now = clock.wall()
    checkpoint = due_checkpoint(store, target, now)
    if forced and target.checkpoints and checkpoint is None and ledger.head(store)[0] > 0:
        checkpoint = ledger.head(store)  # by hand: the head as it is now (committed only if it moved)
    if checkpoint is not None:
        store.make_durable()  # the head goes off the box: what it names is on disk first
    with replica.lock(lock_timeout):
        outcome, state = replica.sync(target.settings, forced=forced, starting=starting, now=now,
                                      checkpoint=checkpoint)
        kept = replica.own_conflicts()
    if outcome.conflicts:
        open_conflicts(store, target.agent, replica.dir, outcome.conflicts, now)
    # Copies this box kept that no item holds: their report was lost (a git that timed out mid-way
    # through the rebase, an interrupt, a store that refused the items), the copies committed all
    # the same and never the agent's to reconcile.
    told = {str(row["log"]) for row in queue_items.unwitnessed(store) if row["job"] == JOB}
    untold = [(name, copy) for name, copy in kept if str(replica.dir / copy) not in told]
    if untold:
        open_conflicts(store, target.agent, replica.dir, untold, now)
    witness_reconciled(store, replica.dir, pushed_all(state), now)
    return outcome, state


def pushed_all(state: State) -> bool:
    """Whether the work tree is all on the remote: nothing committed and unpushed, no error, and no
    change waiting for its quiet period (a copy deleted within it is not gone from the remote yet)."""
    return state.ahead == 0 and not state.error and state.changed_at is None


def lag_line(state: State | None, now: float | None = None, *, short: bool = False) -> str:
    """The replica's lag in words (`replica_rules.lag_words`), for status, the console and the CLI."""
    return rules.lag_words(state.lag() if state is not None else None, clock.wall() if now is None else now,
                           short=short)
