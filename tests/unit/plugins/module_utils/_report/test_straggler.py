"""The straggler rule: step times, a node's time per step (demand or wall), the verdict against the ratio."""
from __future__ import annotations

import pytest

from ansible_collections.multinode.training.plugins.module_utils._report import straggler


def _steps(*pairs):
    return [{"t": t, "step": s} for t, s in pairs]


def test_step_times_divide_by_the_steps_between_and_restart_on_a_lower_step():
    times = straggler.step_times(_steps((0, 1), (1, 2), (3, 4), (3.5, 2), (4.5, 3)))
    assert times == [(1, 1.0), (3, 1.0), (4.5, 1.0)]


def test_demand_per_step_uses_cpu_and_run_queue_wait_inside_the_step_window():
    steps = _steps((10, 1), (31, 21))
    # samples every 2 s from t=8; t=8, t=32 and t=34 are outside the steps (t=10..31.5)
    samples = [{"t": t, "cpu": t / 4.0, "delay": t / 8.0} for t in range(8, 36, 2)]
    # the samples inside see step 1 done at t=10 and at t=30: no step between, None; add one at 25
    assert straggler.demand_per_step(steps, samples) is None
    steps.insert(1, _steps((25, 16))[0])
    # t=10 (step 1 done) to t=30 (step 16 done): 20 s at 0.375 CPU + wait per s over 15 steps
    assert straggler.demand_per_step(steps, samples) == pytest.approx(20 * 0.375 / 15)
    # fewer samples inside the steps than MIN_SAMPLES: too few to judge a node by
    few = [s for s in samples if s["t"] in (8, 10, 20, 30, 34)]
    assert len([s for s in few if 10 <= s["t"] <= 30]) == straggler.MIN_SAMPLES - 2
    assert straggler.demand_per_step(steps, few) is None


def test_node_time_falls_back_to_wall_step_time_without_delay():
    steps = {"0_0": _steps((0, 1), (2, 2), (4, 3), (6, 4), (8, 5), (10, 6))}
    assert straggler.node_time(steps, {"0_0": [{"t": 1, "cpu": 0}, {"t": 3, "cpu": 1}]}) == (2.0, "wall")
    # fewer step intervals than MIN_INTERVALS: no figure at all
    assert straggler.node_time({"0_0": steps["0_0"][:3], "0_1": steps["0_0"][:3]}, {}) == (None, "wall")


@pytest.mark.parametrize("times, ratio, named", [
    ({"a": 1.0, "b": 1.1}, 1.2, []),
    ({"a": 1.0, "b": 1.3}, 1.2, [("b", 1.3)]),
    ({"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.5}, 1.2, [("d", 2.5)]),
    ({"a": 1.0, "b": 1.3}, 1.5, []),
])
def test_verdict_names_nodes_over_ratio_times_the_median(times, ratio, named):
    result = straggler.verdict(times, ratio)
    assert result["stragglers"] == named
    assert ("straggler: " + named[0][0]) in result["line"] if named else result["line"].startswith("no straggler")


def test_verdict_needs_two_nodes_with_step_times():
    assert straggler.verdict({"a": 1.0, "b": None})["line"].startswith("no straggler check")


def test_demand_excess_under_a_tenth_of_the_wall_step_is_no_straggler():
    demand = {"a": 0.010, "b": 0.020}
    assert straggler.verdict(demand, 1.2, "demand", {"a": 0.05, "b": 0.05})["stragglers"] == [("b", 2.0)]
    quiet = straggler.verdict(demand, 1.2, "demand", {"a": 0.5, "b": 0.5})
    assert quiet["stragglers"] == [] and quiet["line"].startswith("no straggler: every node within 1.2x")
    # the wall measure has no floor
    assert straggler.verdict(demand, 1.2, "wall", {"a": 0.5, "b": 0.5})["stragglers"] == [("b", 2.0)]


@pytest.mark.parametrize("times, steps, line", [
    # one node that printed its five steps in 40 ms (the smoke job on the embedded default)
    ({"localhost": None}, {"localhost": 5}, "no straggler check: one node (localhost, last step 5), none to compare "
                                            "it with"),
    ({"n1": 0.5}, {"n1": 120}, "no straggler check: one node (n1, last step 120), none to compare it with"),
    ({"n1": 0.5, "n2": None, "n3": None}, {"n1": 40, "n2": 3},
     "no straggler check: no step time for n2, last step 3; n3, no step line (a node's needs 5 timed step "
     "intervals); 2 nodes with one needed"),
])
def test_without_a_check_the_line_says_what_it_saw(times, steps, line):
    assert straggler.verdict(times, steps=steps)["line"] == line
