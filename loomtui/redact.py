"""Secrets known to this process, scrubbed from anything that is stored, logged or shown."""

from __future__ import annotations

import threading

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
