"""The Prometheus endpoint (`metrics.listen`): what the store says, read at scrape time.

Values come from the store on each scrape rather than from counters kept in memory, so they
are true across daemon restarts and agree with `loom status` and the console.

Every series about one agent carries an `agent` label, even when there is only `main`: a second
agent added later then adds series beside the old ones instead of renaming them, and the alert
rules in contrib/ match per agent from the start. What belongs to the host (the supervisor's
heartbeat, the outbox, the ledger as a whole, the process's loops and their KPIs, job schedules)
has no such label.
"""

from __future__ import annotations

import socket
import threading
import time
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import Collector

from loomtui import redact
from loomtui.agent import proctree
from loomtui.agent.drivers import capabilities
from loomtui.canary import runs as canary
from loomtui.config import loopback_names, split_listen
from loomtui.context import Context
from loomtui.errors import LoomError
from loomtui.pump import client as pump_client
from loomtui.report import status as status_mod
from loomtui.sentinel import queue
from loomtui.states import OPEN
from loomtui.store import canary_runs, counters, job_runs, ledger, outbox, queue_items
from loomtui.text import one_line
from loomtui.timing import Instant, age, as_instant

AGENT = "agent"
LABEL_MAX = 200  # a free-text label (a hold's reason) is cut here: a label is a name, not a document


def label(value: object) -> str:
    """A label value from stored text: one line, no control character (the exposition format
    escapes only backslash, quote and newline; a scraper's terminal or UI would get the rest raw)."""
    return one_line("" if value is None else value, LABEL_MAX)


class StoreCollector(Collector):
    def __init__(self, ctx: Context, loop_stats: Callable[[], dict[str, Any]]) -> None:
        self.ctx = ctx
        self.loop_stats = loop_stats
        self._agents: list[Context] | None = None
        self._lock = threading.Lock()  # scrapes are served on threads of their own

    def agents(self) -> list[Context]:
        """One context per agent, each with its own store connection, made once and kept."""
        with self._lock:
            if self._agents is None:
                self._agents = [self.ctx if name == self.ctx.agent else self.ctx.for_agent(name)
                                for name in self.ctx.config.agent_names]
            return self._agents

    def close(self) -> None:
        """Close the other agents' store connections (the one given stays its owner's)."""
        with self._lock:
            for actx in self._agents or []:
                if actx is not self.ctx:
                    actx.close()
            self._agents = None

    def collect(self) -> Iterator[Any]:
        now = time.time()
        # The same status model `loom status` and the console read, one per agent; the counters
        # below are the metrics' own (totals by label), read from the store at the same moment.
        statuses = [(actx, status_mod.gather(actx, events=0, now=now, look=False)) for actx in self.agents()]
        host = statuses[0][1]
        beat = host.supervisor
        age = GaugeMetricFamily("loom_supervisor_heartbeat_age_seconds", "Seconds since the supervisor's heartbeat")
        age.add_metric([], max(0.0, beat.age) if beat else float("nan"))
        yield age

        yield from agent_metrics(statuses, now)

        pending = GaugeMetricFamily("loom_outbox_pending", "Messages waiting to go to the operator")
        pending.add_metric([], host.outbox["pending"])
        yield pending

        events = CounterMetricFamily("loom_ledger_events", "Events in the ledger")
        events.add_metric([], host.ledger_events)
        yield events

        ticks = CounterMetricFamily("loom_loop_ticks", "Ticks per supervisor loop (this process)",
                                    labels=["loop", AGENT])
        errors = CounterMetricFamily("loom_loop_errors", "Errors per supervisor loop (this process)",
                                     labels=["loop", AGENT])
        for name, stats in self.loop_stats().items():
            loop, _, agent = name.partition(":")  # `watchdog:beta` is beta's; plain `watchdog`, main's
            ticks.add_metric([loop, agent_of(loop, {"agent": agent})], stats.get("ticks", 0))
            errors.add_metric([loop, agent_of(loop, {"agent": agent})], stats.get("errors", 0))
        yield ticks
        yield errors
        yield from kpis(self.ctx, now, statuses)


