"""The pump's pane: each transcript record as a few readable lines for `tmux attach`.

Everything shown comes from the CLI, its stderr or a sender, so every piece goes through `_safe`:
`text.sanitize` (line breaks become spaces, control characters go, hence no escape sequence reaches
the terminal), then `text.printable`, as all of Loom's terminal-bound text (the bidi overrides and
isolates that reorder what the pane shows, and lone surrogates, become U+FFFD); long texts are cut.
"""

from __future__ import annotations

import json
from typing import Any

from loomtui.text import printable, sanitize

STDERR = "stderr: "     # how a line of the CLI's stderr starts on the pane
LINE_MAX = 400          # characters per shown line
LINES_MAX = 40          # lines shown of one text block
INDENT = "  "


def lines(dir: str, data: dict[str, Any]) -> list[str]:
    """The record's lines for the pane; a record nothing here foresaw (numbers past a float, nesting
    past the stack) is one line saying so, never an error: the pump's loop calls this."""
    try:
        return _lines(dir, data)
    except Exception as exc:  # the CLI's output is untrusted: whatever a record holds, the pump goes on
        return [f"? a record the pane cannot show ({type(exc).__name__}; the transcript has it)"]


def _lines(dir: str, data: dict[str, Any]) -> list[str]:
    if dir == "in":
        origin = _short(data.get("origin"))
        who = "you" if origin in ("", "operator") else origin
        return _block(f"{who} › ", data.get("text"))
    if dir == "err":
        return [STDERR + _one(data.get("line"))]
    if dir == "pump":
        return _pump(data)
    if dir == "out":
        event = data.get("event")
        if isinstance(event, dict):
            return event_lines(event)
        return ["? " + _one(data.get("raw"))]
    return []


def stderr_said(screen: str) -> str:
    """Of the pane's text, only what the CLI wrote to stderr: where a resume's failure is said (the
    rest echoes what was sent in and answered, which any text may be, "No conversation found" too)."""
    return "\n".join(line[len(STDERR):] for line in screen.splitlines() if line.startswith(STDERR))


def event_lines(event: dict[str, Any]) -> list[str]:
    kind = event.get("type")
    if kind == "system":
        if event.get("subtype") == "init":
            model = _short(event.get("model"))
            return [f"session {_short(event.get('session_id'))}" + (f" · {model}" if model else "")]
        if event.get("subtype") == "permission_denied":
            return [f"{INDENT}denied: {_short(event.get('tool_name')) or '?'}: {_one(event.get('message'), 200)}"]
        return []
    if kind == "assistant":
        out: list[str] = []
        for block in _content(event):
            if block.get("type") == "text":
                out += _block("assistant › ", block.get("text"))
            elif block.get("type") == "tool_use":
                out.append("tool: " + tool_call(block))
        return out
    if kind == "user":
        out = []
        for block in _content(event):
            if block.get("type") == "tool_result":
                text = _tool_result_text(block.get("content"))
                label = "tool error" if block.get("is_error") is True else "tool result"
                out += _block(f"{INDENT}{label}: ", text, limit=5) if text else [f"{INDENT}{label}"]
        return out
    if kind == "result":
        return _result(event)
    return []


def tool_call(block: dict[str, Any]) -> str:
    """`Bash(touch /tmp/x)`: the tool's name and its command, or its input in short."""
    name = _short(block.get("name")) or "?"
    args = block.get("input")
    if isinstance(args, dict) and isinstance(args.get("command"), str):
        shown = args["command"]
    else:
        shown = json.dumps(args, ensure_ascii=False, sort_keys=True)
    return f"{name}({_one(shown, 200)})"


