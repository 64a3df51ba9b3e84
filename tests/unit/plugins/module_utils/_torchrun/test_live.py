# Copyright: multinode.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The live progress figures (_torchrun.live, _node.watch.live_samples) replayed on recorded jobs: the
samples of tests/fixtures/report/jobs/<name>/ cut at the times the controller would have polled."""
from __future__ import annotations

import json
import os
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._node.watch import live_samples
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


def _replay(tmp_path, name, every=15.0):
    """Every node's Live over polls ``every`` s apart -> (last suffix per host, shared dir)."""
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
            lines[host] = actions[host].line({"live": live_samples(str(node))}, now=at)
        at += every
    return lines, runs / live.LIVE_DIR


def test_throttled_job_names_node2_the_slowest_so_far(tmp_path):
    lines, shared = _replay(tmp_path, "slow")
    host, ratio = live.slowest(live.read_shared(str(shared)))
    assert host == "default-node2" and ratio > 1.5
    assert all(" | step 200, loss " in line for line in lines.values())
    # the node that polled last in the round saw both nodes' figures
    assert lines["default-node2"].endswith(" | slowest so far: default-node2 %.2fx the median CPU per step" % ratio)


def test_polls_too_far_apart_for_two_steps_measure_nothing(tmp_path):
    # the unthrottled job printed all its steps between two polls 15 s apart: no figure, no name
    lines, shared = _replay(tmp_path, "ok", every=15.0)
    assert live.slowest(live.read_shared(str(shared))) is None
    assert all("slowest" not in line and " | step 200" in line for line in lines.values())


@pytest.mark.parametrize("name, every", [("ok", 5.0), ("ok_long", 3.0)])
def test_unthrottled_jobs_name_no_slowest_node(tmp_path, name, every):
    lines, shared = _replay(tmp_path, name, every=every)
    figures = live.read_shared(str(shared))
    assert len(figures) == 2 and all(f["per_step"] > 0 for f in figures.values())
    assert live.slowest(figures) is None
    assert all("slowest" not in line for line in lines.values())


def test_ranks_that_mostly_wait_have_no_slowest_node(tmp_path):
    # 0.5 s sleeps per step: a few ms of CPU per step on either node, under a tenth of the step
    lines, shared = _replay(tmp_path, "sleepy", every=3.0)
    figures = live.read_shared(str(shared))
    assert all(0.4 < f["wall_per_step"] < 0.7 and f["per_step"] < 0.01 for f in figures.values())
    assert live.slowest(figures) is None
    assert all(" | step 30" in line and "slowest" not in line for line in lines.values())
    # the floor: 12 ms more per 500 ms step names nobody, per 50 ms steps it does
    waiting = {"n1": {"per_step": 0.003, "wall_per_step": 0.5}, "n2": {"per_step": 0.015, "wall_per_step": 0.5}}
    assert live.slowest(waiting) is None
    for figures in waiting.values():
        figures["wall_per_step"] = 0.05
    assert live.slowest(waiting) == ("n2", 5.0)


def test_live_samples_reads_the_latest_attempt_and_tolerates_cut_lines(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    (samples / "0_0.jsonl").write_text('{"kind": "proc", "cpu": 50, "delay": 50, "t": 1}\n')
    (samples / "1_0.jsonl").write_text(
        '{"kind": "proc", "cpu": 1.5, "delay": 0.5, "t": 10}\n'
        '{"kind": "line", "text": "smoke: rank=0 step=7 loss=0.5", "t": 11}\n{"kind": "pro')
    (samples / "1_1.jsonl").write_text('{"kind": "proc", "cpu": 2.0, "t": 12}\n')
    (samples / "notes.txt").write_text("not a sample")
    got = live_samples(str(tmp_path))
    assert got == {"demand": 4.0, "ranks": 2, "t": 12.0, "attempt": 1,
                   "lines": ["smoke: rank=0 step=7 loss=0.5"]}
    assert live_samples(str(tmp_path / "nowhere")) is None


def test_tracker_starts_again_after_a_restart_or_a_step_that_went_down():
    tracker = live.Tracker(compile_patterns())

    def poll(step, demand, attempt=0):
        return tracker.update({"lines": ["smoke: rank=0 step=%d loss=1.0" % step], "demand": demand,
                               "ranks": 2, "attempt": attempt})

    assert poll(10, 20.0) == {"step": 10, "loss": 1.0}
    assert poll(20, 40.0)["per_step"] == pytest.approx(1.0)
    assert "per_step" not in poll(5, 2.0, attempt=1)  # the restart's first poll: a new base
    assert poll(15, 12.0, attempt=1)["per_step"] == pytest.approx(0.5)
    assert tracker.update(None) == {}


def test_latest_step_and_a_pattern_without_a_step():
    patterns = compile_patterns()
    hf = "{'loss': 0.75, 'grad_norm': 1.0, 'learning_rate': 5e-05, 'epoch': 0.5}"
    assert live.latest_step(["smoke: rank=0 step=3 loss=0.1", "noise"], patterns) == (3, 0.1)
    assert live.latest_step([hf], patterns) == (None, 0.75)
    assert live.suffix({"loss": 0.75}, None) == " | loss 0.75"
    assert live.suffix({}, ("n2", 2.5)) == " | slowest so far: n2 2.50x the median CPU per step"


def test_slowest_needs_two_measured_nodes(tmp_path):
    directory = str(tmp_path / live.LIVE_DIR)
    live.share(directory, "n1", {"step": 3, "per_step": 0.2})
    assert live.slowest(live.read_shared(directory)) is None
    live.share(directory, "n2", {"step": 3, "per_step": 0.5})
    live.share(directory, "n3", {"step": 3})
    assert live.slowest(live.read_shared(directory)) == ("n2", 2.5)


def test_cluster_live_names_node2_from_one_poll_of_all_nodes(tmp_path):
    """The Slurm launcher's view: one poll carries every node's samples (the shared job directory)."""
    job = os.path.join(JOBS, "slow")
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
        line = cluster.line(polled, now=at)
        at += 5.0
    assert line.startswith(" | step 200, loss ")
    assert line.endswith(" | slowest so far: default-node2 %.2fx the median CPU per step"
                         % live.slowest(cluster.figures)[1])
    assert live.ClusterLive("").line({}) == ""
