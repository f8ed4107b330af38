"""Shared set-up for the benchmarks: the repository on sys.path and the tests' real agent harness."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def summary(label: str, samples_s: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples_s)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"{label:<46} median {statistics.median(ms):8.2f} ms   p95 {p95:8.2f} ms   n={len(ms)}"
