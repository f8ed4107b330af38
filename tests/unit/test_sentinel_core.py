"""The sentinel's pure rules: lines from bytes, where to read, signatures, schedules, queue decisions."""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import replace
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from loomtui.config import SentinelConfig
from loomtui.sentinel import cron, logscan, schedule
from loomtui.sentinel.logscan import MAX_LINE, Carry, FileFacts, Position
from loomtui.sentinel.queue_rules import (
    CLAIMED,
    EXIT,
    LINE,
    MISSED,
    OPEN,
    SCAN,
    WITNESSED,
    Escalate,
    Failure,
    Item,
    JobRun,
    Nudge,
    absorb,
    after_claim,
    decide,
    escalation_text,
    nudge_due,
    nudge_text,
    reopen,
    review,
    unwitnessed_text,
)
from loomtui.sentinel.signature import normalize
from loomtui.timing import Instant

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


def test_the_previous_file_is_its_inode_still_beginning_as_it_did():
    pos = Position("/l", 1, 7, 0, Carry(), b"", prev_inode=9, prev_head=b"2025 old lines\n")
    old = FileFacts(1, 9, 40, b"2025 old lines\nand more", 150)
    assert logscan.is_previous(pos, old)
    # The same inode number with other first bytes is another file (a freed number reused, or a
    # `cp` into the file of the last copy): never skipped as the one already read.
    assert not logscan.is_previous(pos, replace(old, head=b"2025 new copy\n"))
    assert not logscan.is_previous(pos, replace(old, head=b"2025 old"))  # shorter than what was read
    assert not logscan.is_previous(pos, replace(old, inode=10))
    # A previous file that was empty held nothing that was read.
    assert not logscan.is_previous(replace(pos, prev_head=b""), old)
    # Remembered before first bytes were (migration 0006): the inode alone, as before.
    assert logscan.is_previous(replace(pos, prev_head=None), replace(old, head=b"anything"))


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
    assert schedule.missed("every 10m", 1000.0, 1000 + 600 + 300, grace=300, cron=cron.in_zone(UTC)) is None
    first, last = schedule.missed("every 10m", 1000.0, 1000 + 600 + 301, grace=300, cron=cron.in_zone(UTC))
    assert first == last == 1600.0
    assert schedule.missed("every 10m", last, 1000 + 600 + 301, grace=300, cron=cron.in_zone(UTC)) is None
    first, last = schedule.missed("every 10m", 1000.0, 1000 + 3600, grace=300, cron=cron.in_zone(UTC))
    assert (first, last) == (1600.0, 1000.0 + 3000)
    assert schedule.missed("", 0.0, 1e9, grace=0, cron=cron.in_zone(UTC)) is None


def test_a_cron_schedule_past_its_last_date_misses_nothing_more():
    # A year field whose years have passed: croniter finds no next date and raised, which ended every
    # sentinel pass. Its last date may still have been missed; after it, nothing is due.
    utc = cron.in_zone(UTC)
    dec_1_2023 = dt.datetime(2023, 12, 1, tzinfo=UTC).timestamp()
    assert schedule.missed("0 0 1 12 * 0 2023", dec_1_2023 + 1, 1.9e9, grace=300, cron=utc) is None
    assert schedule.missed("0 0 1 12 * 0 2023", dec_1_2023 - 86400, 1.9e9, grace=300, cron=utc) == (dec_1_2023, dec_1_2023)


def test_a_runs_allowance_is_a_period_of_its_schedule_and_the_grace():
    utc = cron.in_zone(UTC)
    day = 86400.0
    seven = 1_704_783_600.0  # 2024-01-09 07:00 UTC
    assert schedule.run_allowance("every 10m", 1000.0, 300, cron=utc) == 900
    # On time at its daily slot: until the next day's, and the grace.
    assert schedule.run_allowance("0 7 * * *", seven, 600, cron=utc) == day + 600
    # Started by hand half an hour before the slot: a day too, not the half hour to the slot.
    assert schedule.run_allowance("0 7 * * *", seven - 1800, 600, cron=utc) == day + 600
    # Weekdays: Friday's run may last to Monday's slot; Thursday's to Friday's, not to Monday's.
    friday = seven + 3 * day  # 2024-01-12, a Friday
    assert schedule.run_allowance("0 7 * * 1-5", friday, 600, cron=utc) == 3 * day + 600
    assert schedule.run_allowance("0 7 * * 1-5", friday - day, 600, cron=utc) == day + 600
    # Every 15 minutes in the day: a run at 10:00 has its 15 minutes; the day's last, the night.
    assert schedule.run_allowance("*/15 9-17 * * *", seven + 3 * 3600, 60, cron=utc) == 900 + 60
    assert schedule.run_allowance("*/15 9-17 * * *", seven + 10 * 3600 + 2700, 60, cron=utc) == 15 * 3600 + 15 * 60 + 60
    assert schedule.run_allowance("", 1000.0, 300, cron=utc) is None
    # A year field: the last slot bounds it; past it nothing does.
    assert schedule.run_allowance("0 7 9 1 * 0 2024", seven - 1800, 600, cron=utc) == 1800 + 600
    assert schedule.run_allowance("0 7 9 1 * 0 2024", seven + 1, 600, cron=utc) is None


