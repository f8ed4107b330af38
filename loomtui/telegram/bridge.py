"""The bridge's reply side: the answer to each operator message goes back to the operator's chat.

The bridge talks to the first agent of the config, and to it only: the operator's chat is one
conversation, so with several agents the command loop relays plain text to the first (its
OperatorActions.relay) and this loop follows the first agent's transcript, in that agent's
directory, with that agent's Context. The other agents are reached with commands (/canary NAME...).

The command loop is the bot's one poller: it passes the operator's text (from an allowed user of
the operator's chat only: `TelegramConfig.senders`, `rules.refusal`) to the agent through
`actions.inject` (commands.py), and the pump writes it to the transcript as an `in` record with
origin "telegram". This loop follows the transcript and, for every turn whose input came from
Telegram, puts the turn's final text in the outbox; the sender delivers it. Canary probes and
nudges are turns with other origins and are never echoed.

A background task begun in a Telegram line's turn (Bash's `run_in_background`: the CLI's
`system/task_started`) ends in a turn the CLI takes by itself (`task_notification`, then a turn the
pump marks `own_turn`): its final text goes to the operator too, who asked for the task. A task
begun in a probe's or a nudge's turn is not the operator's, and its turn is not echoed.

Where it got to (offset, which file, the inputs whose turn has not ended, those of them an error
came before the CLI read, the operator's tasks still running or told ended) is kept in the store's
meta table under the agent's key, written in the same transaction as the outbox rows it caused, so a restart resumes
where it was. The outbox's dedupe key is the input's seq and timestamp: a transcript read again
(replaced, truncated, or a cursor lost) never sends an answer twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from loomtui import redact
from loomtui.context import Context
from loomtui.pump import transcript
from loomtui.store import outbox
from loomtui.store.db import Store
from loomtui.telegram import rules
from loomtui.telegram.clock import SYSTEM, Clock

log = logging.getLogger("loomtui.telegram.bridge")

CURSOR_KEY = "bridge_offset"
TELEGRAM = "telegram"  # the `in` origin of a message the bridge passed on
MAX_OPEN = 64  # inputs waiting for their result: more means results stopped coming, keep the newest
MAX_TASKS = 64  # the operator's background tasks still running: the newest kept
MAX_TASK_ID = 100  # a task id longer than this is none (the CLI's are a few characters)
READ_BYTES = 4 << 20
MAX_LINE_BYTES = transcript.MAX_LINE  # a transcript line longer than this is skipped, not waited on forever
NO_TEXT = "(the agent's turn ended without a text answer)"
LOST = ("Loom: the agent's CLI stopped before answering your message; Loom relaunches it. "
        "Send the message again if it still matters.")
# A line the pump kept (its file stays until the CLI shows it read it): the next pump writes it again.
AGAIN = ("Loom: the agent's CLI stopped before answering your message; Loom relaunches it, and the "
         "message goes to it again (no need to send it again).")
# A turn that ended without a result Loom could read (a record the disk refused, a line past all
# reason), known by a later result that names its own line. The message is named by when it went to
# the agent: nothing else ties this notice to it in the chat.
UNRECORDED = ("Loom: the agent's answer to your message passed to it at {at} could not be read from its "
              "transcript. Send the message again if it still matters.")


# -- the pure part: turns matched to their inputs ----------------------------------------


@dataclass(frozen=True)
class Input:
    """A line written to the CLI, as the transcript's `in` record says (never its text)."""

    seq: int | None
    origin: str
    ts: float

    @property
    def key(self) -> str:
        # seq alone would do if every pump numbers on from the last; the record's own timestamp
        # keeps two pumps' seq 1 apart whatever they do.
        return f"telegram_bridge:{self.seq}:{self.ts!r}"


