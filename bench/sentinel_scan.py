"""Sentinel scan cost is proportional to the new bytes only, however large the log already is."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from _common import ROOT  # noqa: F401  (puts the repository on sys.path)

from loomtui.context import Context
from loomtui.sentinel.tick import sentinel_tick

LINE = b"2026-11-29T10:00:00 INFO processed record 123456 from upstream feed, all good\n"


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="loom-bench-scan-"))
    log = root / "big.log"
    with open(log, "wb") as fh:
        for _ in range(200):
            fh.write(LINE * 10_000)  # ~160 MB already there
    config = root / "config.toml"
    config.write_text(f'state_dir = "{root / "state"}"\n[[jobs]]\nname = "big"\nlog = "{log}"\n')
    ctx = Context.load(str(config), None, environ={})
    try:
        sentinel_tick(ctx, notify=False)  # first sight of the log
        print(f"log size {log.stat().st_size / 1e6:.0f} MB")
        for new_bytes in (0, 10_000, 1_000_000, 10_000_000, 50_000_000):
            with open(log, "ab") as fh:
                fh.write(LINE * (new_bytes // len(LINE)))
                if new_bytes:
                    fh.write(b"ERROR something broke\n")
            t = time.perf_counter()
            report = sentinel_tick(ctx, notify=False)
            took = time.perf_counter() - t
            rate = f"{new_bytes / took / 1e6:7.1f} MB/s" if new_bytes else ""
            print(f"scan after {new_bytes:>11,} new bytes: {took * 1000:9.2f} ms  {rate}  ({report.describe()[:60]})")
        return 0
    finally:
        ctx.close()


if __name__ == "__main__":
    raise SystemExit(main())