def test_cron_schedule_fires_in_the_given_zone_and_counts_a_missed_day_once():
    ran = dt.datetime(2025, 6, 1, 7, 0, 5, tzinfo=BERLIN).timestamp()
    next_day = dt.datetime(2025, 6, 2, 7, 0, tzinfo=BERLIN).timestamp()
    assert schedule.next_due("0 7 * * *", ran, cron=cron.in_zone(BERLIN)) == next_day
    assert schedule.missed("0 7 * * *", ran, next_day + 599, grace=600, cron=cron.in_zone(BERLIN)) is None
    assert schedule.missed("0 7 * * *", ran, next_day + 601, grace=600, cron=cron.in_zone(BERLIN)) == (next_day, next_day)
    three_days = schedule.missed("0 7 * * *", ran, next_day + 2 * 86400 + 601, grace=600, cron=cron.in_zone(BERLIN))
    assert three_days == (next_day, next_day + 2 * 86400)
    # The zone is an argument, never the process's: 07:00 UTC comes two hours after 07:00 in Berlin.
    assert schedule.next_due("0 7 * * *", ran, cron=cron.in_zone(UTC)) == dt.datetime(2025, 6, 1, 7, 0, tzinfo=UTC).timestamp()


def test_cron_schedule_keeps_local_wall_time_across_a_daylight_saving_change():
    before = dt.datetime(2025, 3, 29, 7, 0, 5, tzinfo=BERLIN).timestamp()  # the clocks go forward that night
    assert schedule.next_due("0 7 * * *", before, cron=cron.in_zone(BERLIN)) == dt.datetime(2025, 3, 30, 7, 0, tzinfo=BERLIN).timestamp()


def test_a_fixed_time_in_the_hour_the_clocks_go_back_is_one_slot_as_cron_runs_it():
    # 2025-10-26 in Berlin: 02:00-03:00 comes twice (CEST, then CET). cron runs a job fixed at 02:30
    # once, at the first; croniter gave both, and the job that ran was reported missed an hour later.
    berlin = cron.in_zone(BERLIN)
    first = dt.datetime(2025, 10, 26, 2, 30, tzinfo=BERLIN, fold=0).timestamp()
    again = dt.datetime(2025, 10, 26, 2, 30, tzinfo=BERLIN, fold=1).timestamp()
    assert again - first == 3600
    ran = first + 5
    next_day = dt.datetime(2025, 10, 27, 2, 30, tzinfo=BERLIN).timestamp()
    assert schedule.next_due("30 2 * * *", ran, cron=berlin) == next_day
    assert schedule.missed("30 2 * * *", ran, again + 601, grace=600, cron=berlin) is None
    assert berlin.prev_slot("30 2 * * *", again + 60) == first
    # A wildcard hour runs in both, as cron runs it.
    assert schedule.next_due("30 * * * *", ran, cron=berlin) == again


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
    # A run's failure against the claim on the monotonic clock when both were read on one boot: the
    # wall clock stepped back a day between the run's start and the claim, or forward.
    on_mono = replace(claimed, kind=EXIT, claimed_mono=5000.0, claimed_boot="b")
    earlier = Failure("backup", EXIT, "exit code 1", "run 3 exited 1", at=100.0 + 86400, at_mono=4990.0, at_boot="b")
    assert absorb(on_mono, earlier, 150.0)[0].state == CLAIMED
    later = Failure("backup", EXIT, "exit code 1", "run 4 exited 1", at=100.0 - 86400, at_mono=5010.0, at_boot="b")
    assert absorb(on_mono, later, 150.0)[0].state == OPEN
    # Another boot: by wall time.
    assert absorb(on_mono, replace(later, at_boot="c"), 150.0)[0].state == CLAIMED


