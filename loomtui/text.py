"""Untrusted text (messages, pane text, log lines): made safe to type, and digested for the ledger."""

from __future__ import annotations

import hashlib
import re
import unicodedata

_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029\t]")


def sanitize(text: str) -> str:
    """One line of printable text: breaks become spaces, other control characters are dropped."""
    text = _LINE_BREAKS.sub(" ", text)
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cc")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
