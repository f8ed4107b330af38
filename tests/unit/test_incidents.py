"""Grouping the ledger into incidents: from the first sign of trouble to the first ack after it."""

from hypothesis import given
from hypothesis import strategies as st

from loomtui.report.incidents import HELD, NOTE, ONGOING, RECOVERED, group
from loomtui.store.ledger import Event


def ev(i, kind, cause=None, **detail):
    return Event(i, 1000.0 + i * 10, kind, "test", cause, detail)


def test_wedge_to_recovery():
    events = [
        ev(1, "canary", result="ok"),
        ev(2, "inject", length=3),
        ev(3, "canary", "miss", result="miss"),
        ev(4, "canary", "miss", result="miss"),
        ev(5, "relaunch", "canary_failed", mode="resume", old_session="a", new_session="a"),
        ev(6, "canary", "miss", result="miss"),
        ev(7, "canary", "miss", result="miss"),
        ev(8, "relaunch", "canary_failed", mode="fresh", old_session="a", new_session="b"),
        ev(9, "canary", result="ok"),
        ev(10, "canary", result="ok"),
    ]
    [inc] = group(events)
    assert inc.status == RECOVERED and inc.first_id == 3
    assert inc.causes == ["canary_failed"] and inc.modes == ["resume", "fresh"]
    assert (inc.old_session, inc.new_session) == ("a", "b")
    assert inc.misses == 4 and inc.relaunches == 2
    assert inc.duration(now=0) == 60  # from the first miss (1030) to the ack (1090)
    assert inc.event_ids == [3, 4, 5, 6, 7, 8, 9]


def test_ongoing_and_held_and_notes():
    events = [
        ev(1, "relaunch", "crash", mode="resume", old_session="a", new_session="a"),
        ev(2, "relaunch", "crash", mode="resume", old_session="a", new_session="a"),
        ev(3, "escalation", "crash", held=True),
        ev(4, "foreign_poller_reaped", pid=77),
    ]
    incidents = group(events)
    # A note while an incident is open stays a row of its own; it is not trouble.
    assert [i.status for i in incidents] == [HELD, NOTE]
    assert incidents[0].escalated and 4 not in incidents[0].event_ids
    events.append(ev(5, "relaunch", "operator_fresh", mode="fresh", old_session="a", new_session="b"))
    events.append(ev(6, "canary", result="ok"))
    incidents = group(events)
    assert incidents[0].status == RECOVERED and incidents[0].relaunches == 3


def test_operator_relaunch_and_reaping_are_notes_when_nothing_is_wrong():
    incidents = group([ev(1, "relaunch", "operator_fresh", mode="fresh", new_session="x"),
                       ev(2, "foreign_poller_reaped", pid=12), ev(3, "canary", result="ok")])
    assert [(i.status, i.title) for i in incidents] == [
        (NOTE, "operator relaunch (fresh)"), (NOTE, "foreign poller 12 reaped")]


def test_no_ack_yet_is_ongoing():
    [inc] = group([ev(1, "relaunch", "exit", mode="resume")])
    assert inc.status == ONGOING and inc.end is None and inc.duration(now=1100) == 90


NOTE_TITLES = [
    ("foreign_poller_reaped", {"pid": 77}, "foreign poller 77 reaped", "foreign poller ? reaped"),
    ("modal_dismissed", {}, "dialog dismissed", "dialog dismissed"),
    ("loop_error", {"loop": "watchdog", "type": "OSError"}, "loop watchdog failed: OSError", "loop ? failed: "),
    ("queue_new", {"job": "backup", "item": 4}, "job backup failed: queue item 4", "job ? failed: queue item ?"),
    ("queue_escalate", {"item": 4}, "queue item 4 sent to the operator", "queue item ? sent to the operator"),
    ("queue_reopen", {"item": 4}, "queue item 4 reopened: the claim did not hold",
     "queue item ? reopened: the claim did not hold"),
    ("queue_witness", {"item": 4}, "queue item 4 witnessed fixed", "queue item ? witnessed fixed"),
    ("queue_retire", {"item": 4, "job": "backup"}, "queue item 4 retired: job backup left the config",
     "queue item ? retired: job ? left the config"),
    ("hold_cleared", {}, "hold cleared by the operator", "hold cleared by the operator"),
    ("operator_alert", {"note": "disk full"}, "told the operator: disk full", "told the operator: "),
    ("store_salvaged", {"moved_to": "/s/x.bad"}, "damaged store replaced; old file kept at /s/x.bad",
     "damaged store replaced; old file kept at ?"),
    ("tmux_socket_repair", {}, "tmux socket recreated (the server ran on without it)",
     "tmux socket recreated (the server ran on without it)"),
    ("observation_ambiguous", {"why": "two panes"}, "could not see clearly: two panes", "could not see clearly: "),
    ("relaunch", {"mode": "resume"}, "operator relaunch (resume)", "operator relaunch (?)"),
]