def test_only_a_run_started_after_the_claim_witnesses_or_reopens():
    claimed = item(state=CLAIMED, claimed_at=100.0, kind=EXIT)
    assert review(claimed, JobRun(1, "backup", 99.0, 0, 0), 200.0) == (claimed, [])
    assert review(claimed, JobRun(2, "other", 150.0, 0, 0), 200.0) == (claimed, [])
    it, events = review(claimed, JobRun(3, "backup", 150.0, 0, 0), 200.0)
    assert (it.state, it.witness_run, [k for k, _ in events]) == (WITNESSED, 3, ["queue_witness"])
    for bad in (JobRun(4, "backup", 150.0, 2, 0), JobRun(5, "backup", 150.0, 0, 1), JobRun(6, "backup", 150.0, 127, 0, "x")):
        it, events = review(claimed, bad, 200.0)
        assert it.state == OPEN and [k for k, _ in events] == ["queue_reopen"]


def test_a_claim_never_witnessed_reaches_the_operator_once():
    from dataclasses import replace as _replace

    from loomtui.sentinel.queue_rules import CLAIMED, Escalate, decide

    claimed = _replace(item(), state=CLAIMED, claimed_at=1000.0, note="fixed it")
    assert decide(claimed, CFG, 1000.0 + CFG.backstop - 1) == []
    [action] = decide(claimed, CFG, 1000.0 + CFG.backstop)
    assert isinstance(action, Escalate) and "no clean run has witnessed it" in action.text
    # A daily job gets its period (plus grace) to produce the witness run first.
    assert decide(claimed, CFG, 1000.0 + CFG.backstop, witness_window=86400 + 600) == []
    # Its witness run still going (started after the claim, within its allowance): not yet.
    assert decide(claimed, CFG, 1000.0 + CFG.backstop, witness_going=True) == []
    assert decide(claimed, CFG, 10**9, witness_going=True) == []
    assert decide(_replace(claimed, escalated_at=5.0), CFG, 10**9) == []  # one message per item, ever


def test_a_cron_jobs_claim_waits_for_its_next_run_before_the_operator_hears(tmp_path):
    from dataclasses import replace as _replace

    from loomtui.context import Context
    from loomtui.sentinel.queue_rules import CLAIMED, decide
    from loomtui.sentinel.tick import witness_window

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


def test_after_the_claim_is_decided_by_log_position_when_known_else_by_time():
    claimed = item(state=CLAIMED, claimed_at=100.0, claim_dev=1, claim_inode=5, claim_offset=None)
    at_start = Failure("backup", LINE, "s", "x", position=(1, 5, 0))
    assert after_claim(claimed, at_start)  # no recorded offset: the whole file is after the claim
    # The log did not exist at the claim: any line in it is new.
    assert after_claim(replace(claimed, claim_inode=None, claim_dev=None), Failure("backup", LINE, "s", "x",
                                                                                   position=(1, 5, 0)))
    assert not after_claim(item(), Failure("backup", LINE, "s", "x", position=(1, 5, 10**6), at=10**6))
    timed = item(state=CLAIMED, claimed_at=100.0)
    assert [after_claim(timed, Failure("backup", EXIT, "s", "x", at=at)) for at in (None, 99.0, 100.0, 101.0)] == [
        False, False, False, True]


def test_absorbing_counts_and_stamps_last_seen_and_a_reopen_is_recorded_in_full():
    it, events = absorb(item(count=2), Failure("backup", LINE, "s", "x", 3), 500.0)
    assert (it.count, it.last_seen, it.state, events) == (5, 500.0, OPEN, [])
    claimed = item(state=CLAIMED, claimed_at=100.0, claimed_by="cli", claimed_session="s1")
    it, events = absorb(claimed, Failure("backup", EXIT, "s", "x", at=150.0), 500.0)
    assert (it.state, it.last_seen, it.count, it.reopens) == (OPEN, 500.0, 2, 1)
    assert it.note == "claim did not hold (exit failure seen after the claim)"
    assert events == [("queue_reopen", {"item": 7, "job": "backup", "why": "exit failure seen after the claim",
                                        "claimed_by": "cli", "claimed_session": "s1", "claimed_at": 100.0})]
    # A long earlier note is kept below the reason, the whole note capped at 2000 characters.
    it, _ = reopen(replace(claimed, note="n" * 5000), 500.0, "why")
    assert len(it.note) == 2000 and it.note.startswith("claim did not hold (why); earlier note: nnn")
    assert reopen(item(), 500.0, "why") == (item(), [])  # only a claim can be reopened