def agent_metrics(statuses: list[tuple[Context, status_mod.Status]], now: float) -> Iterator[Any]:
    """What the ledger and the canary say of each agent, one series per agent (label `agent`)."""
    relaunches = CounterMetricFamily("loom_relaunches", "Agent relaunches recorded in the ledger",
                                     labels=[AGENT, "cause", "mode"])
    results = CounterMetricFamily("loom_canary_probes", "Canary probes by result", labels=[AGENT, "result"])
    latency = GaugeMetricFamily("loom_canary_last_latency_seconds", "Latency of the last acked probe", labels=[AGENT])
    ok_age = GaugeMetricFamily("loom_canary_last_ok_age_seconds", "Seconds since the last acked probe was sent "
                               "(never acked: since the first probe was sent)", labels=[AGENT])
    last_miss = GaugeMetricFamily("loom_canary_last_missed", "1 if the last settled probe was a miss", labels=[AGENT])
    queue = GaugeMetricFamily("loom_queue_items", "Sentinel queue items by state", labels=[AGENT, "state"])
    held = GaugeMetricFamily("loom_held", "1 while a hold (the ceiling's, an operator's, the harness's) stops "
                             "automatic relaunching", labels=[AGENT])
    for actx, status in statuses:
        name, store = actx.agent, actx.store
        for row in ledger.relaunch_counts(store, name):
            relaunches.add_metric([name, label(row["cause"]), label(row["mode"])], row["n"])
        for row in canary_runs.counts_by_result(store, name):
            results.add_metric([name, label(row["result"])], row["n"])
        last_ok = canary_runs.last_ok_latency(store, name)
        # None: a dead prober's ack settled after a step of the wall clock, whose time says nothing.
        known = last_ok["latency"] if last_ok else None
        latency.add_metric([name], known if known is not None else float("nan"))
        # An agent that never acked is the deafest of all: aged from its first probe, so the alert
        # on this age fires for it too (NaN, which compares false, had kept it quiet for good).
        since = last_ok["sent_at"] if last_ok else canary_runs.first_sent(store, name)
        ok_age.add_metric([name], now - since if since is not None else float("nan"))
        last = status.canary_settled
        last_miss.add_metric([name], 1.0 if last is not None and last.result == canary.MISS else 0.0)
        for state, n in status.queue.items():
            queue.add_metric([name, state], n)
        held.add_metric([name], 1.0 if status.hold is not None else 0.0)
    yield from (relaunches, results, latency, ok_age, last_miss, queue, held)
    yield from pump_metrics([actx for actx, _ in statuses], now)


def pump_metrics(agents: list[Context], now: float) -> Iterator[Any]:
    """The stream-json pump of each agent that has one, as its status file says now: what waits,
    whether a turn runs and for how long (a turn that never ends is what a wedge looks like from
    outside). No family at all when no agent runs the stream-json driver."""
    pumped = [actx for actx in agents if capabilities(actx).owns_turns]
    if not pumped:
        return
    waiting = GaugeMetricFamily("loom_pump_queue", "Messages the pump holds until the running turn ends",
                                labels=[AGENT])
    turn = GaugeMetricFamily("loom_pump_turn_running", "1 while the agent's CLI is in a turn", labels=[AGENT])
    age = GaugeMetricFamily("loom_pump_turn_age_seconds", "How long the running turn has run (0: none)",
                            labels=[AGENT])
    denied = CounterMetricFamily("loom_permission_denied", "Tool calls the agent's CLI was refused (ledger)",
                                 labels=[AGENT])
    for actx in pumped:
        name = actx.agent
        doc = pump_client.status(actx.agent_dir) or {}
        # The file as its pump last wrote it: a pump killed (or its tmux server gone) left it saying
        # a turn runs, and a dead agent's turn aged on until the long-turn alert fired.
        exited = bool(doc.get("cli_exit")) or not _pump_alive(actx, doc)
        waiting.add_metric([name], float(doc["queue"]) if isinstance(doc.get("queue"), int) and not exited else 0.0)
        running = doc.get("turn") == "running" and not exited
        turn.add_metric([name], 1.0 if running else 0.0)
        started = doc.get("turn_started")
        age.add_metric([name], max(0.0, now - started) if running and isinstance(started, (int, float)) else 0.0)
        denied.add_metric([name], ledger.count_of(actx.store, name, "permission_denied"))
    yield from (waiting, turn, age, denied)


