"""The dispatch witness's rules (sealed: the standard library and timing only, `now` passed in).

Every line Loom types is owed a UserPromptSubmit hook event whose prompt carries it (by digest:
events.said, events.typed_digest). `witness` matches them one to one, in order; a line still
unmatched `timeout` after it was typed is missing. A missing line is a reason to probe at once
(`probe_now`), never to act alone: the canary stays the only proof of deafness.
"""

from __future__ import annotations

from dataclasses import dataclass

from loomtui.timing import Instant, age

# A prompt may be reported before the typed line's ledger event is written (it is written once
# the typing returned, the CLI may already have taken the line): a prompt this much older than
# the event still counts as its dispatch.
EARLY = 30.0
OK = "ok"  # a canary run's result that proves the agent heard (canary.rules.OK)


@dataclass(frozen=True)
class Typed:
    """A line Loom typed: its ledger event, when (the event's time), its digest for the witness."""

    id: int
    at: Instant          # when its timeout counts from (its typing, or a held line's turn's end)
    said: str
    kind: str = "inject"
    typed: float | None = None  # when it was typed (wall), where `at` moved on: a prompt counts from then

    @property
    def typed_wall(self) -> float:
        return self.at.wall if self.typed is None else self.typed


@dataclass(frozen=True)
class Prompt:
    """A UserPromptSubmit the agent's hook reported: when, and the digests it carries."""

    id: int
    at: Instant
    said: frozenset[str]


@dataclass(frozen=True)
class Verdict:
    dispatched: dict[int, int]      # typed line id -> the prompt id that carried it
    missing: list[Typed]            # unmatched past the timeout, and not yet recorded
    next_due: float | None          # seconds until the next unmatched line's timeout (None: none waits)


def witness(typed: list[Typed], prompts: list[Prompt], recorded: frozenset[int] | set[int],
            now: Instant, timeout: float, used: frozenset[tuple[int, str]] | set[tuple[int, str]] = frozenset()
            ) -> Verdict:
    """Each typed line (oldest first) takes the first prompt that carries its digest, not yet taken
    for that digest, and is no older than EARLY before it: one prompt carries each of its lines once
    (the lines a CLI queued behind a turn come as one prompt, joined); `recorded`: ids of lines
    already reported missing; `used`: (prompt id, digest) taken at earlier looks."""
    taken: set[tuple[int, str]] = set(used)
    dispatched: dict[int, int] = {}
    missing: list[Typed] = []
    next_due: float | None = None
    ordered = sorted(prompts, key=lambda p: (p.at.wall, p.id))
    for line in sorted(typed, key=lambda t: t.id):
        match = next((p for p in ordered if (p.id, line.said) not in taken and line.said in p.said
                      and p.at.wall >= line.typed_wall - EARLY), None)
        if match is not None:
            taken.add((match.id, line.said))
            dispatched[line.id] = match.id
            continue
        left = timeout - age(line.at, now)
        if left > 0:
            next_due = left if next_due is None else min(next_due, left)
        elif line.id not in recorded:
            missing.append(line)
    return Verdict(dispatched, missing, next_due)


def probe_now(missing_typed_at: float | None, last_sent_at: float | None, last_result: str | None,
              last_ack_at: float | None) -> bool:
    """Whether a missing dispatch calls for a probe before the schedule: a line reported missing
    was typed after the last probe's ack (an agent that acked since heard it, or the line was the
    probe itself), or after the last probe's send when that probe did not ack. Wall times, all
    from the same machine's ledger and probe records."""
    if missing_typed_at is None:
        return False
    if last_sent_at is None:
        return True
    since = last_ack_at if last_result == OK and last_ack_at is not None else last_sent_at
    return missing_typed_at > since