def test_review_witnesses_with_the_run_and_reopens_saying_why():
    claimed = item(state=CLAIMED, claimed_at=100.0, kind=EXIT, claimed_by="cli", claimed_session="s1")
    assert review(claimed, JobRun(1, "backup", 100.0, 0, 0), 200.0) == (claimed, [])  # started at the claim
    assert review(replace(claimed, claimed_at=None), JobRun(1, "backup", 150.0, 0, 0), 200.0)[1] == []
    it, events = review(claimed, JobRun(3, "backup", 150.0, 0, 0), 200.0)
    assert (it.witnessed_at, it.witness_run) == (200.0, 3)
    assert events == [("queue_witness", {"item": 7, "job": "backup", "run": 3, "claimed_by": "cli",
                                         "claimed_session": "s1"})]
    whys = {JobRun(4, "backup", 150.0, 2, 0): "run 4 exited 2",
            JobRun(5, "backup", 150.0, 0, 1): "run 5 wrote 1 failure line(s)",
            JobRun(6, "backup", 150.0, 0, 0, "killed"): "run 6 did not finish cleanly",
            JobRun(7, "backup", 150.0, 1, 0): "run 7 exited 1"}
    for run, why in whys.items():
        it, events = review(claimed, run, 200.0)
        assert (it.reopened_at, events[0][1]["why"]) == (200.0, why)


def test_a_reopened_item_gives_the_agent_its_backstop_again_before_the_operator_hears():
    """Claimed in time, never escalated, failing again a day later: the reopen's pass nudges the
    agent, and the operator hears only if a backstop passes from the reopen with it still open."""
    claimed = item(first_seen=1000.0, state=CLAIMED, claimed_at=1500.0, claimed_by="cli")
    day = 1000.0 + 86400.0
    reopened, _ = absorb(claimed, Failure("backup", EXIT, "s", "x", at=day), Instant(day, 5000.0, "b"))
    assert (reopened.state, reopened.reopened_at, reopened.reopened_mono, reopened.reopened_boot) == (
        OPEN, day, 5000.0, "b")
    assert [type(a).__name__ for a in decide(reopened, CFG, Instant(day, 5000.0, "b"))] == ["Nudge"]
    just_short = Instant(day + CFG.backstop - 1, 5000.0 + CFG.backstop - 1, "b")
    assert [type(a).__name__ for a in decide(reopened, CFG, just_short)] == ["Nudge"]
    due = Instant(day + CFG.backstop, 5000.0 + CFG.backstop, "b")
    assert type(decide(reopened, CFG, due)[-1]).__name__ == "Escalate"
    # On the monotonic clock within its boot: the wall clock stepped a day ahead changes nothing.
    stepped = Instant(day + 86400.0 + 60, 5060.0, "b")
    assert all(type(a).__name__ == "Nudge" for a in decide(reopened, CFG, stepped))
    # Reopened before it was first seen by a clock stepped back: its first sighting still counts.
    assert replace(reopened, reopened_at=500.0, reopened_mono=None).open_since(CFG.backstop) == reopened.seen
    # A claim that held less than a backstop gives no time again: a job every 15 minutes failing
    # after each claim would have kept the operator from ever hearing.
    quick = replace(reopened, claimed_at=day - 15 * 60)
    assert quick.open_since(CFG.backstop) == quick.seen
    assert type(decide(quick, CFG, Instant(day, 5000.0, "b"))[-1]).__name__ == "Escalate"


def test_an_unclaimed_open_item_needs_no_window_and_actions_carry_the_item():
    claimed = item(state=CLAIMED, claimed_at=1000.0)
    [esc] = decide(claimed, CFG, 1000.0 + CFG.backstop, witness_window=None)
    assert (esc.item_id, esc.dedupe_key) == (7, "queue-7-backstop")
    late = item(first_seen=10_000.0)
    assert decide(late, CFG, 10_000.0 + CFG.backstop - 1, relaunching=True) == []
    nudge, esc = decide(late, CFG, 10_000.0 + CFG.backstop)
    assert (nudge.item_id, esc.item_id) == (7, 7) and esc.text == escalation_text(late, 10_000.0 + CFG.backstop)


