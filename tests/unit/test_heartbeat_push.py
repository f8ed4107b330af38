"""Push heartbeats ([[heartbeat]]): the verdict for every lifecycle state, the URL it goes to, its
config, and the sender against a real loopback HTTP receiver (tests/e2e/test_heartbeat_e2e.py runs
them under the real daemon)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from push_receiver import Receiver

from loomtui.agent import lifecycle
from loomtui.config import load_config
from loomtui.context import Context
from loomtui.daemon.heartbeat_push import COUNTER, Sender
from loomtui.errors import ConfigError
from loomtui.report import heartbeat_rules as rules
from loomtui.report.heartbeat_rules import FAIL, OK, SKIP, AgentHealth, verdict
from loomtui.store import counters, heartbeat_pushes

DOWN = {lifecycle.GONE, lifecycle.EXITED, lifecycle.NO_PROCESS}
UNSURE = {lifecycle.NOT_LOOKED, lifecycle.UNKNOWN, lifecycle.PROCESS_UNKNOWN}
WELL = {lifecycle.BOOTING, lifecycle.RUNNING}


@pytest.mark.parametrize("state", lifecycle.STATES)
@pytest.mark.parametrize("hold_fails", [False, True])
def test_each_state_alone_says_what_it_is(state, hold_fails):
    got = verdict([AgentHealth("main", state, 5.0)], hold_fails=hold_fails, unwitnessed_after=600)
    if state in DOWN:
        assert got.says == FAIL and got.why == f"main {state}"
    elif state in lifecycle.HELD:
        assert got.says == (FAIL if hold_fails else OK)
    elif state in UNSURE:
        assert got.says == SKIP and state in got.why
    else:
        assert state in WELL | {lifecycle.UNWITNESSED}
        assert got.says == OK  # unwitnessed for 5 s: within its bound


@pytest.mark.parametrize("held", sorted(lifecycle.HELD))
@pytest.mark.parametrize("beneath", [s for s in lifecycle.STATES if s not in lifecycle.HELD])
@pytest.mark.parametrize("hold_fails", [False, True])
def test_a_hold_hides_nothing_down_beneath_it(held, beneath, hold_fails):
    """Held, Loom recovers nothing: the agent down beneath the hold is down (the ceiling's hold had
    turned a dead agent's /fail into "ok" at the very moment Loom gave up on it)."""
    got = verdict([AgentHealth("main", held, 900.0, beneath=beneath)], hold_fails=hold_fails, unwitnessed_after=600)
    alone = verdict([AgentHealth("main", beneath, 900.0)], hold_fails=hold_fails, unwitnessed_after=600)
    if hold_fails:
        assert got == rules.Verdict(FAIL, "main held")
    else:
        assert got.says == alone.says
        assert got.why == ("; ".join(f"{part} (held)" for part in alone.why.split("; ")) if alone.why else "")


def test_the_heartbeat_reads_the_state_beneath_a_hold_from_the_status(tmp_path):
    from loomtui.agent.hold_rules import Hold
    from loomtui.daemon.heartbeat_push import health
    from loomtui.report.status import AgentLook, Status

    def status(process: str, hold: Hold | None) -> Status:
        return Status(taken=1000.0, state_dir=str(tmp_path), config=None, pinned_session=None, ledger_events=0,
                      heartbeats={}, last_events=[], outbox={}, conflict=None,
                      agent=AgentLook("up", pane={"pane_pid": 1, "dead": False}, tree={"process": process}),
                      canary=None, canary_settled=None, queue={}, hold=hold, last_launch=None, since_launch=None)

    ceiling = Hold(since=900.0, by="ceiling", reason="6 relaunches within 1h")
    [gone] = health([status("missing", ceiling)])
    assert (gone.state, gone.beneath) == (lifecycle.HELD_CEILING, lifecycle.NO_PROCESS)
    assert verdict([gone], hold_fails=False, unwitnessed_after=600) == \
        rules.Verdict(FAIL, f"main {lifecycle.NO_PROCESS} (held)")
    [well] = health([status("present", ceiling)])
    assert verdict([well], hold_fails=False, unwitnessed_after=600).says == OK
    [free] = health([status("missing", None)])
    assert (free.state, free.beneath) == (lifecycle.NO_PROCESS, None)


def test_an_unwitnessed_relaunch_is_timed_on_the_monotonic_clock(tmp_path):
    """A wall clock stepped an hour ahead just after a relaunch had sent /fail at once; one stepped
    back hid a relaunch unwitnessed for longer than its bound."""
    from loomtui.daemon.heartbeat_push import health
    from loomtui.report.status import AgentLook, RelaunchClaim, Status
    from loomtui.timing import Instant

    def waited(wall_now: float, mono_now: float, boot: str = "b1") -> float | None:
        claim = RelaunchClaim(7, ts=1000.0, cause="crash", mode="resume", source="watchdog", mono=50.0, boot="b1")
        status = Status(taken=wall_now, state_dir=str(tmp_path), config=None, pinned_session=None, ledger_events=0,
                        heartbeats={}, last_events=[], outbox={}, conflict=None,
                        agent=AgentLook("up", pane={"pane_pid": 1, "dead": False}, tree={"process": "present"}),
                        canary=None, canary_settled=None, queue={}, hold=None, last_launch=None, since_launch=None,
                        relaunch=claim, at=Instant(wall_now, mono_now, boot))
        [agent] = health([status])
        assert agent.state == lifecycle.UNWITNESSED
        return agent.unwitnessed_for

    assert waited(1000.0 + 3600 + 30, 80.0) == 30.0   # stepped an hour ahead: 30 s, not an hour
    assert waited(1000.0 - 3600, 50.0 + 900) == 900.0  # stepped back an hour: 15 minutes, past its bound
    assert waited(1000.0 + 40, 7.0, "b2") == 40.0      # another boot: the wall clock is all there is


def test_an_unwitnessed_relaunch_fails_only_past_its_bound():
    def says(waited):
        return verdict([AgentHealth("main", lifecycle.UNWITNESSED, waited)], hold_fails=False,
                       unwitnessed_after=600).says
    assert says(599.9) == OK
    assert says(600) == FAIL
    assert says(None) == OK  # the status could not say since when: not down on a guess


def test_every_down_or_unsure_agent_is_named_in_the_why():
    both = [AgentHealth("a", lifecycle.GONE), AgentHealth("b", lifecycle.EXITED)]
    assert verdict(both, hold_fails=False, unwitnessed_after=600).why == f"a {lifecycle.GONE}; b {lifecycle.EXITED}"
    unsure = [AgentHealth("a", lifecycle.UNKNOWN), AgentHealth("b", lifecycle.NOT_LOOKED)]
    assert verdict(unsure, hold_fails=False, unwitnessed_after=600) == \
        rules.Verdict(SKIP, f"a {lifecycle.UNKNOWN}; b {lifecycle.NOT_LOOKED}")


def test_no_agents_is_well_the_supervisor_is_up():
    assert verdict([], hold_fails=True, unwitnessed_after=1).says == OK


@given(st.lists(st.tuples(st.sampled_from(lifecycle.STATES), st.one_of(st.none(), st.floats(0, 1e6))), max_size=6),
       st.booleans())
def test_one_down_agent_fails_the_beat_whatever_the_others(agents, hold_fails):
    health = [AgentHealth(f"a{i}", s, w) for i, (s, w) in enumerate(agents)]
    got = verdict(health, hold_fails=hold_fails, unwitnessed_after=600)
    alone = [verdict([h], hold_fails=hold_fails, unwitnessed_after=600).says for h in health]
    if FAIL in alone:
        assert got.says == FAIL
    elif SKIP in alone:
        assert got.says == SKIP
    else:
        assert got.says == OK and got.why == ""


def test_fail_goes_to_the_path_with_fail_and_keeps_the_query():
    assert rules.ping_url("https://hc-ping.com/abc", OK) == "https://hc-ping.com/abc"
    assert rules.ping_url("https://hc-ping.com/abc", FAIL) == "https://hc-ping.com/abc/fail"
    assert rules.ping_url("https://hc-ping.com/abc/", FAIL) == "https://hc-ping.com/abc/fail"
    assert rules.ping_url("http://127.0.0.1:8080/p/x?rid=1", FAIL) == "http://127.0.0.1:8080/p/x/fail?rid=1"
    assert rules.ping_url("https://hc-ping.com/ABCX", FAIL) == "https://hc-ping.com/ABCX/fail"  # only slashes go


def test_a_push_url_is_shown_without_its_secret():
    assert rules.shown("https://hc-ping.com/5f4e-secret") == "https://hc-ping.com/…"
    assert rules.shown("http://127.0.0.1:8080/p/secret?x=1") == "http://127.0.0.1:8080/…"
    assert rules.shown("https:///secret") == "https://?/…"  # no host to show: a mark, never the path


def test_due_on_the_monotonic_clock():
    assert rules.due_in(None, 60, 100) == 0
    assert rules.due_in(100, 60, 130) == 30
    assert rules.due_in(100, 60, 170) == 0
    assert rules.due_in(100, 60, 50) == 0  # the clock went back (a new boot): beat now
    assert rules.due_in(100, 60, 100) == 60 and rules.due_in(100, 60, 100.5) == 59.5  # just sent: wait


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_heartbeats_are_named_in_order_with_defaults(tmp_path):
    config, _ = load_config(str(write(tmp_path, '[[heartbeat]]\nurl = "https://hc-ping.com/a"\n'
                                                '[[heartbeat]]\nurl = "https://hc-ping.com/b"\nname = "kuma"\n'
                                                'interval = "5m"\nhold_fails = true\n')), {})
    first, second = config.heartbeat
    assert (first.name, first.interval, first.timeout, first.hold_fails, first.agents) == \
        ("heartbeat1", 60.0, 10.0, False, [])
    assert (second.name, second.interval, second.hold_fails) == ("kuma", 300.0, True)


@pytest.mark.parametrize("text,key", [
    ('[[heartbeat]]\nurl = "ftp://x/secretpath"\n', "heartbeat[0].url"),
    ('[[heartbeat]]\nurl = "http://example.com/secretpath"\n', "heartbeat[0].url"),
    ('[[heartbeat]]\nurl = "https://x:port/secretpath"\n', "heartbeat[0].url"),
    ('[[heartbeat]]\nname = "a"\nurl = "https://x/secretpath"\n[[heartbeat]]\nname = "a"\nurl = "https://y/z"\n',
     "heartbeat[1].name"),
    ('[[heartbeat]]\nurl = "https://x/secretpath"\nagents = ["nobody"]\n', "heartbeat[0].agents[0]"),
    ('[[heartbeat]]\nurl = "https://x/secretpath"\nintervl = "1m"\n', "heartbeat[0].intervl"),
    ('[[heartbeat]]\nname = "a"\n', "heartbeat[0].url"),
    # A table for the list of tables (`[heartbeat]`, the easy typo), a list for the URL: named by type.
    ('[heartbeat]\nurl = "https://hc-ping.com/secretpath"\n', "heartbeat"),
    ('[[heartbeat]]\nurl = ["https://hc-ping.com/secretpath"]\n', "heartbeat[0].url"),
])
def test_a_bad_heartbeat_names_its_key_and_never_echoes_the_url(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message and key in message
    assert "secretpath" not in message


def test_a_push_url_is_never_in_the_configs_repr(tmp_path):
    # A traceback that shows its locals (Textual's, Rich's log handler) prints a config or a context.
    config, _ = load_config(str(write(tmp_path, '[[heartbeat]]\nurl = "https://hc-ping.com/secretpath"\n')), {})
    assert "secretpath" not in repr(config) and "secretpath" not in repr(config.heartbeat)
    assert "heartbeat1" in repr(config.heartbeat[0]) and config.heartbeat[0].url.endswith("/secretpath")
    # Nor an agent's environment's values (an API key), its own or an [[agents]] entry's.
    one, _ = load_config(str(write(tmp_path, '[agent.env]\nANTHROPIC_API_KEY = "sk-secret-1"\n')), {})
    text = ('[[agents]]\nname = "a"\n[agents.env]\nOTHER_KEY = "sk-secret-2"\n'
            '[[agents]]\nname = "b"\n')
    several, _ = load_config(str(write(tmp_path, text)), {})
    for shown in (repr(one), repr(several), repr(several.for_agent("a")), repr(several.for_agent("a").agent)):
        assert "sk-secret" not in shown, shown
    assert "ANTHROPIC_API_KEY" in repr(one.agent) and several.for_agent("a").agent.env["OTHER_KEY"] == "sk-secret-2"


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def beat_ctx(tmp_path: Path, url: str) -> Context:
    path = write(tmp_path, f'state_dir = "{tmp_path / "state"}"\n[[heartbeat]]\nurl = "{url}"\ntimeout = "2s"\n')
    return Context.load(str(path), None, environ={})


def sent(ctx, halt, says, why="") -> Sender:
    from harness import wait_for

    sender = Sender(ctx, ctx.config.heartbeat[0], halt)
    assert sender.offer(says, why)
    wait_for(lambda: heartbeat_pushes.last(ctx.store, "heartbeat1"), 30, what="the beat recorded")
    return sender


def test_a_sender_gets_ok_and_fail_and_records_them(tmp_path, receiver):
    ctx = beat_ctx(tmp_path, receiver.url + "/ping/s3cret")
    halt = threading.Event()
    try:
        sent(ctx, halt, OK)
        assert receiver.paths == ["/ping/s3cret"]
        beat = heartbeat_pushes.last(ctx.store, "heartbeat1")
        assert (beat["says"], beat["sent"]) == (OK, True)
        with ctx.store.write() as db:
            db.execute("DELETE FROM meta WHERE key LIKE 'heartbeat_push:%'")
        sent(ctx, halt, FAIL, "main exited")
        assert receiver.paths[-1] == "/ping/s3cret/fail"
        beat = heartbeat_pushes.last(ctx.store, "heartbeat1")
        assert (beat["says"], beat["why"], beat["sent"]) == (FAIL, "main exited", True)
        got = {c.labels["result"]: c.value for c in counters.read(ctx.store, COUNTER)}
        assert got == {OK: 1, FAIL: 1}
    finally:
        halt.set()
        ctx.close()


def test_a_loopback_receiver_is_reached_directly_never_through_the_proxy(tmp_path, receiver, monkeypatch):
    # Plain http:// is allowed to loopback alone; urllib sent it through an http_proxy of the
    # daemon's environment all the same, the URL's secret path to the proxy in clear text.
    proxy = Receiver()  # a proxy would be asked GET http://127.0.0.1:PORT/ping/s3cret: it records that
    try:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        ctx = beat_ctx(tmp_path, receiver.url + "/ping/s3cret")
        halt = threading.Event()
        try:
            sent(ctx, halt, OK)
        finally:
            halt.set()
            ctx.close()
        assert receiver.paths == ["/ping/s3cret"] and proxy.paths == []
    finally:
        proxy.close()


def test_a_receiver_that_refuses_is_recorded_without_the_url(tmp_path, receiver):
    ctx = beat_ctx(tmp_path, receiver.url + "/missing/s3cret")
    halt = threading.Event()
    try:
        sent(ctx, halt, OK)
        beat = heartbeat_pushes.last(ctx.store, "heartbeat1")
        assert (beat["sent"], beat["error"]) == (False, "HTTP 404")
        assert "s3cret" not in str(beat)
        assert [c.labels["result"] for c in counters.read(ctx.store, COUNTER)] == ["error"]
    finally:
        halt.set()
        ctx.close()


def test_a_reply_that_is_no_http_is_recorded_and_the_next_beat_still_goes(tmp_path, receiver):
    """urllib does not wrap http.client's own errors (BadStatusLine and the rest): the sender's
    thread died of the first, and every beat after was dropped as "still sending the last"."""
    from harness import wait_for

    ctx = beat_ctx(tmp_path, receiver.url + "/garbled/s3cret")
    halt = threading.Event()
    try:
        sender = sent(ctx, halt, OK)
        beat = heartbeat_pushes.last(ctx.store, "heartbeat1")
        assert (beat["sent"], beat["error"]) == (False, "BadStatusLine") and "s3cret" not in str(beat)
        with ctx.store.write() as db:
            db.execute("DELETE FROM meta WHERE key LIKE 'heartbeat_push:%'")
        assert wait_for(lambda: sender.offer(OK, ""), 30, what="the thread taking the next beat")
        wait_for(lambda: heartbeat_pushes.last(ctx.store, "heartbeat1"), 30, what="the next beat recorded")
        assert sender.thread.is_alive() and len(receiver.paths) == 2
    finally:
        halt.set()
        ctx.close()


def test_a_hanging_receiver_holds_up_only_its_own_next_beat(tmp_path, receiver):
    from harness import wait_for

    ctx = beat_ctx(tmp_path, receiver.url + "/hang/s3cret")
    halt = threading.Event()
    try:
        sender = Sender(ctx, ctx.config.heartbeat[0], halt)
        assert sender.offer(OK, "")
        wait_for(lambda: receiver.paths, 30, what="the GET arriving")
        assert sender.offer(OK, "")  # waits in the slot: one beat queued behind the one in flight
        assert not sender.offer(OK, "")  # dropped at once, never waited for
        receiver.release.set()
        wait_for(lambda: len(receiver.paths) == 2, 30, what="the queued beat sent after the release")
    finally:
        halt.set()
        ctx.close()


def test_a_beat_recorded_after_the_status_took_its_now_is_just_now(tmp_path):
    # The daemon beats while `loom status` reads: its `now` comes first (make test-stress saw -3 ms).
    from loomtui.report.status import pushes

    ctx = beat_ctx(tmp_path, "http://127.0.0.1:9/ping/s3cret")
    try:
        with ctx.store.write() as db:
            heartbeat_pushes.record_in(db, "heartbeat1", {"at": 1_000.5, "says": OK, "sent": True})
        assert pushes(ctx, 1_000.0)["heartbeat1"]["age"] == 0.0
        assert pushes(ctx, 1_010.5)["heartbeat1"]["age"] == 10.0
    finally:
        ctx.close()
