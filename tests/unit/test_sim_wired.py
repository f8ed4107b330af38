"""The simulation-driven tests that `make mutants` runs against the wired modules (actions,
recovery, holds, the canary loop, the watchdog, the sentinel tick): Loom's own code under the
simulated world, judged by the invariants and by what each incident claims. Kept to a few seconds
on purpose, since mutmut runs them for each mutant; the wider spreads are in test_sim.py.
"""

from __future__ import annotations

import pytest

from loomtui.sim import simulate
from loomtui.sim.scenarios import SCENARIOS, run_scenario


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def test_each_incident_ends_as_the_design_says(scenario):
    result = run_scenario(scenario, seed=1)
    assert result["passed"], (scenario.name, result["outcome"])


# A stormy day on two seeds: between them every automatic cause, a hold at the ceiling, a
# witnessed queue item and one past its backstop.
STORM = ((1, 1.0), (2, 1.0))


@pytest.mark.parametrize(("seed", "days"), STORM, ids=[f"seed{s}" for s, _ in STORM])
def test_a_stormy_day_breaks_no_invariant(seed, days):
    run = simulate(seed, days, "storm")
    assert run["violation"] is None, run["violation"]
    assert run["simulated_seconds"] == days * 86400.0
    assert run["false_recycles"] == 0 and run["recoveries"] > 0
    assert run["escalations"] > 0 and run["queue"]["witnessed"] > 0 and run["queue"]["escalated"] > 0
    assert {"crash", "exit", "resume_failed"} <= set(run["relaunches"])
