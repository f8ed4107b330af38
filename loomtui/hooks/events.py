"""One hook event, as the agent CLI wrote it, read as untrusted bytes into a typed `HookEvent`
(sealed: the standard library only, no I/O; the shell reads the file and hands the bytes here).

Nothing here raises on what the CLI (or anyone who can write the agent's directory) put in the
file: bytes that are not a JSON object are an event named UNREADABLE with the reason; an event too
large to parse whole is named from its first bytes (Claude Code writes `hook_event_name` before a
tool's input and output), so a huge PostToolUse still counts as one. A prompt's text is never
kept: only its length and the digests of its lines, which is what the dispatch witness matches
a typed line with (witness_rules.said).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from loomtui.text import digest, printable, sanitize

# The events Loom asks for, each with the one field that says most about it (its `source`).
QUALIFIER = {
    "SessionStart": "source",          # startup, resume, clear, compact
    "UserPromptSubmit": "",
    "Stop": "",
    "StopFailure": "error_type",       # rate_limit, authentication_failed, billing_error, ...
    "Notification": "notification_type",  # permission_prompt, idle_prompt, ...
    "PreCompact": "trigger",           # manual, auto
    "PostToolUse": "tool_name",
    # A tool call that failed (PostToolUse is a success's only): a turn whose build or tests keep
    # failing is alive and working, not quiet.
    "PostToolUseFailure": "tool_name",
}
EVENTS = tuple(QUALIFIER)
UNREADABLE = "unreadable"
# A whole event is parsed up to this many bytes; a larger one is named from its head.
MAX_PARSED = 2 << 20
HEAD = 64 << 10
WORD = 64           # longest name, qualifier or error type kept
MAX_SESSION = 128
MESSAGE = 200       # longest notification message kept
MAX_LINES = 64      # a prompt's line digests kept (a queue of typed lines sent as one prompt)

_NAMED = re.compile(rb'"hook_event_name"\s*:\s*"([A-Za-z]{1,64})"')
_SESSION = re.compile(rb'"session_id"\s*:\s*"([A-Za-z0-9._:-]{1,128})"')


@dataclass(frozen=True)
class HookEvent:
    event: str                      # hook_event_name (printable, bounded), or UNREADABLE
    session_id: str = ""
    source: str = ""                # the event's qualifier (QUALIFIER), printable and bounded
    detail: dict[str, Any] = field(default_factory=dict)


def parse(raw: bytes, size: int | None = None) -> HookEvent:
    """`raw`: the file's bytes (its head only, when `size`, the whole size, exceeds MAX_PARSED)."""
    size = len(raw) if size is None else size
    if size > MAX_PARSED:
        return _from_head(raw[:HEAD], size)
    try:
        doc = json.loads(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as exc:
        return HookEvent(UNREADABLE, detail={"error": _word(f"not JSON: {exc}", 200), "bytes": size})
    if not isinstance(doc, dict):
        return HookEvent(UNREADABLE, detail={"error": "not a JSON object", "bytes": size})
    name = doc.get("hook_event_name")
    if not isinstance(name, str) or not name:
        return HookEvent(UNREADABLE, detail={"error": "no hook_event_name", "bytes": size})
    event = _word(name)
    key = QUALIFIER.get(event, "")
    source = _word(doc.get(key)) if key else ""
    detail: dict[str, Any] = {}
    if event == "UserPromptSubmit":
        prompt = doc.get("prompt")
        text = prompt if isinstance(prompt, str) else ""
        detail = {"length": len(text), "said": said(text)}
    elif event == "StopFailure":
        source = source or _word(doc.get("error"))  # the name documented first; either one
        # When the limit resets (epoch seconds), where a CLI gives one: Claude Code 2.1's payload
        # has none (error, error_details, last_assistant_message); harness_rules bounds it.
        reset = doc.get("resets_at")
        if isinstance(reset, (int, float)) and not isinstance(reset, bool) and abs(reset) < 1e11:
            detail = {"resets_at": float(reset)}
    elif event == "Notification":
        # What it says ("Claude needs your permission to use Bash"): told to the operator, untrusted.
        message = _word(doc.get("message"), MESSAGE)
        detail = {"message": message} if message else {}
    return HookEvent(event, _session(doc.get("session_id")), source, detail)


def said(prompt: str) -> list[str]:
    """The digests a prompt carries typed lines by: the whole prompt's and each line's (a CLI may
    send several queued lines as one prompt, a line each), each as Loom's typing left it
    (`text.sanitize`) and with its whitespace collapsed, as `typed_digest` makes them."""
    out: list[str] = []
    for part in [prompt, *prompt.splitlines()[:MAX_LINES]]:
        key = typed_digest(part)
        if key and key not in out:
            out.append(key)
    return out


def typed_digest(text: str) -> str:
    """The digest a typed line is witnessed by: the line as typed, its whitespace collapsed
    (a CLI may trim what it was given); "" for a line of nothing but whitespace."""
    words = sanitize(text).split()
    return digest(" ".join(words)) if words else ""


def _from_head(head: bytes, size: int) -> HookEvent:
    named = _NAMED.search(head)
    session = _SESSION.search(head)
    detail = {"error": "too large to parse", "bytes": size}
    if named is None:
        return HookEvent(UNREADABLE, detail=detail)
    return HookEvent(named.group(1).decode("ascii"), session.group(1).decode("ascii") if session else "",
                     detail=detail)


def _word(value: object, limit: int = WORD) -> str:
    if not isinstance(value, str):
        return ""
    return printable(sanitize(value))[:limit]


def _session(value: object) -> str:
    if not isinstance(value, str):
        return ""
    return printable(sanitize(value))[:MAX_SESSION]