@dataclass(frozen=True)
class Cursor:
    offset: int = 0
    file: str = ""  # the transcript's identity (its first line): another file is read from its start
    open: tuple[Input, ...] = ()
    # Open lines an error result came before the CLI read them (its `unread`): the pump's count of
    # turns is behind the CLI's if it reads them after all, so a later result's `turn` is not trusted.
    unread: tuple[int, ...] = ()
    # Background tasks begun in a Telegram line's turn, still running (their ids, the CLI's), and
    # those the CLI told ended since its last turn of its own: that turn's text is the operator's.
    tasks: tuple[str, ...] = ()
    ended: tuple[str, ...] = ()

    def dumps(self) -> str:
        return json.dumps({"offset": self.offset, "file": self.file,
                           "open": [[i.seq, i.origin, i.ts] for i in self.open], "unread": list(self.unread),
                           "tasks": list(self.tasks), "ended": list(self.ended)})

    @classmethod
    def loads(cls, value: str | None) -> Cursor:
        if not value:
            return cls()
        try:
            data = json.loads(value)
            return cls(int(data["offset"]), str(data["file"]),
                       tuple(Input(seq, str(origin), float(ts)) for seq, origin, ts in data["open"]),
                       tuple(sorted(_seqs(data.get("unread")))),
                       _task_ids(data.get("tasks")), _task_ids(data.get("ended")))
        except (ValueError, KeyError, TypeError):
            log.warning("bridge: the stored cursor is unreadable; reading the transcript from its start")
            return cls()


@dataclass(frozen=True)
class Answer:
    key: str
    text: str
    what: str  # "answer", "error", "lost", "again", "unrecorded", "task" (a background task of the operator's told ended): for the log, which never gets the text


@dataclass
class _Turns:
    open: list[Input] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    unread: set[int] = field(default_factory=set)
    tasks: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)


def advance(cursor: Cursor, records: Iterable[transcript.Record]) -> tuple[Cursor, list[Answer]]:
    """The cursor after `records`, and the answers due to Telegram for the turns they ended.

    A `result` ends the turn of every input written since the last one: the pump writes one per
    turn, and lines that reached the CLI together are one turn to Claude Code, answered once. One
    that names an open line (`turn`: the pump's since 2026-12-07) answers that line only; an open
    line before it ended without a result the bridge could read, and is told so (UNRECORDED). Not
    while a line an error came before is open (the pump's count of turns is behind if the CLI reads
    it after all): then by order, as before. A
    CLI that exits or a pump that starts again ends them unanswered, and an input whose write
    failed never had a turn. Of those, a line the pump kept for the next launch (its `unread`
    before the CLI's exit, less those it sets aside; a new pump's `pending` at its start, or at the
    exit of a CLI it could not start, when the last one was killed; a queued line's failed write)
    is said to go to the agent again; its new `in` is answered as any other.
    """
    turns = _Turns(list(cursor.open), unread=set(cursor.unread), tasks=list(cursor.tasks), ended=list(cursor.ended))
    offset = cursor.offset
    for rec in records:
        offset = rec.end
        if rec.dir == transcript.IN:
            _opened(turns, rec)
        elif rec.dir == transcript.OUT and rec.event.get("type") == "system":
            _task_event(turns, rec.event)
        elif rec.dir == transcript.OUT and rec.event.get("type") == "result" and rec.data.get("own_turn") is True \
                and not any(t.seq in turns.unread for t in turns.open):
            # A turn the CLI took by itself (a background task's end): no line's answer. Unless a line
            # an error came before is open: the CLI may have read it after all, a turn the pump could
            # not tell from one of the CLI's own, and that line's answer is this, by order. The
            # operator's, when a task of theirs was told ended since its last such turn.
            if turns.ended:
                turns.answers.append(_answer(f"telegram_bridge:task:{turns.ended[0]}:{rec.ts!r}", rec.event, "task"))
                turns.ended = []
            continue
        elif rec.dir == transcript.OUT and rec.event.get("type") == "result":
            if rec.data.get("own_turn") is True:
                turns.ended = []  # the CLI's own turn, taken for an unread line's answer: it told them there
            # Lines the pump says the CLI had not read (an error it printed without reading them: a
            # resume that found no session) are not this result's: left open, for the pump's next
            # records to say whether they go again or were lost.
            unread = _seqs(rec.data.get("unread"))
            asked = [t for t in turns.open if t.origin == TELEGRAM and t.seq not in unread]
            turn = _seqs([rec.data.get("turn")])
            named = [t for t in turns.open if t.seq in turn]
            if named and not any(t.seq in turns.unread for t in turns.open):
                # The pump names the line whose turn this is (it writes one line a turn): an open
                # line before it had a turn whose result the bridge never read. Told so; the oldest
                # line waiting was given this answer, and this line none. (A named line with no `in`
                # read: by order, the answer at least reaches the chat.)
                _ended(turns, [t for t in turns.open if t.seq not in unread and t not in named], set(),
                       how="unrecorded")
                asked = [t for t in asked if t in named]
            if asked:
                turns.answers.append(answer_for(asked[0], rec.event))
            turns.open = [t for t in turns.open if t.seq is not None and t.seq in unread]
            turns.unread = {t.seq for t in turns.open if t.seq is not None}
        elif rec.dir == transcript.PUMP and rec.data.get("what") == "unread":
            # Those it names as set aside (their last launch) are not written again: lost below.
            again = _seqs(rec.data.get("seqs")) - _seqs(rec.data.get("set_aside"))
            _ended(turns, [t for t in turns.open if t.seq in again], again)
        elif rec.dir == transcript.PUMP and rec.data.get("what") in ("cli_exit", "started"):
            # `pending`: what a new pump took over from a killed one (on a CLI that failed to start, too).
            _ended(turns, list(turns.open), _seqs(rec.data.get("pending")))
            # Its background tasks end with the CLI: no turn of its own will tell of them.
            turns.tasks, turns.ended = [], []
        elif rec.dir == transcript.PUMP and rec.data.get("what") == "write_failed":
            # Its `in` was recorded before the write: no turn follows it, and none may take its place.
            # A queued line's file stays (`kept`): the next launch writes it again.
            failed = _seqs([rec.data.get("seq")])
            _ended(turns, [t for t in turns.open if t.seq in failed], failed if rec.data.get("kept") is True else set())
    still = {t.seq for t in turns.open}
    return replace(cursor, offset=offset, open=tuple(turns.open),
                   unread=tuple(sorted(s for s in turns.unread if s in still)),
                   tasks=tuple(turns.tasks[-MAX_TASKS:]), ended=tuple(turns.ended[-MAX_TASKS:])), turns.answers


