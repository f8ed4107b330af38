"""Logging for the daemon: one line per record on stderr, every record scrubbed of secrets."""

from __future__ import annotations

import logging
import sys

from loomtui.daemon import scrub


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    scrub.install()
    scrub.quiet_http(debug=level.upper() == "DEBUG")