def _waiting_item_age(actx: Context, now: Instant | float) -> float:
    """How long the agent's oldest open item, not yet escalated, has run toward its backstop (0:
    none): what LoomQueueItemPastBackstop compares with the backstop, as the sentinel does. A claimed
    item is the agent's, under its witness window (a daily job's is a day); measured from its first
    sighting it had raised the alert for a day over a fix made in minutes."""
    backstop = actx.config.sentinel.backstop
    items = map(queue.from_row, queue_items.unwitnessed(actx.store, actx.agent))
    ages = [age(item.open_since(backstop), as_instant(now)) for item in items
            if item.state == OPEN and item.escalated_at is None]
    return max(ages, default=0.0)


def _pump_alive(actx: Context, doc: dict[str, Any]) -> bool:
    """The pump that wrote `doc` still runs: its pid, begun no later than the file says it began."""
    pid, began = doc.get("pid"), doc.get("started")
    if not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(began, (int, float)):
        return False
    return proctree.of(actx).alive_since(pid, None, float(began))


# The loop KPIs counted in the store (store/counters.py): name → (help, labels, kind).
COUNTED = {
    # `agent`: whose loop or action it was (see agent_of); empty for the host's loops.
    "loom_fire_total": ("Triggers received per loop, by source (tick, tui, cli, telegram, cron)",
                        ("loop", "source", AGENT)),
    "loom_admit_total": ("Actions admitted or refused per loop, and why", ("loop", "decision", "reason", AGENT)),
    "loom_run_total": ("Loop runs by outcome", ("loop", "status", AGENT)),
    "loom_notify_total": ("Messages to the operator: sent, failed attempts, given up, deduplicated",
                          ("sink", "result")),
    # The agent CLI's hooks (loomtui/hooks): always kept with the agent's name.
    "loom_dispatch_missing_total": ("Typed lines the agent's hooks never reported taken within "
                                    "agent.dispatch_timeout", (AGENT,)),
    "loom_turns_total": ("Agent turns ended, by outcome (Stop; StopFailure with its error type)",
                         (AGENT, "outcome", "error")),
    # [[heartbeat]] pushes: ok and fail sent, error (not delivered), skip (the look could not tell).
    "loom_heartbeat_push_total": ("Push heartbeats by result (ok, fail, error, skip)", ("heartbeat", "result")),
}
HISTOGRAMS = {"loom_tick_duration_seconds": ("Tick duration per loop", ("loop", AGENT)),
              "loom_dispatch_latency_seconds": ("From a line typed to the agent's UserPromptSubmit that carried it",
                                                (AGENT,))}
# The intervals alert rules compare with, each agent's own (sentinel.backstop is the host's, repeated
# per agent so a rule can compare an agent's queue with it label for label).
SETTINGS = ("canary.interval", "canary.ack_timeout", "sentinel.backstop", "watchdog.interval",
            "watchdog.ceiling_window")


# Loops that belong to an agent (the rest, sentinel and notify, are the host's), and the operator's
# actions, which are always on an agent.
AGENT_BOUND = {"watchdog", "canary", "signals", "exit_watch", "hooks", "operator"}


def agent_of(loop: str, labels: dict[str, str], *, bound: bool = False) -> str:
    """The agent label of a loop KPI. Counters are kept with an agent label only for a named agent
    (so counts from before there were several agents read on), so an agent's loop without one is
    `main`'s; the host's loops have none (an empty label: none, to Prometheus)."""
    return labels.get("agent") or ("main" if bound or loop in AGENT_BOUND else "")


