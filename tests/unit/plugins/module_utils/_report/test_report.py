"""The job report on recorded 2-node x 2-rank smoke jobs (tests/fixtures/report/jobs/): the timeline model,
the straggler verdict (node2 limited to 0.3 CPUs named, the unthrottled run names none), the first failure,
and the HTML file (valid, self-contained)."""
from __future__ import annotations

import html.parser
import shutil

import pytest

from ansible_collections.multinode.training.plugins.module_utils._report import html as writer
from ansible_collections.multinode.training.plugins.module_utils._report import job, timeline
from tests.unit.conftest import FIXTURES

JOBS = FIXTURES / "report" / "jobs"
HOSTS = ["default-node1", "default-node2"]


def test_throttled_node_is_the_straggler_although_its_wall_step_time_is_the_others():
    model = timeline.build(str(JOBS / "slow"), HOSTS)
    assert model["measure"] == "demand"
    assert model["straggler"]["stragglers"] == [("default-node2", 2.19)]
    assert "straggler: default-node2 2.19x" in model["straggler"]["line"]


def test_unthrottled_run_names_no_straggler():
    model = timeline.build(str(JOBS / "ok"), HOSTS)
    assert model["straggler"]["stragglers"] == [] and model["straggler"]["line"].startswith("no straggler:")
    assert [s["step"] for s in model["loss"]][:3] == [1, 2, 3]


def test_first_failure_is_rank_3_with_its_error_line():
    model = timeline.build(str(JOBS / "fail"), HOSTS)
    failure = model["first_failure"]
    assert (failure["rank"], failure["host"], failure["exitcode"]) == (3, "default-node2", 1)
    assert failure["message"] == "RuntimeError: injected failure on rank 3 at step 1"
    assert len([e for e in model["events"] if e["kind"] == "start"]) == 4


def test_a_node_without_a_directory_is_lost(tmp_path):
    shutil.copytree(str(JOBS / "fail" / "default-node1"), str(tmp_path / "default-node1"))
    model = timeline.build(str(tmp_path), HOSTS)
    assert model["lost"] == ["default-node2"] and list(model["nodes"]) == ["default-node1"]


def test_sampler_cost_is_per_node_per_minute():
    cost = timeline.build(str(JOBS / "ok"), HOSTS)["sampler_cost"]
    assert set(cost) == set(HOSTS) and all(0 < value < 0.5 for value in cost.values())


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.title, self.svgs, self.open = "", 0, []

    def handle_starttag(self, tag, attrs):
        self.svgs += tag == "svg"
        self.open.append(tag)

    def handle_data(self, data):
        if self.open and self.open[-1] == "title" and not self.title:
            self.title = data


@pytest.mark.parametrize("name, straggler, failure", [
    ("slow", "straggler: default-node2", "No rank failed."),
    ("fail", "no straggler check", "First failure: rank 3 (node default-node2"),
])
def test_report_file_is_self_contained_html(tmp_path, name, straggler, failure):
    result = job.report({"run_dir": str(JOBS / name), "hosts": HOSTS, "dest": str(tmp_path / "report.html")})
    text = (tmp_path / "report.html").read_text()
    assert result["size"] == len(text.encode())
    parser = _Parser()
    parser.feed(text)
    assert parser.title == "Job report %s" % name and parser.svgs >= 3
    assert straggler in text and failure in text
    assert writer.external_references(text) == [] and "<script" not in text


def test_external_references_are_found():
    assert writer.external_references('<img src="https://x/y.png"><a href=//cdn/z>') != []


@pytest.mark.parametrize("args, message", [
    ({"run_dir": "/nonexistent"}, "is not a directory"),
    ({"ratio": 1.0}, "must be over 1"),
    ({"pattern": "loss=(?P<loss>\\S+)"}, "no named group"),
])
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(job.ReportError, match=message):
        job.report(dict({"run_dir": str(JOBS / "ok")}, **args))
