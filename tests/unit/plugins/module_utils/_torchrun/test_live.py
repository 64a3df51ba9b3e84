# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The live progress figures (_torchrun.live, _node.watchlib.live_samples) replayed on recorded jobs: the
samples of tests/fixtures/report/jobs/<name>/ cut at the times the controller would have polled."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node.watchlib import live_samples
from ansible_collections.multinode.training.plugins.module_utils._report import timeline
from ansible_collections.multinode.training.plugins.module_utils._report.steps import compile_patterns
from ansible_collections.multinode.training.plugins.module_utils._torchrun import live

JOBS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "fixtures", "report", "jobs")


def _records(path):
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _cut(src, dest, until):
    """The node directory ``src`` as a poll at time ``until`` would have found it (samples up to then)."""
    os.makedirs(os.path.join(dest, "samples"), exist_ok=True)
    for name in os.listdir(os.path.join(src, "samples")):
        kept = [r for r in _records(os.path.join(src, "samples", name)) if r["t"] <= until]
        with open(os.path.join(dest, "samples", name), "w") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in kept))


def _span(job):
    times = [r["t"] for host in os.listdir(job) for name in os.listdir(os.path.join(job, host, "samples"))
             for r in _records(os.path.join(job, host, "samples", name))]
    return min(times), max(times)


def _replay(tmp_path, name, every=15.0, named=None):
    """Every node's Live over polls ``every`` s apart -> (last suffix per host, shared dir); ``named`` (a
    list) gets the node each progress line named the slowest."""
    job = os.path.join(JOBS, name)
    runs = tmp_path / "runs" / ("job-" + name)
    hosts = sorted(os.listdir(job))
    actions = {host: live.Live(host, "", str(runs / host)) for host in hosts}
    first, last = _span(job)
    lines = {}
    at = first + every
    while at < last + every:
        for host in hosts:
            node = tmp_path / "node" / host
            shutil.rmtree(node, ignore_errors=True)
            _cut(os.path.join(job, host), str(node), at)
            lines[host] = actions[host].line({"live": live_samples(str(node))})
            if named is not None and "slowest so far: " in lines[host]:
                named.append(lines[host].split("slowest so far: ")[1].split()[0])
        at += every
    return lines, runs / live.LIVE_DIR


def test_throttled_job_names_node2_the_slowest_so_far(tmp_path):
    # about 100 s of steps with default-node2 at 0.2 CPUs, polled every 3 s (the molecule job's interval)
    lines, shared = _replay(tmp_path, "slow_long", every=3.0)
    figures = live.read_shared(str(shared))
    host, ratio, measure = live.slowest(figures)
    assert host == "default-node2" and ratio > 1.5 and measure == "demand"  # recorded before the blocks
    # the same figures as the job report's (CPU + run-queue wait per step over the whole job)
    report = timeline.build(os.path.join(JOBS, "slow_long"))
    assert report["measure"] == "demand"
    for node, value in report["step_time"].items():
        assert figures[node]["per_step"] == pytest.approx(value, rel=0.15)
    assert ratio == pytest.approx(report["straggler"]["ratios"]["default-node2"], rel=0.15)
    assert all(re.search(r" [|] step [0-9]+, loss ", line) for line in lines.values())
    # the node that polled last in the round saw both nodes' figures
    assert lines["default-node2"].endswith(" | slowest so far: default-node2 %.2fx the median CPU per step" % ratio)


@pytest.mark.parametrize("name", ["slow", "slow_long"])
def test_throttled_job_polled_every_second_never_names_node1(tmp_path, name):
    # one poll a second (a short progress interval): a line that names a node names node2; the short job (12 s of
    # steps) is over before LIVE_MIN_SECONDS and names nobody
    named = []
    _replay(tmp_path, name, every=1.0, named=named)
    assert set(named) == ({"default-node2"} if name == "slow_long" else set())