def test_a_nudge_is_due_once_per_renudge_period_and_again_after_a_reopen():
    sent = item(nudges=1, last_nudge_at=1000.0)
    assert [nudge_due(sent, 1200.0, t) for t in (1000.0, 2199.0, 2200.0)] == [False, False, True]
    assert nudge_due(replace(sent, reopened_at=1000.5), 1200.0, 1000.5)  # reopened since its last nudge
    assert not nudge_due(replace(sent, reopened_at=999.0), 1200.0, 1000.0)
    # Reopened and nudged in one pass (a pass reopens before it nudges, at one time): that nudge was
    # the reopen's, and the next comes a renudge later, not at the next pass.
    assert not nudge_due(replace(sent, reopened_at=1000.0), 1200.0, 1600.0)
    assert nudge_due(replace(sent, reopened_at=1000.0), 1200.0, 2200.0)


def test_texts_to_the_agent_and_the_operator_word_for_word():
    kinds = {LINE: "failure lines in its log", EXIT: "a failed run", MISSED: "a missed schedule",
             SCAN: "an unreadable log", "odd": "odd"}
    for kind, what in kinds.items():
        assert nudge_text(item(kind=kind)) == (
            f'[loom sentinel] Queue item 7: job "backup" shows {what}; log: /var/log/b.log. Read the log and the '
            'script, decide whether it is current or stale, fix it if safe, then run: '
            'loom resolve 7 --note "<what you found and did>"')
    text = nudge_text(item(kind=EXIT, count=2, reopens=1, log="/l/my log"))
    assert "shows a failed run (seen 2x); log: '/l/my log'. Reopened: the last claim did not hold. Read" in text
    assert "Reopened" not in nudge_text(item(reopens=1, state=CLAIMED))
    assert "seen" not in nudge_text(item(count=1)) and "Reopened" not in nudge_text(item(count=1))
    long = item(job="sauvegarde-été", first_seen=100.0, count=3, nudges=2, signature="S" * 200)
    assert escalation_text(long, 100.0 + 3900) == (
        'Loom: job "sauvegarde-été" has an open failure for 1h5m (queue item 7, seen 3x, agent nudged 2x): '
        f'{"S" * 120}. Log: /var/log/b.log. See loom queue.')
    claimed = item(state=CLAIMED, claimed_at=1000.0, note="N" * 300)
    assert unwitnessed_text(claimed, 1000.0 + 7200) == (
        'Loom: job "backup": queue item 7 was claimed fixed 2h ago, but no clean run has witnessed it '
        f'(note: "{"N" * 120}"). Log: /var/log/b.log. See loom queue.')
    assert '(note: "")' in unwitnessed_text(replace(claimed, note=None), 0.0)
    assert "fixed 0s ago" in unwitnessed_text(replace(claimed, claimed_at=None), 5000.0)


# -- boundaries the mutation run found untested ------------------------------------------


def test_a_line_keeps_its_spaces_and_loses_only_the_carriage_return():
    assert logscan.line_text(b"ERROR tail X \r") == "ERROR tail X "
    assert logscan.line_text(b"\r") == ""
    assert logscan.line_text(b"ERROR X\r") == "ERROR X"


def test_a_line_of_exactly_max_line_bytes_is_whole_and_one_longer_is_cut():
    for n, cut in ((MAX_LINE, False), (MAX_LINE + 1, True)):
        [line], _ = logscan.split(Carry(), b"x" * n + b"\n", 0)
        assert (len(line.raw), line.cut) == (MAX_LINE, cut)
        assert logscan.flush(Carry(b"x" * MAX_LINE, n), n + 10) == logscan.Line(10, b"x" * MAX_LINE, cut)


def test_a_carried_head_is_topped_up_to_max_line_and_no_further():
    carry = Carry(b"h" * 10, 10)
    [line], rest = logscan.split(carry, b"y" * 2 * MAX_LINE + b"\nz" + b"w" * 2 * MAX_LINE, 10)
    assert (line.offset, line.raw, line.cut) == (0, b"h" * 10 + b"y" * (MAX_LINE - 10), True)
    assert rest == Carry(b"z" + b"w" * (MAX_LINE - 1), 1 + 2 * MAX_LINE)
    _, rest = logscan.split(carry, b"w" * 2 * MAX_LINE, 10)
    assert rest == Carry(b"h" * 10 + b"w" * (MAX_LINE - 10), 10 + 2 * MAX_LINE)


