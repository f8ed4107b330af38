"""The canary's pure rules: what counts as deaf, and when the next probe is due."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loomtui.canary.rules import (
    ERROR,
    INJECT_FAILED,
    MISS,
    OK,
    PENDING,
    SKIPPED,
    ProbeRun,
    ack_deadline,
    consecutive_misses,
    due_in,
    should_recycle,
    witness_due,
)


def runs(*results, seq=1, grace=False):
    return [ProbeRun(float(i), r, seq, grace) for i, r in enumerate(results)]


@pytest.mark.incident("silent_deafness")
def test_trailing_misses_of_this_launch():
    assert consecutive_misses(runs(MISS, MISS), 1) == 2
    assert consecutive_misses(runs(MISS, OK, MISS), 1) == 1
    assert consecutive_misses(runs(MISS, MISS), 2) == 0  # a relaunch starts the count again
    assert consecutive_misses(runs(MISS, MISS, grace=True), 1) == 0


def test_our_own_faults_neither_count_nor_reset():
    assert consecutive_misses(runs(MISS, ERROR, SKIPPED, INJECT_FAILED, MISS), 1) == 2
    assert should_recycle(runs(MISS, ERROR, MISS), 1, 2)
    assert not should_recycle(runs(ERROR, ERROR, ERROR, INJECT_FAILED), 1, 2)


def test_due():
    assert due_in(None, 100, 1200, 180) == 0
    assert due_in(ProbeRun(100, OK), 200, 1200, 180) == 1100
    assert due_in(ProbeRun(100, MISS), 200, 1200, 180) == 0
    assert due_in(ProbeRun(100, ERROR), 200, 1200, 180) == 80
    assert due_in(ProbeRun(100, SKIPPED), 200, 1200, 180) == 80  # a relaunch was under way: not a whole interval


def test_misses_found_late_call_for_one_more_look_first():
    # The hooked storm, seed 34: a dialog ate two probes; the store was locked past the second's
    # deadline, the dialog was closed meanwhile, and the agent, hearing again, was recycled on misses
    # six minutes old. Misses decide only while the newest of them is fresh (its deadline within the
    # ack timeout); older, the next probe is due at once, and its own result joins them.
    from loomtui.timing import Instant

    def miss(sent, mono=None, boot=None):
        return ProbeRun(sent, MISS, 1, False, mono, boot, deadline=sent + 60.0)

    found = [miss(1000.0), miss(1060.0)]  # the second's deadline: 1120
    assert should_recycle(found, 1, 2, 1120.0, 60.0)
    assert should_recycle(found, 1, 2, 1180.0, 60.0)
    assert not should_recycle(found, 1, 2, 1181.0, 60.0)
    assert should_recycle(found, 1, 2)  # no `now`: the count alone (what the count's tests ask)
    assert due_in(found[-1], 1500.0, 1200, 60) == 0  # looked at again at once
    assert should_recycle([*found, miss(1500.0)], 1, 2, 1560.0, 60.0)
    assert not should_recycle([*found, ProbeRun(1500.0, OK, 1)], 1, 2, 1560.0, 60.0)
    # Our own faults after them add nothing fresh: an error run is no look at the agent.
    assert not should_recycle([*found, ProbeRun(1500.0, ERROR, 1)], 1, 2, 1510.0, 60.0)
    # An excused miss, or one of another launch, is not the newest that counts.
    excused = ProbeRun(1400.0, MISS, 1, deadline=1460.0, excused="busy")
    assert not should_recycle([*found, excused], 1, 2, 1470.0, 60.0)
    # On the monotonic clock within a boot: a wall clock stepped back an hour does not make old
    # misses fresh, nor one stepped forward make fresh ones old; another boot's are stale.
    on_mono = [miss(1000.0, 10.0, "b"), miss(1060.0, 70.0, "b")]
    assert not should_recycle(on_mono, 1, 2, Instant(1200.0 - 3600, 400.0, "b"), 60.0)
    assert should_recycle(on_mono, 1, 2, Instant(1130.0 + 3600, 140.0, "b"), 60.0)
    assert not should_recycle(on_mono, 1, 2, Instant(1130.0, 140.0, "c"), 60.0)
    # A run with no deadline stored (built by hand) is taken as fresh.
    assert should_recycle(runs(MISS, MISS), 1, 2, 10_000.0, 60.0)


@given(st.lists(st.sampled_from([OK, MISS, ERROR, SKIPPED, INJECT_FAILED]), max_size=30), st.integers(1, 5))
def test_only_misses_after_the_last_ok_can_recycle(results, n):
    seq = runs(*results)
    if should_recycle(seq, 1, n):
        after_ok = results[max((i for i, r in enumerate(results) if r == OK), default=-1) + 1:]
        assert after_ok.count(MISS) >= n


def test_doctor_says_when_claude_cannot_ack(tmp_path):
    from loomtui.config import parse_config
    from loomtui.report.doctor import FAIL, OK, check_canary_permissions

    bare = parse_config({}, "c.toml", None)
    check = check_canary_permissions(bare, tmp_path)
    assert check.status == FAIL and "--allowedTools 'Bash(touch:*)'" in check.detail
    good = parse_config({"agent": {
        "fresh_command": "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' --session-id {session_id}",
        "resume_command": "claude --add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' --resume {session_id}",
    }}, "c.toml", None)
    assert check_canary_permissions(good, tmp_path).status == OK


@pytest.mark.parametrize("flags, ok", [
    ("--add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)'", True),
    ("--add-dir={state_dir}/acks --allowed-tools 'Bash(touch *)'", True),
    ("--add-dir {state_dir} --allowedTools Bash", True),                   # a directory holding the acks, all of Bash
    ("--add-dir {state_dir}/acks --permission-mode bypassPermissions", True),
    ("--add-dir {state_dir}/acks --dangerously-skip-permissions", True),
    # The flag's words anywhere in the command had passed these:
    ("--add-dir {state_dir}/acks --disallowedTools 'Bash(touch:*)'", False),  # touch forbidden
    ("--add-dir {state_dir}/acks --allowedTools 'Bash(touch:*)' --disallowedTools Bash", False),
    ("--add-dir /srv/other --settings /x/acks.json --allowedTools 'Bash(touch:*)'", False),  # never the acks dir
    ("--add-dir {state_dir}/acks-old --allowedTools 'Bash(touch:*)'", False),
    ("--allowedTools 'Bash(touch:*)' --add-dir", False),
])
def test_doctor_reads_the_canary_flags_as_the_cli_does(tmp_path, flags, ok):
    from loomtui.config import parse_config
    from loomtui.report.doctor import FAIL, OK, check_canary_permissions

    config = parse_config({"agent": {"fresh_command": f"claude {flags} --session-id {{session_id}}",
                                     "resume_command": f"claude {flags} --resume {{session_id}}"}}, "c.toml", None)
    assert check_canary_permissions(config, tmp_path).status == (OK if ok else FAIL)


def test_runs_of_an_earlier_launch_are_skipped_not_the_end_of_the_count():
    history = runs(MISS, MISS, seq=0) + [ProbeRun(5.0, MISS, 1), ProbeRun(6.0, OK, 0), ProbeRun(7.0, MISS, 1)]
    assert consecutive_misses(history, 1) == 2


def test_an_overdue_probe_is_due_now_not_later():
    assert due_in(ProbeRun(0.0, OK), 1000.0, 300, 60) == 0.0
    assert due_in(ProbeRun(0.0, ERROR), 1000.0, 300, 60) == 0.0
    assert due_in(ProbeRun(0.0, INJECT_FAILED), 30.0, 300, 60) == 30.0


def test_a_relaunch_is_probed_once_the_agent_is_ready_then_the_schedule_carries_on():
    assert witness_due([], 7, ready=True)
    assert not witness_due([], 7, ready=False)            # still booting: a probe would prove nothing
    assert not witness_due([], 0, ready=True)             # never relaunched by Loom: nothing to witness
    assert witness_due(runs(OK, MISS, seq=6), 7, True)    # probes of the replaced agent do not witness this one
    assert witness_due(runs(SKIPPED, seq=7), 7, True)     # not sent (a relaunch held the lock): try again
    for result in (OK, MISS, PENDING, ERROR, INJECT_FAILED):
        # Sent: its result decides (an ok witnesses; a miss re-probes by the schedule and counts).
        assert not witness_due(runs(result, seq=7), 7, True)


@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([OK, MISS, PENDING, ERROR, SKIPPED, INJECT_FAILED])),
                max_size=20), st.integers(0, 4), st.booleans())
def test_a_witness_probe_is_due_only_for_a_ready_launch_nothing_was_sent_to(sent, seq, ready):
    history = [ProbeRun(float(i), result, launch) for i, (launch, result) in enumerate(sent)]
    due = witness_due(history, seq, ready)
    sent_to_this = any(launch == seq and result != SKIPPED for launch, result in sent)
    assert due == (ready and seq > 0 and not sent_to_this)
    # Whatever is sent to this launch ends the need; anything sent elsewhere or skipped does not.
    assert not witness_due([*history, ProbeRun(99.0, MISS, seq)], seq, ready)
    assert witness_due([*history, ProbeRun(99.0, SKIPPED, seq), ProbeRun(99.0, OK, seq + 1)], seq, ready) == due


def test_a_probe_into_a_booting_pump_waits_out_the_boot_grace_then_its_ack_timeout():
    grace, ack = 90.0, 60.0  # launched at wall 1000, the probes sent 6, 85 and 95 s into the boot
    assert ack_deadline(1006.0, ack, 6.0, grace) == 1000.0 + 90 + 60    # sent as the pump came up
    assert ack_deadline(1085.0, ack, 85.0, grace) == 1000.0 + 90 + 60   # near the grace's end
    assert ack_deadline(1095.0, ack, 95.0, grace) == 1095.0 + 60        # after it: its own timeout
    assert ack_deadline(1006.0, ack, None, grace) == 1006.0 + 60        # the CLI has spoken, or no pump
    # The wall clock stepped back a day since the launch: the boot's age is the monotonic clock's.
    assert ack_deadline(1006.0 - 86400, ack, 6.0, grace) == 1000.0 - 86400 + 90 + 60


@given(st.floats(0, 1e6), st.floats(0.1, 1e4), st.one_of(st.none(), st.floats(0, 1e6)), st.floats(0, 1e4))
def test_an_ack_deadline_is_never_sooner_than_the_ack_timeout(sent, ack, booting_for, grace):
    deadline = ack_deadline(sent, ack, booting_for, grace)
    assert deadline >= sent + ack
    if booting_for is None or booting_for >= grace:
        assert deadline == sent + ack
    else:
        assert deadline == sent + ack + (grace - booting_for)