def test_every_note_kind_is_a_finished_row_of_its_own_with_its_title():
    # The console shows these titles as they are; a detail the event lacks reads as "?" or nothing.
    for kind, detail, title, bare in NOTE_TITLES:
        cause = "operator_resume" if kind == "relaunch" else None
        for i, (d, want) in enumerate([(detail, title), ({}, bare)]):
            [inc] = group([ev(7 + i, kind, cause, **d)])
            assert (inc.status, inc.title) == (NOTE, want), kind
            assert (inc.first_id, inc.start, inc.end, inc.event_ids) == (7 + i, inc.start, inc.start, [7 + i])
            assert inc.start == 1070.0 + i * 10 and inc.key == f"i{7 + i}" and inc.duration(now=0) == 0


def test_ordinary_traffic_is_no_incident_even_with_an_operator_cause():
    assert group([ev(1, "inject", "operator_resume", length=3), ev(2, "canary", result="ok"),
                  ev(3, "heartbeat")]) == []


def test_each_failure_kind_opens_an_incident_and_names_its_cause_once():
    for kind in ("resume_failed", "relaunch_failed", "launch_died"):
        [inc] = group([ev(1, kind), ev(2, kind), ev(3, "canary", result="ok")])
        assert inc.causes == [kind] and inc.event_ids == [1, 2, 3], kind
        assert (inc.status, inc.title) == (RECOVERED, kind)


def test_titles_count_relaunches_and_misses_in_words():
    [one] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "canary", "miss", result="miss"),
                   ev(3, "canary", result="ok")])
    assert one.title == "crash; 1 relaunch (resume); 1 miss"
    [two] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "relaunch", "exit", mode="fresh"),
                   ev(3, "canary", "miss", result="miss"), ev(4, "canary", "miss", result="miss")])
    assert two.title == "crash, exit; 2 relaunches (resume→fresh); 2 misses"
    [misses] = group([ev(1, "canary", "miss", result="miss")])
    assert misses.title == "canary misses; 1 miss"
    [held] = group([ev(1, "escalation", None, held=True)])
    assert (held.title, held.causes, held.status) == ("trouble; escalated", [], HELD)


def test_a_canary_result_other_than_miss_or_ok_neither_opens_nor_counts():
    assert group([ev(1, "canary", result="late")]) == []
    [inc] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "canary", result="late")])
    assert inc.misses == 0 and inc.event_ids == [1] and inc.status == ONGOING


def test_clearing_the_hold_reopens_a_held_incident_and_only_that():
    [inc] = group([ev(1, "escalation", "crash"), ev(2, "hold_cleared")])
    assert (inc.status, inc.event_ids) == (ONGOING, [1, 2])
    [inc] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "hold_cleared"),
                   ev(3, "relaunch", "crash", mode="fresh")])
    assert (inc.status, inc.event_ids, inc.relaunches) == (ONGOING, [1, 2, 3], 2)


def test_grouping_goes_on_after_a_recovery():
    incidents = group([ev(1, "relaunch", "crash", mode="resume", old_session="a", new_session="b"),
                       ev(2, "canary", result="ok"),
                       ev(3, "relaunch", "exit", mode="fresh", old_session="b"),
                       ev(4, "foreign_poller_reaped", pid=5)])
    assert [(i.first_id, i.status) for i in incidents] == [(1, RECOVERED), (3, ONGOING), (4, NOTE)]
    assert incidents[0].title == "crash; 1 relaunch (resume)"
    # A relaunch that names no new session keeps the old one unknown rather than inventing it.
    assert (incidents[1].old_session, incidents[1].new_session) == ("b", None)