@pytest.mark.parametrize("name, every", [("ok", 15.0), ("ok", 1.0), ("ok_long", 1.0), ("sleepy", 1.0)])
def test_too_little_evidence_measures_nothing(tmp_path, name, every):
    # under LIVE_MIN_SECONDS of steps (ok: 200 steps in 5 s, polls 15 s apart see them all at once; ok_long:
    # 23 s, whose first 8 s said 1.41x; sleepy: 15 s): no figure, no name
    lines, shared = _replay(tmp_path, name, every=every)
    assert live.read_shared(str(shared)) == {}
    assert all("slowest" not in line and " | step " in line for line in lines.values())


@pytest.mark.parametrize("every", [1.0, 3.0])
def test_unthrottled_long_job_names_no_slowest_node(tmp_path, every):
    named = []
    _lines, shared = _replay(tmp_path, "even_long", every=every, named=named)
    figures = live.read_shared(str(shared))
    assert len(figures) == 2 and all(f["per_step"] > 0 for f in figures.values())
    assert live.slowest(figures) is None
    assert named == []


def test_a_node_named_only_over_the_ratio_and_the_floor():
    # ranks that mostly wait: 12 ms more per 500 ms step names nobody, per 50 ms steps it does
    waiting = {"n1": {"per_step": 0.003, "wall_per_step": 0.5}, "n2": {"per_step": 0.015, "wall_per_step": 0.5}}
    assert live.slowest(waiting) is None
    for figures in waiting.values():
        figures["wall_per_step"] = 0.05
    assert live.slowest(waiting) == ("n2", 5.0, "demand")
    # 1.15x is within the default ratio; over a ratio of 1.1 it is named
    even = {"n1": {"per_step": 0.020, "wall_per_step": 0.025}, "n2": {"per_step": 0.023, "wall_per_step": 0.025}}
    assert live.slowest(even) is None
    assert live.slowest(even, ratio=1.1) == ("n2", 1.15, "demand")


def test_live_samples_reads_the_latest_attempt_and_tolerates_cut_lines(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "0_0.jsonl").write_text('{"kind": "proc", "cpu": 50, "delay": 50, "t": 1}\n')
    (samples / "1_0.jsonl").write_text(
        '{"kind": "proc", "cpu": 1.0, "delay": 0.5, "t": 8}\n'
        '{"kind": "line", "text": "smoke: rank=0 step=5 loss=0.6", "t": 9}\n'
        '{"kind": "proc", "cpu": 1.5, "delay": 0.5, "t": 10}\n'
        '{"kind": "line", "text": "smoke: rank=0 step=7 loss=0.5", "t": 11}\n{"kind": "pro')
    (samples / "1_1.jsonl").write_text('{"kind": "proc", "cpu": 1.0, "t": 9}\n{"kind": "proc", "cpu": 2.0, "t": 11}\n')
    (samples / "notes.txt").write_text("not a sample")
    got = live_samples(str(tmp_path))
    # one moment for both ranks, the older latest sample (10): rank 1 between its samples at 9 and 11
    assert got == {"demand": 3.5, "ranks": 2, "t": 10.0, "attempt": 1, "blocks": {}, "fr_off": "",
                   "step_lines": ["smoke: rank=0 step=5 loss=0.6"],
                   "lines": ["smoke: rank=0 step=5 loss=0.6", "smoke: rank=0 step=7 loss=0.5"]}
    assert live_samples(str(tmp_path / "nowhere")) is None


def test_live_samples_takes_the_lines_of_the_lowest_local_rank_that_printed_some(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "0_0.jsonl").write_text('{"kind": "proc", "cpu": 1.0, "delay": 0.0, "t": 10}\n')
    (samples / "0_1.jsonl").write_text('{"kind": "line", "text": "smoke: rank=3 step=4 loss=0.5", "t": 9}\n'
                                       '{"kind": "proc", "cpu": 1.0, "delay": 0.0, "t": 10}\n')
    got = live_samples(str(tmp_path))
    assert got["step_lines"] == got["lines"] == ["smoke: rank=3 step=4 loss=0.5"]
    assert got["demand"] == 2.0 and got["t"] == 10.0


