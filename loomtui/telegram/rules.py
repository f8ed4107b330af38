"""Pure decisions of the Telegram loops: no clock, no store, no network."""

from __future__ import annotations

import re

from loomtui.text import printable

MAX_LENGTH = 4096  # Telegram's limit for one text message, counted in UTF-16 code units
TRUNCATED = "\n… [truncated]"
MIN_GAP = 1.0  # seconds between two messages to one chat: Telegram's per-chat flood limit


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def truncate(text: str, limit: int = MAX_LENGTH) -> tuple[str, bool]:
    """The text as it may go to the chat: cut to `limit` with a visible marker, and whether it was cut.

    Counted in UTF-16 units because that is how Telegram counts: an emoji is two. Every message
    passes here on its way out (the sender, the bridge), so this is also where its untrusted parts
    (reasons, job names, log lines, the agent's answers) lose their control characters: shown as
    symbols (text.printable; lines and tabs kept), never passed to the operator's client raw.
    """
    text = printable(text, keep_newlines=True)
    if utf16_len(text) <= limit:
        return text, False
    budget = limit - utf16_len(TRUNCATED)
    used = 0
    cut = len(text)
    for i, ch in enumerate(text):
        width = 2 if ord(ch) > 0xFFFF else 1
        if used + width > budget:
            cut = i
            break
        used += width
    return text[:cut] + TRUNCATED, True


def rate_wait(last_sent: float | None, now: float, gap: float = MIN_GAP) -> float:
    """Seconds to wait before the next message to a chat last written to at `last_sent`."""
    if last_sent is None:
        return 0.0
    return max(0.0, min(gap, last_sent + gap - now))


def parse_command(text: str | None) -> tuple[str, list[str]] | None:
    """`/recycle@loom_bot fresh` → ("recycle", ["fresh"]); None when it is not a command: a bot
    command's name is 1 to 32 letters, digits and underscores (Telegram's own rule), so
    "/etc/hosts is wrong" is text, relayed to the agent with the bridge on, not a command."""
    if not text or not text.startswith("/"):
        return None
    words = text.split()
    name = words[0][1:].split("@", 1)[0].lower()
    if not COMMAND_NAME.fullmatch(name):
        return None
    return name, words[1:]


COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")


def addressee(text: str | None) -> str:
    """The bot a command is addressed to, lowercased: `/canary@Other_Bot` → "other_bot"; "" when none."""
    if not text or not text.startswith("/"):
        return ""
    return text.split(maxsplit=1)[0][1:].partition("@")[2].lower()


SENDER = "sender"        # from a user who is not allowed to command Loom
OTHER_BOT = "other_bot"  # a command addressed to another bot of the chat


def refusal(sender: int | None, allowed: frozenset[int], text: str | None, username: str | None) -> str | None:
    """Why a message in the operator's chat is not Loom's to act on, or None when it is.

    `sender` is the Telegram user id it came from (None: no user, e.g. a channel's post), `allowed`
    who may command Loom, `username` Loom's own bot username (None when not known yet: then a
    command addressed to any bot is not taken to be Loom's).
    """
    if sender is None or sender not in allowed:
        return SENDER
    to = addressee(text)
    if to and (username is None or to != username.lower()):
        return OTHER_BOT
    return None


def pick_agent(args: list[str], names: list[str] | tuple[str, ...]) -> tuple[str | None, list[str]]:
    """The agent a command names and the words after it: `/recycle beta fresh` → ("beta", ["fresh"]).

    The name is the first word when it is one of `names`; with a single agent it may be left
    out (today's `/recycle fresh`). None when it cannot be told: several agents and none named.
    """
    if args and args[0].lower() in names:
        return args[0].lower(), args[1:]
    if len(names) == 1:
        return names[0], args
    return None, args


def names_an_unknown_agent(rest: list[str], arity: int) -> bool:
    """Whether the words left after `pick_agent` hold one word too many in front: the operator
    named an agent that does not exist (`/canary gamma`, `/recycle gamma fresh`)."""
    return len(rest) == arity + 1


def which_agent(command: str, names: list[str] | tuple[str, ...], usage: str = "", *, unknown: bool = False) -> str:
    """The answer to a command that named no agent where it must, or one that does not exist.
    The word the operator typed is not echoed back: the list of names says enough."""
    listed = ", ".join(names)
    if unknown:
        return f"/{command}: no agent by that name (agents: {listed})"
    return f"/{command} needs an agent: /{command} NAME{' ' + usage if usage else ''} (agents: {listed})"
