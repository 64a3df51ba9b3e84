# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Step time per node and the straggler rule.

The verdict (``verdict``) judges whatever figure per node it is given: the CPU and wall figures below, the
report's secondary column and the verdict of jobs without the flight recorder's blocks. Where two nodes have
the recorder's figures (_report.arrival), ``cost_verdict`` decides: a node is named by what it costs the
others, the share of their time per collective they spend waiting for it, with its ratio beside it.

In a job whose steps are synchronous (data parallel: every step ends in a collective) every node
prints its steps at the same pace, the slow node's pace; the wall time between step lines cannot
tell which node holds the others up. What differs is how long each node's ranks wanted the CPU per
step: CPU time plus run-queue wait (throttling by a CPU limit included), from the sampler's
``cpu`` and ``delay`` (``demand_per_step``); the others spend the difference blocked in the
collective. The node's time per step is that demand where the samples carry it, else the wall
step time.

A rank's step time is the time between two step lines divided by the steps between them (several
steps can arrive in one write); a step number that goes down (a restart resumed from a checkpoint)
starts a new series. A node's step time is the median over its ranks' step times; a node whose step
time exceeds ``ratio`` times the nodes' median (the lower middle for an even count, so that of two
nodes the slow one is compared with the fast one) is a straggler, named with its ratio.
"""
from __future__ import annotations

import statistics


def step_times(steps):
    """[{t, step}] in time order -> [(t, seconds per step)]."""
    out, last = [], None
    for record in steps:
        if last is not None and record["step"] > last["step"] and record["t"] >= last["t"]:
            out.append((record["t"], (record["t"] - last["t"]) / (record["step"] - last["step"])))
        if last is None or record["step"] != last["step"]:
            last = record
    return out


# Step intervals (over the node's ranks) the wall measure needs: with one or two intervals per rank,
# noise alone puts a node over the ratio.
MIN_INTERVALS = 5


def node_step_time(rank_steps):
    """{rank: [{t, step}]} of one node -> median seconds per step, None with fewer than MIN_INTERVALS."""
    times = [seconds for steps in rank_steps.values() for _t, seconds in step_times(steps)]
    return statistics.median(times) if len(times) >= MIN_INTERVALS else None


def _steps_by(steps, when):
    done = [s["step"] for s in steps if s["t"] <= when]
    return done[-1] if done else None


# Samples (2 s apart: 8 s of steps) a rank needs while it printed steps for its demand per step to
# count: over fewer, a node's share of a busy host's CPU decides rather than what its ranks asked for.
# Below it the nodes are compared by wall step time, which names nobody in a synchronous job; the
# verdict's line says which measure it used.
MIN_SAMPLES = 5


def demand_per_step(steps, samples):
    """One rank's (CPU + run-queue wait) seconds per step between the first and the last sample taken
    while it printed steps, or None (fewer than MIN_SAMPLES such samples, no step between, no ``delay``)."""
    if not steps:
        return None
    inside = [s for s in samples if steps[0]["t"] <= s["t"] <= steps[-1]["t"] + 0.5 and "delay" in s]
    if len(inside) < MIN_SAMPLES:
        return None
    first, last = inside[0], inside[-1]
    done = (_steps_by(steps, last["t"]) or 0) - (_steps_by(steps, first["t"]) or 0)
    if done <= 0:
        return None
    return (last["cpu"] + last["delay"] - first["cpu"] - first["delay"]) / done


def node_time(rank_steps, rank_samples):
    """(seconds per step, how): the median demand per step over the node's ranks, else the wall step time."""
    demands = [d for d in (demand_per_step(steps, rank_samples.get(key, [])) for key, steps in rank_steps.items())
               if d is not None]
    if demands:
        return statistics.median(demands), "demand"
    return node_step_time(rank_steps), "wall"


BASIS = {"demand": "CPU + run-queue wait per step", "wall": "wall time per step",
         "collective": "time per collective not spent waiting for other ranks"}
# With the demand measure, a node is a straggler only when its demand over the median is at least this
# fraction of the wall time per step: ranks that mostly wait (a sleep, the GPU, the input pipeline) use
# a few ms of CPU per step, and a ratio over that (under a millisecond more per step) holds nobody up.
SIGNIFICANT = 0.1
# The straggler rule's default ratio: every module option, action and report that takes a ratio
# defaults to this; train_straggler_ratio in roles/train/defaults/main.yml and the documented defaults
# are copies that tests/unit/packaging/test_budgets.py holds to it.
RATIO = 1.2


