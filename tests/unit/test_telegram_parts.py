"""The Telegram channel's pure rules, token loading and log scrubbing, without a network."""

from __future__ import annotations

import io
import logging
import os
import threading

import pytest

from loomtui import redact
from loomtui.config import TelegramConfig
from loomtui.daemon import scrub as logs
from loomtui.errors import LoomError
from loomtui.telegram import rules
from loomtui.telegram.bot import base_url, describe
from loomtui.telegram.token import load_token

TOKEN = "424242:unit-TEST-token-AAAAbbbbCCCCdddd"


def assert_clean(text: str) -> None:
    # Not a bare assert: pytest would print the very text that holds the token.
    if TOKEN in text or TOKEN.split(":")[1] in text:
        pytest.fail("the bot token leaked into the output", pytrace=False)


def test_truncate_marks_the_cut_and_counts_like_telegram():
    assert rules.truncate("short") == ("short", False)
    exact = "a" * 4096
    assert rules.truncate(exact) == (exact, False)
    text, cut = rules.truncate("b" * 5000)
    assert cut and text.endswith("… [truncated]") and rules.utf16_len(text) == 4096
    emoji, cut = rules.truncate("😀" * 3000)  # 6000 UTF-16 units: over the limit although 3000 chars
    assert cut and rules.utf16_len(emoji) <= 4096 and emoji.endswith("[truncated]")


def test_backoff_grows_and_is_capped():
    from loomtui.timing import backoff

    delays = [backoff(n, 1.0, 60.0) for n in range(0, 10)]
    assert delays[:5] == [0.0, 1.0, 2.0, 4.0, 8.0] and max(delays) == 60.0
    assert backoff(10_000, 1.0, 60.0) == 60.0


def test_rate_wait_one_second_per_chat_and_survives_clock_jumps():
    assert rules.rate_wait(None, 100.0) == 0.0
    assert rules.rate_wait(100.0, 100.25) == pytest.approx(0.75)
    assert rules.rate_wait(100.0, 105.0) == 0.0
    assert rules.rate_wait(500.0, 100.0) == 1.0  # last send "in the future": never more than the gap


def test_parse_command():
    assert rules.parse_command("/recycle@loom_bot fresh") == ("recycle", ["fresh"])
    assert rules.parse_command("/STATUS") == ("status", [])
    assert rules.parse_command("hello") is None
    assert rules.parse_command("/") is None
    assert rules.parse_command("/etc/hosts is wrong") is None   # a path, not a command's name
    assert rules.parse_command("/tmp is full") == ("tmp", ["is", "full"])  # a name Telegram allows
    assert rules.parse_command("/" + "x" * 33) is None
    assert rules.parse_command(None) is None


def test_base_url_forms():
    assert base_url("") == "https://api.telegram.org/bot"
    assert base_url("http://127.0.0.1:8081") == "http://127.0.0.1:8081/bot"
    assert base_url("http://127.0.0.1:8081/bot/") == "http://127.0.0.1:8081/bot"
    assert base_url("http://h/x/{token}/") == "http://h/x/{token}/"


def test_token_from_env_is_registered_for_redaction():
    cfg = TelegramConfig(token_env="LOOM_UNIT_TOKEN")
    assert load_token(cfg, {"LOOM_UNIT_TOKEN": TOKEN + "\n"}) == TOKEN
    assert redact.scrub(f"url /bot{TOKEN}/getMe and {TOKEN.split(':')[1]}") == "url /bot[redacted]/getMe and [redacted]"


def test_missing_token_names_where_to_put_it():
    with pytest.raises(LoomError, match="LOOM_NOPE or telegram.token_file"):
        load_token(TelegramConfig(token_env="LOOM_NOPE"), {})


def test_token_file_must_be_private(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    os.chmod(path, 0o644)
    cfg = TelegramConfig(token_file=path)
    with pytest.raises(LoomError) as err:
        load_token(cfg, {})
    assert str(path) in str(err.value) and "0644" in str(err.value) and "\n" not in str(err.value)
    assert_clean(str(err.value))
    os.chmod(path, 0o600)
    assert load_token(cfg, {}) == TOKEN
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(LoomError, match="cannot read"):
        load_token(TelegramConfig(token_file=tmp_path / "link"), {})


def test_a_token_file_that_is_a_named_pipe_is_refused_at_once(tmp_path):
    # The open itself blocked, before the check for a regular file: `loom doctor` hung, silent.
    path = tmp_path / "token"
    os.mkfifo(path, 0o600)
    failed: list[BaseException] = []

    def load() -> None:
        try:
            load_token(TelegramConfig(token_file=path), {})
        except LoomError as exc:
            failed.append(exc)

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(30)
    assert not reader.is_alive() and "not a regular file" in str(failed[0])


def test_log_filter_scrubs_messages_args_and_tracebacks():
    redact.register(TOKEN)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.Logger("unit-root")
    root.addHandler(handler)
    logs.install(root)
    logs.install(root)
    assert len(handler.filters) == 1
    root.warning("url %s", f"http://x/bot{TOKEN}/sendMessage")
    try:
        raise RuntimeError(f"The token `{TOKEN}` was rejected by the server.")
    except RuntimeError:
        root.exception("failed")
    out = stream.getvalue()
    assert_clean(out)
    assert "bot[redacted]/sendMessage" in out and "RuntimeError: The token `[redacted]` was rejected" in out


def test_describe_is_one_scrubbed_line():
    redact.register(TOKEN)
    line = describe(ValueError(f"bad\nurl http://h/bot{TOKEN}/x"))
    assert line == "ValueError: bad url http://h/bot[redacted]/x"


def test_parse_hold_takes_an_optional_duration_then_a_required_reason():
    from loomtui.agent.hold_rules import parse_request as parse_hold

    assert parse_hold(["30m", "deploying", "it"]) == ("deploying it", 1800.0)
    assert parse_hold(["deploying"]) == ("deploying", None)
    assert parse_hold(["30m"]) is None and parse_hold([]) is None
    assert parse_hold(["0s", "x"]) is None
