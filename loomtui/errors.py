"""Errors that end a command with one clear line and a non-zero exit status."""

from __future__ import annotations

import sqlite3


class LoomError(Exception):
    """A failure the operator can act on: the message is shown as one line."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        # One line, always: a multi-line message would hide the part that names the key or path.
        return " ".join(str(self.args[0]).split()) if self.args else ""


class ConfigError(LoomError):
    exit_code = 2


class StateDirError(LoomError):
    exit_code = 1


class StoreError(LoomError):
    exit_code = 1


class StoreUnavailable(StoreError, sqlite3.OperationalError):
    """The store is locked past its busy timeout, or failed mid-read: a fault of ours, named."""


class LockHeld(LoomError):
    exit_code = 3


class TmuxError(LoomError):
    """tmux refused or failed a command (agent/tmux.py raises it; every driver may)."""


class AgentNotReading(TmuxError):
    """The agent's CLI no longer reads its input: the stream-json pump's refusal after a write to
    the CLI's stdin failed. Unlike a pane Loom could not type into (our side), it is the agent's own
    deafness, told by the kernel: the canary counts a probe refused so as a miss."""


class TmuxTimeout(TmuxError):
    """tmux did not answer in time: ambiguous, never evidence that anything is gone."""


class Ambiguous(Exception):
    """The process walk could not see everything; no absence may be concluded from it."""