def test_tracker_needs_evidence_and_starts_again_after_a_restart_or_a_step_that_went_down():
    tracker = live.Tracker(compile_patterns())

    def poll(step, demand, at, attempt=0):
        line = ["smoke: rank=0 step=%d loss=1.0" % step]
        return tracker.update({"lines": line, "step_lines": line, "demand": demand, "t": at,
                               "ranks": 2, "attempt": attempt})

    assert poll(10, 20.0, 100.0) == {"step": 10, "loss": 1.0}
    assert "per_step" not in poll(14, 28.0, 140.0)  # 4 steps: fewer than MIN_INTERVALS
    assert "per_step" not in poll(30, 60.0, 129.0)  # 29 s: less than LIVE_MIN_SECONDS
    assert poll(40, 80.0, 130.0) == {"step": 40, "loss": 1.0, "per_step": 1.0, "wall_per_step": 1.0}
    assert "per_step" not in poll(5, 2.0, 140.0, attempt=1)  # the restart's first poll: a new base
    assert poll(15, 12.0, 180.0, attempt=1)["per_step"] == pytest.approx(0.5)
    assert "per_step" not in poll(3, 1.0, 190.0, attempt=1)  # a step that went down: a new base
    assert tracker.update(None) == {}
    # the latest step for the line, the steps of the samples' moment for the figure
    assert tracker.update({"lines": ["smoke: rank=0 step=99 loss=0.2"], "step_lines": [], "demand": 9.0,
                           "t": 200.0, "ranks": 2, "attempt": 1}) == {"step": 99, "loss": 0.2}


def test_tracker_keeps_the_blocks_of_the_current_attempt_only():
    tracker = live.Tracker(compile_patterns())
    first = [["0", 1, 8, 100.0, 107.0, 103.5, None], ["0", 9, 8, 108.0, 115.0, 111.5, None]]
    again = [["0", 1, 8, 200.0, 207.0, 203.5, None]]  # the restart counts its collectives from 1 again
    assert tracker.update({"attempt": 0, "blocks": {"0": first}})["blocks"] == {"0": first}
    assert tracker.update({"attempt": 1, "blocks": {"0": again}})["blocks"] == {"0": again}
    # the polls' tails overlap: a block seen twice is kept once
    assert tracker.update({"attempt": 1, "blocks": {"0": again}})["blocks"] == {"0": again}


def test_latest_step_and_a_pattern_without_a_step():
    patterns = compile_patterns()
    hf = "{'loss': 0.75, 'grad_norm': 1.0, 'learning_rate': 5e-05, 'epoch': 0.5}"
    assert live.latest_step(["smoke: rank=0 step=3 loss=0.1", "noise"], patterns) == (3, 0.1)
    assert live.latest_step([hf], patterns) == (None, 0.75)
    assert live.suffix({"loss": 0.75}, None) == " | loss 0.75"
    assert live.suffix({}, ("n2", 2.5, "demand")) == " | slowest so far: n2 2.50x the median CPU per step"
    assert live.suffix({}, ("n2", 1.9, "collective", 0.187)) == (
        " | slowest so far: n2 costs the others 18.7% of their time per collective (1.90x the median time per "
        "collective not spent waiting)")


def test_ratio_of_the_actions_argument():
    assert live.ratio_of("1.5") == 1.5 and live.ratio_of(1.3) == 1.3
    assert live.ratio_of(None) == live.ratio_of("") == live.ratio_of("fast") == live.RATIO


def test_slowest_needs_two_measured_nodes(tmp_path):
    directory = str(tmp_path / live.LIVE_DIR)
    live.share(directory, "n1", {"step": 3, "per_step": 0.2})
    assert live.slowest(live.read_shared(directory)) is None
    live.share(directory, "n2", {"step": 3, "per_step": 0.5})
    live.share(directory, "n3", {"step": 3})
    assert live.slowest(live.read_shared(directory)) == ("n2", 2.5, "demand")


