"""python-telegram-bot, configured the way Loom uses it, and its errors made safe to show."""

from __future__ import annotations

import datetime as dt
import urllib.parse
import warnings

import telegram
from telegram.request import HTTPXRequest

from loomtui import redact
from loomtui.config import TelegramConfig, is_loopback

DEFAULT_BASE = "https://api.telegram.org/bot"


def base_url(api_base: str) -> str:
    """The Bot API base PTB appends the token to.

    "" is Telegram's own; `http://host:8081` and `http://host:8081/bot` both mean a Bot API
    server at that address; a `{token}` placeholder is passed through for unusual layouts.
    """
    if not api_base:
        return DEFAULT_BASE
    if "{token}" in api_base:
        return api_base
    trimmed = api_base.rstrip("/")
    return trimmed if trimmed.endswith("/bot") else trimmed + "/bot"


def make_bot(token: str, cfg: TelegramConfig, *, read_timeout: float = 10.0) -> telegram.Bot:
    url = base_url(cfg.api_base)
    # A Bot API server on loopback (the only place plain http:// may go): never through a proxy of
    # the environment, which httpx trusts and does not exempt loopback from; the token is in the
    # URL's path, and over http the proxy reads it.
    direct = {"trust_env": False} if is_loopback(urllib.parse.urlsplit(url).hostname or "") else {}
    # Separate small pools: a long poll must not hold the connection a send needs.
    request = HTTPXRequest(connection_pool_size=2, read_timeout=read_timeout, connect_timeout=10.0,
                           httpx_kwargs=direct or None)
    updates = HTTPXRequest(connection_pool_size=1, read_timeout=read_timeout, connect_timeout=10.0,
                           httpx_kwargs=direct or None)
    file_url = url[: -len("/bot")] + "/file/bot" if url.endswith("/bot") else url  # Loom sends no files
    return telegram.Bot(token, base_url=url, base_file_url=file_url, request=request, get_updates_request=updates)


def retry_after_seconds(exc: telegram.error.RetryAfter) -> float:
    value = getattr(exc, "_retry_after", None)
    if not isinstance(value, dt.timedelta):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the int form is deprecated in PTB 22; both are fine here
            value = exc.retry_after
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    return max(0.0, seconds)


def describe(exc: BaseException) -> str:
    """One scrubbed line for the store, the ledger and logs: PTB and httpx messages can carry the URL."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return redact.scrub(text)[:300]
