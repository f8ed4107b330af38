"""Issue 26, part 1: the hooks settings Loom writes, the hook command (run by a real /bin/sh), the
parser of what a hook wrote, the ingest into a real store, the dispatch witness and its rules."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fake_clock import FakeClock
from loomtui import clock
from loomtui.agent.commands import render_command
from loomtui.config import parse_config
from loomtui.context import Context
from loomtui.errors import ConfigError
from loomtui.hooks import events, ingest, settings
from loomtui.hooks.events import UNREADABLE, parse, said, typed_digest
from loomtui.hooks.witness import Witness, line_calling_for_probe
from loomtui.hooks.witness_rules import EARLY, Prompt, Typed, probe_now, witness
from loomtui.report.doctor import OK, WARN, check_hooks
from loomtui.store import hook_events, ledger, outbox
from loomtui.text import digest
from loomtui.timing import Instant

BOOT = "b1"


def at(wall: float, mono: float | None = None) -> Instant:
    return Instant(wall, wall - 1000 if mono is None else mono, BOOT)


def hooked_ctx(tmp_path: Path, timeout: str = "15s", name: str = "state dir") -> Context:
    state = tmp_path / name
    config = tmp_path / "config.toml"
    config.write_text(f'state_dir = {json.dumps(str(state))}\n[agent]\n'
                      f'fresh_command = "claude --settings {{hook_settings}} --session-id {{session_id}}"\n'
                      f'resume_command = "claude --settings {{hook_settings}} --resume {{session_id}}"\n'
                      f'dispatch_timeout = "{timeout}"\n')
    return Context.load(str(config), None, environ={})


# -- the settings file and the placeholder -------------------------------------------------------


def test_the_settings_file_has_one_fixed_command_for_each_event_and_is_private(tmp_path):
    agent_dir = tmp_path / "it's an agent dir"
    agent_dir.mkdir()
    path = settings.write(agent_dir)
    assert path == agent_dir / "hooks" / "settings.json"
    doc = json.loads(path.read_text())
    assert sorted(doc) == ["hooks"]
    assert sorted(doc["hooks"]) == sorted(["SessionStart", "UserPromptSubmit", "Stop", "StopFailure",
                                          "Notification", "PreCompact", "PostToolUse", "PostToolUseFailure"])
    command = settings.hook_command(agent_dir)
    for groups in doc["hooks"].values():
        assert groups == [{"matcher": "", "hooks": [{"type": "command", "command": command}]}]
    # The events directory is the only thing spliced in, and it is shell-quoted.
    quoted = shlex.quote(str(agent_dir / "hooks" / "events"))
    assert command == f"set -C; cat > {quoted}/ev.$$.json; exit 0"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (agent_dir / "hooks", agent_dir / "hooks" / "events"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    path.write_text("{}")
    settings.write(agent_dir)  # refreshed whole before each launch
    assert json.loads(path.read_text()) == doc


def test_the_placeholder_expands_to_the_agent_s_own_settings_file_quoted(tmp_path):
    ctx = hooked_ctx(tmp_path)
    rendered = render_command(ctx, ctx.config.agent.fresh_command, "abc")
    expected = shlex.quote(str(ctx.agent_dir / "hooks" / "settings.json"))
    assert rendered == f"claude --settings {expected} --session-id abc"
    assert shlex.split(rendered)[2] == str(ctx.agent_dir / "hooks" / "settings.json")
    assert settings.wanted(ctx.config.agent)
    assert ctx.config.agent.dispatch_timeout == 15.0


def test_without_the_placeholder_there_is_no_witness_and_a_bad_placeholder_names_it(tmp_path):
    config = parse_config({"agent": {"fresh_command": "claude --session-id {session_id}"}}, "c.toml", None)
    assert not settings.wanted(config.agent) and config.agent.dispatch_timeout == 15.0
    with pytest.raises(ConfigError, match=r"\{hook_settings\}"):
        parse_config({"agent": {"fresh_command": "claude --settings {hook_setings} --session-id {session_id}"}}, "c.toml", None)


def test_doctor_warns_when_a_claude_code_command_lacks_the_hooks_settings():
    def config(fresh: str, resume: str):
        return parse_config({"agent": {"fresh_command": fresh, "resume_command": resume}}, "c.toml", None)

    bare = check_hooks(config("claude --session-id {session_id}", "claude --settings {hook_settings} --resume {session_id}"))
    assert bare is not None and (bare.status, bare.name) == (WARN, "hooks")
    assert bare.detail.startswith("agent.fresh_command lacks --settings {hook_settings}: no dispatch witness")
    hooked = check_hooks(config("claude --settings {hook_settings} --session-id {session_id}",
                                "/opt/bin/claude --settings {hook_settings} --resume {session_id}"))
    assert hooked is not None and hooked.status == OK
    assert check_hooks(config("python -m loomtui.demo.agent --session-id {session_id}",
                              "python -m loomtui.demo.agent --resume {session_id}")) is None


def run_hook(agent_dir: Path, payload: bytes) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", "-c", settings.hook_command(agent_dir)], input=payload,
                          capture_output=True, timeout=30)


def test_the_hook_command_stores_the_payload_as_received_and_no_shell_reads_it(tmp_path):
    agent_dir = tmp_path / "a b$(touch pwned)"
    agent_dir.mkdir()
    settings.write(agent_dir)
    hostile = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s",
                          "prompt": "$(touch pwned) `touch pwned` ; rm -rf / \x1b[31m \"'"}).encode()
    done = run_hook(agent_dir, hostile)
    # Nothing on stdout (Claude Code would add it to the model's context) and exit 0.
    assert done.returncode == 0 and done.stdout == b""
    [written] = list(settings.events_dir(agent_dir).iterdir())
    assert written.name.startswith("ev.") and written.name.endswith(".json")
    assert written.read_bytes() == hostile
    assert not list(tmp_path.rglob("pwned")) and not (Path.cwd() / "pwned").exists()
    # A file of that name already there (a pid reused before the daemon read it) is never overwritten.
    blocker = settings.events_dir(agent_dir) / "ev.1.json"
    blocker.write_bytes(b"earlier")
    reused = subprocess.run(["/bin/sh", "-c", settings.hook_command(agent_dir).replace("$$", "1")],
                            input=hostile, capture_output=True, timeout=30)
    assert reused.returncode == 0 and blocker.read_bytes() == b"earlier"


def test_concurrent_hooks_never_interleave_and_a_missing_directory_still_exits_0(tmp_path):
    settings.write(tmp_path)
    payloads = [json.dumps({"hook_event_name": "PostToolUse", "n": i, "pad": "x" * 200_000}).encode()
                for i in range(12)]
    with ThreadPoolExecutor(6) as pool:
        assert all(r.returncode == 0 for r in pool.map(lambda p: run_hook(tmp_path, p), payloads))
    stored = sorted(p.read_bytes() for p in settings.events_dir(tmp_path).iterdir())
    assert stored == sorted(payloads)
    gone = tmp_path / "elsewhere"
    assert run_hook(gone, payloads[0]).returncode == 0  # an event lost, never the agent's turn


# -- the parser ----------------------------------------------------------------------------------


def event(**fields) -> bytes:
    return json.dumps({"session_id": "0f0e-11", "transcript_path": "/x", "cwd": "/w", **fields}).encode()


def test_each_event_is_typed_with_its_qualifier():
    assert parse(event(hook_event_name="SessionStart", source="resume")) == \
        events.HookEvent("SessionStart", "0f0e-11", "resume", {})
    assert parse(event(hook_event_name="StopFailure", error_type="rate_limit")).source == "rate_limit"
    assert parse(event(hook_event_name="Notification", notification_type="permission_prompt",
                       message="Claude needs your permission to use Bash")).source == "permission_prompt"
    assert parse(event(hook_event_name="PreCompact", trigger="auto")).source == "auto"
    tool = parse(event(hook_event_name="PostToolUse", tool_name="Bash", tool_input={"command": "ls"},
                       tool_response={"stdout": "secret"}))
    assert (tool.event, tool.source, tool.detail) == ("PostToolUse", "Bash", {})
    assert parse(event(hook_event_name="Stop", stop_hook_active=False)) == events.HookEvent("Stop", "0f0e-11")


def test_a_prompt_is_kept_as_its_length_and_digests_never_its_text():
    prompt = "first line\n  second   line \nthird"
    parsed = parse(event(hook_event_name="UserPromptSubmit", prompt=prompt))
    assert parsed.detail == {"length": len(prompt), "said": said(prompt)}
    assert "line" not in json.dumps(parsed.detail)
    # The whole prompt, and each line as typed (whitespace collapsed), carry a typed line.
    assert typed_digest("second line") in parsed.detail["said"]
    assert typed_digest("first line") in parsed.detail["said"] and typed_digest("third") in parsed.detail["said"]
    # What inject records for a plain line is the very digest the prompt carries.
    assert typed_digest("say hi") == digest("say hi")


def test_what_is_not_an_event_is_recorded_as_unreadable_never_raised():
    assert parse(b"{not json").event == UNREADABLE and "not JSON" in parse(b"{not json").detail["error"]
    assert parse(b"[1, 2]").detail == {"error": "not a JSON object", "bytes": 6}
    assert parse(b'{"session_id": "s"}').detail["error"] == "no hook_event_name"
    assert parse(b"\xff\xfe garbage").event == UNREADABLE
    assert parse(b"[" * 100_000).event == UNREADABLE  # nested past the parser's depth
    shown = parse(event(hook_event_name="Stop\x1b[2J", session_id="s\x07id"))
    assert "\x1b" not in shown.event and "\x07" not in shown.session_id
    assert parse(event(hook_event_name="X" * 500)).event == "X" * events.WORD


def test_an_event_too_large_to_parse_is_named_from_its_head():
    head = event(hook_event_name="PostToolUse", tool_name="Read")[:-1] + b', "tool_response": "'
    parsed = parse(head[: events.HEAD], size=events.MAX_PARSED + 1)
    assert (parsed.event, parsed.session_id) == ("PostToolUse", "0f0e-11")
    assert parsed.detail == {"error": "too large to parse", "bytes": events.MAX_PARSED + 1}
    assert parse(b'{"x": "' + b"y" * 100, size=events.MAX_PARSED + 1).event == UNREADABLE


# -- recording what the hooks wrote ---------------------------------------------------------------


def test_event_files_are_recorded_in_the_store_and_the_ledger_then_deleted(tmp_path):
    ctx = hooked_ctx(tmp_path)
    settings.write(ctx.agent_dir)
    for payload in (event(hook_event_name="SessionStart", source="startup"),
                    event(hook_event_name="UserPromptSubmit", prompt="hello"),
                    event(hook_event_name="Stop"),
                    event(hook_event_name="StopFailure", error_type="rate_limit"),
                    event(hook_event_name="Notification", notification_type="idle_prompt"),
                    event(hook_event_name="PreCompact", trigger="manual")):
        assert run_hook(ctx.agent_dir, payload).returncode == 0
    directory = settings.events_dir(ctx.agent_dir)
    (directory / "ev.1.json").write_bytes(b'{"hook_event_name": "St')  # a hook still writing
    garbage = directory / "ev.2.json"
    garbage.write_bytes(b"garbage")
    long_ago = garbage.stat().st_mtime - ingest.PARTIAL_GRACE - 1
    os.utime(garbage, (long_ago, long_ago))  # no longer being written: unreadable
    os.symlink("/etc/passwd", directory / "ev.3.json")
    (directory / "other.txt").write_text("not an event")
    recorded = ingest.collect(ctx)
    assert len(recorded) == 7
    rows = list(reversed(hook_events.recent(ctx.store, ctx.agent)))
    assert sorted(r["event"] for r in rows) == sorted(["SessionStart", "UserPromptSubmit", "Stop", "StopFailure",
                                                       "Notification", "PreCompact", UNREADABLE])
    prompt = next(r for r in rows if r["event"] == "UserPromptSubmit")
    assert json.loads(prompt["detail"]) == {"length": 5, "said": [digest("hello")]}
    assert prompt["session_id"] == "0f0e-11" and prompt["mono"] is not None and prompt["boot"] is not None
    kinds = {e.kind: e.detail for e in ledger.tail(ctx.store, 20)}
    assert kinds["session_started"] == {"event": "SessionStart", "session_id": "0f0e-11", "source": "startup"}
    assert kinds["turn_failed"]["source"] == "rate_limit"
    assert kinds["agent_notification"]["source"] == "idle_prompt"
    assert kinds["compaction"]["source"] == "manual"
    assert not {"inject", "dispatch_missing"} & set(kinds)  # prompt and stop: the table only
    # Recorded files are gone; the one being written, the link and a stranger are left alone.
    assert sorted(p.name for p in directory.iterdir()) == ["ev.1.json", "ev.3.json", "other.txt"]
    assert not any("root:" in (r["detail"] or "") for r in rows)
    assert ingest.collect(ctx) == []


def test_an_event_file_that_cannot_be_removed_is_recorded_once(tmp_path, monkeypatch):
    # The directory refuses the delete (made read-only, remounted so: root ignores a mode, so the
    # system's refusal is played by pathlib's unlink, not Loom's). Read again at each look, the
    # permission prompt told the operator again each time and the failed turn's hold began anew.
    ctx = hooked_ctx(tmp_path)
    settings.write(ctx.agent_dir)
    directory = settings.events_dir(ctx.agent_dir)
    real_unlink = Path.unlink

    def refused(self, missing_ok=False):
        if self.parent == directory:
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, missing_ok)

    monkeypatch.setattr(Path, "unlink", refused)
    for payload in (event(hook_event_name="Notification", notification_type="permission_prompt", message="Bash"),
                    event(hook_event_name="StopFailure", error_type="rate_limit")):
        assert run_hook(ctx.agent_dir, payload).returncode == 0
    assert len(ingest.collect(ctx)) == 2
    for _ in range(3):
        assert ingest.collect(ctx) == []
    assert len(hook_events.recent(ctx.store, ctx.agent)) == 2
    assert [e.kind for e in ledger.tail(ctx.store, 50)].count("turn_failed") == 1
    assert outbox.summary(ctx.store)[outbox.PENDING] == 2  # told once of the prompt, once of the hold
    # A new event beside them is recorded as any other.
    assert run_hook(ctx.agent_dir, event(hook_event_name="Stop")).returncode == 0
    assert [r.event.event for r in ingest.collect(ctx)] == ["Stop"]
    monkeypatch.undo()
    # Deletable again (a remount, a chmod): the next look removes them, recording none again.
    assert ingest.collect(ctx) == [] and list(directory.iterdir()) == []
    assert str(directory) not in ingest._UNREMOVED and len(hook_events.recent(ctx.store, ctx.agent)) == 3


# -- the dispatch witness -------------------------------------------------------------------------


def line(i: int, wall: float, text: str) -> Typed:
    return Typed(i, at(wall), typed_digest(text), "inject")


def prompt(i: int, wall: float, *texts: str) -> Prompt:
    return Prompt(i, at(wall), frozenset(said("\n".join(texts))))


def test_a_typed_line_is_dispatched_by_the_prompt_that_carries_it():
    verdict = witness([line(1, 100, "hi")], [prompt(7, 101, "hi")], set(), at(200), 15)
    assert verdict.dispatched == {1: 7} and verdict.missing == [] and verdict.next_due is None


def test_a_line_unmatched_past_the_timeout_is_missing_once():
    typed = [line(1, 100, "hi")]
    early = witness(typed, [prompt(7, 101, "other")], set(), at(110), 15)
    assert early.missing == [] and early.next_due == pytest.approx(5)
    late = witness(typed, [prompt(7, 101, "other")], set(), at(115), 15)
    assert late.missing == typed and late.next_due is None
    assert witness(typed, [], {1}, at(500), 15).missing == []  # already recorded


def test_the_timeout_is_counted_on_the_monotonic_clock_within_a_boot():
    typed = [Typed(1, Instant(100, 50, BOOT), "d")]
    # The wall clock stepped forward an hour: 5 s passed, nothing is missing yet.
    assert witness(typed, [], set(), Instant(3700, 55, BOOT), 15).missing == []
    assert witness(typed, [], set(), Instant(3700, 65, BOOT), 15).missing == typed


def test_matching_is_one_to_one_in_order_and_a_prompt_long_before_the_line_does_not_count():
    typed = [line(1, 100, "same"), line(2, 130, "same")]
    one = witness(typed, [prompt(7, 101, "same")], set(), at(200), 15)
    assert one.dispatched == {1: 7} and one.missing == [typed[1]]
    assert witness(typed, [prompt(7, 101, "same"), prompt(8, 131, "same")], set(), at(200), 15).dispatched == \
        {1: 7, 2: 8}
    # Reported a moment before the typed line's event was written: still its dispatch.
    assert witness([line(1, 100, "x")], [prompt(7, 100 - EARLY, "x")], set(), at(200), 15).dispatched == {1: 7}
    assert witness([line(1, 100, "x")], [prompt(7, 99 - EARLY, "x")], set(), at(200), 15).dispatched == {}


def test_queued_lines_sent_as_one_prompt_are_each_dispatched():
    # Claude Code joins the lines queued behind a turn into one message (docs/STREAM.md): one
    # prompt carries each of them, once.
    typed = [line(1, 100, "first"), line(2, 101, "  second  line ")]
    verdict = witness(typed, [prompt(7, 120, "first", "second line")], set(), at(300), 15)
    assert verdict.dispatched == {1: 7, 2: 7} and verdict.missing == []
    again = [*typed, line(3, 102, "first")]  # the same line twice is owed two prompts
    assert witness(again, [prompt(7, 120, "first", "second line")], set(), at(300), 15).missing == [again[2]]
    assert witness(again, [prompt(7, 120, "first", "second line"), prompt(8, 121, "first")], set(), at(300),
                   15).dispatched == {1: 7, 2: 7, 3: 8}
    # What earlier looks took is not taken again.
    assert witness([line(3, 102, "first")], [prompt(7, 120, "first")], set(), at(300), 15,
                   {(7, typed_digest("first"))}).missing == [line(3, 102, "first")]


def test_a_missing_line_calls_for_a_probe_only_if_no_probe_has_answered_since():
    assert not probe_now(None, 50, "ok", 60)
    assert probe_now(100, None, None, None)                 # never probed
    assert probe_now(100, 50, "ok", 60)                     # typed after the last ack
    assert not probe_now(100, 90, "ok", 110)                # the probe typed later acked: it heard
    assert not probe_now(100, 90, "ok", 100)
    assert probe_now(100, 90, "miss", None)                 # a line typed after a probe that missed
    assert not probe_now(100, 100, "miss", None)
    assert probe_now(100, 90, "ok", None)                   # an ok without an ack time counts from its send


def test_a_probe_acked_after_a_missing_line_was_recorded_answers_it_whatever_the_wall_clock_did(tmp_path):
    """The wall clock stepped back an hour after a dispatch_missing: every later probe was sent and
    acked at a wall time before the line's typing, so by wall time none answered it, and the canary
    probed back to back (a real model turn each) until the clock caught up. The ledger's order says
    the ack came after."""
    from loomtui.canary import runs as canary_runs

    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        typed_event(ctx, "never taken")
        virtual.advance(16)
        assert seen.look() == (1, None)
        assert line_calling_for_probe(ctx) == virtual.at_wall - 16
        virtual.at_wall -= 3600  # NTP steps a clock that ran an hour ahead back
        virtual.advance(5)
        sent = clock.wall()
        run = canary_runs.insert_run(ctx, "n-after", "canary", canary_runs.PENDING, sent, sent + 60)
        ledger.append(ctx.store, "canary_sent", source="canary", detail={"run": run, "ok": True})
        virtual.advance(2)
        assert canary_runs.settle_run(ctx, run, canary_runs.OK, ack_at=clock.wall())
        assert line_calling_for_probe(ctx) is None
        # A probe that missed since answers nothing: the line still calls (by its wall rule, as ever).
        virtual.at_wall += 3600
        run = canary_runs.insert_run(ctx, "n-missed", "canary", canary_runs.PENDING, clock.wall(), clock.wall() + 60)
        assert canary_runs.settle_run(ctx, run, canary_runs.MISS)
        assert line_calling_for_probe(ctx) is None  # the ok after the record still answered it
        virtual.advance(1)
        typed_event(ctx, "lost again")
        virtual.advance(16)
        assert seen.look() == (1, None)
        assert line_calling_for_probe(ctx) == virtual.at_wall - 16  # a new missing line calls again


def test_two_threads_writing_the_settings_at_once_both_succeed(tmp_path):
    """The daemon's hooks loop and a relaunch write the settings at once at a start: with one
    temporary name per process, one truncated the other's file and the other's rename failed."""
    from harness import failures_at_once

    agent_dir = tmp_path / "agent"
    agent_dir.mkdir(mode=0o700)
    assert failures_at_once(lambda: [settings.write(agent_dir) for _ in range(300)], 2) == []
    path = settings.settings_path(agent_dir)
    assert json.loads(path.read_text()) == settings.settings(agent_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []  # no temporaries left


def test_a_probe_typed_before_the_missing_line_settled_ok_after_its_record_does_not_answer_it(tmp_path):
    """settle_stale records a dead prober's ok up to its deadline and more after it: recorded after
    the dispatch_missing, its ack (before the line was typed) had answered the line, and the probe
    the missing line called for was never sent."""
    from loomtui.canary import runs as canary_runs

    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        sent = clock.wall()
        run = canary_runs.insert_run(ctx, "n-before", "canary", canary_runs.PENDING, sent, sent + 60)
        ledger.append(ctx.store, "canary_sent", source="canary", detail={"run": run, "ok": True})
        virtual.advance(3)
        typed_at = clock.wall()
        typed_event(ctx, "never taken")
        virtual.advance(16)
        assert seen.look() == (1, None)
        assert canary_runs.settle_run(ctx, run, canary_runs.OK, ack_at=sent + 1)  # acked before the line
        assert line_calling_for_probe(ctx) == typed_at


def test_a_line_typed_after_the_wall_clock_stepped_back_below_the_witness_s_start_is_judged(tmp_path):
    """The horizon ran from the witness's start by wall time: stepped back an hour, every line typed
    for that hour lay before it, and none was judged."""
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        virtual.at_wall -= 3600
        virtual.advance(1)
        lost = typed_event(ctx, "never taken")
        assert seen.look() == (0, 15.0)
        virtual.advance(16)
        assert seen.look() == (1, None)
        [missing] = [e for e in ledger.tail(ctx.store, 20) if e.kind == "dispatch_missing"]
        assert missing.detail["typed"] == lost


def test_a_slash_command_typed_into_the_agent_is_owed_no_prompt(tmp_path):
    """`loom inject /compact`: the CLI runs its own command and submits no prompt, so the witness
    reported it missing and hastened a probe each time. The real inject; the driver port takes the line."""
    from loomtui import actions

    class Taking:
        has_dialogs, owns_turns = False, False

        def pane_pid(self) -> int:
            return 4242

        def type_line(self, text, expect_pane_pid=None, *, origin="operator", ref=""):
            return None

    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    ctx.driver = Taking()
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        assert actions.inject(ctx, "/compact", source="cli").ok
        assert actions.inject(ctx, "what broke?", source="cli").ok
        assert actions.inject(ctx, "/etc/hosts is wrong", source="cli").ok  # a path: text, owed a prompt
        virtual.advance(16)
        assert seen.look() == (2, None)  # the plain lines only
    [slash] = [e for e in ledger.tail(ctx.store, 20) if e.kind == "inject" and e.detail["length"] == 8]
    plain = [e for e in ledger.tail(ctx.store, 20) if e.kind == "inject" and e.detail["length"] != 8]
    assert slash.detail["slash"] is True and "compact" not in json.dumps(slash.detail)  # that, not which
    assert len(plain) == 2 and not [e for e in plain if "slash" in e.detail]


def typed_event(ctx: Context, text: str, kind: str = "inject", **extra) -> int:
    return ledger.append(ctx.store, kind, source="cli", detail={
        "length": len(text), "digest": digest(text), "ok": True, **extra}).id


def test_the_witness_records_a_missing_dispatch_once_and_a_witnessed_one_never(tmp_path):
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        heard = typed_event(ctx, "hello there")
        lost = typed_event(ctx, "never taken", kind="queue_nudge")
        typed_event(ctx, "failed", ok=False)  # typing failed: nothing is owed
        queued = typed_event(ctx, "behind a turn", delivery="queued")
        assert seen.look() == (0, 15.0)
        with ctx.store.write() as db:
            hook_events.insert_in(db, ctx.agent, clock.now(), "UserPromptSubmit", "s", "",
                                  {"length": 11, "said": said("hello there")})
            # Its turn over at once: nothing holds the other lines back (a busy turn would, below).
            hook_events.insert_in(db, ctx.agent, clock.now(), "Stop", "s", "", {})
        virtual.advance(10)
        assert seen.look() == (0, pytest.approx(5.0))
        assert line_calling_for_probe(ctx) is None
        virtual.advance(6)
        assert seen.look() == (1, None)
        [missing] = [e for e in ledger.tail(ctx.store, 20) if e.kind == "dispatch_missing"]
        assert missing.source == "hooks"
        assert missing.detail == {"typed": lost, "kind": "queue_nudge", "typed_at": virtual.at_wall - 16,
                                  "after": 15.0}
        assert heard not in (missing.detail["typed"], queued)
        assert line_calling_for_probe(ctx) == virtual.at_wall - 16
        virtual.advance(60)
        assert seen.look() == (0, None)
        # A witness started afresh (a daemon restart) does not report it again.
        assert Witness(ctx).look() == (0, None)
        assert len([e for e in ledger.tail(ctx.store, 50) if e.kind == "dispatch_missing"]) == 1


def test_a_line_typed_into_a_busy_turn_is_owed_its_prompt_only_once_the_turn_ends(tmp_path):
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)

    def hook(event: str, **detail) -> None:
        with ctx.store.write() as db:
            hook_events.insert_in(db, ctx.agent, clock.now(), event, "s", "", detail)

    def missing() -> list:
        return [e for e in ledger.tail(ctx.store, 50) if e.kind == "dispatch_missing"]

    with clock.use(virtual):
        seen = Witness(ctx)
        hook("UserPromptSubmit", length=9, said=said("long task"))  # a turn begins, and runs
        virtual.advance(1)
        queued = typed_event(ctx, "queued behind the turn")
        typed_at = virtual.at_wall
        for _ in range(6):  # a minute and a half of work, a tool's use every 15 s: the CLI queues the line
            virtual.advance(15)
            hook("PostToolUse", tool_name="Bash")
            assert seen.look()[0] == 0
        assert not missing()
        virtual.advance(5)
        hook("Stop")  # the turn ends: the line is owed its prompt from now
        assert seen.look() == (0, pytest.approx(15.0, abs=5.0))
        virtual.advance(16)
        assert seen.look() == (1, None)
        [event] = missing()
        assert event.detail["typed"] == queued and event.detail["typed_at"] == typed_at  # when it was typed

        # The same, taken once the turn ended: dispatched, never missing.
        hook("UserPromptSubmit", length=7, said=said("another"))
        virtual.advance(1)
        typed_event(ctx, "taken after the turn")
        virtual.advance(20)
        hook("PostToolUse", tool_name="Read")
        assert seen.look()[0] == 0
        hook("Stop")
        virtual.advance(1)
        hook("UserPromptSubmit", length=20, said=said("taken after the turn"))
        virtual.advance(30)
        assert seen.look()[0] == 0
        assert len(missing()) == 1


def test_a_witness_that_starts_late_does_not_report_old_lines(tmp_path):
    ctx = hooked_ctx(tmp_path, timeout="15s")
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        typed_event(ctx, "typed before the hooks were configured")
        virtual.advance(3600)
        assert Witness(ctx).look() == (0, None)


def test_a_line_dispatched_behind_an_older_one_still_unsettled_stays_dispatched(tmp_path):
    """An older line whose prompt never came keeps the witness reading from before it: the newer
    line, dispatched at once, was read again at every look, its prompt already used, and reported
    missing once its own timeout had passed."""
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)
    with clock.use(virtual):
        seen = Witness(ctx)
        lost = typed_event(ctx, "line A")
        virtual.advance(1)
        typed_event(ctx, "line B")
        with ctx.store.write() as db:
            hook_events.insert_in(db, ctx.agent, clock.now(), "UserPromptSubmit", "s", "",
                                  {"length": 6, "said": said("line B")})
            hook_events.insert_in(db, ctx.agent, clock.now(), "Stop", "s", "", {})
        virtual.advance(1)
        assert seen.look()[0] == 0
        for _ in range(3):
            virtual.advance(7)
            seen.look()
        missing = [e.detail["typed"] for e in ledger.tail(ctx.store, 50) if e.kind == "dispatch_missing"]
        assert missing == [lost]


def test_a_line_held_behind_a_turn_has_its_whole_timeout_from_the_turn_s_end(tmp_path):
    """The held line's timeout started again only at looks where it had run out: seen ended, the
    turn left it what remained of the last (0 to 15 s), and a line the CLI took a second after the
    turn's end could be reported missing."""
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)

    def hook(event: str, **detail) -> None:
        with ctx.store.write() as db:
            hook_events.insert_in(db, ctx.agent, clock.now(), event, "s", "", detail)

    with clock.use(virtual):
        seen = Witness(ctx)
        hook("UserPromptSubmit", length=9, said=said("long task"))
        virtual.advance(1)
        typed_event(ctx, "queued behind the turn")
        for _ in range(3):  # 45 s of work: held back at the look past its timeout (16 s), again at 31 and 46
            virtual.advance(15)
            hook("PostToolUse", tool_name="Bash")
            assert seen.look()[0] == 0
        virtual.advance(14)  # 14 s since the last restart of its timeout: the turn ends now
        hook("Stop")
        assert seen.look() == (0, pytest.approx(15.0))  # the whole timeout from here
        virtual.advance(2)
        assert seen.look()[0] == 0  # before, it was reported missing here
        hook("UserPromptSubmit", length=22, said=said("queued behind the turn"))
        virtual.advance(30)
        assert seen.look()[0] == 0
        assert not [e for e in ledger.tail(ctx.store, 50) if e.kind == "dispatch_missing"]


