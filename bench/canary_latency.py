"""Ack-to-detection latency: from the agent's `touch` to the canary recording `ok`.

The probe watches the acks directory with watchfiles; this measures how long after the ack file
appears the result is in the store, without an agent in the way (the file is touched directly,
as the agent would).

Anchor, in the same run: watchfiles alone, from a touch to its event in a bare watch loop.
Not to regress: median 14 ms (issue 14's figure).
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

import watchfiles
from _common import ROOT, machine, median, ratio_line, summary, was_line  # noqa: F401

from loomtui.canary import probe
from loomtui.canary import runs as canary
from loomtui.context import Context


def bare_watchfiles(root: Path, n: int = 30) -> list[float]:
    """Touch -> event with nothing but watchfiles (debounce and step as the probe sets them)."""
    watched = root / "bare"
    watched.mkdir()
    samples = []
    stop = threading.Event()
    for i in range(n):
        touched: list[float] = []

        def touch(i=i) -> None:
            time.sleep(0.2)
            touched.append(time.monotonic())
            (watched / f"f{i}").touch()

        thread = threading.Thread(target=touch)
        thread.start()
        for _changes in watchfiles.watch(watched, stop_event=stop, rust_timeout=5000, yield_on_timeout=False,
                                         debounce=20, step=10):
            samples.append(time.monotonic() - touched[0])
            break
        thread.join()
    return samples


def main() -> int:
    print(f"machine: {machine()}")
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
        anchor = bare_watchfiles(root)
        print(summary("anchor: touch -> watchfiles event, bare", anchor))
        print(ratio_line("ack -> ok recorded (median)", median(samples), "bare watchfiles", median(anchor)))
        print(was_line("  not to regress", median(samples), 0.014))
        return 0
    finally:
        ctx.close()


if __name__ == "__main__":
    raise SystemExit(main())
