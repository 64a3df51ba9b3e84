# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The straggler from the flight recorder (_report.arrival): synthetic blocks for the rules, and jobs recorded
with real ranks (tests/fixtures/report/jobs/spin_slow, spin_even, sleep_slow: GPU-shaped smoke jobs)."""
from __future__ import annotations

import os
import re

import pytest

from ansible_collections.multinode.training.plugins.module_utils._report import arrival, straggler, timeline

JOBS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "report", "jobs")


def _blocks(start, lag, period=0.3, count=6, size=8, duration=None, pg="0"):
    """``count`` blocks of one rank that enters every collective ``lag`` s after the first rank does."""
    out = []
    for k in range(count):
        first = 1 + k * size
        t0 = start + (first - 1) * period + lag
        times = [t0 + i * period for i in range(size)]
        out.append([pg, first, size, times[0], times[-1], sum(times) / size, duration])
    return [(0, b) for b in out]


def test_the_node_that_enters_last_has_the_most_time_not_spent_waiting():
    # node2's ranks enter each collective 0.1 s after node1's; the time per collective is 0.3 s
    ranks = {("n1", "0_0"): _blocks(100, 0.0), ("n1", "0_1"): _blocks(100, 0.002),
             ("n2", "0_0"): _blocks(100, 0.1), ("n2", "0_1"): _blocks(100, 0.099)}
    found = arrival.figures(ranks)
    assert found["n1"]["work"] == pytest.approx(0.2, abs=0.002)
    assert found["n2"]["work"] == pytest.approx(0.3, abs=0.002)
    assert found["n1"]["wait"] == pytest.approx(0.1, abs=0.002) and found["n2"]["period"] == pytest.approx(0.3)
    assert found["n1"]["blocks"] == 6 and found["n1"]["gpu"] is False
    verdict = straggler.verdict({h: f["work"] for h, f in found.items()}, measure="collective")
    assert verdict["stragglers"] == [("n2", pytest.approx(1.5, abs=0.02))]
    assert re.match(r"straggler: n2 1.4[89]x the median time per collective not spent waiting", verdict["line"])


def test_a_node_is_named_by_what_it_costs_the_others_where_its_ratio_stays_under():
    """The collective takes most of each 0.65 s step; node2's ranks arrive 80 and 123 ms after node1's, which
    wait 123 ms per collective for it (18.9% of their time). Its time per collective not spent waiting is only
    1.19x node1's (its own first rank waits 43 ms for its second): the ratio rule alone named nobody."""
    ranks = {("n1", "0_0"): _blocks(100, 0.0, period=0.65), ("n1", "0_1"): _blocks(100, 0.0, period=0.65),
             ("n2", "0_0"): _blocks(100, 0.08, period=0.65), ("n2", "0_1"): _blocks(100, 0.123, period=0.65)}
    found = arrival.figures(ranks)
    assert found["n2"]["cost"] == pytest.approx(0.123 / 0.65, abs=0.002) and found["n1"]["cost"] == 0.0
    assert straggler.verdict({h: f["work"] for h, f in found.items()}, measure="collective")["stragglers"] == []
    judged = straggler.cost_verdict(found)
    assert judged["stragglers"] == [("n2", pytest.approx(1.19, abs=0.01))]
    assert judged["line"] == ("straggler: n2 costs the other nodes 18.9% of their time per collective, waiting for "
                              "it (1.19x the median time per collective not spent waiting for other ranks 0.527 s) "
                              "(over 16.7%, 1 - 1/ratio 1.2)")
    # at ratio 1.3 (floor 23.1%) nobody; the line names the most costly node and the largest ratio
    quiet = straggler.cost_verdict(found, 1.3)
    assert quiet["stragglers"] == [] and quiet["line"].startswith(
        "no straggler: no node costs the others over 23.1% of their time per collective (the most: n2, 18.9%); "
        "every node within 1.19x")
    assert straggler.cost_verdict({"n1": found["n1"]})["line"].startswith("no straggler check")


def test_gpu_durations_decide_and_no_clock_is_compared():
    # node2's clock 2 s ahead; its GPU kernels short (it came last), node1's long (it waited 0.1 s in each)
    ranks = {("n1", "0_0"): _blocks(100, 0.0, duration=100.5), ("n2", "0_0"): _blocks(102, 0.0, duration=0.5)}
    found = arrival.figures(ranks)
    assert found["n1"]["gpu"] and found["n2"]["gpu"]
    assert found["n1"]["wait"] == pytest.approx(0.1) and found["n2"]["wait"] == 0
    assert found["n2"]["work"] / found["n1"]["work"] == pytest.approx(1.5, abs=0.01)
    # without the durations the same clocks would blame node2 by 2 s: the durations are what counted
    untimed = arrival.figures({("n1", "0_0"): _blocks(100, 0.0), ("n2", "0_0"): _blocks(102, 0.0)})
    assert untimed["n1"]["wait"] == pytest.approx(2.0)


