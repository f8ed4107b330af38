"""Hostile text through every place Loom shows it, and nothing of it raw on the way out.

The text carries what a terminal obeys (ESC, CSI, OSC ended by ST and by BEL, OSC 52 that would
write the clipboard, a C1 CSI, DEL, bidi overrides) and bytes that are not UTF-8. It goes in the
ways it does in life: a hold reason through `loom hold --reason`, a job's name from the config, its
log lines from a real `loom run-job`, the queue through `loom sentinel scan`, a note through
`loom resolve --note`, an event detail in the ledger, memory titles with undecodable bytes. Then
the real commands, the console, the Telegram messages (sent by the real sender to the loopback
fake Bot API) and the metrics exposition are read back, and none of it may arrive raw.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
import time
import unicodedata

import pytest
from conftest import REPO, loom_env
from fakebot import FakeBot
from prometheus_client import generate_latest
from prometheus_client.core import CollectorRegistry
from rich.text import Text
from textual.widgets import DataTable, TabbedContent
from tui_state import until, write_config

from loomtui import text
from loomtui.context import Context
from loomtui.sentinel import queue as sentinel_queue
from loomtui.store import ledger, outbox

OSC_TITLE = "\x1b]2;PWNED\x1b\\"          # set the window/pane title, ST-terminated
OSC_CLIPBOARD = "\x1b]52;c;UFdORUQ=\x07"  # write the clipboard, BEL-terminated
CSI = "\x1b[31m"
C1_CSI = "\x9b31m"                        # CSI as one C1 character
HOSTILE = f"x {OSC_TITLE} {OSC_CLIPBOARD} {CSI}red {C1_CSI} del\x7f rtl\u202e iso\u2066 bell\x07 nel\x85 y"
REASON = " ".join(HOSTILE.split())  # a hold's reason as `loom hold` keeps it (NEL is whitespace)
# The same as bytes a job writes: the UTF-8 of HOSTILE, then bytes that are no UTF-8 at all
# (a raw 0x9b is CSI to an 8-bit terminal).
LOG_LINE = b"ERROR " + HOSTILE.encode() + b" raw \x9b\xff\xfe bytes\n"
# The config refuses C0 controls in a job's name; C1 and bidi controls it lets through.
JOB = f"job {C1_CSI} rtl\u202e [b]x"
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
TOKEN = "5550003333:AAE-sanitizeTESTtoken_aaBBccDDeeFF"
CHAT = 515151


def raw_controls(shown: str) -> list[str]:
    """What in `shown` a terminal would obey or reorder: C0 (but the newline) and C1 controls, DEL,
    bidi controls, lone surrogates."""
    return sorted({repr(c) for c in shown
                   if (unicodedata.category(c) in ("Cc", "Cs") and c != "\n") or c in BIDI})


def assert_clean(shown: str, where: str) -> None:
    found = raw_controls(shown)
    assert not found, f"{where}: raw {', '.join(found)} in {shown!r}"


def assert_clean_bytes(data: bytes, where: str) -> str:
    shown = data.decode("utf-8")  # strict: no undecodable byte goes out either
    assert_clean(shown, where)
    return shown


def loom(*args: str | bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """`loom` as a real subprocess, its output as bytes (to see exactly what a terminal would get)."""
    return subprocess.run([sys.executable, "-m", "loomtui", *args], capture_output=True, env=loom_env(env),
                          timeout=120, cwd=REPO)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """One state dir with hostile text in every field, put there by the real commands."""
    root = tmp_path_factory.mktemp("hostile")
    fake = FakeBot(TOKEN).start()
    try:
        (root / "logs").mkdir()
        job_log = root / "logs" / "hostile.log"
        extra = (f"[[jobs]]\nname = {json.dumps(JOB)}\nlog = \"{job_log}\"\nschedule = \"every 10m\"\n"
                 f"[telegram]\ntoken_env = \"LOOM_SANITIZE_TOKEN\"\nchat_id = {CHAT}\napi_base = \"{fake.api_base}\"\n")
        config = write_config(root, socket="loomtest-sanitize-absent", hostile_job=False, extra=extra)
        memory = root / "memory"
        # A memory title and hook with escapes and with bytes that are not UTF-8 (read as surrogates).
        (memory / "MEMORY.md").write_bytes(
            b"# Memory\n\n- [Operator](operator.md) \xe2\x80\x94 who runs this box\n"
            b"- [Evil \x1b]2;PWNED\x07 \xff\xfe title](evil.md) \xe2\x80\x94 hook \x1b[31m \xc2\x9b31m \x9b\n")
        (memory / "evil.md").write_bytes(b"# Evil \x1b]2;PWNED\x07 \xff\n\nbody \x1b]52;c;UFdORUQ=\x07 \x9b\n")
        env = {"LOOM_CONFIG": str(config), "LOOM_SANITIZE_TOKEN": TOKEN}
        writer = f"import sys; sys.stdout.buffer.write({LOG_LINE!r}); sys.stdout.flush(); sys.exit(2)"
        for _ in range(2):  # two runs: the schedule's drift metric needs a run before the last
            assert loom("run-job", JOB, "--", sys.executable, "-c", writer, env=env).returncode == 2
        scan = loom("sentinel", "scan", "--no-nudge", env=env)
        assert scan.returncode == 0, scan.stderr
        ctx = Context.load(str(config), None, environ={})
        items = {i.kind: i for i in sentinel_queue.listing(ctx.store)}
        assert set(items) == {"line", "exit"} and items["line"].job == JOB and "\x1b]2;PWNED" in items["line"].sample
        resolved = loom("resolve", str(items["exit"].id), "--note", HOSTILE, env=env)
        assert resolved.returncode == 0, resolved.stderr
        # An event whose detail carries the text as it was (operator alerts quote what they saw).
        ledger.append(ctx.store, "operator_alert", source="watchdog", detail={"text": HOSTILE, "job": JOB})
        held = loom("hold", "--reason", HOSTILE, env=env)
        assert held.returncode == 0, held.stderr
        try:
            yield {"root": root, "config": config, "env": env, "ctx": ctx, "hold_output": held, "bot": fake}
        finally:
            ctx.close()
    finally:
        fake.stop()


def test_the_cli_outputs_show_no_control_character_raw(world):
    env = world["env"]
    held = world["hold_output"]
    shown = assert_clean_bytes(held.stdout + held.stderr, "loom hold")
    assert "␛]2;PWNED␛\\" in shown  # shown, not dropped: the operator sees what was tried
    outputs = {}
    for args in (("status",), ("status", "--json"), ("queue",), ("queue", "--json"), ("ledger", "tail"),
                 ("ledger", "tail", "--json"), ("sentinel", "scan", "--no-nudge"), ("sentinel", "scan", "--json"),
                 ("memory",), ("memory", "lint"), ("memory", "search", "evil"), ("doctor",)):
        res = loom(*args, env=env)
        outputs[args] = assert_clean_bytes(res.stdout, "loom " + " ".join(args) + " (stdout)")
        assert_clean_bytes(res.stderr, "loom " + " ".join(args) + " (stderr)")
        assert "Traceback" not in outputs[args] + res.stderr.decode(), (args, res.stderr)
    assert "HELD: held by the operator: x ␛]2;PWNED␛\\" in outputs[("status",)]
    assert "job �31m rtl� [b]x" in outputs[("queue",)] and "␛]2;PWNED" in outputs[("ledger", "tail")]
    # JSON keeps the data: the escapes read back as the very characters that were stored.
    status = json.loads(outputs[("status", "--json")])
    assert status["hold"]["reason"] == REASON
    assert {i["job"] for i in json.loads(outputs[("queue", "--json")])["items"]} == {JOB}
    events = [json.loads(line) for line in outputs[("ledger", "tail", "--json")].splitlines()]
    assert {"text": HOSTILE, "job": JOB} in [e["detail"] for e in events]
    assert any(e["detail"].get("reason") == REASON for e in events if e["kind"] == "hold_placed")

    released = loom("release", env=env)
    assert released.returncode == 0 and "␛]2;PWNED" in assert_clean_bytes(released.stdout + released.stderr,
                                                                          "loom release")
    again = loom("hold", "--json", "--reason", HOSTILE, env=env)
    assert json.loads(assert_clean_bytes(again.stdout, "loom hold --json"))["hold"]["reason"] == REASON
    released = loom("release", "--json", env=env)
    assert_clean_bytes(released.stdout + released.stderr, "loom release --json")
    assert loom("hold", "--reason", HOSTILE, env=env).returncode == 0  # held again for the tests below


@pytest.mark.parametrize("args", [
    ("inject", b"\xff"),
    ("hold", "--reason", b"swap \xff the model"),
    ("--state-dir", b"/tmp/\xfe", "status"),
])
def test_an_argument_that_is_not_utf8_exits_2_with_one_line(world, args):
    res = loom(*args, env=world["env"])
    where = 1 + next(i for i, a in enumerate(args) if isinstance(a, bytes))
    assert res.returncode == 2
    assert res.stderr.decode() == f"loom: argument {where} is not valid UTF-8\n"
    assert res.stdout == b""
    # Nothing was done: the hold in force is still the one placed before, with its own reason.
    status = json.loads(loom("status", "--json", env=world["env"]).stdout)
    assert status["hold"]["reason"] == REASON


def test_a_loom_environment_variable_that_is_not_utf8_is_refused_in_one_line(world):
    res = subprocess.run([sys.executable, "-m", "loomtui", "status"], capture_output=True, timeout=120, cwd=REPO,
                         env={**{k.encode(): v.encode() for k, v in loom_env(world["env"]).items()},
                              b"LOOM_SESSION_ID": b"sess-\xff"})
    assert res.returncode == 2 and res.stderr == b"loom: environment variable LOOM_SESSION_ID is not valid UTF-8\n"


def screen_text(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def test_the_console_shows_no_control_character_raw(world):
    from loomtui.tui.app import LoomApp
    from loomtui.tui.modals import DetailScreen, PromptScreen

    ctx = world["ctx"]

    async def run():
        app = LoomApp(ctx, watch=False, refresh_every=3600)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(pilot, lambda: app.snapshot is not None, "a first snapshot")
            seen = [screen_text(app)]
            assert "␛]2;PWNED" in seen[0]  # the header's hold line, shown
            tabs = app.query_one(TabbedContent)
            # Each tab's screen once its own table is drawn (a word only that table shows).
            for key, tab, drawn in (("2", "canary", "latency"), ("3", "queue", "nudged"), ("4", "fleet", "schedule"),
                                    ("5", "memory", "MEMORY.md:"), ("6", "timeline", "incidents · page")):
                await pilot.press(key)
                await until(pilot, lambda tab=tab, drawn=drawn: tabs.active == tab and drawn in screen_text(app),
                            f"the {tab} tab drawn")
                seen.append(screen_text(app))
            queue = app.query_one("#queue-table", DataTable)
            await until(pilot, lambda: queue.row_count >= 2, "the queue items")
            cells = [c for r in range(queue.row_count) for c in queue.get_row_at(r)]
            assert all(isinstance(c, Text) for c in cells)
            for cell in cells:
                assert_clean(cell.plain, "a queue cell")
            await pilot.press("6")
            await pilot.press("t")  # the raw events, newest first: the hold, then the alert
            await until(pilot, lambda: "events" in screen_text(app), "the events view")
            for _ in range(3):
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, DetailScreen), "an event's detail")
                seen.append(screen_text(app))
                await pilot.press("escape")
                await until(pilot, lambda: not isinstance(app.screen, DetailScreen), "the detail closed")
                await pilot.press("down")
            await pilot.press("h")  # with a hold in force: the release prompt quotes the hold
            await until(pilot, lambda: isinstance(app.screen, PromptScreen) and "Enter to confirm" in screen_text(app),
                        "the release prompt")
            seen.append(screen_text(app))
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, PromptScreen), "the prompt closed")
            await pilot.resize_terminal(80, 24)
            await pilot.press("1")
            await until(pilot, lambda: tabs.active == "agent" and app.size == (80, 24) and
                        max(map(len, screen_text(app).splitlines())) <= 80, "the first tab at 80 columns")
            seen.append(screen_text(app))
            for n, shown in enumerate(seen):
                assert_clean(shown, f"console screen {n}")
            joined = "\n".join(seen)
            assert "␛]2;PWNED" in joined and "job �31m rtl� [b]x" in joined and "Evil ␛]2;PWNED␇" in joined

    asyncio.run(run())


def test_the_console_renderers_show_what_tmux_and_the_store_hand_them(world):
    from loomtui.tui.agent_panel import render_pane
    from loomtui.tui.header import render_header
    from loomtui.tui.queue_panel import describe
    from loomtui.tui.snapshot import PaneView, Source
    from loomtui.tui.tables import safe

    # A pane's text as capture-pane -e gives it, with what from_ansi leaves alone (C1, OSC).
    pane = render_pane(PaneView("up", f"prompt {CSI}red\x1b[0m {OSC_TITLE} {C1_CSI} {OSC_CLIPBOARD}\nnext",
                                why=HOSTILE))
    assert_clean(pane.plain, "the agent pane")
    assert "red" in pane.plain and any(span.style for span in pane.spans)  # the colour is kept
    snap = Source(world["ctx"]).load()
    assert_clean(render_header(snap.header).plain, "the header")
    for item in snap.queue:
        assert_clean(describe(item).plain, "a queue item's detail")
    assert_clean(safe("\udcff" + HOSTILE).plain, "a cell with a surrogate")


def test_telegram_messages_reach_the_chat_with_no_control_character_raw(world):
    from loomtui.telegram.bot import make_bot
    from loomtui.telegram.clock import SYSTEM
    from loomtui.telegram import rules
    from loomtui.telegram.commands import OperatorActions, agent_line, format_agents, queue_summary
    from loomtui.telegram.sender import Sender

    ctx = world["ctx"]
    actions = OperatorActions(ctx)
    try:
        replies = [actions.status(None), actions.queue(), actions.release(ctx.agent),
                   actions.hold(ctx.agent, REASON, None)]
    finally:
        actions.close()
    from loomtui.report import status as status_mod

    statuses = [status_mod.gather(ctx, events=0)]
    replies += [format_agents(statuses), agent_line(statuses[0]),
                queue_summary(sentinel_queue.listing(ctx.store), with_agent=True)]
    assert any("PWNED" in r for r in replies[:2])
    for reply in replies:
        assert_clean(reply, "a Telegram reply as formatted")
    # The way out is the sender's: every reply, and an escalation quoting a log line as the
    # sentinel read it, go through the real sender to the loopback Bot API.
    for n, reply in enumerate(replies):
        outbox.enqueue(ctx.store, reply, chat_id=CHAT, dedupe_key=f"sanitize-reply-{n}")
    outbox.enqueue(ctx.store, f"Loom: job {JOB} failed: {LOG_LINE.decode('utf-8', 'replace')}",
                   dedupe_key="sanitize-escalation")
    cfg = ctx.config.telegram
    assert asyncio.run(_drain(ctx, Sender(ctx.store, cfg, make_bot(TOKEN, cfg), SYSTEM))), "the outbox drained"
    texts = world["bot"].texts(CHAT)
    assert len(texts) >= len(replies) + 1 and any("␛]2;PWNED" in t for t in texts)
    for message in texts:
        assert_clean(message, "a message the fake Bot API received")
    # The same gate cuts and cleans whatever else it is handed (a surrogate, an undecodable byte).
    cut, _ = rules.truncate("surrogate \udcff " + HOSTILE * 200)
    assert_clean(cut, "a cut message") and rules.utf16_len(cut) <= rules.MAX_LENGTH


async def _drain(ctx, sender) -> bool:
    deadline = time.monotonic() + 60
    try:
        while outbox.head(ctx.store) is not None:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(min(await sender.step(), 0.2))
        return True
    finally:
        await sender.bot.shutdown()


def test_the_metrics_labels_show_no_control_character_raw(world):
    from loomtui.daemon.metrics import StoreCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(world["ctx"], lambda: {}))
    exposition = generate_latest(registry).decode("utf-8")
    assert_clean(exposition, "the metrics exposition")
    [hold] = [line for line in exposition.splitlines() if line.startswith("loom_hold{") and line.endswith(" 1.0")]
    assert 'reason="x ␛]2;PWNED␛\\\\ ' in hold  # the exposition's own escape of the backslash
    assert 'loom_schedule_drift_seconds{job="job �31m rtl� [b]x"}' in exposition


def test_a_log_record_is_one_line_with_no_control_character_raw():
    from loomtui.daemon.logs import FORMAT, SafeFormatter
    from loomtui.daemon.scrub import ScrubFilter

    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(SafeFormatter(FORMAT))
    handler.addFilter(ScrubFilter())
    log = logging.getLogger("loomtest.sanitize")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("hold placed: %s", HOSTILE + "\n2026-01-01 INFO loom: forged record")
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            log.exception("tick failed on %s", JOB)
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert_clean(out.getvalue(), "the log")
    assert lines[0].endswith("forged record") and "␊2026-01-01" in lines[0]  # one record, one line
    assert lines[1].startswith(tuple("0123456789")) and "tick failed on job �31m rtl� [b]x" in lines[1]
    assert lines[2] == "Traceback (most recent call last):"  # a traceback keeps its lines


def test_printable_is_one_for_one_and_json_safe_keeps_the_data():
    tricky = HOSTILE + " \udcff \U000e0041 👩\u200d💻 é\t"
    shown = text.printable(tricky)
    assert len(shown) == len(tricky) and text.printable(shown) == shown and not raw_controls(shown)
    assert text.printable("a\tb\nc", keep_newlines=True) == "a\tb\nc"
    assert text.one_line("a\nb") == "a␊b" and text.one_line("abcdef", 4) == "abc…"
    dumped = text.dumps({"k": tricky})
    assert not raw_controls(dumped) and json.loads(dumped) == {"k": tricky}
    assert text.undecodable(["ok", "é", "\udcff"]) == 3 and text.undecodable(["ok"]) is None


def test_sanitize_drops_exactly_unicode_control_characters():
    """sanitize's regex names the 65 code points of category Cc: the same as asking each character's category."""
    import sys
    import unicodedata

    every = "".join(chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF) + "\udcff"
    breaks = "\n\v\f\x85\u2028\u2029\t\r"
    spaced = "".join(" " if ch in breaks else ch for ch in every)
    assert text.sanitize(every) == "".join(ch for ch in spaced if unicodedata.category(ch) != "Cc")
    assert text.sanitize("a\r\nb\x1b[31mc\x9b\x00d") == "a b[31mcd"
