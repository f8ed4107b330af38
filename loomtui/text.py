"""Untrusted text (messages, pane text, log lines, job names, memory files): one line safe to type,
its digest for the ledger, and a form safe to print on a terminal. The one place for all three."""

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


def printable(text: str, keep_newlines: bool = False) -> str:
    """Control characters as visible symbols (ESC as ␛), so untrusted text cannot drive a terminal."""
    out = []
    for c in text:
        o = ord(c)
        if keep_newlines and c in "\n\t":
            out.append(c)
        elif c.isprintable() or c == "\u200d":  # ZWJ holds emoji sequences together
            out.append(c)
        elif o < 0x20:
            out.append(chr(0x2400 + o))
        elif o == 0x7F:
            out.append("\u2421")
        else:  # C1 controls, bidi overrides, lone surrogates from undecodable bytes
            out.append("\ufffd")
    return "".join(out)