@pytest.mark.parametrize("name, measure", [("slow_long", "CPU per step"),
                                           ("spin_slow", "time per collective not spent waiting")])
def test_cluster_live_names_node2_from_one_poll_of_all_nodes(tmp_path, name, measure):
    """The Slurm launcher's view: one poll carries every node's samples (the shared job directory); a job
    recorded before the blocks by the CPU figure, a GPU-shaped one by the flight recorder's."""
    job = os.path.join(JOBS, name)
    hosts = sorted(os.listdir(job))
    cluster = live.ClusterLive("")
    first, last = _span(job)
    at, line = first + 5.0, ""
    while at < last + 5.0:
        polled = {}
        for host in hosts:
            node = tmp_path / host
            shutil.rmtree(str(node), ignore_errors=True)
            _cut(os.path.join(job, host), str(node), at)
            polled[host] = live_samples(str(node))
        line = cluster.line(polled)
        at += 5.0
    assert re.search(r" [|] step [0-9]+", line)
    slow = live.slowest(cluster.figures)
    if slow[2] == "collective":
        assert line.endswith(" | slowest so far: default-node2 costs the others %.1f%% of their time per collective "
                             "(%.2fx the median %s)" % (slow[3] * 100, slow[1], measure))
    else:
        assert line.endswith(" | slowest so far: default-node2 %.2fx the median %s" % (slow[1], measure))
    assert live.ClusterLive("").line({}) == ""


@pytest.mark.parametrize("name", ["spin_slow", "sleep_slow"])
def test_gpu_shaped_slow_node_is_named_from_the_flight_recorder(tmp_path, name):
    # ranks that spin (or sleep) while their device works, node2's twice as long: polled every 3 s, the lines
    # that name a node name node2 by the flight recorder's figure, as the report does
    named = []
    lines, shared = _replay(tmp_path, name, every=3.0, named=named)
    assert named and set(named) == {"default-node2"}
    host, ratio, measure, cost = live.slowest(live.read_shared(str(shared)))
    assert (host, measure) == ("default-node2", "collective") and ratio > 1.6 and cost > 0.4
    report = timeline.build(os.path.join(JOBS, name))
    assert ratio == pytest.approx(report["straggler"]["ratios"]["default-node2"], rel=0.1)
    assert cost == pytest.approx(report["straggler"]["costs"]["default-node2"], rel=0.1)
    assert lines["default-node2"].endswith(
        " | slowest so far: default-node2 costs the others %.1f%% of their time per collective (%.2fx the median "
        "time per collective not spent waiting)" % (cost * 100, ratio))


@pytest.mark.parametrize("every", [1.0, 3.0])
def test_gpu_shaped_even_job_names_no_slowest_node(tmp_path, every):
    named = []
    _lines, shared = _replay(tmp_path, "spin_even", every=every, named=named)
    assert named == []
    assert live.arrival_slowest(live.read_shared(str(shared))) is None  # judged, and nobody over the ratio


def test_arrival_needs_two_nodes_and_live_min_seconds(tmp_path):
    block = ["0", 1, 8, 100.0, 102.1, 101.05, None]
    one = {"n1": {"blocks": {"0": [block]}}, "n2": {"step": 3, "per_step": 0.9, "wall_per_step": 1.0}}
    assert live.arrival_slowest(one) is None  # blocks, not yet enough: nobody, not the CPU figure
    assert live.slowest(dict(one, n3={"per_step": 0.1, "wall_per_step": 1.0})) is None
    short = {"n1": {"blocks": {"0": [block]}}, "n2": {"blocks": {"0": [block]}}}
    assert live.arrival_slowest(short) is None  # one block: under LIVE_MIN_SECONDS
    assert live.arrival_slowest({"n1": {"per_step": 0.2}, "n2": {"per_step": 0.5}}) is False  # no recorder
