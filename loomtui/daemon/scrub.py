"""Log records scrubbed of secrets before any handler writes them.

httpx logs every request URL at INFO, and a Bot API URL contains the bot token; PTB logs it
at DEBUG and puts it in InvalidToken's message. A filter on the handlers (not on one logger)
sees records from every logger that propagates to them.
"""

from __future__ import annotations

import logging
import traceback

from loomtui import redact


class ScrubFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not drop the record, nor leak its args
            message = f"{record.msg!r} (unformattable arguments)"
        record.msg = redact.scrub(message)
        record.args = None
        if record.exc_info:
            # The traceback text is cached on the record so the formatter uses the scrubbed copy.
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            record.exc_text = redact.scrub(text)
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact.scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = redact.scrub(record.stack_info)
        return True


def install(root: logging.Logger | None = None) -> None:
    """Put the filter on every handler of the root logger (idempotent)."""
    root = root or logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, ScrubFilter) for f in handler.filters):
            handler.addFilter(ScrubFilter())


def quiet_http(debug: bool = False) -> None:
    # Request lines are noise at INFO; at DEBUG they are kept (scrubbed) for diagnosis.
    logging.getLogger("httpx").setLevel(logging.INFO if debug else logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    # PTB logs a traceback for every non-JSON error page (a 502 from a proxy); the loops already
    # log one line per failed attempt, which is all an hour-long outage should cost.
    if not debug:
        logging.getLogger("telegram.request").setLevel(logging.CRITICAL)