def _result(event: dict[str, Any]) -> list[str]:
    subtype = _short(event.get("subtype"))
    took = _took(event.get("duration_ms"))
    if event.get("is_error") is True:
        head = f"result error: {subtype or 'unknown'}{took}"
        errors = event.get("errors")
        detail = event.get("result") or event.get("error") or (
            "; ".join(e for e in errors if isinstance(e, str)) if isinstance(errors, list) else "")
        out = [head] + (_block(INDENT, detail, limit=5) if isinstance(detail, str) and detail else [])
    else:
        out = [f"result ok{took}"]
    names = []
    denials = event.get("permission_denials")
    for item in denials if isinstance(denials, list) else []:
        name = item.get("tool_name") if isinstance(item, dict) else item
        if isinstance(name, str):
            names.append(_short(name))
    if names:
        out.append(f"{INDENT}denied: " + ", ".join(names))
    return out


def _took(ms: object) -> str:
    """ ` (1.5s)` for a result's duration_ms; nothing for one that is not a number a float holds."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return ""
    try:
        return f" ({ms / 1000:.1f}s)"
    except OverflowError:  # an int past a float's range (any JSON number parses)
        return ""


def _pump(data: dict[str, Any]) -> list[str]:
    what = data.get("what")
    if what == "started":
        argv = data.get("argv") or []
        shown = " ".join(str(a) for a in argv) if isinstance(argv, list) else ""
        return [f"— loom pump {_n(data.get('pid'))}: started {_one(shown, 200)} (pid {_n(data.get('cli_pid'))})"]
    if what == "queued":
        return [f"— queued #{_n(data.get('seq'))} (position {_n(data.get('position'))}, from {_short(data.get('origin'))})"]
    if what == "pending":
        return [f"— {len(data.get('seqs') or [])} queued message(s) left by an earlier pump"]
    if what == "unread":
        seqs, aside = data.get("seqs"), data.get("set_aside")
        last = f" ({len(aside)} of them set aside at the next start)" if isinstance(aside, list) and aside else ""
        return [f"— {len(seqs) if isinstance(seqs, list) else 0} message(s) written that the CLI never showed it "
                f"read: kept for the next launch{last}"]
    if what == "cli_exit":
        if data.get("signal"):
            return [f"— the CLI was killed by signal {_n(data.get('signal'))}"]
        return [f"— the CLI exited with status {_n(data.get('status'))}"]
    if what == "not_kept":
        return [f"— #{_n(data.get('seq'))} written but not kept for a next launch: {_one(data.get('error'))}"]
    if what == "write_failed":
        kept = " (kept for the next launch)" if data.get("kept") is True else ""
        return [f"— could not write #{_n(data.get('seq'))} to the CLI: {_one(data.get('error'))}{kept}"]
    if what == "signal":
        return [f"— loom pump got signal {_n(data.get('signal'))}: stopping the CLI"]
    if what == "spawn_failed":
        return [f"— could not start the CLI: {_one(data.get('error'))}"]
    if what == "set_aside":
        return [f"— set aside #{_n(data.get('seq'))}: {_n(data.get('unread'))} launches exited before reading it "
                f"(kept as {_one(data.get('name'))} in the pump's queue)"]
    if what == "bad_queue_file":
        return [f"— skipped an unreadable queue file {_one(data.get('name'))}"]
    return []


def _content(event: dict[str, Any]) -> list[dict[str, Any]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _tool_result_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _block(head: str, text: object, limit: int = LINES_MAX) -> list[str]:
    """A multi-line text under a head: its lines each made safe, the first beside the head."""
    parts = str(text if text is not None else "").split("\n")
    shown = [_safe(p)[:LINE_MAX] for p in parts[:limit]]
    if len(parts) > limit:
        shown.append(f"… {len(parts) - limit} more lines")
    pad = " " * len(head)
    return [(head if i == 0 else pad) + line for i, line in enumerate(shown)]


def _n(value: object) -> str:
    """A number a record gives (a seq, a pid, a status), as safe text whatever the record holds."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else _one(value, 40)


def _one(text: object, limit: int = LINE_MAX) -> str:
    return _safe(str(text if text is not None else ""))[:limit]


def _short(text: object) -> str:
    return _safe(text)[:80] if isinstance(text, str) else ""


def _safe(text: str) -> str:
    return printable(sanitize(text))
