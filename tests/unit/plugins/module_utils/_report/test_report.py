"""The job report on recorded 2-node x 2-rank smoke jobs (tests/fixtures/report/jobs/): the timeline model,
the straggler verdict (node2 limited to 0.3 CPUs named, the unthrottled run names none), the first failure,
and the HTML file (valid, self-contained)."""
from __future__ import annotations

import html.parser
import json
import re
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
    assert "the median CPU + run-queue wait per step" in model["straggler"]["line"]
    assert "straggler: default-node2 2.19x" in model["straggler"]["line"]


def test_unthrottled_run_names_no_straggler():
    model = timeline.build(str(JOBS / "ok"), HOSTS)
    assert model["straggler"]["stragglers"] == [] and model["straggler"]["line"].startswith("no straggler:")
    # its steps lasted 3-4 samples, under straggler.MIN_SAMPLES: compared by wall time, and the line says so
    assert model["measure"] == "wall" and "the median wall time per step" in model["straggler"]["line"]
    assert [s["step"] for s in model["loss"]][:3] == [1, 2, 3]


def test_long_unthrottled_run_is_judged_by_demand_and_names_no_straggler():
    model = timeline.build(str(JOBS / "ok_long"), HOSTS)
    assert model["measure"] == "demand" and model["straggler"]["stragglers"] == []
    assert model["straggler"]["ratios"] == {"default-node1": 1.0, "default-node2": 1.12}
    assert model["environment"]["versions"] == "deepspeed 0.19.8, numpy 2.4.6, torch 2.13.0+cpu"
    assert model["environment"]["environment"].startswith("/opt/multinode-training/venv.releases/")


def _only_rank0_prints(tmp_path, name, keep=("default-node1", "0_0.jsonl")):
    """A copy of a recorded job whose ranks' step lines are gone except ``keep``'s (global rank 0): what a
    DeepSpeed or Hugging Face Trainer job leaves, which log on global rank 0 only."""
    job_dir = tmp_path / name
    shutil.copytree(str(JOBS / name), str(job_dir))
    for path in job_dir.glob("*/samples/*.jsonl"):
        if (path.parent.parent.name, path.name) != keep:
            kept = [line for line in path.read_text().splitlines(True) if '"kind": "line"' not in line]
            path.write_text("".join(kept))
    return str(job_dir)


def test_nodes_without_step_lines_are_counted_with_global_rank_0s_steps(tmp_path):
    own = timeline.build(str(JOBS / "slow_long"), HOSTS)
    model = timeline.build(_only_rank0_prints(tmp_path, "slow_long"), HOSTS)
    assert model["steps_of_rank0"] == ["default-node2"]
    assert model["measure"] == "demand"
    assert model["straggler"]["stragglers"] == own["straggler"]["stragglers"] == [("default-node2", 3.38)]
    assert "default-node2: CPU + run-queue wait per step (steps of global rank 0)" in writer.render(model)
    assert "(steps of global rank 0)" not in writer.render(own)
    even = timeline.build(_only_rank0_prints(tmp_path, "even_long"), HOSTS)
    assert even["straggler"]["stragglers"] == [] and even["measure"] == "demand"
    # no step line anywhere: nothing to count with
    none = timeline.build(_only_rank0_prints(tmp_path / "none", "even_long", keep=None), HOSTS)
    assert none["steps_of_rank0"] == [] and none["straggler"]["line"].startswith("no straggler check")


def test_ranks_that_mostly_wait_name_no_straggler():
    # 30 steps of 0.5 s sleep: node1 1.2x node2's demand per step, but 0.6 ms more per 500 ms step
    model = timeline.build(str(JOBS / "sleepy"), HOSTS)
    assert model["measure"] == "demand" and model["straggler"]["stragglers"] == []
    assert model["straggler"]["ratios"]["default-node1"] > 1.2
    assert "or less than 10% of the wall time per step 0.500 s above it" in model["straggler"]["line"]


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


def test_nodes_an_elastic_job_finished_without_are_a_warning(tmp_path):
    shutil.copytree(str(JOBS / "fail" / "default-node1"), str(tmp_path / "default-node1"))
    args = {"run_dir": str(tmp_path), "hosts": HOSTS, "dest": str(tmp_path / "report.html")}
    assert "warnings" not in job.report(args)
    result = job.report(dict(args, elastic_lost=["default-node2"]))
    assert result["lost"] == ["default-node2"]
    assert result["warnings"] == ["node(s) default-node2 lost during the job: the elastic job finished without "
                                  "them on default-node1 (the report lists them)"]


