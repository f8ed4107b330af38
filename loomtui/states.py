"""What an observation can say, as plain strings: shared by the probes that look (tmux, the
process tree) and the rules that decide (watchdog_rules), so the rules need neither. And every
kind of event the ledger records, one name each."""

from __future__ import annotations

from string import Formatter

from typing import Literal, get_args

# Agents: the one agent of a single [agent] table (and of every row written before agents had
# names), and the names [[agents]] may take (they appear in tmux session names and paths).
MAIN_AGENT = "main"
# The queue's job name for the memory replica's conflicts: no [[jobs]] entry may take it while a
# memory remote is set (its clean runs would witness them).
MEMORY_QUEUE = "memory"
AGENT_NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,31}"

# tmux: the server and session answered (UP), said they are not there (GONE), or did not answer.
UP, GONE, UNKNOWN = "up", "gone", "unknown"
# A process in the pane's tree: found, definitely not there, or the walk could not tell.
PRESENT, MISSING = "present", "missing"
# A sentinel queue item: open, claimed by the agent, witnessed by the job's next clean run; or
# retired, its job gone from the config (no run of it will ever witness it). Here and
# not only in sentinel/queue_rules: the store counts items by state, and `loom status` (which every
# `loom hosts` runs on each host) should not import the queue's rules to do it.
OPEN, CLAIMED, WITNESSED, RETIRED = "open", "claimed", "witnessed", "retired"
LIVE = (OPEN, CLAIMED)  # the items still the agent's to fix: nudged, escalated, shown
# The command placeholder for the hooks settings file Loom writes for each launch: an agent whose
# commands pass it has hooks (hooks/settings.py). Here so that the config, which may not import
# the hooks, picks a hooked agent's defaults by the same test.
HOOK_SETTINGS = "{hook_settings}"


def placeholders(command: str) -> frozenset[str]:
    """The placeholders a command template names, as str.format reads it (`{{hook_settings}}` is
    the literal text, none); none for a template format() cannot read (the config refuses it)."""
    try:
        return frozenset(field for _, field, _, _ in Formatter().parse(command) if field is not None)
    except ValueError:
        return frozenset()


def passes_hook_settings(*commands: str) -> bool:
    return any(HOOK_SETTINGS[1:-1] in placeholders(command) for command in commands)


# Every kind of ledger event. The ledger refuses any other on write (a typo would be an event no
# reader, rule or metric ever looks for); old ledgers with retired kinds still read and verify.
EventKind = Literal[
    # the agent: launches, relaunches and what decided them
    "relaunch", "relaunch_failed", "resume_failed", "resume_proven", "launch_died", "escalation",
    "hold_placed", "hold_cleared", "refused",
    # the watchdog's own looks and hands
    "observation_ambiguous", "operator_alert", "tmux_socket_repair", "foreign_poller_reaped", "modal_dismissed",
    # typing into the pane, and the canary
    "inject", "keys", "canary_sent", "canary", "canary_late_ack",
    # the stream-json driver: a tool call the CLI's permissions refused (once per result), and a
    # kept message the pump set aside (pump.rules.MAX_UNREAD launches exited before reading it)
    "permission_denied", "pump_set_aside",
    # the agent CLI's own hooks (loomtui/hooks): what it said happened, and a typed line it never took
    "session_started", "turn_failed", "agent_notification", "compaction", "dispatch_missing",
    # the sentinel's queue
    "queue_new", "queue_nudge", "queue_claim", "queue_witness", "queue_reopen", "queue_escalate", "queue_retire",
    # Telegram
    "telegram_sent", "telegram_error", "telegram_failed", "telegram_retry_after", "telegram_command",
    "telegram_ignored", "telegram_refused", "telegram_conflict", "telegram_conflict_cleared", "telegram_chat_migrated",
    "outbox_requeued", "outbox_forgotten",
    # the supervisor and the store
    "supervisor_start", "supervisor_stop", "loop_error", "store_salvaged",
]
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))
