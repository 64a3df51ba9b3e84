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
    steps = _steps((10, 1), (20, 11))
    samples = [{"t": 8, "cpu": 0, "delay": 0}, {"t": 12, "cpu": 1, "delay": 1},
               {"t": 18, "cpu": 2, "delay": 6}, {"t": 30, "cpu": 9, "delay": 9}]
    # between t=12 (step 1 done) and t=18 (still step 1) no step: None; add one at 15
    assert straggler.demand_per_step(steps, samples) is None
    steps.insert(1, _steps((15, 5))[0])
    assert straggler.demand_per_step(steps, samples) == pytest.approx((8 - 2) / 4)


def test_node_time_falls_back_to_wall_step_time_without_delay():
    steps = {"0_0": _steps((0, 1), (2, 2), (4, 3))}
    assert straggler.node_time(steps, {"0_0": [{"t": 1, "cpu": 0}, {"t": 3, "cpu": 1}]}) == (2.0, "wall")


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