def test_the_partial_first_line_of_a_first_look_is_dropped_once_even_across_chunks():
    assert logscan.first_carry(0) == Carry() and logscan.first_carry(1) == Carry(discard=True)
    lines, carry = logscan.split(logscan.first_carry(1), b"still partial", 1)
    assert lines == [] and carry == Carry(b"still partial", 13, True)
    lines, carry = logscan.split(carry, b"\nnext", 14)
    assert lines == [] and carry == Carry(b"next", 4, False)
    assert logscan.flush(Carry(b"x", 1, True), 9) is None


def test_plan_restarts_a_shrunk_or_replaced_file_from_zero_after_finishing_the_old_carry():
    pos = Position("/l", 1, 7, 500, Carry(), b"2025 first line\n")
    assert logscan.plan(pos, "/l", facts(100)) == logscan.Plan("truncated", 0, finish_old=True)
    assert logscan.plan(pos, "/l", facts(900, head=b"2026 other\n")) == logscan.Plan("replaced", 0, finish_old=True)
    # A log that vanished keeps its position for when it comes back.
    assert logscan.plan(pos, "/l", None) == logscan.Plan("absent", 500)
    assert logscan.plan(None, "/l", None) == logscan.Plan("absent", 0)


def test_same_head_needs_the_remembered_bytes_all_there():
    assert logscan.same_head(b"2025 a", b"2025 a and more")
    assert not logscan.same_head(b"2025 a and more", b"2025 a")  # shorter now: rewritten
    assert not logscan.same_head(b"2024 x", b"2025 a and more")


def test_is_copy_boundaries():
    pos = Position("/l", 1, 7, 16, Carry(), b"2025 first line\n", mtime_ns=100)
    copy = FileFacts(1, 9, 16, b"2025 first line\n", 100)
    # Timestamps can be coarse: a copy written in the same tick as the last look still counts.
    assert logscan.is_copy(pos, copy, None)
    empty = Position("/l", 1, 7, 0, Carry(), b"", mtime_ns=100)
    assert logscan.is_copy(empty, FileFacts(1, 11, 1, b"x", 150), None, quiet=True)
    assert not logscan.is_copy(empty, FileFacts(1, 11, 0, b"", 150), None, quiet=True)


def test_only_a_timestamp_then_the_mark_makes_a_run_job_line():
    m = logscan.Matcher(["ERROR"], [])
    assert not m.is_failure_line(b"1 [loom run-job] exit 1: ./ERROR.sh")
    assert m.is_failure_line(b" [loom run-job] ERROR from the job itself")
    assert m.is_failure_line(b"[loom run-job] ERROR from the job itself")


def test_signature_turns_control_characters_into_one_space_and_never_ends_in_one():
    assert normalize("a\x00b\x1bc\td") == "a b c d"
    assert normalize("x" * 199 + " " + "y" * 50) == "x" * 199


def test_an_every_schedule_counts_a_long_outage_in_full():
    # Far more periods than the cron walk's bound: the arithmetic path has no bound.
    assert schedule.missed("every 1s", 0.0, 50_000.5, grace=0, cron=cron.in_zone(UTC)) == (1.0, 50_000.0)


def test_a_cron_run_is_missed_only_once_its_grace_has_passed():
    day = dt.datetime(2031, 3, 3, 7, 0, tzinfo=BERLIN).timestamp()
    ran = day - 3600
    assert schedule.missed("0 7 * * *", ran, day + 600, grace=600, cron=cron.in_zone(BERLIN)) is None
    # The next day's run is within its grace at `now`: only today's counts.
    now = day + 86400 + 300
    assert schedule.missed("0 7 * * *", ran, now, grace=600, cron=cron.in_zone(BERLIN)) == (day, day)
    assert schedule.missed("0 7 * * *", ran, day + 86400 + 600, grace=600, cron=cron.in_zone(BERLIN)) == (day, day)
    assert schedule.missed("0 7 * * *", ran, day + 86400 + 601, grace=600, cron=cron.in_zone(BERLIN)) == (day, day + 86400)
