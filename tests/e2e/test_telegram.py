"""The Telegram channel end to end: python-telegram-bot in a real runner process against the loopback fake.

Every test ends by scanning what it produced (runner logs at DEBUG, `loom` command output,
every file of the state dir) for the bot token.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, loom_env, run_loom
from fakebot import FakeBot

from loomtui.store import ledger, outbox, session
from loomtui.store import telegram_state as state
from loomtui.store.db import Store

TOKEN = "5550001111:AAE-e2eTESTtoken_zzYYxxWWvvUUttSS"
OTHER_TOKEN = "5550002222:AAE-someOTHERtoken_qqRRssTTuuVV"
CHAT = 424242
STRANGER = 999001


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for: {what}", pytrace=False)
        time.sleep(0.05)


class Harness:
    def __init__(self, tmp_path: Path, fake: FakeBot) -> None:
        self.tmp, self.fake = tmp_path, fake
        self.state_dir = tmp_path / "state"
        self.log = tmp_path / "runner.log"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outputs: list[str] = []
        self._store: Store | None = None

    def config(self, *, commands: bool = False, token_file: Path | None = None, api_base: str | None = None) -> Path:
        token_line = f'token_file = "{token_file}"' if token_file else 'token_env = "LOOM_E2E_TOKEN"'
        path = self.tmp / "loom.toml"
        path.write_text(
            "[telegram]\n"
            f"{token_line}\n"
            f"chat_id = {CHAT}\n"
            f'api_base = "{api_base or self.fake.api_base}"\n'
            f"commands = {'true' if commands else 'false'}\n"
            'poll_interval = "100ms"\nbackoff_base = "100ms"\nbackoff_max = "500ms"\nlong_poll = "1s"\n'
        )
        return path

    def start(self, config: Path, token: str | None = TOKEN) -> subprocess.Popen[bytes]:
        env = {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
        if token:
            env["LOOM_E2E_TOKEN"] = token
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "loomtui.telegram", "--config", str(config), "--state-dir",
                 str(self.state_dir), "--log-level", "debug"],
                stdout=log, stderr=subprocess.STDOUT, env=loom_env(env), cwd=REPO,
            )
        self.procs.append(proc)
        return proc

    def terminate(self, proc: subprocess.Popen[bytes]) -> int:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout=30)

    @property
    def store(self) -> Store:
        if self._store is None:
            self.state_dir.mkdir(mode=0o700, exist_ok=True)
            self._store = Store.in_dir(self.state_dir)
        return self._store

    def loom(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = run_loom("--state-dir", str(self.state_dir), *args)
        self.outputs += [result.stdout, result.stderr]
        return result

    def events(self, kind: str) -> list[ledger.Event]:
        return ledger.tail(self.store, 1000, kinds=[kind])

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        if self._store is not None:
            self._store.close()
        self.fake.stop()

    def assert_no_token_anywhere(self) -> None:
        texts = {f"output {i}": text for i, text in enumerate(self.outputs)}
        if self.log.exists():
            texts["runner log"] = self.log.read_text(errors="replace")
        for path in self.state_dir.rglob("*") if self.state_dir.exists() else []:
            if path.is_file():
                texts[str(path)] = path.read_bytes().decode("latin-1")
        for name, text in texts.items():
            for secret in (TOKEN, TOKEN.split(":")[1], OTHER_TOKEN.split(":")[1]):
                if secret in text:
                    # Not a bare assert: pytest would print the text, token and all.
                    pytest.fail(f"the bot token appears in {name}", pytrace=False)


@pytest.fixture
def tg(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(tmp_path, FakeBot(TOKEN).start())
    try:
        yield harness
    finally:
        harness.close()
    harness.assert_no_token_anywhere()


def telegram_line(status_text: str) -> str:
    return next(line for line in status_text.splitlines() if line.startswith("telegram "))


def sent_rows(store: Store) -> list[outbox.Message]:
    return [m for m in reversed(outbox.recent(store, 1000)) if m.state == "sent"]


def test_delivers_in_order_to_the_operator_chat(tg: Harness):
    texts = ["first: the job failed", "second " + "x" * 5000, "third"]
    for text in texts:
        outbox.enqueue(tg.store, text)
    outbox.enqueue(tg.store, "said once", dedupe_key="once")
    outbox.enqueue(tg.store, "said once", dedupe_key="once")
    outbox.enqueue(tg.store, "to another chat", chat_id=31337)
    proc = tg.start(tg.config())
    wait_for(lambda: len(tg.fake.messages) >= 5, "five messages at the fake")
    got = [(m.chat_id, m.text) for m in tg.fake.messages]
    assert got[0] == (CHAT, texts[0]) and got[2] == (CHAT, "third") and got[3] == (CHAT, "said once")
    assert got[4] == (31337, "to another chat")
    long_text = got[1][1]
    assert long_text.startswith("second xxx") and long_text.endswith("\n… [truncated]") and len(long_text) == 4096
    wait_for(lambda: len(sent_rows(tg.store)) == 5, "five rows recorded as sent")
    assert tg.terminate(proc) == 0
    assert len(tg.fake.messages) == 5
    rows = sent_rows(tg.store)
    assert [r.telegram_message_id for r in rows] == [m.message_id for m in tg.fake.messages]
    sent = tg.events("telegram_sent")
    assert [e.detail["outbox_id"] for e in sent] == [r.id for r in rows]
    assert all(set(e.detail) == {"outbox_id", "length", "message_id", "truncated"} for e in sent)
    assert sent[1].detail["truncated"] is True and sent[1].detail["length"] == 4096
    dump = json.dumps([e.as_dict() for e in ledger.tail(tg.store, 1000)])
    assert "job failed" not in dump and "xxxx" not in dump
    to_operator = [m.at for m in tg.fake.messages if m.chat_id == CHAT]
    assert all(b - a >= 0.95 for a, b in zip(to_operator, to_operator[1:])), "more than one message a second"
    assert ledger.verify(tg.store).ok


def test_flood_control_retry_after_is_honoured(tg: Harness):
    tg.fake.flood = [2]
    outbox.enqueue(tg.store, "a")
    outbox.enqueue(tg.store, "b")
    tg.start(tg.config())
    wait_for(lambda: len(tg.fake.messages) == 2, "both messages delivered")
    assert tg.fake.texts() == ["a", "b"]
    sends = [(at, status) for method, at, status in tg.fake.calls if method == "sendMessage"]
    assert sends[0][1] == 429 and sends[1][1] == 200
    assert sends[1][0] - sends[0][0] >= 2.0, "retried before retry_after had passed"
    wait_for(lambda: len(sent_rows(tg.store)) == 2, "both recorded")
    (event,) = tg.events("telegram_retry_after")
    assert event.detail == {"outbox_id": 1, "retry_after": 2.0}


@pytest.mark.parametrize("mode", ["refuse", "502"])
def test_outage_and_a_killed_runner_lose_nothing_and_send_nothing_twice(tg: Harness, mode: str):
    config = tg.config()
    tg.fake.go_down(mode)
    expected = [f"message {i}" for i in range(6)]
    for text in expected[:3]:
        outbox.enqueue(tg.store, text)
    first = tg.start(config)
    wait_for(lambda: outbox.get(tg.store, 1).attempts >= 3, "the first runner retrying during the outage")
    first.kill()
    first.wait(timeout=30)
    tries = outbox.get(tg.store, 1).attempts
    for text in expected[3:]:
        outbox.enqueue(tg.store, text)
    tg.start(config)
    wait_for(lambda: outbox.get(tg.store, 1).attempts >= tries + 3, "the second runner retrying")
    assert tg.fake.messages == []
    summary = json.loads(tg.loom("status", "--json").stdout)["telegram"]["outbox"]
    assert summary["pending"] == 6 and summary["last_error"]
    tg.fake.come_back()
    wait_for(lambda: len(sent_rows(tg.store)) == 6, "everything delivered after the outage", timeout=60)
    assert tg.fake.texts() == expected
    assert len({m.message_id for m in tg.fake.messages}) == 6
    assert len(tg.events("telegram_error")) == 1  # one line for the whole outage, not one per retry
    assert ledger.verify(tg.store).ok


def test_a_strangers_commands_change_nothing_and_are_recorded(tg: Harness):
    tg.start(tg.config(commands=True))
    strangers = [tg.fake.add_update(STRANGER, "/recycle fresh"), tg.fake.add_update(STRANGER, "/status")]
    wait_for(lambda: tg.events("telegram_ignored"), "the stranger recorded")
    tg.fake.add_update(CHAT, "/status")  # a positive sync point: the operator is still answered
    wait_for(lambda: tg.fake.texts(CHAT), "the operator's reply")
    assert tg.fake.texts(STRANGER) == [] and len(tg.fake.messages) == 1
    # The stranger's first message in the ledger; the next within the hour only counted.
    assert [e.detail for e in tg.events("telegram_ignored")] == [{"chat_id": STRANGER, "update_id": strangers[0]}]
    assert [e.detail["command"] for e in tg.events("telegram_command")] == ["status"]
    assert session.pinned(tg.store) is None
    assert "recycle fresh" not in json.dumps([e.as_dict() for e in ledger.tail(tg.store, 1000)])


def test_operator_status_is_answered_and_not_rerun_after_a_restart(tg: Harness):
    config = tg.config(commands=True)
    proc = tg.start(config)
    tg.fake.add_update(CHAT, "/status")
    wait_for(lambda: tg.fake.texts(CHAT), "a reply to /status")
    reply = tg.fake.texts(CHAT)[0]
    assert reply.startswith("Loom status\n") and "ledger:" in reply and "outbox:" in reply
    last = tg.fake.add_update(CHAT, "/canary")
    wait_for(lambda: len(tg.fake.texts(CHAT)) == 2, "a reply to /canary")
    # /canary runs a real probe through the actions module; no agent runs here, so it cannot be typed.
    assert tg.fake.texts(CHAT)[1].startswith("canary inject_failed")
    assert tg.store.query("SELECT source, result FROM canary_runs")[0][:] == ("telegram", "inject_failed")
    tg.fake.add_update(CHAT, "/canary", age=3600)  # sent during an outage an hour ago
    wait_for(lambda: len(tg.fake.texts(CHAT)) == 3, "a reply to the stale /canary")
    assert "not run" in tg.fake.texts(CHAT)[2]
    assert tg.terminate(proc) == 0
    polled = len(tg.fake.get_updates_offsets)
    tg.start(config)
    wait_for(lambda: last + 2 in tg.fake.get_updates_offsets[polled:], "the new runner polling past the old commands")
    assert state.offset(tg.store) == last + 2
    assert len(tg.fake.texts(CHAT)) == 3 and len(outbox.recent(tg.store)) == 3


@pytest.mark.incident("one_bot_one_poller")
def test_a_409_conflict_is_surfaced_in_loom_status(tg: Harness):
    tg.fake.conflict = True
    tg.start(tg.config(commands=True))
    wait_for(lambda: state.conflict(tg.store), "the conflict recorded")
    wait_for(lambda: len(tg.fake.get_updates_offsets) >= 3, "several 409s")
    data = json.loads(tg.loom("status", "--json").stdout)
    assert "another process polls this token" in data["telegram"]["conflict"]["note"]
    assert "another process polls this token" in telegram_line(tg.loom("status").stdout)
    assert len(tg.events("telegram_conflict")) == 1
    wait_for(lambda: any("409 Conflict" in t for t in tg.fake.texts(CHAT)), "the operator told")
    tg.fake.conflict = False
    wait_for(lambda: state.conflict(tg.store) is None, "the conflict cleared once polling works")
    assert "another process" not in telegram_line(tg.loom("status").stdout)
    assert len(tg.events("telegram_conflict_cleared")) == 1


def test_a_rejected_token_is_reported_without_showing_it(tg: Harness):
    outbox.enqueue(tg.store, "hello")
    tg.start(tg.config(), token=OTHER_TOKEN)  # the fake only knows TOKEN: PTB's InvalidToken quotes the token
    wait_for(lambda: outbox.get(tg.store, 1).attempts >= 2, "delivery attempts")
    status = tg.loom("status")
    assert "InvalidToken" in telegram_line(status.stdout) and "[redacted]" in telegram_line(status.stdout)
    log = tg.log.read_text()
    assert "[redacted]" in log and "HTTP Request: POST" in log  # httpx's URL lines were there, scrubbed
    for text in [status.stdout, log, outbox.get(tg.store, 1).last_error]:
        if OTHER_TOKEN.split(":")[1] in text:
            pytest.fail("the rejected token leaked", pytrace=False)


def test_token_file_must_be_0600(tg: Harness):
    token_file = tg.tmp / "bot-token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o644)
    config = tg.config(token_file=token_file)
    proc = tg.start(config, token=None)
    assert proc.wait(timeout=30) != 0
    lines = [line for line in tg.log.read_text().splitlines() if line.startswith("loom:")]
    assert lines == [f"loom: telegram.token_file {token_file}: mode 0644 is too open; run: chmod 600 {token_file}"]
    os.chmod(token_file, 0o600)
    outbox.enqueue(tg.store, "via the token file")
    proc = tg.start(config, token=None)
    wait_for(lambda: tg.fake.texts() == ["via the token file"], "delivery with the token from the file")
    assert tg.terminate(proc) == 0


def test_missing_token_is_one_clear_line(tg: Harness):
    proc = tg.start(tg.config(), token=None)
    assert proc.wait(timeout=30) == 1
    assert "loom: telegram: no bot token: set LOOM_E2E_TOKEN or telegram.token_file" in tg.log.read_text()


def test_a_second_sender_on_the_same_state_dir_is_refused(tg: Harness):
    config = tg.config()
    first = tg.start(config)
    outbox.enqueue(tg.store, "sent once, by the first")
    wait_for(lambda: tg.fake.texts(), "delivery by the first runner (so it holds the sender lock)")
    second = tg.start(config)
    assert second.wait(timeout=30) == 3
    assert "telegram-sender.lock is held by another process" in tg.log.read_text()
    assert tg.terminate(first) == 0
    assert tg.fake.texts() == ["sent once, by the first"]


def test_with_no_chat_configured_the_runner_idles_and_stops_cleanly(tg: Harness):
    config = tg.config()
    config.write_text(config.read_text().replace(f"chat_id = {CHAT}", "chat_id = 0"))
    outbox.enqueue(tg.store, "kept, not sent")
    proc = tg.start(config, token=None)  # no token needed while Telegram is off
    wait_for(lambda: "Telegram is off" in tg.log.read_text(), "the runner saying Telegram is off")
    assert tg.terminate(proc) == 0
    assert tg.fake.calls == [] and outbox.summary(tg.store)["pending"] == 1
