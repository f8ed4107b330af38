"""The stream-json pump's turn marks, read from its transcript as it grows (hooks.pump_marks
converts; this only reads).

The canary asks at every tick, and a busy turn's transcript grows by every event the CLI prints:
each read takes only the bytes appended since the last (per transcript path, in this process),
however many (a turn of tool results carrying images can add megabytes between two looks), keeps
the marks compacted, and starts from a bounded tail on its first read, or again when the file was
replaced or cut: the last MiB, or further back until it holds a record that bounds the latest turn
(the `in` that began it, a `result`, a pump's start or its CLI's exit). A turn that printed more
than a MiB since its `in` (tool results carrying images) was otherwise not seen by a supervisor
restarted during it: its signs of life had no start, and the busy agent's probes counted as misses,
to a recycle mid-turn. (Until 2026-12-06 it also started again from the tail when the file had grown by
more than 5 MiB since: the open turn's prompt was dropped with the marks before it, and the probes
queued behind that busy turn counted as misses, to a recycle.)
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from loomtui.hooks import pump_marks
from loomtui.hooks.turn_rules import Mark
from loomtui.pump import transcript

# The last hundred or so turns (a prompt and a stop each, their signs of life cut to two), as the
# hooks keep (hooks.turns.MARKS).
MARKS = 240
TAIL = 1 << 20  # where a first read starts: the transcript's last MiB
# Then further back while no record there bounds the latest turn; past the last, the whole file
# (a turn of more than that is still open, and its start is the one thing its reader needs).
WIDER = (16 << 20, 256 << 20)
# The pump's records that bound a turn, as an `in` (it begins one) and a `result` (it ends one) do:
# the turns after any of them depend on nothing earlier (pump_marks), so a first read may start there.
BOUNDS = {(transcript.PUMP, pump_marks.STARTED), (transcript.PUMP, pump_marks.CLI_EXIT),
          (transcript.PUMP, pump_marks.SPAWN_FAILED)}
CHUNK = 4 << 20  # at most this much per read of the file (transcript.read's default)


@dataclass
class _Kept:
    inode: int
    offset: int
    carried: pump_marks.Read = pump_marks.Read()
    marks: list[Mark] = field(default_factory=list)


_KEPT: dict[str, _Kept] = {}
_LOCK = threading.Lock()  # the canary's and the hooks loop's threads may ask at once


def marks(state_dir: Path) -> list[Mark]:
    """The pump's latest MARKS turn marks for the agent whose pump state dir this is, oldest first."""
    path = transcript.path_in(state_dir)
    try:
        stat = os.stat(path)
    except OSError:
        return []  # no pump has run here yet (or it cannot be read): no turns
    with _LOCK:
        kept = _KEPT.get(str(path))
        if kept is None or kept.inode != stat.st_ino or stat.st_size < kept.offset:
            kept = _Kept(stat.st_ino, _first_offset(path))
        while True:
            records = list(transcript.read(path, kept.offset, CHUNK))
            if not records:
                break
            found, kept.carried = pump_marks.marks(records, kept.carried)
            kept.marks = pump_marks.compact(kept.marks + found, MARKS)
            kept.offset = records[-1].end
        _KEPT[str(path)] = kept
        return list(kept.marks)


def _first_offset(path: Path) -> int:
    """Where a first read starts: the last TAIL, or the first of the WIDER windows (else the whole
    file) that holds a record bounding the latest turn."""
    return transcript.reaching_back(path, (TAIL, *WIDER), _is_bound) or 0


def _is_bound(record: transcript.Record) -> bool:
    if record.dir == transcript.IN:
        return True
    if record.dir == transcript.OUT:
        return record.event.get("type") == "result"
    return (record.dir, record.data.get("what")) in BOUNDS
