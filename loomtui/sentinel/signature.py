"""The normalized signature of a failure line: what stays the same when the same error recurs.

Timestamps, uuids, hex ids and numbers change from one occurrence to the next; masking them
lets a recurring error deduplicate into one queue item with a count.
"""

from __future__ import annotations

import re
import unicodedata

MAX_SIGNATURE = 200

_MASKS = [
    # ISO and syslog-ish dates and times, with optional fraction and zone.
    (re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b0[xX][0-9a-fA-F]+\b"), "<hex>"),
    # A hex id must have a letter and a digit, so a plain number stays a number whatever its length.
    (re.compile(r"\b(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
]
_SPACE = re.compile(r"\s+")


def normalize(text: str) -> str:
    """One line, control characters gone, variable parts masked, whitespace collapsed, cut short."""
    text = "".join(" " if unicodedata.category(ch) in ("Cc", "Zl", "Zp") else ch for ch in text)
    for pattern, mask in _MASKS:
        text = pattern.sub(mask, text)
    return _SPACE.sub(" ", text).strip()[:MAX_SIGNATURE].rstrip()
