"""Ack-to-detection latency: from the agent's `touch` to the canary recording `ok`.

The probe watches the acks directory with watchfiles; this measures how long after the ack file
appears the result is in the store, without an agent in the way (the file is touched directly,
as the agent would).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, summary  # noqa: F401

from loomtui.canary import probe
from loomtui.canary import runs as canary
from loomtui.context import Context


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="loom-bench-canary-"))
    config = root / "config.toml"
    config.write_text(f'state_dir = "{root / "state"}"\n[canary]\nack_timeout = "10s"\n')
    ctx = Context.load(str(config), None, environ={})
    samples = []
    try:
        for i in range(30):
            now = time.time()
            run_id = canary.insert_run(ctx, f"bench{i}", "bench", canary.PENDING, now, now + 10)
            run = canary.Probe(run_id, f"bench{i}", canary.PENDING, now, now + 10)
            touched: list[float] = []

            def ack() -> None:
                time.sleep(0.2)
                touched.append(time.monotonic())
                (ctx.acks_dir / run.nonce).touch()

            thread = threading.Thread(target=ack)
            thread.start()
            result = probe.wait(ctx, run)
            seen = time.monotonic()
            thread.join()
            assert result.result == canary.OK, result
            samples.append(seen - touched[0])
        print(summary("ack file written -> ok recorded", samples))
        return 0
    finally:
        ctx.close()


if __name__ == "__main__":
    raise SystemExit(main())
