"""`loom check [--agent NAME]`: one line and a monitoring plugin's exit code (0 OK, 1 WARNING,
2 CRITICAL, 3 UNKNOWN) for Nagios, Icinga, Monit, cron and healthchecks wrappers. The verdict is
report/check_rules.py's; this gathers its facts from the same status `loom status` shows.

A config that does not load exits 2, as every command does (it is critical to the operator too);
a state dir or store that cannot be read is UNKNOWN: nothing is known of the agent.
"""

from __future__ import annotations

import argparse

from loomtui import redact
from loomtui.cli.common import add_agent_option, base_context, choose_agent, subcommand
from loomtui.errors import ConfigError, LoomError
from loomtui.text import printable


def register(sub) -> None:
    parser = subcommand(sub, "check", "one line and a monitoring plugin's exit code: "
                        "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN")
    add_agent_option(parser, "only this agent (default: every agent)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from loomtui.report import check_rules as rules

    try:
        code, line = _verdict(args)
    except ConfigError:
        raise  # one line naming the file and key, exit 2
    except LoomError as exc:
        code, line = rules.UNKNOWN, f"LOOM UNKNOWN - {exc}"
    except Exception as exc:  # a monitoring plugin answers with its one line, never a traceback and 1
        code, line = rules.UNKNOWN, f"LOOM UNKNOWN - loom check failed: {type(exc).__name__}: {redact.scrub(str(exc))}"
    print(printable(line))
    return code


def _verdict(args: argparse.Namespace) -> tuple[int, str]:
    from loomtui.report import check_rules as rules
    from loomtui.daemon.oneshot import loop_name, stuck_host_loops, stuck_ticks
    from loomtui.report import status as status_mod
    from loomtui.sentinel import queue
    from loomtui.timing import age, as_instant

    base = base_context(args)
    config = base.config
    named = choose_agent(config.agent_names, args.agent, required=False)
    statuses = ([status_mod.gather(base if base.agent == named else base.for_agent(named), events=0)]
                if named is not None else status_mod.gather_all(base, events=0))
    escalated: dict[str, int] = {}
    for item in queue.unresolved_items(base.store):
        if item.escalated_at is not None:
            escalated[item.agent] = escalated.get(item.agent, 0) + 1
    beat = statuses[0].supervisor  # the host's: every agent's status has the same
    running = beat.loops if beat is not None else None  # None: an older daemon says nothing
    host_stale = rules.supervisor_stale_after(config.watchdog.interval)
    agents = []
    for s in statuses:
        view = config.for_agent(s.name)
        claim = s.relaunch
        agents.append(rules.AgentFacts(
            name=s.name, state=s.agent_state(),
            # The hold's reason is anyone's words: one line, and no `|` (monitoring splits perfdata there).
            hold_reason=printable(s.hold.reason).replace("|", "/") if s.hold is not None else "",
            # On the monotonic clock within a boot (the relaunch's record keeps it): a wall clock
            # stepped ahead had warned at once, one stepped back hid a relaunch past its bound.
            unwitnessed_for=age(claim.at, as_instant(s.moment)) if s.unwitnessed and claim is not None else None,
            witness_within=rules.witness_within(view.agent.boot_grace, view.canary.ack_timeout,
                                                view.canary.misses_to_recycle, view.watchdog.interval),
            past_backstop=escalated.get(s.name, 0),
            supervised=None if running is None else loop_name("watchdog", s.name) in running,
            stuck=stuck_ticks(beat, config, s.name)))
    box = statuses[0].outbox
    host = rules.HostFacts(
        heartbeat_age=beat.age if beat is not None else None,
        stale_after=host_stale,
        telegram_on=bool(config.telegram.chat_id), pending=box["pending"],
        oldest_pending_age=box["oldest_pending_age"], failed=box["failed"], stuck=stuck_host_loops(beat, config))
    return rules.verdict(agents, host)
