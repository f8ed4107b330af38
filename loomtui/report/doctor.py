"""`loom doctor`: one line per check; any failure makes the whole run fail."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from loomtui.agent.drivers import driver_class
from loomtui.config import Config, load_config
from loomtui.durations import format_duration
from loomtui.errors import LoomError
from loomtui.hooks.settings import PLACEHOLDER
from loomtui.states import passes_hook_settings
from loomtui.store import ledger
from loomtui.store.db import DB_NAME, Store
from loomtui.store.statedir import agent_dir, prepare_state_dir, resolve_state_dir
from loomtui.text import counted

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
    if not driver_class(config).has_dialogs:  # no prompt to eat a canary: a call not allowed is denied
        return check_stream_permissions(config, state_dir)
    acks = state_dir / "acks"
    missing = []
    for key in ("fresh_command", "resume_command"):
        command = getattr(config.agent, key)
        argv = _argv(command)
        if argv is None or not _CLAUDE.search(command):
            continue  # an unsplittable command cannot start at all: the launch's own check names it
        # The flags as the CLI reads them, not words found anywhere: a --disallowedTools naming
        # touch, or "acks" in another flag's value, had passed; a permitting mode had failed.
        lacks = [flag for flag, ok in (("--add-dir", adds_acks(argv, state_dir)),
                                       ("--allowedTools 'Bash(touch:*)'", permits_touch(argv))) if not ok]
        if lacks:
            missing.append(f"agent.{key} lacks {' and '.join(lacks)}")
    if missing:
        return Check(FAIL, "canary", "; ".join(missing) + ": add --add-dir {state_dir}/acks "
                     "--allowedTools 'Bash(touch:*)' or a permission prompt eats every canary")
    return Check(OK, "canary", f"the agent may touch files in {acks} without asking")


def check_hooks(config: Config) -> Check | None:
    """Claude Code without Loom's hooks settings runs with no dispatch witness: a line typed and
    never taken is noticed only at the next canary. A warning: it still works as before."""
    lacking = [key for key in ("fresh_command", "resume_command")
               if _CLAUDE.search(getattr(config.agent, key)) and not passes_hook_settings(getattr(config.agent, key))]
    if not any(_CLAUDE.search(getattr(config.agent, key)) for key in ("fresh_command", "resume_command")):
        return None
    if lacking:
        verb = "lacks" if len(lacking) == 1 else "lack"
        return Check(WARN, "hooks", f"agent.{' and agent.'.join(lacking)} {verb} --settings {PLACEHOLDER}: no "
                     "dispatch witness (a typed line the agent never takes waits for the next canary)")
    return Check(OK, "hooks", f"Loom's hooks settings are passed ({PLACEHOLDER}): every typed line is witnessed")


# -- the stream-json driver -------------------------------------------------------------------

_ALLOWED_TOOLS = ("--allowedTools", "--allowed-tools")
_DISALLOWED_TOOLS = ("--disallowedTools", "--disallowed-tools")
_TOUCH_RULES = ("Bash(touch:*)", "Bash(touch *)", "Bash")
# Permission modes under which print mode runs a Bash command without asking (there is nobody to ask).
_PERMITTING_MODES = ("bypassPermissions",)
# Flags whose value print mode with stream-json cannot take: Loom appends the right ones, and a
# command that says otherwise would start a CLI that reads or writes something else.
_STREAM_VALUES = {"--input-format": "stream-json", "--output-format": "stream-json"}
# Flags that open an interactive picker when given no value: there is no screen to pick on.
_NEEDS_VALUE = ("--resume", "-r")


def _argv(command: str) -> list[str] | None:
    try:
        return shlex.split(command)
    except ValueError:
        return None


def _values(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """Every value given to the flags `names`: `--flag=v`, or the words after `--flag` up to the next flag."""
    found = []
    for i, word in enumerate(argv):
        for name in names:
            if word.startswith(name + "="):
                found.append(word.split("=", 1)[1])
            elif word == name:
                for value in argv[i + 1:]:
                    if value.startswith("-"):
                        break
                    found.append(value)
    return found


def _rules(argv: list[str], names: tuple[str, ...]) -> list[str]:
    # Rules are split by commas or spaces, but not inside a rule's parentheses: "Bash(touch *)".
    return [rule for value in _values(argv, names) for rule in re.findall(r"[^\s,()]+(?:\([^)]*\))?", value)]


def permits_touch(argv: list[str]) -> bool:
    """The canary's `touch` runs without a prompt (print mode never asks: there it is denied):
    allowed beforehand and not disallowed (a deny rule wins over every allow and mode)."""
    if any(rule == "Bash" or rule.startswith("Bash(touch") for rule in _rules(argv, _DISALLOWED_TOOLS)):
        return False
    if "--dangerously-skip-permissions" in argv:
        return True
    if any(mode in _PERMITTING_MODES for mode in _values(argv, ("--permission-mode",))):
        return True
    return any(rule in _TOUCH_RULES for rule in _rules(argv, _ALLOWED_TOOLS))


def adds_acks(argv: list[str], state_dir: Path) -> bool:
    """An --add-dir gives the agent its acks directory (`state_dir`: the agent's own, which
    `{state_dir}` in its command names), or a directory holding it."""
    acks = Path(os.path.abspath(state_dir / "acks"))
    for value in _values(argv, ("--add-dir",)):
        given = Path(os.path.abspath(os.path.expanduser(value.replace("{state_dir}", str(state_dir)))))
        if given == acks or given in acks.parents:
            return True
    return False


def check_stream_permissions(config: Config, state_dir: Path) -> Check:
    acks = state_dir / "acks"
    missing = []
    for key in ("fresh_command", "resume_command"):
        command = getattr(config.agent, key)
        argv = _argv(command)
        if argv is None or not _CLAUDE.search(command):
            continue  # an unsplittable command is the stream-json check's to name
        lacks = []
        if not permits_touch(argv):
            lacks.append("--allowedTools 'Bash(touch:*)' (or a --permission-mode that permits it)")
        if not adds_acks(argv, state_dir):
            lacks.append("--add-dir {state_dir}/acks")
        if lacks:
            missing.append(f"agent.{key} lacks {' and '.join(lacks)}")
    if missing:
        return Check(FAIL, "canary", "; ".join(missing) + ": in print mode a tool call that is not allowed "
                     "beforehand is denied, and every canary with it")
    return Check(OK, "canary", f"the agent may touch files in {acks} without asking (print mode)")


def check_stream_flags(config: Config) -> Check:
    """The commands can run in print mode with stream-json: what Loom appends is not contradicted."""
    problems = []
    for key in ("fresh_command", "resume_command"):
        argv = _argv(getattr(config.agent, key))
        if argv is None:
            problems.append(f"agent.{key} cannot be split into words (unbalanced quotes)")
            continue
        for flag, wanted in _STREAM_VALUES.items():
            wrong = [v for v in _values(argv, (flag,)) if v != wanted]
            if wrong:
                problems.append(f"agent.{key} has {flag} {wrong[0]} (print mode here needs {wanted})")
        for flag in _NEEDS_VALUE:
            if flag in argv and (argv.index(flag) + 1 >= len(argv) or argv[argv.index(flag) + 1].startswith("-")):
                problems.append(f"agent.{key} has {flag} without a session id (an interactive picker)")
    if problems:
        return Check(FAIL, "stream-json", "; ".join(problems))
    return Check(OK, "stream-json", "the commands run in print mode; Loom appends -p --input-format stream-json "
                 "--output-format stream-json --verbose where missing")


SYSTEMD_BOOTED = Path("/run/systemd/system")  # what sd_booted() looks for
LINGER_DIR = Path("/var/lib/systemd/linger")


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER", str(os.getuid()))


def check_linger(user: str | None = None, booted: Path = SYSTEMD_BOOTED, linger_dir: Path = LINGER_DIR,
                 loginctl: str | None = "loginctl") -> Check | None:
    """Without lingering, systemd stops the user's manager, `loom.service` and the agent with it, at
    the user's last logout: supervision that ends when the operator logs off. Nothing to say where
    systemd is not what booted (macOS, a container): there is no user manager to linger."""
    if not booted.is_dir():
        return None
    user = user or _user()
    if (linger_dir / user).exists():
        return Check(OK, "linger", f"lingering is on for {user}: the user's services run after logout")
    binary = shutil.which(loginctl) if loginctl else None
    if binary:
        try:
            out = subprocess.run([binary, "show-user", user, "-p", "Linger", "--value"], capture_output=True,
                                 text=True, timeout=5, stdin=subprocess.DEVNULL)
            if out.returncode == 0 and out.stdout.strip() == "yes":
                return Check(OK, "linger", f"lingering is on for {user}: the user's services run after logout")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return Check(WARN, "linger", f"lingering is off for {user}: systemd stops loom.service and the agent at "
                 "your last logout; run: loginctl enable-linger " + shlex.quote(user))


def check_simulation(config: Config, source: str | None) -> list[Check]:
    """The operator's settings simulated (loomtui.sim.preflight): storm on a fixed list of seeds. One
    line per agent when the file has several (each agent's own watchdog and canary); `source` None
    (no config file) simulates what `loom sim` does without one, so the replay command is exact."""
    from concurrent.futures.process import BrokenProcessPool

    from loomtui.sim import preflight
    from loomtui.sim.profiles import default_config

    seeds = preflight.SEEDS
    shown = (f"{seeds[0]}..{seeds[-1]}" if seeds == tuple(range(seeds[0], seeds[-1] + 1))
             else ", ".join(map(str, seeds)))
    views = ([(config.for_agent(name), name if len(config.agents) > 1 else None) for name in config.agent_names]
             if source is not None else [(default_config(), None)])
    checks = []
    for view, agent in views:
        name = "simulation" + (f" {agent}" if agent else "")
        try:
            v = preflight.simulate_config(view, source, agent)
        except (OSError, BrokenProcessPool) as exc:
            checks.append(Check(FAIL, name, f"the simulation could not run: {exc}"))
            continue
        if v.seed is None:
            of = "" if source is not None else " of loom sim's defaults (no config file)"
            held = f"{preflight.PROFILE}, seeds {shown}, {v.days:g} days each{of}: every invariant held ({v.steps} steps)"
            if v.cut_short:
                checks.append(Check(WARN, name, f"{held}, but it recycled an agent still at work, as this config "
                                    f"tells it to: {cut_short_text(v.cut_short, view)}; replay with {v.cut_replay}"))
            else:
                checks.append(Check(OK, name, held))
        else:
            checks.append(Check(FAIL, name, f"invariant {v.invariant} broke on seed {v.seed} at {v.at} "
                                f"({preflight.PROFILE}, {v.days:g} days): {v.message}; replay with {v.replay}"))
    return checks


def cut_short_text(cut: dict[str, int], config: Config) -> str:
    """What the config's turn thresholds did to the simulated operator's ordinary turns."""
    from loomtui.sim import faults, hooks_model

    said = []
    if cut.get("turn_quiet"):
        said.append(f"{counted(cut['turn_quiet'], 'turn')} quiet longer than canary.turn_quiet "
                    f"({format_duration(config.canary.turn_quiet)}), where a tool call may run "
                    f"{format_duration(hooks_model.LONG_CALL_MAX)} without a word")
    if cut.get("turn_too_long"):
        said.append(f"{counted(cut['turn_too_long'], 'turn')} longer than canary.max_turn "
                    f"({format_duration(config.canary.max_turn)}), where the operator's turns run up to "
                    f"{format_duration(faults.LONG_TURN)}")
    return "; ".join(said)


def run_checks(config_arg: str | None, state_dir_arg: str | None, environ: dict[str, str] | None = None,
               extra: list[Callable[[Config, Path, Store], Iterator[Check]]] | None = None,
               unit: Path | None = None) -> list[Check]:
    """Every check, in order; `unit`: the service file to check (default: where install-service puts it)."""
    from loomtui.report import first_start

    env = dict(os.environ) if environ is None else environ
    checks = [check_tmux()]
    try:
        config, path = load_config(config_arg, env)
        checks.append(Check(OK, "config", str(path) if path else "no config file: defaults"))
    except LoomError as exc:
        # Nothing further: the defaults in its place are not the operator's setup, and checking
        # them made a store in a state dir the operator never named.
        checks.append(Check(FAIL, "config", str(exc)))
        return checks
    state_dir = resolve_state_dir(state_dir_arg, config, env)
    try:
        prepare_state_dir(state_dir)
    except LoomError as exc:
        checks.append(Check(FAIL, "state dir", str(exc)))
        return checks
    # Writable by others is refused by prepare_state_dir; readable by others is a warning.
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        checks.append(Check(WARN, "state dir", f"{state_dir} is writable but mode {mode:o} (expected 700)"))
    else:
        checks.append(Check(OK, "state dir", f"{state_dir} is writable"))
    linger = check_linger()
    if linger is not None:
        checks.append(linger)
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
        for name in config.agent_names:
            view = config.for_agent(name)
            own = [*first_start.check_agent(view, env), check_canary_permissions(view, agent_dir(state_dir, name))]
            hooks = check_hooks(view)
            if hooks is not None:
                own.append(hooks)
            if driver_class(view).owns_turns:  # the pump talks stream-json to the CLI: print mode
                own.append(check_stream_flags(view))
            # With several agents each line says whose it is.
            checks.extend(own if len(config.agents) == 1 else [dataclasses.replace(c, name=f"{c.name} {name}")
                                                                for c in own])
        # The host's: one Telegram, one memory dir per agent view, one service.
        service = first_start.installed_unit() if unit is None else unit
        checks.extend([*first_start.check_telegram(config, env, service), *first_start.check_metrics(config),
                       *first_start.check_memory(config),
                       *first_start.check_service(service)])
        for more in extra or ():
            checks.extend(more(config, state_dir, store))
    # Last, with the store closed: the simulation forks a process per core.
    checks.extend(check_simulation(config, os.path.abspath(path) if path else None))
    return checks
