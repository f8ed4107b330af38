"""The bot token: from a 0600 file or the environment, registered for redaction the moment it is read."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import quote

from loomtui import redact
from loomtui.config import TelegramConfig
from loomtui.errors import LoomError


def load_token(cfg: TelegramConfig, environ: Mapping[str, str] | None = None) -> str:
    """`telegram.token_file` when set, else the `telegram.token_env` variable; LoomError otherwise."""
    env = os.environ if environ is None else environ
    if cfg.token_file is not None:
        token = _read_file(cfg.token_file)
        source = f"telegram.token_file {cfg.token_file}"
    else:
        token = env.get(cfg.token_env, "").strip()
        source = f"environment variable {cfg.token_env} (telegram.token_env)"
        if not token:
            raise LoomError(f"telegram: no bot token: set {cfg.token_env} or telegram.token_file")
    _register(token)
    if any(c.isspace() or ord(c) < 32 for c in token) or len(token) < 8:
        raise LoomError(f"telegram: the bot token in {source} is malformed")
    return token


def _read_file(path: os.PathLike[str]) -> str:
    return redact.read_secret_file(path, "telegram.token_file")


def _register(token: str) -> None:
    redact.register(token)
    # URLs may carry it percent-encoded (':' → %3A) and the part after ':' is the actual secret.
    redact.register(quote(token, safe=""))
    if ":" in token:
        redact.register(token.split(":", 1)[1])
