"""Logging for the daemon: one line per record on stderr, every record scrubbed of secrets and
shown safe (log lines carry job names, pane text, hold reasons and Telegram's words)."""

from __future__ import annotations

import logging
import sys

from loomtui.daemon import scrub
from loomtui.text import one_line, printable

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class SafeFormatter(logging.Formatter):
    """A record's message on one line with no control character (a newline in untrusted text
    would forge a second record, an ESC would reach whoever tails the journal); a traceback keeps
    its lines, its control characters shown the same way."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_text:  # set by the scrub filter, which drops exc_info
            record.exc_text = printable(record.exc_text, keep_newlines=True)
        return super().format(record)

    def formatException(self, ei) -> str:
        return printable(super().formatException(ei), keep_newlines=True)

    def formatStack(self, stack_info: str) -> str:
        return printable(super().formatStack(stack_info), keep_newlines=True)


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format=FORMAT)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(SafeFormatter(FORMAT))
    scrub.install()
    scrub.quiet_http(debug=level.upper() == "DEBUG")