def unchecked_line(node_times, steps=None):
    """Why there is no straggler check, from what was seen: one node, or the nodes without a step time
    with the last step each printed (``steps``: {node: step or None}), against what a step time needs."""
    def seen_on(node):
        step = (steps or {}).get(node)
        return "%s, %s" % (node, "no step line" if step is None else "last step %s" % step)
    seen = [seen_on(node) for node, value in node_times.items() if len(node_times) < 2 or not value]
    if len(node_times) < 2:
        return "no straggler check: %s, none to compare it with" % ("one node (%s)" % seen[0] if seen else "no node")
    return ("no straggler check: no step time for %s (a node's needs %d timed step intervals); 2 nodes with one "
            "needed" % ("; ".join(seen), MIN_INTERVALS))


def verdict(node_times, ratio=RATIO, measure="wall", wall=None, steps=None):
    """{node: seconds per step or None} -> {median, ratios, stragglers [(node, ratio)], line}; ``measure``
    (demand or wall) names the figure in the line; ``wall`` ({node: wall seconds per step}), with the
    demand measure, sets the floor below which an excess is not a straggler (SIGNIFICANT); ``steps``
    ({node: step lines seen}) goes into the line when there is nothing to compare (``unchecked_line``)."""
    basis = BASIS.get(measure, BASIS["wall"])
    walls = [value for value in (wall or {}).values() if value]
    floor = SIGNIFICANT * statistics.median(walls) if measure == "demand" and walls else 0.0
    known = {node: value for node, value in node_times.items() if value}
    if len(known) < 2:
        return {"median": None, "ratios": {}, "stragglers": [], "line": unchecked_line(node_times, steps)}
    median = statistics.median_low(sorted(known.values()))
    ratios = {node: round(value / median, 2) for node, value in known.items()}
    stragglers = sorted(((node, r) for node, r in ratios.items()
                         if value_over(known[node], median, ratio) and known[node] - median >= floor),
                        key=lambda item: -item[1])
    if stragglers:
        line = "straggler: %s (%s)" % (", ".join("%s %.2fx the median %s %.3f s" % (node, r, basis, median)
                                                 for node, r in stragglers), "ratio > %g" % ratio)
    elif any(value_over(value, median, ratio) for value in known.values()):
        line = ("no straggler: every node within %gx the median %s %.3f s, or less than %d%% of the wall "
                "time per step %.3f s above it" % (ratio, basis, median, SIGNIFICANT * 100, floor / SIGNIFICANT))
    else:
        line = "no straggler: every node within %gx the median %s %.3f s" % (ratio, basis, median)
    return {"median": median, "ratios": ratios, "stragglers": stragglers, "line": line}


def value_over(value, median, ratio):
    return value > ratio * median


def cost_floor(ratio):
    """The share of the other nodes' time per collective a straggler costs them, at least: ``1 - 1/ratio`` (16.7%
    at the default 1.2): what a node ``ratio`` times slower than the others costs them where the collective
    itself takes no time. The one knob (train_straggler_ratio) sets both rules."""
    return 1.0 - 1.0 / ratio


def cost_verdict(figures, ratio=RATIO, steps=None):
    """{node: _report.arrival figures (work, cost, ...) or None} -> verdict()'s shape plus ``costs``: a node whose
    cost to the others is over cost_floor(ratio) is a straggler, named by that cost with its ratio to the median
    time per collective not spent waiting beside it (a collective that takes most of a step keeps that ratio
    near 1 however long the others wait)."""
    figures = figures or {}
    base = verdict({node: (f or {}).get("work") for node, f in figures.items()}, ratio, "collective", steps=steps)
    if base["median"] is None:
        return dict(base, costs={})
    costs = {node: float(f.get("cost") or 0.0) for node, f in figures.items() if f and f.get("work")}
    floor = cost_floor(ratio)
    named = sorted((node for node, cost in costs.items() if cost > floor), key=lambda n: (-costs[n], n))
    stragglers = [(node, base["ratios"][node]) for node in named]
    basis, median = BASIS["collective"], base["median"]
    if stragglers:
        line = "straggler: %s (over %.1f%%, 1 - 1/ratio %g)" % ("; ".join(
            "%s costs the other nodes %.1f%% of their time per collective, waiting for it (%.2fx the median %s "
            "%.3f s)" % (node, costs[node] * 100, base["ratios"][node], basis, median) for node in named),
            floor * 100, ratio)
    else:
        worst = max(sorted(costs), key=lambda n: costs[n])
        line = ("no straggler: no node costs the others over %.1f%% of their time per collective (the most: %s, "
                "%.1f%%); every node within %.2fx the median %s %.3f s" % (
                    floor * 100, worst, costs[worst] * 100, max(base["ratios"].values()), basis, median))
    return dict(base, stragglers=stragglers, costs=costs, line=line)
