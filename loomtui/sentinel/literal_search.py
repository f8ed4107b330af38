"""Finding the sentinel's needles with hyperscan, where it is installed: one pass over the buffer
for all of them (several GB/s), where bytes.find needs one pass per needle.

Only the needles go to hyperscan, each as an escaped byte literal, never the user's patterns:
which lines are failures is still decided by Python's `re` (logscan.Matcher), so no pattern
means anything else than it did. Without hyperscan (not installed, another platform, or a
database that will not compile) logscan's own bytes.find search is used.
"""

from __future__ import annotations

import threading
from types import ModuleType

from loomtui.sentinel.logscan import Finder, Needle


def _accelerator() -> ModuleType | None:
    try:  # an optional accelerator: Linux x86-64 wheels only
        import hyperscan as module
    except ImportError:  # pragma: no cover - depends on the platform
        return None
    return module


hyperscan = _accelerator()


def available() -> bool:
    return hyperscan is not None


def finder(needles: frozenset[Needle]) -> Finder | None:
    """A function finding where the needles start in buf[lo:hi], or None to use bytes.find."""
    if hyperscan is None or not needles:
        return None
    ordered = sorted(needles, key=lambda n: (n.text, n.caseless))
    lengths = [len(n.text) for n in ordered]
    try:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(
            expressions=[b"".join(b"\\x%02x" % byte for byte in n.text) for n in ordered],
            ids=list(range(len(ordered))),
            elements=len(ordered),
            flags=[hyperscan.HS_FLAG_CASELESS if n.caseless else 0 for n in ordered],
        )
    except hyperscan.error:
        return None
    # A database's scratch space serves one scan at a time.
    lock = threading.Lock()

    def find(buf: bytes, lo: int, hi: int) -> list[int]:
        hits: list[int] = []

        def on_match(ident: int, _start: int, end: int, _flags: int, _context: object) -> None:
            begin = end - lengths[ident]
            if lo <= begin and end <= hi:
                hits.append(begin)

        with lock:
            db.scan(buf, match_event_handler=on_match)
        return hits

    return find