def _task_event(turns: _Turns, event: dict[str, Any]) -> None:
    """A background task's start in a turn of an operator's line makes it theirs; its end, told to
    the CLI, makes the text of the CLI's next turn of its own theirs (told inside another line's
    turn, the task's end still gets that turn after it: tests/e2e/test_claude_code_cli.py)."""
    [task] = _task_ids([event.get("task_id")]) or ("",)
    if not task:
        return
    subtype = event.get("subtype")
    # The running turn is the last line's written (the pump writes one a turn).
    if subtype == "task_started" and turns.open and turns.open[-1].origin == TELEGRAM and task not in turns.tasks:
        turns.tasks.append(task)
        del turns.tasks[:-MAX_TASKS]
    elif subtype == "task_notification" and task in turns.tasks:
        turns.tasks.remove(task)
        turns.ended.append(task)


def _task_ids(value: object) -> tuple[str, ...]:
    """A record's task ids (untrusted: anything but a short string is none)."""
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, str) and 0 < len(v) <= MAX_TASK_ID)


def _ended(turns: _Turns, ending: list[Input], again: set[int], how: str = "lost") -> None:
    """The turns of `ending` (open inputs) ended unanswered: those whose seq is in `again` go to
    the agent again, the rest are lost (`how`: lost, or unrecorded: answered, the answer unread);
    the operator is told which, of those it sent."""
    for t in ending:
        if t.origin == TELEGRAM:
            turns.answers.append(Answer(t.key, AGAIN, "again") if t.seq in again else
                                 Answer(t.key, LOST, "lost") if how == "lost" else
                                 Answer(t.key, UNRECORDED.format(at=_clock(t.ts)), "unrecorded"))
    turns.unread -= {t.seq for t in ending if t.seq is not None}
    turns.open = [t for t in turns.open if t not in ending]


def _seqs(value: object) -> set[int]:
    """A record's list of seqs (untrusted: anything else is none)."""
    if not isinstance(value, list):
        return set()
    return {v for v in value if isinstance(v, int) and not isinstance(v, bool)}


def _clock(ts: float) -> str:
    """A line's time as the operator's machine tells it: the hour and minute."""
    return time.strftime("%H:%M", time.localtime(ts))


def _opened(turns: _Turns, rec: transcript.Record) -> None:
    seq = rec.data.get("seq")
    if isinstance(seq, int):
        turns.unread.discard(seq)  # a kept line written again (its seq, a new `in`): read or not anew
    origin = rec.data.get("origin")
    turns.open.append(Input(seq if isinstance(seq, int) else None, origin if isinstance(origin, str) else "", rec.ts))
    del turns.open[:-MAX_OPEN]


