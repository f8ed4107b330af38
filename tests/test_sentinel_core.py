"""The sentinel's pure rules: lines from bytes, where to read, signatures, schedules, queue decisions."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import replace
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from loomtui import logscan, schedule
from loomtui.config import SentinelConfig
from loomtui.logscan import MAX_LINE, Carry, FileFacts, Position
from loomtui.queue_core import (
    CLAIMED,
    EXIT,
    LINE,
    MISSED,
    OPEN,
    WITNESSED,
    Escalate,
    Failure,
    Item,
    Nudge,
    Run,
    absorb,
    decide,
    nudge_text,
    review,
)
from loomtui.signature import normalize

# -- lines from bytes --------------------------------------------------------------------


def scan_chunks(data: bytes, cuts: list[int], carry: Carry = Carry()) -> tuple[list[tuple[int, bytes, bool]], Carry]:
    points = sorted({c for c in cuts if 0 < c < len(data)})
    out, start = [], 0
    for end in [*points, len(data)]:
        lines, carry = logscan.split(carry, data[start:end], start)
        out += [(l.offset, l.raw, l.cut) for l in lines]
        start = end
    return out, carry


log_bytes = st.lists(
    st.one_of(st.binary(max_size=40), st.just(b"\n"), st.just(b"\r\n"), st.just(b"\xff\xfe"),
              st.binary(min_size=MAX_LINE - 3, max_size=MAX_LINE + 5).filter(lambda b: b"\n" not in b)),
    max_size=30,
).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(log_bytes, st.lists(st.integers(min_value=0, max_value=20000), max_size=12))
def test_any_chunking_yields_the_same_lines_as_reading_whole(data, cuts):
    whole, whole_carry = scan_chunks(data, [])
    split, split_carry = scan_chunks(data, cuts)
    assert split == whole and split_carry == whole_carry
    # Each line is where it says, cut to MAX_LINE, and the carry holds exactly the unterminated rest.
    pieces = data.split(b"\n")
    assert len(whole) == len(pieces) - 1
    for (offset, raw, cut), piece in zip(whole, pieces):
        assert data[offset:offset + len(piece)] == piece
        assert raw == piece[:MAX_LINE] and cut == (len(piece) > MAX_LINE)
    assert whole_carry.length == len(pieces[-1]) and whole_carry.data == pieces[-1][:MAX_LINE]


def test_a_partial_line_waits_for_its_end_and_flushes_when_the_file_ends():
    lines, carry = logscan.split(Carry(), b"one\ntw", 0)
    assert [l.raw for l in lines] == [b"one"] and carry == Carry(b"tw", 2)
    lines, carry = logscan.split(carry, b"o\n", 6)
    assert [(l.offset, l.raw) for l in lines] == [(4, b"two")] and carry == Carry()
    assert logscan.flush(Carry(b"tail", 4), 20) == logscan.Line(16, b"tail", False)
    assert logscan.flush(Carry(), 20) is None


def test_a_first_look_mid_file_drops_the_partial_first_line():
    lines, carry = logscan.split(logscan.first_carry(100), b"ial line\nwhole\n", 100)
    assert [l.raw for l in lines] == [b"whole"]
    lines, _ = logscan.split(logscan.first_carry(0), b"whole\n", 0)
    assert [l.raw for l in lines] == [b"whole"]


def test_invalid_utf8_is_replaced_and_long_lines_are_cut():
    assert logscan.line_text(b"ERROR \xff\xfe here\r") == "ERROR \ufffd\ufffd here"
    lines, _ = logscan.split(Carry(), b"x" * 10000 + b"\n", 0)
    assert len(lines[0].raw) == MAX_LINE and lines[0].cut


# -- where to read from ------------------------------------------------------------------


def facts(size, inode=7, head=b"2025 first line\n"):
    return FileFacts(1, inode, size, head[:size])


def test_plan_continue_truncate_rotate_replace_first_new_absent():
    pos = Position("/l", 1, 7, 500, Carry(), b"2025 first line\n")
    assert logscan.plan(pos, "/l", facts(900)) == logscan.Plan("continue", 500)
    assert logscan.plan(pos, "/l", facts(100)).kind == "truncated"
    assert logscan.plan(pos, "/l", facts(900, inode=8)) == logscan.Plan("rotated", 0, True)
    assert logscan.plan(pos, "/l", facts(900, head=b"2026 other\n")).kind == "replaced"
    assert logscan.plan(pos, "/l", None).kind == "absent"
    assert logscan.plan(None, "/l", facts(10)) == logscan.Plan("first", 0)
    big = logscan.plan(None, "/l", facts(10 * logscan.FIRST_LOOK))
    assert big == logscan.Plan("first", 9 * logscan.FIRST_LOOK)
    assert logscan.plan(replace(pos, path="/other"), "/l", facts(900)).kind == "first"
    assert logscan.plan(Position("/l"), "/l", facts(900)) == logscan.Plan("new", 0)
    # Empty at the last look and written since: lines may already sit in a copy beside the log.
    empty = Position("/l", 1, 7, 0, Carry(), b"", mtime_ns=5)
    assert logscan.plan(empty, "/l", replace(facts(0), mtime_ns=9)) == logscan.Plan("continue", 0, look_for_copy=True)
    assert not logscan.plan(empty, "/l", replace(facts(0), mtime_ns=5)).look_for_copy


def test_is_copy_needs_the_same_beginning_more_bytes_and_a_newer_write():
    pos = Position("/l", 1, 7, 16, Carry(), b"2025 first line\n", mtime_ns=100)
    copy = FileFacts(1, 9, 40, b"2025 first line\nmore", 150)
    now = FileFacts(1, 7, 0, b"", 160)
    assert logscan.is_copy(pos, copy, now)
    assert not logscan.is_copy(pos, replace(copy, head=b"2024 older\n"), now)
    assert not logscan.is_copy(pos, replace(copy, size=10), now)
    assert not logscan.is_copy(pos, replace(copy, mtime_ns=50), now)
    assert not logscan.is_copy(pos, replace(copy, inode=7), now)
    empty = Position("/l", 1, 7, 0, Carry(), b"", mtime_ns=100, prev_inode=9)
    fresh = FileFacts(1, 11, 40, b"2025 old lines\n", 150)
    assert logscan.is_copy(empty, fresh, FileFacts(1, 7, 12, b"2025 new one\n", 160), quiet=True)
    assert not logscan.is_copy(empty, replace(fresh, inode=9), now, quiet=True)  # finished at the last rotation
    assert not logscan.is_copy(empty, fresh, FileFacts(1, 7, 40, b"2025 old lines\n", 160), quiet=True)
    assert not logscan.is_copy(empty, fresh, now)  # with nothing read, only a quiet look may guess


def test_matcher_is_patterns_minus_anti_patterns_with_job_lists_overriding():
    m = logscan.matcher_for(None, None, [r"\bERROR\b", "Traceback"], ["expected"])
    assert m.failure("ERROR: disk full") and m.failure("Traceback (most recent call last):")
    assert not m.failure("ERROR expected during retry") and not m.failure("all good")
    own = logscan.matcher_for(["^FAIL"], [], [r"\bERROR\b"], ["expected"])
    assert own.failure("FAIL expected") and not own.failure("ERROR x")
    assert not logscan.Matcher([], []).failure("ERROR")
    assert not m.is_failure_line(b"2025-01-01T00:00:00.000+00:00 [loom run-job] start: ./ERROR.sh")
    assert m.is_failure_line(b"2025-01-01T00:00:00.000+00:00 ERROR [loom run-job] x")


# -- signatures --------------------------------------------------------------------------

words = st.text(alphabet="ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=8)
delims = st.sampled_from([" ", " = ", ", ", " (", ") ", " [", "] ", " /", "/ "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(words, delims), min_size=1, max_size=8),
       st.lists(st.integers(min_value=0, max_value=10**15), min_size=8, max_size=8),
       st.lists(st.integers(min_value=0, max_value=10**15), min_size=8, max_size=8))
def test_signature_is_stable_when_numbers_change(template, first, second):
    def render(numbers):
        return "ERROR " + "".join(f"{w}{d}{n}{d}" for (w, d), n in zip(template, numbers))

    assert normalize(render(first)) == normalize(render(second))


# A hex id has a digit and a letter; letters alone could be a word ("facade"), digits alone a number.
hex_ids = st.text("0123456789abcdef", min_size=8, max_size=40).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s))


@settings(max_examples=200, deadline=None)
@given(st.datetimes(min_value=dt.datetime(1990, 1, 1), max_value=dt.datetime(2090, 1, 1)),
       st.datetimes(min_value=dt.datetime(1990, 1, 1), max_value=dt.datetime(2090, 1, 1)),
       st.uuids(), st.uuids(), hex_ids, hex_ids)
def test_signature_masks_timestamps_uuids_and_hex(t1, t2, u1, u2, h1, h2):
    def line(t: dt.datetime, u: uuid.UUID, h: str) -> str:
        return (f"{t.isoformat(timespec='milliseconds')}+02:00 ERROR job {u} failed at 0x{h} "
                f"sha {h} at {t.strftime('%H:%M:%S')}")

    assert normalize(line(t1, u1, h1)) == normalize(line(t2, u2, h2))


@given(st.text(max_size=400))
def test_signature_is_idempotent_short_and_one_line(text):
    sig = normalize(text)
    assert normalize(sig) == sig and len(sig) <= 200
    assert not any(c in sig for c in "\n\r\x1b\x00")


def test_signature_examples():
    assert normalize("2025-06-01T07:00:01.123+02:00 ERROR db timeout after 30s (conn 0x7f3a)") == \
        "<ts> ERROR db timeout after <n>s (conn <hex>)"
    assert normalize("ERROR disk full") != normalize("ERROR db timeout")


# -- schedules ---------------------------------------------------------------------------


UTC = dt.timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def test_every_schedule_missed_after_period_plus_grace_and_reported_once():
    assert schedule.missed("every 10m", 1000.0, 1000 + 600 + 300, grace=300, tz=UTC) is None
    first, last = schedule.missed("every 10m", 1000.0, 1000 + 600 + 301, grace=300, tz=UTC)
    assert first == last == 1600.0
    assert schedule.missed("every 10m", last, 1000 + 600 + 301, grace=300, tz=UTC) is None
    first, last = schedule.missed("every 10m", 1000.0, 1000 + 3600, grace=300, tz=UTC)
    assert (first, last) == (1600.0, 1000.0 + 3000)
    assert schedule.missed("", 0.0, 1e9, grace=0, tz=UTC) is None


def test_cron_schedule_fires_in_the_given_zone_and_counts_a_missed_day_once():
    ran = dt.datetime(2025, 6, 1, 7, 0, 5, tzinfo=BERLIN).timestamp()
    next_day = dt.datetime(2025, 6, 2, 7, 0, tzinfo=BERLIN).timestamp()
    assert schedule.next_due("0 7 * * *", ran, tz=BERLIN) == next_day
    assert schedule.missed("0 7 * * *", ran, next_day + 599, grace=600, tz=BERLIN) is None
    assert schedule.missed("0 7 * * *", ran, next_day + 601, grace=600, tz=BERLIN) == (next_day, next_day)
    three_days = schedule.missed("0 7 * * *", ran, next_day + 2 * 86400 + 601, grace=600, tz=BERLIN)
    assert three_days == (next_day, next_day + 2 * 86400)
    # The zone is an argument, never the process's: 07:00 UTC comes two hours after 07:00 in Berlin.
    assert schedule.next_due("0 7 * * *", ran, tz=UTC) == dt.datetime(2025, 6, 1, 7, 0, tzinfo=UTC).timestamp()


def test_cron_schedule_keeps_local_wall_time_across_a_daylight_saving_change():
    before = dt.datetime(2025, 3, 29, 7, 0, 5, tzinfo=BERLIN).timestamp()  # the clocks go forward that night
    assert schedule.next_due("0 7 * * *", before, tz=BERLIN) == dt.datetime(2025, 3, 30, 7, 0, tzinfo=BERLIN).timestamp()


# -- the queue's rules, with an injected clock -------------------------------------------

CFG = SentinelConfig(renudge="20m", backstop="30m")


def item(**kw) -> Item:
    base = dict(id=7, job="backup", kind=LINE, signature="<ts> ERROR x", sample="ERROR x", log="/var/log/b.log",
                first_seen=0.0, last_seen=0.0)
    return Item(**{**base, **kw})


def drive(it: Item, until: float, step: float = 60.0, *, claim_at: float | None = None,
          witness_at: float | None = None, relaunching=lambda t: False) -> tuple[Item, list[tuple[float, object]]]:
    """Run the decision every `step` seconds, applying its actions as the shell would."""
    done = []
    t = 0.0
    while t <= until:
        if claim_at is not None and t >= claim_at and it.state == OPEN:
            it = replace(it, state=CLAIMED, claimed_at=t, claimed_by="cli")
        if witness_at is not None and t >= witness_at and it.state == CLAIMED:
            it = replace(it, state=WITNESSED, witnessed_at=t)
        for action in decide(it, CFG, t, relaunching=relaunching(t)):
            done.append((t, action))
            if isinstance(action, Nudge):
                it = replace(it, nudges=it.nudges + 1, last_nudge_at=t)
            else:
                it = replace(it, escalated_at=t)
        t += step
    return it, done


def test_nudge_renudge_and_backstop_exactly_once():
    it, done = drive(item(), until=4 * 3600)
    nudges = [t for t, a in done if isinstance(a, Nudge)]
    escalations = [(t, a) for t, a in done if isinstance(a, Escalate)]
    assert nudges == [i * 1200.0 for i in range(13)]
    assert [t for t, _ in escalations] == [1800.0]
    assert escalations[0][1].dedupe_key == "queue-7-backstop"
    assert [a.renudge for t, a in done if isinstance(a, Nudge)][:2] == [False, True]


def test_resolution_stops_nudges_and_the_backstop():
    # Claimed before the backstop, witnessed by the next clean run: nothing more goes out.
    _, done = drive(item(), until=4 * 3600, claim_at=1500, witness_at=2000)
    assert [t for t, a in done] == [0.0, 1200.0]
    # Claimed but never witnessed: no more nudges, and one message to the operator after the backstop.
    _, done = drive(item(), until=4 * 3600, claim_at=1500)
    assert [(t, type(a).__name__) for t, a in done] == [(0.0, "Nudge"), (1200.0, "Nudge"), (3300.0, "Escalate")]
    _, done = drive(item(state=WITNESSED), until=4 * 3600)
    assert done == []


def test_no_nudge_while_a_relaunch_is_under_way_but_the_backstop_still_goes():
    _, done = drive(item(), until=3600, relaunching=lambda t: t < 2400)
    assert [(t, type(a).__name__) for t, a in done] == [(1800.0, "Escalate"), (2400.0, "Nudge"), (3600.0, "Nudge")]


def test_a_clock_jumping_back_does_not_silence_nudges():
    it = item(nudges=1, last_nudge_at=10_000.0)
    assert any(isinstance(a, Nudge) for a in decide(it, CFG, 5_000.0))


def test_nudge_text_names_item_job_log_and_the_resolve_command():
    text = nudge_text(item(job='we"ird $(job)'))
    assert "Queue item 7" in text and '"we\\"ird $(job)"' in text and "/var/log/b.log" in text
    assert 'loom resolve 7 --note "' in text
    assert "Read the log and the script" in text and "current or stale" in text and "fix it if safe" in text
    assert "\n" not in text


def test_a_failure_after_the_claim_reopens_and_before_it_only_counts():
    claimed = item(state=CLAIMED, claimed_at=100.0, claim_dev=1, claim_inode=5, claim_offset=1000, nudges=2,
                   last_nudge_at=90.0, note="fixed the path")
    before = Failure("backup", LINE, "<ts> ERROR x", "ERROR x", 3, position=(1, 5, 999))
    it, events = absorb(claimed, before, 150.0)
    assert (it.state, it.count, events) == (CLAIMED, 4, [])
    after = Failure("backup", LINE, "<ts> ERROR x", "ERROR x", 1, position=(1, 5, 1000))
    it, events = absorb(claimed, after, 150.0)
    assert it.state == OPEN and it.reopens == 1 and it.reopened_at == 150.0
    assert "claim did not hold" in it.note and "fixed the path" in it.note
    assert [k for k, _ in events] == ["queue_reopen"]
    # Reopened: nudged again at once, and the backstop (from first seen) is already due.
    actions = decide(it, CFG, 2000.0)
    assert [type(a) for a in actions] == [Nudge, Escalate] and "Reopened" in actions[0].text
    rotated = Failure("backup", LINE, "<ts> ERROR x", "ERROR x", 1, position=(1, 6, 0))
    assert absorb(claimed, rotated, 150.0)[0].state == OPEN
    missed = Failure("backup", MISSED, "missed schedule", "no run", at=99.0)
    assert absorb(replace(claimed, kind=MISSED), missed, 150.0)[0].state == CLAIMED


def test_only_a_run_started_after_the_claim_witnesses_or_reopens():
    claimed = item(state=CLAIMED, claimed_at=100.0, kind=EXIT)
    assert review(claimed, Run(1, "backup", 99.0, 0, 0), 200.0) == (claimed, [])
    assert review(claimed, Run(2, "other", 150.0, 0, 0), 200.0) == (claimed, [])
    it, events = review(claimed, Run(3, "backup", 150.0, 0, 0), 200.0)
    assert (it.state, it.witness_run, [k for k, _ in events]) == (WITNESSED, 3, ["queue_witness"])
    for bad in (Run(4, "backup", 150.0, 2, 0), Run(5, "backup", 150.0, 0, 1), Run(6, "backup", 150.0, 127, 0, "x")):
        it, events = review(claimed, bad, 200.0)
        assert it.state == OPEN and [k for k, _ in events] == ["queue_reopen"]


def test_a_claim_never_witnessed_reaches_the_operator_once():
    from dataclasses import replace as _replace

    from loomtui.queue_core import CLAIMED, Escalate, decide

    claimed = _replace(item(), state=CLAIMED, claimed_at=1000.0, note="fixed it")
    assert decide(claimed, CFG, 1000.0 + CFG.backstop - 1) == []
    [action] = decide(claimed, CFG, 1000.0 + CFG.backstop)
    assert isinstance(action, Escalate) and "no clean run has witnessed it" in action.text
    # A daily job gets its period (plus grace) to produce the witness run first.
    assert decide(claimed, CFG, 1000.0 + CFG.backstop, witness_window=86400 + 600) == []
    assert decide(_replace(claimed, escalated_at=5.0), CFG, 10**9) == []  # one message per item, ever


def test_a_cron_jobs_claim_waits_for_its_next_run_before_the_operator_hears(tmp_path):
    from dataclasses import replace as _replace

    from loomtui.context import Context
    from loomtui.queue_core import CLAIMED, decide
    from loomtui.sentinel import witness_window

    config = tmp_path / "c.toml"
    config.write_text(f'state_dir = "{tmp_path / "s"}"\n[[jobs]]\nname = "backup"\nlog = "{tmp_path}/b.log"\n'
                      'schedule = "0 7 * * *"\n')
    ctx = Context.load(str(config), None, environ={})
    claimed = _replace(item(), state=CLAIMED, claimed_at=1_795_000_000.0)
    window = witness_window(ctx, claimed)
    assert 600 < window <= 86400 + 600  # up to a day to the next 07:00, plus the grace
    wait = max(window, CFG.backstop)
    assert decide(claimed, CFG, claimed.claimed_at + wait - 1, witness_window=window) == []
    assert decide(claimed, CFG, claimed.claimed_at + wait, witness_window=window)
