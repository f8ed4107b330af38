"""The system's git, run for the memory replica: an argv list (never a shell), a timeout on every
call, and an environment of Loom's own so no system config or prompt changes what it does.

What is Loom's: the repository itself (a git directory under the state dir, named on every call:
replica.git_dir_of), the identity (`Loom on HOST`), no system config (GIT_CONFIG_NOSYSTEM), never a
prompt for a password or a host key (GIT_TERMINAL_PROMPT=0, ssh in BatchMode unless GIT_SSH_COMMAND
says otherwise), no hooks, no fsmonitor, no signing, no pager, none of Loom's own variables (LOOM_*,
the bot token among them). What stays the operator's: the global config
(GIT_CONFIG_GLOBAL or ~/.gitconfig: credential helpers, `url.insteadOf`), and ssh's own config.
A call that outlives its timeout is ended with its whole process group (git's ssh included).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from loomtui import bounded_run
from loomtui.errors import LoomError

GIT = "/usr/bin/git" if os.path.exists("/usr/bin/git") else "git"
# Settings that would change what a command does, pinned whatever the operator's global config says.
PINNED = ("-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false", "-c", "core.autocrlf=false",
          "-c", "core.quotepath=false", "-c", "rebase.autoStash=false", "-c", "rebase.autoSquash=false",
          "-c", "advice.detachedHead=false", "-c", "init.defaultBranch=main", "-c", "protocol.ext.allow=never",
          "-c", "rebase.backend=merge")


class GitError(LoomError):
    """A git call that failed or timed out: one line naming the command and the directory."""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    data: bytes = b""  # stdout as it came (a blob need not be UTF-8)

    @property
    def ok(self) -> bool:
        return self.code == 0

    def first_error_line(self) -> str:
        """git's own word on the failure: its first `error:`, `fatal:` or `CONFLICT` line, else its
        first line that is neither a hint nor progress ("Rebasing (3/10)" had been the error shown)."""
        lines = [line.strip() for line in (self.err or self.out).splitlines()]
        said = [line for line in lines if line and not line.startswith("hint:") and not _PROGRESS.match(line)]
        for line in said:
            if line.startswith(("error:", "fatal:", "CONFLICT")):
                return as_text(line)[:200]
        return as_text(said[0])[:200] if said else f"exit {self.code}"


# What git says while it works, on stderr beside its errors.
_PROGRESS = re.compile(r"(Rebasing \(\d+/\d+\)|Successfully rebased|Auto-merging |Enumerating objects|Counting objects"
                       r"|Compressing objects|Writing objects|Total \d+|remote: (Enumerating|Counting|Compressing|Total))")


def as_text(name: str) -> str:
    """A name git gave (bytes not UTF-8 kept as surrogates) as text SQLite, JSON and a log take."""
    return os.fsencode(name).decode("utf-8", "replace")


def environment(host: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for name in list(env):
        # A caller's GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE... would point git somewhere else.
        if name.startswith("GIT_") and name not in ("GIT_CONFIG_GLOBAL", "GIT_SSH_COMMAND", "GIT_SSH"):
            del env[name]
        # Loom's own (the bot token's LOOM_TELEGRAM_TOKEN): nothing git or its ssh needs to see.
        elif name.startswith("LOOM_"):
            del env[name]
    who = f"Loom on {host}"
    env.update({
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "GIT_EDITOR": "true",
        "GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": f"loom@{host}", "GIT_COMMITTER_NAME": who,
        "GIT_COMMITTER_EMAIL": f"loom@{host}", "LC_ALL": "C",
    })
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    return env


class Git:
    """git in one work tree, every call ended after `timeout` seconds."""

    def __init__(self, work_tree: Path, host: str, timeout: float, *, git_dir: Path) -> None:
        self.work_tree = Path(work_tree)
        # The repository, named on every call, never found from the work tree: the agent writes
        # there, and a .git of its making (its config's filters and fsmonitor, its hooks) would be
        # code this process ran with its environment.
        self.git_dir = Path(git_dir)
        self.timeout = timeout
        self.env = environment(host)

    def run(self, *args: str, check: bool = True, timeout: float | None = None) -> Result:
        argv = [GIT, *PINNED, "-c", f"core.hooksPath={os.devnull}", "-c", "core.fsmonitor=false",
                f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", "-C", str(self.work_tree), *args]
        limit = self.timeout if timeout is None else timeout
        try:
            done = bounded_run.run(argv, timeout=limit, env=self.env)  # at the limit, git and the ssh it started
        except OSError as exc:
            raise GitError(f"{self.work_tree}: cannot run git: {exc.strerror or exc}") from None
        if done is None:
            raise GitError(f"{self.work_tree}: git {args[0]} did not finish within {limit:g}s (memory.git_timeout)")
        # stdout as the file system's names (surrogateescape): a path read from `ls-files -z` is
        # passed back to git as the same bytes, where "replace" made a name git did not know.
        result = Result(done.code, os.fsdecode(done.stdout), done.stderr.decode("utf-8", "replace"), done.stdout)
        if check and not result.ok:
            raise GitError(f"{self.work_tree}: git {args[0]} failed: {result.first_error_line()}")
        return result
