"""A text that an operator's pattern matches: what the simulated agent shows and runs as.

The world shows a ready prompt that `agent.ready_match` finds and runs a poller whose command line
`agent.poller_match` finds, whatever the operator wrote there. The pattern's own parse tree is
walked for the shortest text it accepts (the first branch, each repeat at its least, a class's
first member); the result is checked with re.search, and None is said when the pattern is beyond
this (a lookaround, a back reference): the world then shows nothing it would match.
"""

from __future__ import annotations

import re

# The private parser (re._parser, Python 3.11 on, as requires-python says): the public API has no parse tree.
from re import _constants as _c
from re import _parser as _p

_CATEGORY = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_SPACE": " ",
             "CATEGORY_NOT_DIGIT": "a", "CATEGORY_NOT_WORD": "-", "CATEGORY_NOT_SPACE": "a"}


class _Beyond(Exception):
    pass


def _text(parsed) -> str:
    out = []
    for op, av in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(av) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_member(av))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, item = av
            out.append(_text(item) * low)
        elif name == "SUBPATTERN":
            out.append(_text(av[-1]))
        elif name == "ATOMIC_GROUP":
            out.append(_text(av))
        elif name == "BRANCH":
            out.append(_text(av[1][0]))
        elif name == "AT":
            continue  # anchors: the text stands alone on its line
        else:
            raise _Beyond(name)
    return "".join(out)


def _member(items) -> str:
    negate = any(str(op) == "NEGATE" for op, _ in items)
    if negate:
        return "~"
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            return chr(av)
        if name == "RANGE":
            return chr(av[0])
        if name == "CATEGORY":
            return _CATEGORY.get(str(av), "a")
    raise _Beyond("IN")


def matching(pattern: str) -> str | None:
    """The shortest plain text `pattern` finds, or None when none can be told."""
    if not pattern:
        return None
    try:
        text = _text(_p.parse(pattern))
    except (_Beyond, re.error, _c.error, TypeError, ValueError):
        return None
    return text if re.search(pattern, text) else None
