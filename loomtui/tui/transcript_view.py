"""The agent's conversation from the pump's transcript (stream-json driver), not a screen capture.

Every string in a record is untrusted (the operator's messages, the model's answers, tool output):
it becomes `Text` through `printable`, never markup and never an escape sequence.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text

from loomtui.pump.transcript import ERR, IN, OUT, PUMP, Record, read, tail_offset
from loomtui.text import printable

MAX_ENTRIES = 300
MAX_CHARS = 2000       # of one entry: a tool's output can be megabytes
TOOL_INPUT_CHARS = 200


@dataclass(frozen=True)
class Entry:
    """One thing the operator reads: who (you/assistant/tool/result/error/pump), and what."""

    who: str
    text: str
    origin: str = ""   # of a user message: operator, telegram, canary, sentinel
    error: bool = False


def _clip(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit} more characters)"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_content_text(part.get("text", part.get("content", ""))) for part in content
                         if isinstance(part, dict))
    return ""


def _from_event(event: dict[str, Any]) -> list[Entry]:
    kind = event.get("type")
    raw = event.get("message")
    message: dict[str, Any] = raw if isinstance(raw, dict) else {}
    content = message.get("content")
    parts: list[Any] = content if isinstance(content, list) else []
    if kind == "assistant":
        out = []
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and str(part.get("text", "")).strip():
                out.append(Entry("assistant", _clip(str(part["text"]))))
            elif part.get("type") == "tool_use":
                shown = json.dumps(part.get("input", {}), ensure_ascii=False)
                out.append(Entry("tool", f"{part.get('name', '?')} {_clip(shown, TOOL_INPUT_CHARS)}"))
        return out
    if kind == "user":
        out = []
        for part in parts:
            if isinstance(part, dict) and part.get("type") == "tool_result":
                text = _content_text(part.get("content", "")).strip()
                out.append(Entry("tool result", _clip(text or "(no output)"), error=bool(part.get("is_error"))))
        return out
    if kind == "result":
        bad = bool(event.get("is_error"))
        denials = event.get("permission_denials")
        denials = denials if isinstance(denials, list) else []
        what = f"turn ended: {event.get('subtype', '?')}"
        if isinstance(event.get("duration_ms"), (int, float)):
            what += f" in {event['duration_ms'] / 1000:.1f}s"
        if denials:
            names = sorted({str(d.get("tool_name", d)) if isinstance(d, dict) else str(d) for d in denials})
            what += f"; denied: {', '.join(names)}"
        return [Entry("result", what, error=bad or bool(denials))]
    if kind == "system" and event.get("subtype") == "init":
        return [Entry("pump", f"session {event.get('session_id', '?')}")]
    return []


def entries(records: list[Record]) -> list[Entry]:
    """What the console shows of these records, oldest first (the newest MAX_ENTRIES). A record of
    a shape not foreseen is one line saying so: raised, it stopped every refresh of the console at
    the same record, for good."""
    out: list[Entry] = []
    for record in records:
        try:
            out.extend(_entries_of(record))
        except Exception as exc:  # noqa: BLE001 - the CLI's output is anyone's JSON
            out.append(Entry("pump", f"a record Loom cannot show ({type(exc).__name__})", error=True))
    return out[-MAX_ENTRIES:]


def _entries_of(record: Record) -> list[Entry]:
    out: list[Entry] = []
    data = record.data
    if record.dir == IN:
        out.append(Entry("you", _clip(str(data.get("text", ""))), origin=str(data.get("origin", ""))))
    elif record.dir == OUT:
        if "raw" in data:
            out.append(Entry("output", _clip(str(data["raw"]))))
        else:
            out.extend(_from_event(record.event))
    elif record.dir == ERR:
        out.append(Entry("stderr", _clip(str(data.get("line", ""))), error=True))
    elif record.dir == PUMP:
        what = str(data.get("what", ""))
        rest = {k: v for k, v in data.items() if k != "what"}
        out.append(Entry("pump", _clip(f"{what} {json.dumps(rest, ensure_ascii=False)}" if rest else what),
                         error=what == "cli_exit"))
    return out


class Follower:
    """Follows the transcript for the console's worker: reads only what was appended since the last
    look, starts near the end (a months-long transcript costs one tail read), and starts over
    when the file is replaced or cut short."""

    TAIL_BYTES = 256 << 10

    def __init__(self, path: Path) -> None:
        self.path = path
        self._inode: int | None = None
        self._offset = 0
        self._entries: deque[Entry] = deque(maxlen=MAX_ENTRIES)

    def look(self) -> tuple[Entry, ...]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._inode, self._offset = None, 0
            self._entries.clear()
            return ()
        if st.st_ino != self._inode or st.st_size < self._offset:
            self._inode, self._offset = st.st_ino, tail_offset(self.path, self.TAIL_BYTES)
            self._entries.clear()
        while True:
            records = list(read(self.path, self._offset))
            if not records:
                break
            self._entries.extend(entries(records))
            self._offset = records[-1].end
        return tuple(self._entries)


STYLES = {
    "you": "bold blue", "assistant": "bold", "tool": "cyan", "tool result": "dim",
    "result": "green", "stderr": "red", "pump": "dim italic", "output": "",
}


def render(found: list[Entry]) -> Text:
    if not found:
        return Text("(no conversation yet)", style="dim")
    body = Text()
    for i, entry in enumerate(found):
        if i:
            body.append("\n")
        # The origin is the transcript's word, not checked when a pump restores its queue: printable.
        label = entry.who if not entry.origin or entry.origin == "operator" else f"{entry.who} ({printable(entry.origin)})"
        style = "bold red" if entry.error else STYLES.get(entry.who, "")
        body.append(f"{label} › ", style=style)
        body.append(printable(entry.text, keep_newlines=True), style="red" if entry.error else "")
    return body
