"""The hooks settings file Loom writes for each agent (never the operator's own settings), passed to
the CLI with `--settings {hook_settings}`, and the one fixed command each hook runs.

The command appends the event as received and interprets nothing: the CLI writes the payload to
its stdin and `cat` copies it to a file named by the hook's own shell pid (`$$`: no two running
hooks share one), so concurrent hooks never interleave; `set -C` makes the redirection refuse a
file that is already there (a pid reused before the daemon read the earlier event): that event is
lost, never another one overwritten. No shell ever sees the payload; the only thing spliced into
the command is the events directory, shell-quoted. No Python, no temporary file and rename: a hook
runs at every prompt and tool call and must cost milliseconds, and every process it starts costs
one or two (bench/hooks.py); a JSON object is complete only when its last byte is written, so the
reader tells a file still being written from a whole one by parsing it (hooks/ingest.py). The
command writes nothing to stdout (Claude Code adds a SessionStart or UserPromptSubmit hook's
output to the model's context) and always exits 0 (exit 2 from UserPromptSubmit would refuse the
prompt): a lost event costs a canary probe, never the agent's turn.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import tempfile
from pathlib import Path

from loomtui.errors import LoomError
from loomtui.hooks.events import EVENTS
from loomtui.states import HOOK_SETTINGS, passes_hook_settings

PLACEHOLDER = HOOK_SETTINGS
HOOKS_DIR = "hooks"
EVENTS_DIR = "events"
SETTINGS = "settings.json"
PREFIX = "ev."
SUFFIX = ".json"


@functools.lru_cache(maxsize=256)
def hooks_dir(agent_dir: Path) -> Path:
    return Path(agent_dir) / HOOKS_DIR


@functools.lru_cache(maxsize=256)
def events_dir(agent_dir: Path) -> Path:
    """Made once per agent directory (a Path is immutable): the hooks loop asks at every look."""
    return hooks_dir(agent_dir) / EVENTS_DIR


def settings_path(agent_dir: Path) -> Path:
    return hooks_dir(agent_dir) / SETTINGS


def wanted(agent: object) -> bool:
    """Whether the agent's commands pass Loom's hooks settings (no hooks configured: no witness)."""
    return passes_hook_settings(getattr(agent, "fresh_command", ""), getattr(agent, "resume_command", ""))


def hook_command(agent_dir: Path) -> str:
    where = shlex.quote(str(events_dir(agent_dir)))
    return f"set -C; cat > {where}/{PREFIX}$${SUFFIX}; exit 0"


def settings(agent_dir: Path) -> dict:
    """One matcher group per event, matching everything, each with the one fixed command."""
    command = {"type": "command", "command": hook_command(agent_dir)}
    return {"hooks": {event: [{"matcher": "", "hooks": [dict(command)]}] for event in EVENTS}}


def write(agent_dir: Path) -> Path:
    """Write (or refresh) the settings file: 0600 in a 0700 directory, replaced whole by a rename;
    the events directory is made too. LoomError naming the path when it cannot be."""
    path = settings_path(agent_dir)
    try:
        for directory in (hooks_dir(agent_dir), events_dir(agent_dir)):
            directory.mkdir(mode=0o700, exist_ok=True)
            os.chmod(directory, 0o700)
        # A name of its own (mkstemp: 0600, O_EXCL): the daemon's hooks loop and a relaunch write it
        # at once at a start, and with one name per process one truncated the other's file, whose
        # rename then failed the relaunch.
        fd, name = tempfile.mkstemp(prefix=f".{SETTINGS}.", dir=path.parent)
        temp = Path(name)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(settings(agent_dir), fh, indent=2)
                fh.write("\n")
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise LoomError(f"cannot write the hooks settings {path}: {exc.strerror or exc}") from None
    return path
