# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The live part of the wait's progress lines: the latest step (and loss) of each node and the slowest
node so far, while the job runs (ssh launcher: ``Live``, one per node's action; Slurm: ``ClusterLive``).

Each node's poll answers with ``live`` (_node.watchlib.live_samples: the tail of the job report's samples
of its latest attempt - the ranks' CPU plus run-queue wait, and the last candidate step lines of its
lowest local rank). The controller's action for that node (plugins/action/torchrun.py) parses the step
with the report's rules (_report.steps, ``train_step_pattern``) and measures the node's demand per step
since the first step it saw, the same measure as the report's straggler rule (_report.straggler), with
the figure and the step count of the same moment (the node's samples), once it spans LIVE_MIN_SECONDS.

The nodes' actions run in separate processes: each writes its figures to
``<runs>/<job id>/.live/<host>.json`` and reads the others' there, so every progress line can name the
slowest node so far: the one whose demand per step is highest, with its ratio to the median (the lower
middle), when the report's rule would name it a straggler (over ``straggler_ratio``, by the floor).
"""
from __future__ import annotations

import json
import os
import statistics

from ansible_collections.multinode.training.plugins.module_utils._report import arrival as _arrival
from ansible_collections.multinode.training.plugins.module_utils._report import steps as _steps
from ansible_collections.multinode.training.plugins.module_utils._report.straggler import (
    MIN_INTERVALS, RATIO, SIGNIFICANT, cost_verdict,
)

LIVE_DIR = ".live"
# The options of this live part, in the argument specs of both launch modules (torchrun, slurm_job), as the
# doc fragment multinode.training.progress documents them for both: empty step_pattern - the report's
# built-in patterns (_report.steps).
PROGRESS_SPEC = dict(
    step_pattern=dict(type="str", default=""),
    straggler_ratio=dict(type="float", default=RATIO),
)


def latest_step(lines, patterns):
    """(step, loss) of the last line that is a step with a number, else (None, loss of the last that matched)."""
    loss = None
    for line in reversed(lines or []):
        found = _steps.match(line, patterns)
        if found is None:
            continue
        _name, step, found_loss = found
        if step is not None:
            return step, found_loss
        if loss is None:
            loss = found_loss
    return None, loss


# The evidence a node's live figure needs: MIN_INTERVALS steps (the report's rule, _report.straggler) and
# LIVE_MIN_SECONDS of samples since the first step this wait saw. On a shared host the nodes' demand per
# step swings 2x from one 2 s sample to the next (tests/fixtures/report/jobs/ok_long), so the first
# seconds of an even job can put any node over the ratio; warm-up (compiling, caches, data workers) is
# uneven on real nodes too. A hint that names a node the report then clears costs the user's trust; 30 s
# is nothing to a real job.
LIVE_MIN_SECONDS = 30.0
# The flight recorder's blocks a node's action keeps per rank for the live figure (a block is 8 to a few
# thousand collectives: _node.sampler.block_of).
LIVE_BLOCKS = 200


def ratio_of(value):
    """The actions' straggler_ratio as a number; what is not one gives the default here (the module's own
    argument check then refuses it, naming the option)."""
    try:
        return float(value) if value not in (None, "") else RATIO
    except (TypeError, ValueError):
        return RATIO


class Tracker(object):
    """One node's figures over one wait. ``update(live)`` -> {step, loss, per_step, wall_per_step}:
    per_step is the demand (CPU + run-queue wait per rank) per step since the first step seen in this
    attempt, wall_per_step the time per step, both measured at the moments of the node's samples (``t``,
    ``step_lines``: _node.watchlib.live_samples) and given once they span MIN_INTERVALS steps and
    LIVE_MIN_SECONDS; a new attempt (a restart), a step or a demand that went down starts the count again."""

    def __init__(self, patterns):
        self.patterns = patterns
        self.base = None
        self.attempt, self.blocks = None, {}

    def arrivals(self, live):
        """The flight recorder's blocks of this attempt so far ({local rank: [block]}, the last LIVE_BLOCKS
        of each rank): the polls' tails overlap, each block is kept once."""
        if live.get("attempt") != self.attempt:
            self.attempt, self.blocks = live.get("attempt"), {}
        for local, blocks in (live.get("blocks") or {}).items():
            kept = self.blocks.setdefault(str(local), {})
            for block in blocks:
                if isinstance(block, list) and len(block) == 7:
                    kept[(block[0], block[1])] = block
            for key in sorted(kept, key=lambda k: kept[k][3])[:-LIVE_BLOCKS]:
                del kept[key]
        return {local: sorted(kept.values(), key=lambda b: b[3]) for local, kept in self.blocks.items() if kept}

    def update(self, live):
        if not isinstance(live, dict):
            return {}
        step, loss = latest_step(live.get("lines"), self.patterns)
        out = {key: value for key, value in (("step", step), ("loss", loss)) if value is not None}
        blocks = self.arrivals(live)
        if blocks:
            out["blocks"] = blocks
        at = live.get("t")
        counted = latest_step(live.get("step_lines"), self.patterns)[0]
        if counted is None or live.get("demand") is None or at is None:
            return out
        ranks = max(1, int(live.get("ranks") or 1))
        demand = float(live["demand"]) / ranks
        attempt = live.get("attempt")
        base = self.base
        if base is None or base[0] != attempt or counted < base[1] or demand < base[2]:
            self.base = (attempt, counted, demand, float(at))
        elif counted - base[1] >= MIN_INTERVALS and float(at) - base[3] >= LIVE_MIN_SECONDS:
            out["per_step"] = round((demand - base[2]) / (counted - base[1]), 6)
            out["wall_per_step"] = round((float(at) - base[3]) / (counted - base[1]), 6)
        return out


