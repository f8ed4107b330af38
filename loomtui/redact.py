"""Secrets known to this process, scrubbed from anything that is stored, logged or shown."""

from __future__ import annotations

import os
import stat
import threading

from loomtui.errors import LoomError

_lock = threading.Lock()
_secrets: set[str] = set()
MASK = "[redacted]"


def register(secret: str) -> None:
    # Very short strings would redact ordinary words; a real token is far longer.
    if secret and len(secret) >= 8:
        with _lock:
            _secrets.add(secret)


def scrub(text: str) -> str:
    with _lock:
        known = sorted(_secrets, key=len, reverse=True)
    for secret in known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def read_secret_file(path: os.PathLike[str] | str, key: str) -> str:
    """The secret in `path` (the config's `key`: named in every error), registered to be scrubbed.
    A regular file of mode 0600 or stricter, opened without following a symlink and without blocking
    on a named pipe; its mode checked on the open descriptor, so it cannot be swapped in between."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise LoomError(f"{key} {path}: cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise LoomError(f"{key} {path}: not a regular file")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise LoomError(f"{key} {path}: mode {mode:04o} is too open; run: chmod 600 {path}")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    secret = data.decode("utf-8", "replace").strip()
    if not secret:
        raise LoomError(f"{key} {path}: file is empty")
    register(secret)
    return secret