def test_an_escalation_adds_its_cause_once():
    [inc] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "escalation", "crash"),
                   ev(3, "escalation", "fuse")])
    assert inc.causes == ["crash", "fuse"] and inc.title == "crash, fuse; 1 relaunch (resume); escalated"


def test_an_incident_that_relaunched_ends_at_the_ack_that_witnesses_the_relaunch():
    events = [
        ev(1, "relaunch", "crash", mode="resume", old_session="a", new_session="a"),
        # An ack of the agent that was replaced, recorded after the relaunch: proves nothing new.
        ev(2, "canary", result="ok", launch=0),
        ev(3, "canary", result="ok", launch=1, witnessed=1),
    ]
    [inc] = group(events)
    assert inc.status == RECOVERED and inc.witness == 3 and inc.end == events[2].ts
    assert inc.duration(now=0) == 20 and 2 not in inc.event_ids
    # Without the witness it is still a claim: ongoing, however alive the old acks look.
    [inc] = group(events[:2])
    assert inc.status == ONGOING and inc.witness is None
    # A second relaunch in the same incident needs its own witness.
    again = [*events[:1], ev(2, "relaunch", "crash", mode="fresh", old_session="a", new_session="b"),
             ev(3, "canary", result="ok", launch=1, witnessed=1), ev(4, "canary", result="ok", launch=2, witnessed=2)]
    [inc] = group(again)
    assert inc.witness == 4 and inc.relaunches == 2


def test_acks_recorded_before_acks_named_their_launch_still_close_an_incident():
    [inc] = group([ev(1, "relaunch", "crash", mode="resume"), ev(2, "canary", result="ok")])
    assert inc.status == RECOVERED and inc.witness == 2


@given(st.lists(st.one_of(
    st.tuples(st.just("relaunch"), st.sampled_from(["crash", "exit", "canary_failed"])),
    st.tuples(st.just("ok"), st.integers(0, 30)),
    st.tuples(st.just("miss"), st.integers(0, 30)),
), max_size=30))
def test_a_recovered_incident_is_closed_by_an_ack_of_its_last_relaunch_or_later(script):
    events = []
    for i, (kind, arg) in enumerate(script, start=1):
        if kind == "relaunch":
            events.append(ev(i, "relaunch", arg, mode="resume"))
        else:
            events.append(ev(i, "canary", None if kind == "ok" else "miss", result=kind, launch=arg))
    by_id = {e.id: e for e in events}
    for inc in group(events):
        if inc.status != RECOVERED:
            continue
        ack = by_id[inc.witness]
        assert ack.detail["result"] == "ok" and ack.ts == inc.end and ack.id == inc.event_ids[-1]
        assert ack.detail["launch"] >= inc.last_relaunch
        # No earlier event of the incident's own span could have closed it.
        assert not any(e.kind == "canary" and e.detail["result"] == "ok" and e.detail["launch"] >= inc.last_relaunch
                       and inc.last_relaunch and inc.first_id <= e.id < inc.witness and e.id > inc.last_relaunch
                       for e in events)


def test_a_detail_of_another_type_is_left_out_never_a_crash():
    # Another host's ledger (the console reads it over ssh) may say anything in a detail.
    events = [
        ev(1, "canary", "miss", result="miss"),
        ev(2, "relaunch", "canary_failed", mode=7, old_session=["a"], new_session={"b": 1}),
        ev(3, "relaunch", "canary_failed", mode="fresh", old_session="a", new_session="b"),
        ev(4, "canary", result="ok"),
    ]
    [inc] = group(events)
    assert inc.status == RECOVERED and inc.modes == ["fresh"] and inc.relaunches == 2
    assert (inc.old_session, inc.new_session) == ("a", "b")
    assert inc.title == "canary_failed; 2 relaunches (fresh); 1 miss"