def share(directory, host, figures):
    """Write this node's figures for the other nodes' actions (atomically: a reader never sees half a file)."""
    try:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, "%s.json" % host)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as handle:
            json.dump(figures, handle)
        os.replace(tmp, path)
    except OSError:
        pass  # the live line is a convenience: the wait goes on without it


def read_shared(directory):
    """{host: figures} that the nodes' actions wrote."""
    out = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return out
    for name in names:
        if name.endswith(".json"):
            try:
                with open(os.path.join(directory, name)) as handle:
                    out[name[:-len(".json")]] = json.load(handle)
            except (OSError, ValueError):
                continue
    return out


def arrival_slowest(shared, ratio=RATIO):
    """(host, ratio, "collective", cost) of the node whose ranks reach the collectives last, by the report's rule
    (_report.straggler.cost_verdict: what it costs the others, over 1 - 1/``ratio``), from the
    blocks the nodes' actions shared, once blocks seen on two nodes span LIVE_MIN_SECONDS; None when no node
    is over it or there is not enough yet; False when no node shared any block (no flight recorder: the CPU
    figure then). A job with blocks is never judged by the CPU figure, which names the fast node of a job
    whose ranks spin while they wait."""
    ranks = {(host, local): [(0, block) for block in blocks]
             for host, figures in shared.items() if isinstance(figures, dict)
             for local, blocks in (figures.get("blocks") or {}).items() if isinstance(blocks, list)}
    if not ranks:
        return False
    clusters = _arrival.compared(ranks)
    if _arrival.span(clusters) < LIVE_MIN_SECONDS:  # also fewer than two nodes: nothing compared, span 0
        return None
    found = _arrival.figures(ranks, clusters)
    judged = cost_verdict(found, ratio)  # the report's rule
    if not judged["stragglers"]:
        return None
    host, times = judged["stragglers"][0]
    return host, times, "collective", judged["costs"][host]


def slowest(shared, ratio=RATIO):
    """(host, ratio to the median, measure) of the slowest node so far, when the report's rule would name
    it: by the flight recorder's blocks where two nodes have enough of them (arrival_slowest), else by the
    demand per step: over ``ratio`` x the median (the lower middle) and by at least the report's floor
    (_report.straggler.SIGNIFICANT of the wall time per step: ranks that mostly wait); else None, and
    with fewer than two nodes measured. One node of an even job is always the slowest by a little:
    naming it would send a user after nothing."""
    by_arrival = arrival_slowest(shared, ratio)
    if by_arrival is not False:
        return by_arrival
    known = {host: f["per_step"] for host, f in shared.items() if isinstance(f, dict) and f.get("per_step")}
    if len(known) < 2:
        return None
    median = statistics.median_low(sorted(known.values()))
    host = max(sorted(known), key=lambda h: known[h])
    walls = [f["wall_per_step"] for f in shared.values() if isinstance(f, dict) and f.get("wall_per_step")]
    if known[host] <= ratio * median:
        return None
    if walls and known[host] - median < SIGNIFICANT * statistics.median(walls):
        return None
    return host, round(known[host] / median, 2), "demand"