def kpis(ctx: Context, now: float, statuses: list[tuple[Context, status_mod.Status]] | None = None) -> Iterator[Any]:
    """The loop KPIs: what ran, what was let through, what was proved, who was told, what is stuck."""
    if statuses is None:
        statuses = [(ctx, status_mod.gather(ctx, events=0, now=now, look=False))]
    store = ctx.store
    stored = counters.read(store, "loom_")
    for name, (help_text, labels) in COUNTED.items():
        family = CounterMetricFamily(name.removesuffix("_total"), help_text, labels=list(labels))
        for c in stored:
            if c.name == name:
                # An admission is always of an action on an agent (a nudge is the sentinel's, on one).
                agent = agent_of(c.labels.get("loop", ""), c.labels, bound=name == "loom_admit_total")
                family.add_metric([agent if k == AGENT else label(c.labels.get(k, "")) for k in labels], c.value)
        yield family
    for name, (help_text, labels) in HISTOGRAMS.items():
        yield _histogram(name, help_text, labels, [c for c in stored if c.name.startswith(name + "_")])

    witness = GaugeMetricFamily("loom_witness_ratio", "Witnessed ÷ claimed: queue resolutions witnessed by a "
                                "clean run; relaunches witnessed by a canary ack", labels=[AGENT, "what"])
    for actx, _ in statuses:
        for what, num, den in witness_counts(actx.store, actx.agent):
            witness.add_metric([actx.agent, what], num / den if den else float("nan"))
    yield witness

    drift = GaugeMetricFamily("loom_schedule_drift_seconds", "Last run's actual start minus its intended start",
                              labels=["job"])
    for job, seconds in schedule_drift(ctx):
        drift.add_metric([label(job)], seconds)
    yield drift

    settings = GaugeMetricFamily("loom_setting_seconds", "The configured intervals alert rules compare with",
                                 labels=[AGENT, "setting"])
    # Not `_count`: that suffix is a histogram's or a summary's (promtool check metrics).
    ceiling = GaugeMetricFamily("loom_setting_ceiling_relaunches", "Automatic relaunches allowed in the ceiling window",
                                labels=[AGENT])
    for actx, _ in statuses:
        cfg = actx.config
        values = {"canary.interval": cfg.canary.interval, "canary.ack_timeout": cfg.canary.ack_timeout,
                  "sentinel.backstop": cfg.sentinel.backstop, "watchdog.interval": cfg.watchdog.interval,
                  "watchdog.ceiling_window": cfg.watchdog.ceiling_window}
        for name in SETTINGS:
            settings.add_metric([actx.agent, name], float(values[name]))
        ceiling.add_metric([actx.agent], float(cfg.watchdog.ceiling_count))
    yield settings
    yield ceiling

    from loomtui.agent import hold_rules, holds

    by = GaugeMetricFamily("loom_hold", "1 while a hold is in force, by who placed it (ceiling, operator, harness) and why",
                           labels=[AGENT, "by", "reason"])
    left = GaugeMetricFamily("loom_hold_remaining_seconds", "Time left on a timed hold (NaN: none, or until released)",
                             labels=[AGENT])
    for actx, status in statuses:
        at = status.moment  # both clocks: the hold shown is the hold enforced, whatever the wall clock did
        hold = holds.current(actx, at)
        for who in hold_rules.BYS:
            mine = hold is not None and hold.by == who
            by.add_metric([actx.agent, who, label(hold.reason) if hold is not None and mine else ""],
                          1.0 if mine else 0.0)
        remaining = hold_rules.remaining(hold, at) if hold is not None else None
        left.add_metric([actx.agent], remaining if remaining is not None else float("nan"))
    yield by
    yield left

    backlog = GaugeMetricFamily("loom_outbox_oldest_pending_age_seconds",
                                "Age of the oldest message still waiting to reach the operator (0: none)")
    first = outbox.oldest_pending_created(store)
    backlog.add_metric([], now - first if first is not None else 0.0)
    yield backlog

    stuck = GaugeMetricFamily("loom_stuck_age_seconds", "How long the oldest open queue item not yet sent to the "
                              "operator has waited (from where its backstop runs), and the last relaunch while no "
                              "canary has witnessed it (0: nothing stuck)", labels=[AGENT, "what"])
    for actx, status in statuses:
        stuck.add_metric([actx.agent, "queue_item"], _waiting_item_age(actx, status.moment))
        claim = status.relaunch
        # Only the last relaunch can be unwitnessed: a later one supersedes the claim of an earlier.
        stuck.add_metric([actx.agent, "relaunch"], age(claim.at, as_instant(status.moment))
                         if claim is not None and status.unwitnessed else 0.0)
    yield stuck


def witness_counts(store: Any, agent: str) -> list[tuple[str, int, int]]:
    row = ledger.queue_witness_counts(store, agent)
    launched = ledger.relaunch_witness_counts(store, agent)
    return [("queue", int(row["w"] or 0), int(row["c"] or 0)), ("relaunch", int(launched["w"]), int(launched["n"]))]


