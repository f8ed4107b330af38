"""`loom doctor`: one line per check; any failure makes the whole run fail."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loomtui.config import Config, load_config
from loomtui.errors import LoomError
from loomtui.store import ledger
from loomtui.store.db import DB_NAME, Store
from loomtui.store.statedir import prepare_state_dir, resolve_state_dir

OK, WARN, FAIL = "ok", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    status: str
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<5} {self.name:<12} {self.detail}"


def check_tmux() -> Check:
    binary = shutil.which("tmux")
    if not binary:
        return Check(FAIL, "tmux", "tmux binary not found on PATH")
    try:
        out = subprocess.run([binary, "-V"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check(FAIL, "tmux", f"{binary} -V failed: {exc}")
    return Check(OK, "tmux", f"{binary} ({out.stdout.strip() or out.stderr.strip()})")


_CLAUDE = re.compile(r"(^|[/\s])claude(\s|$)")


def check_canary_permissions(config: Config, state_dir: Path) -> Check:
    """Claude Code asks before running a command; a permission prompt would eat every canary."""
    acks = state_dir / "acks"
    missing = []
    for key in ("fresh_command", "resume_command"):
        command = getattr(config.agent, key)
        if not _CLAUDE.search(command):
            continue
        lacks = [flag for flag, ok in (("--add-dir", "--add-dir" in command and ("acks" in command)),
                                       ("--allowedTools 'Bash(touch:*)'", "Bash(touch" in command)) if not ok]
        if lacks:
            missing.append(f"agent.{key} lacks {' and '.join(lacks)}")
    if missing:
        return Check(FAIL, "canary", "; ".join(missing) + ": add --add-dir {state_dir}/acks "
                     "--allowedTools 'Bash(touch:*)' or a permission prompt eats every canary")
    return Check(OK, "canary", f"the agent may touch files in {acks} without asking")


def run_checks(config_arg: str | None, state_dir_arg: str | None, environ: dict[str, str] | None = None,
               extra: list[Callable[[Config, Path, Store], Iterator[Check]]] | None = None) -> list[Check]:
    env = dict(os.environ) if environ is None else environ
    checks = [check_tmux()]
    try:
        config, path = load_config(config_arg, env)
        checks.append(Check(OK, "config", str(path) if path else "no config file: defaults"))
    except LoomError as exc:
        checks.append(Check(FAIL, "config", str(exc)))
        config, path = Config(), None
    state_dir = resolve_state_dir(state_dir_arg, config, env)
    try:
        prepare_state_dir(state_dir)
    except LoomError as exc:
        checks.append(Check(FAIL, "state dir", str(exc)))
        return checks
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        checks.append(Check(WARN, "state dir", f"{state_dir} is writable but mode {mode:o} (expected 700)"))
    else:
        checks.append(Check(OK, "state dir", f"{state_dir} is writable"))
    try:
        store = Store.in_dir(state_dir)
    except LoomError as exc:
        checks.append(Check(FAIL, "store", str(exc)))
        return checks
    with store:
        integrity = store.integrity_check()
        if integrity == "ok":
            checks.append(Check(OK, "store", f"{state_dir / DB_NAME} schema {store.schema_version()}, integrity ok"))
        else:
            checks.append(Check(FAIL, "store", f"{state_dir / DB_NAME} integrity check: {integrity}"))
        verdict = ledger.verify(store)
        checks.append(Check(OK if verdict.ok else FAIL, "ledger", verdict.describe()))
        checks.append(check_canary_permissions(config, state_dir))
        for more in extra or ():
            checks.extend(more(config, state_dir, store))
    return checks
