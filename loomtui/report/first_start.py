"""`loom doctor`'s checks of what a first start needs: the agent's command and its directory, the
Telegram settings, the memory dir and an installed service. Each is one line with its fix; each
looks without starting anything (no agent, no tmux server, no request to Telegram).

A doctor that said "ok" six times over a config whose `claude` was not installed, whose cwd did not
exist and whose token file was 0644 sent the operator to `loom recycle` to find out (issue 27).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from loomtui.config import Config
from loomtui.daemon.service import ENV_FILE
from loomtui.errors import LoomError
from loomtui.report.doctor import FAIL, OK, WARN, Check
from loomtui.states import placeholders

# Words a command may start with that run the words after them: their options (and numbers: nice's
# value, timeout's duration) and VAR=value words are skipped to find the program
# (`env -i PATH=… claude`, `exec claude`, `nice -n 5 claude`).
_RUNNERS = {"env", "exec", "nice", "nohup", "command", "stdbuf", "setsid", "timeout"}
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDERS = {"session_id": "x", "memory_index": "x", "state_dir": "x", "hook_settings": "x"}


def program(command: str) -> str | None:
    """The program a command template runs (its first word past assignments and runners), or None
    when it cannot be split into words (the config check names that)."""
    try:
        words = shlex.split(command.format(**_PLACEHOLDERS))
    except (ValueError, KeyError, IndexError):
        return None
    after_runner = False
    for word in words:
        if _ASSIGNMENT.match(word) or (after_runner and (word.startswith("-") or word[:1].isdigit())):
            continue
        if os.path.basename(word) in _RUNNERS:
            after_runner = True
            continue
        return word
    return None


def resolve(word: str, cwd: Path, path_var: str) -> str | None:
    """Where `word` runs from, as a shell finds it: a path (relative to the agent's cwd) that is an
    executable file, or the first match on PATH; None when nothing would run."""
    if "/" in word:
        target = Path(os.path.expanduser(word))
        target = target if target.is_absolute() else cwd / target
        return str(target) if target.is_file() and os.access(target, os.X_OK) else None
    return shutil.which(word, path=path_var)


def check_agent(config: Config, environ: Mapping[str, str]) -> Iterator[Check]:
    """The agent's cwd exists, and each command's program resolves on the agent's PATH (its
    `agent.env` PATH, else the one Loom runs with, which tmux's server and the pane inherit)."""
    agent = config.agent
    cwd = Path(agent.cwd)
    if not cwd.is_dir():
        yield Check(FAIL, "cwd", f"agent.cwd {cwd} is not a directory: create it (mkdir -p "
                    f"{shlex.quote(str(cwd))}) or set agent.cwd to the agent's project")
    else:
        yield Check(OK, "cwd", f"{cwd}")
    path_var = agent.env.get("PATH") or environ.get("PATH", os.defpath)
    seen: dict[str, str | None] = {}
    problems, found = [], []
    for key in ("fresh_command", "resume_command"):
        word = program(getattr(agent, key))
        if word is None or word in seen:
            continue
        seen[word] = where = resolve(word, cwd, path_var)
        if where is None:
            problems.append(f"agent.{key} runs {word!r}, which is not "
                            + ("an executable file" if "/" in word else "on the agent's PATH"))
        else:
            found.append(where)
    if problems:
        yield Check(FAIL, "agent", "; ".join(problems) + ": install it, or give its full path in the command "
                    "(or PATH in [agent] env)")
    elif found:
        yield Check(OK, "agent", ", ".join(dict.fromkeys(found)))


def check_telegram(config: Config, environ: Mapping[str, str], service: Path | None = None,
                   env_file: Path | None = None) -> Iterator[Check]:
    """With a chat id Telegram is on: the token must load as the sender loads it (a file of mode
    0600, or the variable). A group chat without allowed_users is the config's own error.

    The variable is looked for where the daemon will have it: with an installed systemd unit
    (`service`), in the unit's EnvironmentFile (`env_file`, default ~/.config/loom/env), not in the
    shell running the doctor; a launchd agent passes no such variable at all. Without a service,
    `loom supervise` is started by hand, from a shell like this one."""
    from loomtui.telegram.token import load_token

    tg = config.telegram
    if not tg.chat_id:
        yield Check(OK, "telegram", "off (telegram.chat_id = 0): alerts stay in the outbox, shown by loom status")
        return
    where = ""
    if tg.token_file is None and service is not None and service.exists():
        if service.suffix == ".plist":
            environ, where = _plist_environment(service), f" in {service} (the launchd agent's)"
            if tg.token_env not in environ:
                # launchctl setenv could still pass it: a warning, with the way that always works.
                yield Check(WARN, "telegram", f"the launchd agent {service} sets no {tg.token_env} for loom supervise "
                            "(only launchctl setenv would pass it): put the token in a file of mode 0600 and set "
                            "telegram.token_file")
                return
        else:
            env_file = env_file or _home() / ENV_FILE
            try:
                environ, where = _environment_file(env_file), f" in {env_file} (the service's)"
            except LoomError as exc:
                yield Check(FAIL, "telegram", f"{exc}")
                return
            if tg.token_env not in environ:
                # A drop-in's Environment= or environment.d could still set it: a warning, naming the usual place.
                yield Check(WARN, "telegram", f"the service {service} reads its secrets from {env_file}, which does "
                            f"not set {tg.token_env} (nor does the unit): add a line {tg.token_env}=TOKEN there "
                            "(the file of mode 0600)")
                return
    try:
        load_token(tg, environ)
    except LoomError as exc:
        yield Check(FAIL, "telegram", f"{exc}{where}")
        return
    source = f"file {tg.token_file}" if tg.token_file is not None else f"${tg.token_env}{where}"
    yield Check(OK, "telegram", f"chat {tg.chat_id}, token from {source}")


def _home() -> Path:
    # systemd's %h, as ssh's: the passwd entry's home, not $HOME.
    import pwd

    return Path(pwd.getpwuid(os.getuid()).pw_dir)


def _plist_environment(path: Path) -> dict[str, str]:
    """The EnvironmentVariables a launchd agent's plist gives its program ({} if it cannot be read)."""
    import plistlib

    try:
        with path.open("rb") as fh:
            variables = plistlib.load(fh).get("EnvironmentVariables") or {}
    except (OSError, ValueError, AttributeError, plistlib.InvalidFileException):
        return {}
    return {str(k): str(v) for k, v in variables.items()} if isinstance(variables, dict) else {}


def _environment_file(path: Path) -> dict[str, str]:
    """The variables a systemd EnvironmentFile sets, read as systemd reads its plain lines (NAME=VALUE,
    one pair of quotes around a value removed, # and ; comments); {} when there is none (the unit's
    `-` makes it optional). It holds secrets: one others may read is refused."""
    try:
        info = path.stat()
        text = path.read_text("utf-8", "replace")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise LoomError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if info.st_mode & 0o077:
        raise LoomError(f"{path} holds the service's secrets and its mode {info.st_mode & 0o777:04o} is too open; "
                        f"run: chmod 600 {path}")
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        name, sep, value = line.partition("=")
        if not sep or line.startswith(("#", ";")) or not _NAME.fullmatch(name.strip()):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[name.strip()] = value
    return found


def check_metrics(config: Config) -> Iterator[Check]:
    """The metrics endpoint's token file reads as `loom supervise` reads it at start (a daemon that
    cannot read it does not start)."""
    from loomtui import redact

    cfg = config.metrics
    if not cfg.listen or cfg.token_file is None:
        return
    try:
        redact.read_secret_file(cfg.token_file, "metrics.token_file")
    except LoomError as exc:
        yield Check(FAIL, "metrics", f"{exc}")
        return
    yield Check(OK, "metrics", f"{cfg.listen}, scrapes need the token of {cfg.token_file}")


def check_memory(config: Config) -> Iterator[Check]:
    """Each memory directory once, whichever agents share it: with several agents, the line names
    them (the first agent's alone was checked, an agent's own `[agents.memory] dir` never)."""
    users: dict[Path, list[str]] = {}
    passes: dict[Path, bool] = {}
    for name in config.agent_names:
        view = config.for_agent(name)
        directory = Path(view.memory.dir)
        users.setdefault(directory, []).append(name)
        passes[directory] = passes.get(directory, False) or any(
            "memory_index" in placeholders(getattr(view.agent, key)) for key in ("fresh_command", "resume_command"))
    for directory, names in users.items():
        label = "memory" if len(config.agent_names) == 1 else f"memory {', '.join(names)}"
        if directory.is_dir():
            yield Check(OK, label, f"{directory}")
        elif passes[directory]:
            yield Check(FAIL, label, f"memory.dir {directory} is not a directory, and the agent's command passes "
                        "its index ({memory_index}): create it or set memory.dir")
        else:
            yield Check(OK, label, f"memory.dir {directory} does not exist yet (nothing passes its index; the "
                        "console's memory panel stays empty until it does)")


def check_service(installed: Path | None) -> Iterator[Check]:
    """An installed unit (or plist) starts this Loom: the Python it names is the one running now."""
    if installed is None or not installed.exists():
        return
    try:
        text = installed.read_text("utf-8", "replace")
    except OSError as exc:
        yield Check(FAIL, "service", f"{installed}: cannot read: {exc.strerror or exc}")
        return
    if sys.executable in text:
        yield Check(OK, "service", f"{installed} starts this Loom ({sys.executable})")
    else:
        yield Check(FAIL, "service", f"{installed} does not start this Loom ({sys.executable}): run "
                    "loom install-service again from this install")


def installed_unit() -> Path | None:
    from loomtui.daemon import service

    kind = "launchd" if sys.platform == "darwin" else "systemd"
    return service.target_path(kind)


def first_start(config: Config, environ: Mapping[str, str], unit: Path | None) -> list[Check]:
    """Every first-start check for one agent's view of the config (the Telegram, memory and service
    lines are the host's: the caller keeps one of each)."""
    return [*check_agent(config, environ), *check_telegram(config, environ, unit), *check_memory(config),
            *check_service(unit)]