def test_a_held_line_is_matched_to_its_prompt_also_when_the_look_after_the_turn_comes_late(tmp_path):
    """The look that sees the holding turn ended may come late (the hooks loop waited on a resume's
    relaunch lock, a slow store): its timeout starts there, but its prompt, written just after the
    turn's end, still carries it; counted from that look, the prompt was too early to match."""
    ctx = hooked_ctx(tmp_path, timeout="15s")
    settings.write(ctx.agent_dir)
    virtual = FakeClock(1_000_000.0, 1_000_000.0 - 1000, BOOT)

    def hook(event: str, **detail) -> None:
        with ctx.store.write() as db:
            hook_events.insert_in(db, ctx.agent, clock.now(), event, "s", "", detail)

    with clock.use(virtual):
        seen = Witness(ctx)
        hook("UserPromptSubmit", length=9, said=said("long task"))
        virtual.advance(1)
        typed_event(ctx, "queued behind the turn")
        virtual.advance(16)
        hook("PostToolUse", tool_name="Bash")
        assert seen.look()[0] == 0  # held back
        virtual.advance(5)
        hook("Stop")
        virtual.advance(1)
        hook("UserPromptSubmit", length=22, said=said("queued behind the turn"))  # taken at once
        virtual.advance(45)  # the next look comes late
        assert seen.look()[0] == 0
        virtual.advance(30)
        assert seen.look()[0] == 0
        assert not [e for e in ledger.tail(ctx.store, 50) if e.kind == "dispatch_missing"]