def answer_for(turn: Input, event: dict[str, Any]) -> Answer:
    """What the operator reads for one ended turn: its final text, or a short note on an error."""
    return _answer(turn.key, event, "answer")


def _answer(key: str, event: dict[str, Any], what: str) -> Answer:
    result = event.get("result")
    text = result.strip() if isinstance(result, str) else ""
    if event.get("is_error"):
        subtype = event.get("subtype")
        why = " ".join(text.split())[:300]
        note = f"Loom: the agent's turn ended in an error ({subtype if isinstance(subtype, str) else 'unknown'})"
        return Answer(key, note + (f": {why}" if why else ""), "error")
    return Answer(key, text or NO_TEXT, what)


# -- the shell: the file, the store, the loop --------------------------------------------


def identity(path: Path) -> tuple[str, int] | None:
    """(an id for this file, its size), None when there is no transcript yet.

    The id is the first line's digest: the pump's first record carries its start time, so a
    replaced file or one truncated and written again differs there, whatever its length.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            first = fh.readline(64 << 10)
    except FileNotFoundError:
        return None
    return (hashlib.sha256(first).hexdigest()[:16] if first.endswith(b"\n") else ""), size


class Bridge:
    def __init__(self, store: Store, agent_dir: Path, chat_id: int) -> None:
        """`store` opened as the agent (its cursor is that agent's), `agent_dir` where its pump writes."""
        self.store, self.path, self.chat_id = store, transcript.path_in(agent_dir), chat_id
        self.cursor_key = store.agent_key(CURSOR_KEY)

    def cursor(self) -> Cursor:
        return Cursor.loads(self.store.get_meta(self.cursor_key))

    def step(self) -> int:
        """Read what the transcript gained since the last step; the number of answers put in the outbox."""
        found = identity(self.path)
        if found is None:
            return 0
        file, size = found
        cursor = self.cursor()
        if cursor.file != file or cursor.offset > size:
            if cursor.file:
                log.info("bridge: the transcript was replaced or truncated; reading the new one from its start")
            cursor = Cursor(file=file)
            self._save(cursor, [])
        queued = 0
        while True:
            records = self._read(cursor.offset)
            if not records:
                return queued
            moved, answers = advance(cursor, records)
            queued += self._save(moved, answers)
            cursor = moved

    def _read(self, offset: int) -> list[transcript.Record]:
        # A line longer than a read is read whole; one past all reason is stepped over (transcript.read).
        records = list(transcript.read(self.path, offset, READ_BYTES, MAX_LINE_BYTES))
        for record in records:
            if record.dir == transcript.SKIPPED:
                log.warning("bridge: skipped a transcript line of %d bytes at offset %d",
                            record.end - record.offset, record.offset)
        return records

    def _save(self, cursor: Cursor, answers: list[Answer]) -> int:
        queued = 0
        with self.store.write() as db:
            for answer in answers:
                text, _ = rules.truncate(redact.scrub(answer.text))
                fresh = not outbox.has_key_in(db, answer.key)
                outbox.enqueue(db, text, dedupe_key=answer.key, chat_id=self.chat_id)
                queued += int(fresh)
                # Lengths only: the agent's words and the operator's stay out of the log.
                log.info("bridge: %s for input %s (%d characters)%s", answer.what, answer.key, len(text),
                         "" if fresh else ", already in the outbox")
            self.store.set_meta(self.cursor_key, cursor.dumps(), db=db)
        return queued


def first_agent(ctx: Context) -> Context:
    """The Context of the config's first agent, the one the bridge talks to (`ctx` itself when it is)."""
    first = ctx.config.agent_names[0]
    return ctx if ctx.agent == first else ctx.for_agent(first)


async def run_bridge(ctx: Context, stop: asyncio.Event, *, clock: Clock = SYSTEM,
                     step: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext) -> None:
    """Follow the first agent's transcript until `stop` is set (with the bridge off, only wait for `stop`).
    Each look runs inside `step()`: the daemon's heartbeat says how long it has run."""
    cfg = ctx.config.telegram
    if not cfg.bridge:
        await stop.wait()
        return
    first = first_agent(ctx)
    try:
        bridge = Bridge(first.store, first.agent_dir, cfg.chat_id)
        while not stop.is_set():
            with step():
                await asyncio.to_thread(bridge.step)
            if await clock.sleep(cfg.poll_interval, stop):
                break
    finally:
        if first is not ctx:
            first.close()