# What the progress line says the slowest node's ratio is of.
LIVE_BASIS = {"collective": "time per collective not spent waiting", "demand": "CPU per step"}


def suffix(figures, slow):
    """What the progress line gets: ``step 120, loss 0.53`` and ``slowest so far: <host> 1.93x the median``."""
    parts = []
    if "step" in figures:
        parts.append("step %s" % figures["step"] + (", loss %.4g" % figures["loss"] if "loss" in figures else ""))
    elif "loss" in figures:
        parts.append("loss %.4g" % figures["loss"])
    if slow and slow[2] == "collective":
        parts.append("slowest so far: %s costs the others %.1f%% of their time per collective (%.2fx the median %s)"
                     % (slow[0], slow[3] * 100, slow[1], LIVE_BASIS[slow[2]]))
    elif slow:
        parts.append("slowest so far: %s %.2fx the median %s" % (slow[0], slow[1], LIVE_BASIS[slow[2]]))
    return "".join(" | " + part for part in parts)


def off_line(node, live):
    """``hang detection off on <node>: torch 2.7.1 records no collectives for backend gloo (...)`` when the node's
    ranks say their collectives cannot be seen (_node.sampler.recorder_off, through live_samples), else None."""
    off = (live or {}).get("fr_off") if isinstance(live, dict) else None
    if not off:
        return None
    return "hang detection off on %s: %s; the straggler is named by the CPU figure" % (node, off)


class ClusterLive(object):
    """The Slurm launcher's side (plugins/action/slurm_job.py): one poll answers for every node (the
    submit host reads the nodes' job directories on shared storage), so one action keeps a Tracker per
    node. ``line(live_by_node)`` -> the suffix: the first node's latest step and the slowest node so far."""

    def __init__(self, pattern, ratio=RATIO):
        self.patterns = _steps.compile_patterns(pattern or None)
        self.ratio = ratio
        self.trackers = {}
        self.figures = {}
        self.said = set()

    def notices(self, live_by_node):
        """The lines to print once (off_line), each node's the first time it says so."""
        out = []
        for node, sample in sorted((live_by_node or {}).items()):
            line = off_line(node, sample)
            if line and node not in self.said:
                self.said.add(node)
                out.append(line)
        return out

    def line(self, live_by_node):
        for node, sample in sorted((live_by_node or {}).items()):
            tracker = self.trackers.setdefault(node, Tracker(self.patterns))
            figures = tracker.update(sample)
            if figures:
                self.figures[node] = figures
        first = next((self.figures[n] for n in sorted(self.figures) if "step" in self.figures[n]), {})
        return suffix(first, slowest(self.figures, self.ratio))


class Live(object):
    """The action's side for one node: ``line(polled)`` -> the suffix of its progress line."""

    def __init__(self, host, pattern, collect_to, ratio=RATIO):
        self.host = host
        self.said_off = False
        self.ratio = ratio
        self.tracker = Tracker(_steps.compile_patterns(pattern or None))
        self.directory = os.path.join(os.path.dirname(collect_to.rstrip("/")), LIVE_DIR) if collect_to else None

    def notice(self, polled):
        """off_line for this node, the first time its ranks say so; else None."""
        line = None if self.said_off else off_line(self.host, polled.get("live"))
        self.said_off = self.said_off or bool(line)
        return line

    def line(self, polled):
        figures = self.tracker.update(polled.get("live"))
        slow = None
        if self.directory:
            if figures.get("per_step") or figures.get("blocks"):
                share(self.directory, self.host, figures)
            slow = slowest(read_shared(self.directory), self.ratio)
        return suffix(figures, slow)