def test_too_few_blocks_a_lone_node_and_incomplete_copies_count_for_nothing():
    two = {("n1", "0_0"): _blocks(100, 0.0, count=2), ("n2", "0_0"): _blocks(100, 0.1, count=2)}
    assert arrival.figures(two) == {}  # 2 blocks each: under MIN_BLOCKS
    assert arrival.figures({("n1", "0_0"): _blocks(100, 0.0), ("n1", "0_1"): _blocks(100, 0.1)}) == {}
    # node2's second rank misses every block but the first: only the first is complete, so nothing counts
    partial = {("n1", "0_0"): _blocks(100, 0.0), ("n2", "0_0"): _blocks(100, 0.1), ("n2", "0_1"): _blocks(100, 0.1)[:1]}
    assert arrival.figures(partial) == {}


def test_a_restart_counts_its_collectives_again_without_meeting_the_first_attempt():
    # node1's rank kept its file (the same restart count), node2's a new one; the attempts 60 s apart
    first = {("n1", "0_0"): _blocks(100, 0.0), ("n2", "0_0"): _blocks(100, 0.1)}
    again = {("n1", "0_0"): _blocks(160, 0.1), ("n2", "1_0"): _blocks(160, 0.0)}
    records = [{"frb": [b for _s, b in first[("n1", "0_0")]]}, {"frb": [b for _s, b in again[("n1", "0_0")]]}]
    kept = arrival.rank_blocks(records)
    assert [s for s, _b in kept] == [0] * 6 + [1] * 6  # the second process: a new segment
    ranks = {("n1", "0_0"): kept, ("n2", "0_0"): first[("n2", "0_0")], ("n2", "1_0"): again[("n2", "1_0")]}
    assert all(len(c) == 2 for c in arrival.matched(ranks))  # one copy per node in every comparison
    found = arrival.figures(ranks)
    # node1: last in the second attempt (its 6 blocks there), first in the first: both its ranks' medians
    assert found["n1"]["blocks"] == 6 and found["n2"]["blocks"] == 6
    assert arrival.rank_blocks([{"frb": [["0", 1, 8]]}, {"cpu": 1}]) == []  # a record cut short is passed over


def test_copies_of_one_block_further_apart_than_slack_are_two_attempts_even_from_other_local_ranks():
    # a restart 60 s later whose files are other local ranks' (node1's local 0 only in the first attempt, its
    # local 1 only in the second): no local rank repeats, so only the time apart tells the attempts apart
    ranks = {("n1", "0_0"): _blocks(100, 0.0), ("n2", "0_0"): _blocks(100, 0.1),
             ("n1", "1_1"): _blocks(160, 0.1), ("n2", "1_1"): _blocks(160, 0.0)}
    clusters = arrival.matched(ranks)
    assert clusters and all(len(c) == 2 for c in clusters)
    assert all(max(b[arrival.T_FIRST] for b in c.values()) - min(b[arrival.T_FIRST] for b in c.values())
               <= arrival.SLACK for c in clusters)
    found = arrival.figures(ranks)
    assert found["n1"]["wait"] == pytest.approx(0.05, abs=0.002)  # waited 0.1 s in one attempt, 0 in the other


def _job(name):
    return timeline.build(os.path.join(JOBS, name))


@pytest.mark.parametrize("name", ["spin_slow", "sleep_slow"])
def test_recorded_gpu_shaped_jobs_name_the_node_with_twice_the_device_time(name):
    model = _job(name)
    assert [node for node, _r in model["straggler"]["stragglers"]] == ["default-node2"]
    assert model["straggler"]["ratios"]["default-node2"] > 1.6
    assert model["straggler"]["line"].startswith("straggler: default-node2 costs the other nodes ")
    assert "time per collective not spent waiting for other ranks" in model["straggler"]["line"]
    # node1 waits for node2 46.9% (spinning) and 49.6% (sleeping) of its time: over 2.8x the floor
    assert model["straggler"]["costs"]["default-node2"] > 2.5 * straggler.cost_floor(1.2)
    assert set(model["arrival"]) == {"default-node1", "default-node2"}


def test_recorded_even_spinning_job_names_nobody():
    model = _job("spin_even")
    assert model["straggler"]["stragglers"] == []
    assert max(model["straggler"]["ratios"].values()) < 1.1
    # each node costs the other 3.4% and 5.4% of its time: over 3x under the floor 1 - 1/1.2
    assert max(model["straggler"]["costs"].values()) < straggler.cost_floor(1.2) / 3
    assert model["straggler"]["line"].startswith(
        "no straggler: no node costs the others over 16.7% of their time per collective (the most: default-node1, ")


@pytest.mark.parametrize("name", ["spin_slow", "sleep_slow"])
def test_the_cpu_figure_cannot_see_the_slow_node_of_a_gpu_shaped_job(name):
    # spinning (CUDA's default sync): every rank's CPU + run-queue wait per step is its wall time, on both nodes;
    # blocking: a few ms on both nodes, under the floor. The CPU figure (secondary) names nobody either way
    model = _job(name)
    assert model["cpu_straggler"]["stragglers"] == []
    assert model["straggler"]["stragglers"][0][0] == "default-node2"


def test_jobs_without_blocks_keep_the_cpu_figure():
    model = _job("slow_long")  # recorded before the sampler kept blocks
    assert model["arrival"] == {} and model["straggler"] is not None
    assert "CPU + run-queue wait per step" in model["straggler"]["line"]