def test_header_environment_from_the_rank_records(tmp_path):
    shutil.copytree(str(JOBS / "ok"), str(tmp_path / "job"))
    for host, prefix in (("default-node1", "/venv.releases/aaa"), ("default-node2", "/venv.releases/bbb")):
        for key in ("0_0", "0_1"):
            start = tmp_path / "job" / host / "exits" / (key + ".start")
            data = json.loads(start.read_text())
            data.update(python="3.11.2", prefix=prefix)
            start.write_text(json.dumps(data))
            end = tmp_path / "job" / host / "exits" / (key + ".exit")
            data = json.loads(end.read_text())
            data["versions"] = {"torch": "2.13.0", "deepspeed": "0.19.8"}
            end.write_text(json.dumps(data))
    model = timeline.build(str(tmp_path / "job"), HOSTS)
    assert model["environment"] == {
        "python": "3.11.2", "versions": "deepspeed 0.19.8, torch 2.13.0",
        "environment": "/venv.releases/aaa (default-node1); /venv.releases/bbb (default-node2)"}
    text = writer.render(model)
    assert "<th>versions</th><td>deepspeed 0.19.8, torch 2.13.0</td>" in text
    # records from before the wrapper wrote them: no row, no error
    assert timeline.build(str(JOBS / "ok"), HOSTS)["environment"] == {}


def test_only_directories_with_a_job_are_nodes(tmp_path):
    shutil.copytree(str(JOBS / "ok"), str(tmp_path / "job"))
    (tmp_path / "job" / ".live").mkdir()
    (tmp_path / "job" / "preflight").mkdir()
    assert list(timeline.build(str(tmp_path / "job"))["nodes"]) == HOSTS


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


def test_thin_bounds_a_long_series_and_keeps_a_wide_spike():
    points = [(float(i), 1.0) for i in range(4000)]
    for i in range(2000, 2030):  # a 30-point spike: wider than one run of 10
        points[i] = (float(i), 9.0)
    thinned = writer.thin(points, 400)
    assert len(thinned) == 400 and thinned[0][0] == 4.5
    assert max(y for _x, y in thinned) == 9.0
    assert writer.thin(points[:50], 400) == points[:50]


def test_a_long_job_report_stays_small(tmp_path):
    result = job.report({"run_dir": str(JOBS / "ok_long"), "dest": str(tmp_path / "report.html")})
    # 1000 steps x 4 ranks: about 700 KB with every point of every series
    assert result["size"] < 350_000


def test_report_shows_both_figures_per_node(tmp_path):
    # the flight recorder's figure decides; the CPU figure stays beside it, and its verdict is printed as secondary
    result = job.report({"run_dir": str(JOBS / "spin_slow"), "hosts": HOSTS, "dest": str(tmp_path / "report.html")})
    text = (tmp_path / "report.html").read_text()
    assert result["straggler_line"].startswith("straggler: default-node2 ")
    table = text[text.index('<table id="arrival">'):text.index("</table>", text.index('<table id="arrival">'))]
    assert table.count("<tr>") == 3 and "<th>not waiting per collective</th>" in table
    assert "<th>costs the others (their time waiting for it)</th>" in table
    assert re.search(r"<td>default-node2</td><td>4[0-9]\.[0-9]%</td><td>0\.[0-9]+ s</td><td>1\.[6-9][0-9]x</td>",
                     table)
    assert re.search(r"<td>default-node1</td><td>0\.0%</td>", table)
    assert "<th>CPU + run-queue wait per step (secondary)</th>" in table
    assert '<p id="secondary">secondary: no straggler: every node within 1.2x the median CPU' in text
    # a job without blocks: no secondary line, the table holds the CPU figure alone
    job.report({"run_dir": str(JOBS / "slow"), "hosts": HOSTS, "dest": str(tmp_path / "old.html")})
    old = (tmp_path / "old.html").read_text()
    assert 'id="secondary"' not in old and "<td>default-node1</td><td>-</td>" in old


def test_sampler_cost_read_from_outside_is_preferred(tmp_path):
    shutil.copytree(str(JOBS / "ok"), str(tmp_path / "ok"))
    own = timeline.build(str(tmp_path / "ok"), HOSTS)
    assert set(own["sampler_cost_source"].values()) == {"the sampler's own thread clock"}
    (tmp_path / "ok" / HOSTS[1] / "watch_state.json").write_text(json.dumps({"sampler_cpu": {"0_0": 3.0, "0_1": 3.0}}))
    model = timeline.build(str(tmp_path / "ok"), HOSTS)
    assert model["sampler_cost_source"][HOSTS[1]] == "read from /proc by the node's watcher"
    assert model["sampler_cost"][HOSTS[1]] > 10 * own["sampler_cost"][HOSTS[1]]
    assert model["sampler_cost"][HOSTS[0]] == own["sampler_cost"][HOSTS[0]]