def schedule_drift(ctx: Context) -> list[tuple[str, float]]:
    from loomtui.clock import local_zone
    from loomtui.sentinel.cron import in_zone
    from loomtui.sentinel.schedule import drift

    out = []
    slots = in_zone(local_zone())
    for job in ctx.config.jobs:
        if not job.schedule:
            continue
        rows = job_runs.last_starts(ctx.store, job.name)
        if not rows:
            continue
        try:
            late = drift(job.schedule, rows[0]["started"], rows[1]["started"] if len(rows) > 1 else None, cron=slots)
        except (ValueError, KeyError):
            continue  # a schedule the config check let through but croniter refuses: doctor says so
        if late is not None:
            out.append((job.name, late))
    return out


def _histogram(name: str, help_text: str, labels: tuple[str, ...], parts: list[counters.Counter]) -> Any:
    family = HistogramMetricFamily(name, help_text, labels=list(labels))
    series: dict[tuple[str, ...], dict[str, Any]] = {}
    for c in parts:
        key = tuple(agent_of(c.labels.get("loop", ""), c.labels) if k == AGENT else label(c.labels.get(k, ""))
                    for k in labels)
        entry = series.setdefault(key, {"buckets": {}, "sum": 0.0})
        if c.name == name + "_bucket":
            entry["buckets"][c.labels.get("le", "+Inf")] = c.value
        elif c.name == name + "_sum":
            entry["sum"] = c.value
    for key, entry in sorted(series.items()):
        buckets = sorted(entry["buckets"].items(), key=lambda kv: float(kv[0]))
        family.add_metric(list(key), buckets, entry["sum"])
    return family


def parse_listen(listen: str) -> tuple[str, int]:
    """(host, port) to bind: `[::1]:9464` is ("::1", 9464). The config check has refused a host
    that is not loopback unless metrics.allow_remote says it may be."""
    return split_listen(listen)


def host_names(host: str, port: int) -> frozenset[str]:
    """The Host headers that name a loopback endpoint (config.loopback_names, with its port)."""
    return frozenset(f"{name}:{port}" for name in loopback_names(host))


def guarded(app: Any, allowed: frozenset[str] | None, token: str | None = None) -> Any:
    """`app`, answering only requests whose Host names this endpoint (`allowed`; None: any, the
    network's names being the operator's to choose, metrics.allow_remote). A page in a browser
    that got its name to resolve to 127.0.0.1 (DNS rebinding) sends its own name: refused, 403.
    With a `token` (metrics.token_file), a request without `Authorization: Bearer TOKEN` is refused,
    401, as Prometheus's `authorization` expects."""
    import hmac

    wanted = f"Bearer {token}".encode() if token is not None else None

    def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if allowed is not None and str(environ.get("HTTP_HOST", "")).lower() not in allowed:
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"403: not this endpoint's name\n"]
        if wanted is not None and not hmac.compare_digest(
                str(environ.get("HTTP_AUTHORIZATION", "")).encode("utf-8", "surrogateescape"), wanted):
            start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                                ("WWW-Authenticate", 'Bearer realm="loom"')])
            return [b"401: send the bearer token of metrics.token_file\n"]
        return app(environ, start_response)
    return wsgi


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # a scrape every few seconds is no news


def serve(ctx: Context, loop_stats: Callable[[], dict[str, Any]]) -> Any:
    """Start the endpoint in a thread; a port that cannot be bound is a fatal, named error. `::1`
    is served over IPv6."""
    cfg = ctx.config.metrics
    host, port = parse_listen(cfg.listen)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(ctx, loop_stats))

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    token = redact.read_secret_file(cfg.token_file, "metrics.token_file") if cfg.token_file is not None else None
    app = guarded(make_wsgi_app(registry), None if cfg.allow_remote else host_names(host, port), token)
    try:
        server = make_server(host.strip("[]"), port, app, Server, handler_class=_Quiet)
    except OSError as exc:
        raise LoomError(f"metrics.listen {cfg.listen}: cannot listen: {exc.strerror or exc}") from None
    threading.Thread(target=server.serve_forever, name="loom-metrics", daemon=True).start()
    return server
