"""The Prometheus endpoint (`metrics.listen`): what the store says, read at scrape time.

Values come from the store on each scrape rather than from counters kept in memory, so they
are true across daemon restarts and agree with `loom status` and the console.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
)
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from loomtui.canary import runs as canary
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.report import status as status_mod


class StoreCollector(Collector):
    def __init__(self, ctx: Context, loop_stats: Callable[[], dict[str, Any]]) -> None:
        self.ctx = ctx
        self.loop_stats = loop_stats

    def collect(self) -> Iterator[Any]:
        store = self.ctx.store
        now = time.time()
        # The same status model `loom status` and the console read; the counters below are the
        # metrics' own (totals by label), read from the store at the same moment.
        status = status_mod.gather(self.ctx, events=0, now=now, look=False)
        beat = status.supervisor
        age = GaugeMetricFamily("loom_supervisor_heartbeat_age_seconds", "Seconds since the supervisor's heartbeat")
        age.add_metric([], max(0.0, beat.age) if beat else float("nan"))
        yield age

        relaunches = CounterMetricFamily("loom_relaunches", "Agent relaunches recorded in the ledger",
                                         labels=["cause", "mode"])
        for row in store.query(
            "SELECT cause, json_extract(detail, '$.mode') AS mode, COUNT(*) AS n FROM ledger "
            "WHERE kind = 'relaunch' GROUP BY cause, mode"
        ):
            relaunches.add_metric([row["cause"] or "", row["mode"] or ""], row["n"])
        yield relaunches

        results = CounterMetricFamily("loom_canary_probes", "Canary probes by result", labels=["result"])
        for row in store.query("SELECT result, COUNT(*) AS n FROM canary_runs GROUP BY result"):
            results.add_metric([row["result"]], row["n"])
        yield results
        latency = GaugeMetricFamily("loom_canary_last_latency_seconds", "Latency of the last acked probe")
        last_ok = store.query_one("SELECT latency, sent_at FROM canary_runs WHERE result = 'ok' ORDER BY id DESC LIMIT 1")
        latency.add_metric([], last_ok["latency"] if last_ok else float("nan"))
        yield latency
        ok_age = GaugeMetricFamily("loom_canary_last_ok_age_seconds", "Seconds since the last acked probe was sent")
        ok_age.add_metric([], now - last_ok["sent_at"] if last_ok else float("nan"))
        yield ok_age
        last_miss = GaugeMetricFamily("loom_canary_last_missed", "1 if the last settled probe was a miss")
        last = status.canary_settled
        last_miss.add_metric([], 1.0 if last is not None and last.result == canary.MISS else 0.0)
        yield last_miss

        queue = GaugeMetricFamily("loom_queue_items", "Sentinel queue items by state", labels=["state"])
        for state, n in status.queue.items():
            queue.add_metric([state], n)
        yield queue

        pending = GaugeMetricFamily("loom_outbox_pending", "Messages waiting to go to the operator")
        pending.add_metric([], status.outbox["pending"])
        yield pending

        held = GaugeMetricFamily("loom_held", "1 while automatic relaunching is held at the ceiling")
        held.add_metric([], 1.0 if status.hold is not None else 0.0)
        yield held

        events = CounterMetricFamily("loom_ledger_events", "Events in the ledger")
        events.add_metric([], status.ledger_events)
        yield events

        ticks = CounterMetricFamily("loom_loop_ticks", "Ticks per supervisor loop (this process)", labels=["loop"])
        errors = CounterMetricFamily("loom_loop_errors", "Errors per supervisor loop (this process)", labels=["loop"])
        for name, stats in self.loop_stats().items():
            ticks.add_metric([name], stats.get("ticks", 0))
            errors.add_metric([name], stats.get("errors", 0))
        yield ticks
        yield errors


def parse_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host, int(port)


def serve(ctx: Context, loop_stats: Callable[[], dict[str, Any]]) -> Any:
    """Start the endpoint in a thread; a port that cannot be bound is a fatal, named error."""
    host, port = parse_listen(ctx.config.metrics.listen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(ctx, loop_stats))
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise LoomError(f"metrics.listen {ctx.config.metrics.listen}: cannot listen: {exc.strerror or exc}") from None
    return server
