"""Untrusted text (messages, pane text, log lines, job names, memory files, hold reasons, notes):
one line safe to type, its digest for the ledger, and the forms safe to show. The one place for all.

Whatever leaves Loom for a terminal, a chat, a metric label or a log goes through `printable`
(or a variant of it below): ESC and so every CSI and OSC sequence (ST- or BEL-terminated), the
other C0 controls, DEL, the C1 controls (U+0080..U+009F, which some terminals obey like ESC [),
bidi overrides and isolates, and the lone surrogates that stand for undecodable bytes become
visible symbols, one for one, so a hostile string is shown, never obeyed. JSON output keeps its
data (`json_safe`: the same characters as \\u escapes)."""

from __future__ import annotations

import json
import re
from typing import Any

_LINE_BREAKS = re.compile(r"\r\n|[\r\n\v\f\x85\u2028\u2029\t]")


# Unicode's control characters (category Cc), which the standard fixes for ever as these 65:
# one regex pass instead of a category lookup for each character of every typed line.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def sanitize(text: str) -> str:
    """One line of printable text: breaks become spaces, other control characters are dropped."""
    return _CONTROLS.sub("", _LINE_BREAKS.sub(" ", text))


def digest(text: str) -> str:
    import hashlib  # here: OpenSSL's load is a fifth of `loom status`'s imports, which make no digest

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def printable(text: str, keep_newlines: bool = False) -> str:
    """Control characters as visible symbols (ESC as ␛), so untrusted text cannot drive a terminal.

    One character out for each one in (spans over the text stay where they were), and a second
    pass changes nothing."""
    if text.isprintable() or (keep_newlines and text.replace("\n", "").replace("\t", "").isprintable()):
        return text  # the common case, at C speed
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


def for_terminal(value: object, *, keep_newlines: bool = False) -> str:
    """Any value as text a terminal (or a chat, or a console widget) may show: `printable` of its str."""
    return printable("" if value is None else str(value), keep_newlines)


def one_line(value: object, limit: int | None = None) -> str:
    """One line for a sink that has no lines (a metric label, a log record's message): line
    breaks shown as symbols too, so untrusted text cannot forge a second series or record."""
    shown = for_terminal(value)
    return shown if limit is None or len(shown) <= limit else shown[: max(limit - 1, 0)] + "…"


def _escaped(c: str) -> str:
    o = ord(c)
    if o > 0xFFFF:  # JSON escapes name UTF-16 units: a surrogate pair
        o -= 0x10000
        return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"
    return f"\\u{o:04x}"


def json_safe(dumped: str) -> str:
    """JSON text (from json.dumps with ensure_ascii=False) with every character `printable` would
    replace written as its \\u escape instead: the same data for a program, nothing raw for a
    terminal. Outside its strings JSON is ASCII and whitespace, so only strings change."""
    if dumped.replace("\n", "").isprintable():
        return dumped
    return "".join(c if c == "\n" or c.isprintable() or c == "\u200d" else _escaped(c) for c in dumped)


def dumps(obj: Any, **kwargs: Any) -> str:
    """json.dumps for output: non-ASCII text kept readable, control characters escaped (json_safe)."""
    return json_safe(json.dumps(obj, ensure_ascii=False, **kwargs))


class PrintableStream:
    """A text stream that shows what is written to it through `printable` (newlines and tabs
    kept): a command's every line, error and traceback included, reaches the terminal safe,
    whichever code printed it. Everything but `write` is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self.wrapped = stream

    def write(self, text: str) -> int:
        self.wrapped.write(printable(text, keep_newlines=True))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def undecodable(words: Any) -> int | None:
    """The 1-based position of the first word that is not valid UTF-8 (Python hands such bytes in
    argv and the environment over as lone surrogates), or None."""
    for n, word in enumerate(words, start=1):
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:
            return n
    return None


def counted(n: int, one: str, many: str = "") -> str:
    """`n` and its noun, singular for one: "1 hold", "2 holds" (`many` where +s will not do)."""
    return f"{n} {one if n == 1 else (many or one + 's')}"
