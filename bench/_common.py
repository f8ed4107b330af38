"""Shared set-up for the benchmarks: the repository on sys.path, the tests' real agent harness,
and one way to print a figure beside its anchor (measured in the same run) as a ratio.

Every figure line looks like

    <what>   <figure>   anchor <what it is> <anchor figure>   ratio <x>   target <bound>  met|MISSED

so `make bench` output can be read (and RESULTS.md written) without knowing each script.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def summary(label: str, samples_s: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples_s)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"{label:<46} median {statistics.median(ms):8.2f} ms   p95 {p95:8.2f} ms   n={len(ms)}"


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def timed(fn: Callable[[], object], n: int) -> list[float]:
    """n wall-clock samples of fn(), in seconds."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def run_wall(argv: Sequence[str], n: int, **kwargs) -> list[float]:
    """n wall-clock samples of running argv to its end (output discarded), in seconds."""
    kwargs.setdefault("stdout", subprocess.DEVNULL)
    kwargs.setdefault("stderr", subprocess.DEVNULL)
    return timed(lambda: subprocess.run(argv, **kwargs), n)


def fmt(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.2f} ms" if value < 1 else f"{value:.2f} s"
    if unit == "MB/s":
        return f"{value / 1e6:,.0f} MB/s"
    if unit == "MiB":
        return f"{value / 2**20:.1f} MiB"
    if unit == "%":
        return f"{value:.2f} %"
    return f"{value:g} {unit}"


def ratio_line(label: str, value: float, anchor_label: str, anchor: float, unit: str = "s", *,
               target: float | None = None, higher_is_better: bool = False) -> str:
    """One figure beside its anchor, and the ratio figure/anchor against its target (a ratio)."""
    r = value / anchor if anchor else float("inf")
    line = f"{label:<44} {fmt(value, unit):>12}   anchor {anchor_label} {fmt(anchor, unit)}   ratio {r:.3g}x"
    if target is not None:
        met = r >= target if higher_is_better else r <= target
        line += f"   target {'>=' if higher_is_better else '<='} {target:g}x  {'met' if met else 'MISSED'}"
    return line


def bound_line(label: str, value: float, bound: float, unit: str = "s", anchor: tuple[str, float] | None = None) -> str:
    """A figure with an absolute bound (still beside an anchor where one means something)."""
    line = f"{label:<44} {fmt(value, unit):>12}"
    if anchor is not None:
        line += f"   anchor {anchor[0]} {fmt(anchor[1], unit)}   ratio {value / anchor[1]:.3g}x"
    line += f"   target <= {fmt(bound, unit)}  {'met' if value <= bound else 'MISSED'}"
    return line


def exit_on_sigterm() -> None:
    """A bench stopped with SIGTERM still runs its `finally` blocks (crowds of processes, tmux servers)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def was_line(label: str, value: float, was: float, unit: str = "s") -> str:
    """A figure that must not regress, beside the figure it had (issue 14: measured on this machine)."""
    return f"{label:<44} {fmt(value, unit):>12}   before {fmt(was, unit)}   ratio {value / was:.3g}x (no regression: ~1x or less)"


def machine() -> str:
    model = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "?")
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{os.cpu_count()} cores, {model}, Python {sys.version.split()[0]}, load average {load}, "
            f"{time.strftime('%Y-%m-%d %H:%M %Z')}")
